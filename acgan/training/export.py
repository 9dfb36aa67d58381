"""A run's generator as one model file that loads without acgan: `keras.saving.load_model(path)` on
TensorFlow or JAX gives a model from (noise [N, noise_dim] float32 uniform in [-1, 1], labels [N] int)
to images [N, H, W, C] float32 in [0, 1].

The generator is cloned into built-in Keras layers. acgan's own layers in a generator have built-in
equivalents for sampling, so they are replaced rather than registered (a registered class loads only
where its code is importable, which is what the file must not need):

- TransposedConv2D -> keras.layers.Conv2DTranspose: the same config and weights; it differs only in its
  gradient on JAX (model/transposed_conv.py), which sampling never takes.
- BatchNorm -> keras.layers.BatchNormalization: the same config and weights; it differs only in a
  training call on JAX under --jax_batch_norm fused (model/batch_norm.py), which sampling never makes.
- UnitRange -> keras.ops.multiply and keras.ops.add: the same x * 0.5 + 0.5 (acgan_cifar's tanh image),
  as Keras ops in the graph, which Keras saves itself, as it saves the one-hot of the labels. (Not
  keras.layers.Rescaling: a tf.data layer, which on JAX reaches for TensorFlow whenever its module is
  in sys.modules, even as the None that hides it.)

Any other layer of acgan's own stops the export with a message naming it.

Weights are float32 under every policy; by default every layer also computes in float32, so the file
samples the same anywhere, CPUs included. keep_policy: each layer keeps the run's policy (mixed_float16
or mixed_bfloat16 compute, float32 outputs), for serving on the hardware the run trained on.

What a user needs besides the model travels inside the file: `acgan.json` in the .keras archive (a zip
that Keras reads by name, so an extra member is left alone), `assets.extra/acgan.json` in a SavedModel
folder (TF Serving's place for extra files), or the metadata entry "acgan.json" of an ONNX file (onnxruntime:
`session.get_modelmeta().custom_metadata_map`): METADATA_FORMAT, the noise size and distribution, the label
and image contracts, the class names, and the run it came from.

ONNX goes through Keras's own `model.export(format="onnx")`: tf2onnx on TensorFlow, jax2onnx on JAX, from
a float32 model only (Keras's rule; api.export refuses --keep_policy with it). The inputs are named `z`
(float32 [N, noise_dim]) and `labels` (int32 [N]); the batch is dynamic; the output's name depends on the
backend that wrote the file, so read the first output.
"""

import contextlib
import json
import logging
import os
import tempfile
import warnings
import zipfile
from pathlib import Path

import keras

from acgan import backend
from acgan.errors import UserError
from acgan.model.batch_norm import BatchNorm
from acgan.model.blocks import UnitRange
from acgan.model.transposed_conv import TransposedConv2D
from acgan.training.sampling import load_run, sampled_generator
from acgan.util import disk

METADATA_FORMAT = "acgan-generator/1"
METADATA_NAME = "acgan.json"
# acgan's layers that differ from their built-in base only where sampling never goes (see above).
BUILT_IN = {
    TransposedConv2D: keras.layers.Conv2DTranspose,
    BatchNorm: keras.layers.BatchNormalization,
}


def portable_layer(layer, dtype=None):
    """A built-in Keras layer (or Keras ops) computing what `layer` computes, its weights not yet set;
    dtype: the policy it computes in (None: the layer's own)."""
    config = layer.get_config()
    if dtype is not None:
        config["dtype"] = dtype
    if isinstance(
        layer, UnitRange
    ):  # a float32 output whatever the policy (blocks.float32_tanh_to_unit)
        return lambda x: keras.ops.add(keras.ops.multiply(x, 0.5), 0.5)
    built_in = BUILT_IN.get(type(layer), type(layer))
    if not built_in.__module__.startswith("keras."):
        raise RuntimeError(
            f"cannot export layer {layer.name!r}: {type(layer).__name__} is acgan's own and has no "
            "built-in Keras equivalent in acgan/training/export.py"
        )
    return built_in.from_config(config)


def portable_generator(generator, keep_policy=False):
    """`generator` cloned into built-in Keras layers with its weights: float32 compute, or with
    keep_policy each layer's own policy."""
    dtype = None if keep_policy else "float32"
    clone = keras.models.clone_model(
        generator, clone_function=lambda layer: portable_layer(layer, dtype)
    )
    for layer in generator.layers:
        if layer.weights:
            clone.get_layer(layer.name).set_weights(layer.get_weights())
    return clone


def metadata(config, info, generator, step, keep_policy, run_dir, which, checkpoint):
    """The sampler's contract and the run's identity, as acgan.json holds them."""
    noise_dim = int(generator.inputs[0].shape[-1])
    return {
        "format": METADATA_FORMAT,
        "noise_dim": noise_dim,
        "noise": f"float32 [N, {noise_dim}], uniform in [-1, 1]",
        "labels": "int [N]: class indices, 0 to num_classes - 1 (class_names)",
        "images": "float32 [N, height, width, channels] in [0, 1]",
        "image_shape": [int(n) for n in info["image_shape"]],
        "num_classes": len(info["class_names"]),
        "class_names": list(info["class_names"]),
        "policy": config.policy if keep_policy else "float32",  # what the file's layers compute in
        "run_policy": config.policy,
        "arch": config.arch,
        "width": config.width,
        "dataset": config.dataset,
        "step": step,
        "generator": which,  # "ema": the moving average of G's weights; "raw": G's own
        "ema_decay": config.ema_decay,
        "run": str(run_dir),
        "run_backend": config.backend,
        "exported_on": keras.backend.backend(),
        "keras_version": keras.__version__,
        "checkpoint": checkpoint,  # "latest" or "best" (best.py)
    }


def export_run(run_dir, out, keep_policy=False, format="keras", ema=True, checkpoint="latest"):
    """Writes the generator of `run_dir`'s newest intact checkpoint (checkpoint="best": its best one) to
    `out` (a Path, export_request.check_output's: a .keras file; with
    format="savedmodel" a new SavedModel folder; with format="onnx" a .onnx file); returns its metadata.
    Sets the run's dtype policy (as acgan.generate does). ema: G's moving average where the run kept one. Nothing is left half-written:
    the file or folder appears whole or not at all."""
    config, info, trainer = load_run(Path(run_dir), ema=ema, checkpoint=checkpoint)
    with (
        backend.tensorflow_hidden()
    ):  # on JAX, each layer's get_config probes TensorFlow (a 10-second import)
        generator = portable_generator(trainer.models.generator, keep_policy)
    meta = metadata(
        config,
        info,
        generator,
        int(trainer.step.numpy()),
        keep_policy,
        run_dir,
        sampled_generator(trainer),
        checkpoint,
    )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with disk.full_disk_stops_clearly(out.parent):
            SAVERS[format](generator, meta, out)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    return meta


@contextlib.contextmanager
def _written_whole(out, suffix=None):
    """A new temporary path beside `out` (a file ending in `suffix`; None: a folder) for the block to
    write, renamed to `out` when it is done; removed when it fails."""
    if suffix is None:
        tmp = tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.")
    else:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.stem}.", suffix=suffix)
        os.close(fd)
    try:
        yield tmp
        os.replace(tmp, out)
    finally:
        disk.remove_quietly(tmp)


def _save_keras(generator, meta, out):
    with _written_whole(out, ".keras") as tmp:
        with backend.tensorflow_hidden():  # on JAX, saving probes TensorFlow: seconds for nothing
            generator.save(tmp)
        with zipfile.ZipFile(tmp, "a") as archive:
            archive.writestr(METADATA_NAME, json.dumps(meta, indent=2) + "\n")


def _save_savedmodel(generator, meta, out):
    with _written_whole(out) as tmp:
        generator.export(tmp, format="tf_saved_model", verbose=False)
        (Path(tmp) / "assets.extra").mkdir(exist_ok=True)
        (Path(tmp) / "assets.extra" / METADATA_NAME).write_text(json.dumps(meta, indent=2) + "\n")


@contextlib.contextmanager
def _converters_quiet():
    """What Keras's ONNX export says that is no news to a user: its numpy-2 patch of tf2onnx sets
    np.object (a FutureWarning), and onnx_ir, under jax2onnx, logs a warning for every shape value whose
    type it cannot name (the batch size's among them) and leaves that annotation out of the file."""
    logger = logging.getLogger("onnx_ir.serde")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*np.object", category=FutureWarning)
            yield
    finally:
        logger.setLevel(level)


def _save_onnx(generator, meta, out):
    import onnx  # here: only ONNX export needs it (the onnx extra)

    # The signature given, not inferred: Keras 3.15's ONNX export takes a Functional model that was never
    # called (a clone) for one it cannot trace unless a signature is passed.
    signature = [
        [keras.InputSpec(dtype=x.dtype, shape=x.shape, name=x.name) for x in generator.inputs]
    ]
    with _written_whole(out, ".onnx") as tmp:
        with _converters_quiet(), backend.tensorflow_hidden():
            generator.export(tmp, format="onnx", verbose=False, input_signature=signature)
        model = onnx.load(tmp)
        model.metadata_props.add(key=METADATA_NAME, value=json.dumps(meta, indent=2) + "\n")
        onnx.save(model, tmp)


SAVERS = {"keras": _save_keras, "savedmodel": _save_savedmodel, "onnx": _save_onnx}
