"""acgan.export: a run's generator as one Keras file that a process where acgan cannot be imported loads
on TensorFlow or on JAX (without TensorFlow there), and that samples what acgan.generate samples from the
same noise and labels: both presets, both training backends, a mixed_float16 run exported in float32 and
with its policy kept; SavedModel for TF Serving; ONNX from both backends, read by onnxruntime; one-line
errors.

Sizes: the runs are api_runs' shared tiny runs (width 0.125, ten images a class; the JAX run one step, as a
second compiles its step again), since what is checked is the exported computation, not what it learned;
the child processes are the ones a boundary asks for: the JAX run (the other backend) and one loader per
backend (acgan, and on JAX TensorFlow, unimportable), each loader reading every exported file at once."""

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import acgan
from acgan.config import Config
from api_runs import ROOT, child_env

# Loads each exported generator and samples from the given noise and labels, then runs the README's three
# lines on the first, in a process where `import acgan` fails (the editable install's finder would find it
# on any path: a None in sys.modules stops it), from another folder; on JAX TensorFlow is blocked the same
# way: only Keras and the backend. Saves what it sampled; prints the backend and the frameworks loaded.
LOADER = """
import sys
blocked = ["acgan"] + (["tensorflow"] if sys.argv[1] == "jax" else [])
for name in blocked:
    sys.modules[name] = None
try:
    import acgan
except ImportError:
    pass
else:
    raise SystemExit("acgan imported")
import json, zipfile
import keras
import numpy as np
for model_path, inputs_path, out_path in json.loads(sys.argv[2]):
    generator = keras.saving.load_model(model_path)
    with np.load(inputs_path) as inputs:
        images = generator.predict([inputs["noise"], inputs["labels"]], verbose=0)
    info = json.loads(zipfile.ZipFile(model_path).read("acgan.json"))
    np.savez(out_path, images=images, noise_dim=generator.inputs[0].shape[1], class_names=info["class_names"],
             policies=[layer.dtype_policy.name for layer in generator.layers])
readme = {}  # the README's three lines, as printed there, on the first file
exec(sys.argv[3].replace('"generator.keras"', repr(json.loads(sys.argv[2])[0][0])), readme)
assert readme["images"].shape[0] == 10 and 0 <= readme["images"].min() and readme["images"].max() <= 1
print(keras.backend.backend(), sorted(m for m in ("tensorflow", "jax") if sys.modules.get(m) is not None))
"""

BACKENDS = ("tensorflow", "jax")
# name: how closely the exported generator's images match acgan.generate's (the greatest absolute
# difference of pixels in [0, 1]; measured: 0 to 4e-7). A float32 run, and a mixed_float16 run with its
# policy kept: float32 arithmetic in another order (another backend's kernels); the mixed_float16 run
# exported in float32 also misses acgan.generate's float16 rounding, small in two-step generators whose
# pre-activations are near 0 (test_portable_generator_computes_what_the_generator_does has large weights).
EXPORTS = {
    "jax-acgan_cifar-float32": 1e-5,
    "tensorflow-reference-mixed_float16-as-float32": 2e-5,
    "tensorflow-reference-mixed_float16-kept": 1e-5,
}


@pytest.fixture(scope="module")
def exported(jax_run, tf_run, tmp_path_factory):
    """{name: (model file, acgan.generate's npz)}: the JAX run (exported by the `acgan export` command in its
    child, which trains while this process trains and exports the TensorFlow run) and the shared TensorFlow
    run, exported here in float32 and with its policy kept."""
    root = tmp_path_factory.mktemp("export")
    acgan.export(tf_run, out=root / "tf-float32.keras")
    acgan.export(tf_run, out=root / "tf-kept.keras", keep_policy=True)
    samples = acgan.generate(tf_run, per_class=2, seed=3)
    np.savez(
        root / "tf-generated.npz", images=samples.images, noise=samples.noise, labels=samples.labels
    )
    jax_dir, out = jax_run.finished()
    assert (
        f"wrote {jax_dir / 'generator.onnx'}: G's moving average at step 1, float32; noise 100 (uniform in [-1, 1]), "
        "10 classes, images 32x32x3 in [0, 1] (acgan.json inside)" in out
    )
    # training, sampling, both exports on JAX
    assert out.strip().endswith("tensorflow imported: False")
    return {
        "jax-acgan_cifar-float32": (jax_dir / "generator.keras", jax_dir / "generated.npz"),
        "tensorflow-reference-mixed_float16-as-float32": (
            root / "tf-float32.keras",
            root / "tf-generated.npz",
        ),
        "tensorflow-reference-mixed_float16-kept": (
            root / "tf-kept.keras",
            root / "tf-generated.npz",
        ),
    }


def read_metadata(path):
    """acgan.json of an exported file (.keras, .onnx) or folder (SavedModel), read as docs/api.md says."""
    if path.is_dir():
        return json.loads((path / "assets.extra" / "acgan.json").read_text())
    if path.suffix.lower() == ".onnx":
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        return json.loads({entry.key: entry.value for entry in model.metadata_props}["acgan.json"])
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("acgan.json"))


def readme_snippet():
    """The README's three lines that load an exported generator and sample ten images."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("    import keras, numpy as np")
    assert lines[start + 1].startswith("    generator = keras.saving.load_model(")
    return "\n".join(line[4:] for line in lines[start : start + 3])


@pytest.fixture(scope="module")
def loaded(exported, tmp_path_factory):
    """{backend: {name: what the loader sampled}}: both loaders at once."""
    root = tmp_path_factory.mktemp("loaded")
    procs = {}
    for backend in BACKENDS:
        jobs = [
            (str(model), str(inputs), str(root / f"{backend}-{name}.npz"))
            for name, (model, inputs) in exported.items()
        ]
        env = child_env(KERAS_BACKEND=backend)
        env.pop("PYTHONPATH")
        command = [sys.executable, "-I", "-c", LOADER, backend, json.dumps(jobs), readme_snippet()]
        procs[backend] = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root
        )
    for backend, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        # The backend, and which frameworks loaded (Keras on TensorFlow probes JAX too).
        last = out.strip().splitlines()[-1]
        assert (
            last == "jax ['jax']"
            if backend == "jax"
            else (last.startswith("tensorflow [") and "'tensorflow'" in last)
        ), last
    return {
        backend: {name: dict(np.load(root / f"{backend}-{name}.npz")) for name in exported}
        for backend in BACKENDS
    }


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", EXPORTS)
def test_the_exported_generator_samples_what_generate_does_without_acgan(
    exported, loaded, name, backend
):
    _, inputs = exported[name]
    sampled = loaded[backend][name]
    with np.load(inputs) as generated:
        expected = generated["images"]
    assert sampled["images"].shape == expected.shape and sampled["images"].dtype == np.float32
    difference = np.abs(sampled["images"] - expected).max()
    assert difference <= EXPORTS[name], difference
    # the images differ from each other by more than that
    assert np.ptp(expected) > 10 * EXPORTS[name]
    assert 0 <= sampled["images"].min() and sampled["images"].max() <= 1
    # mixed: batch norms and the image layer stay float32
    policies = {str(p) for p in sampled["policies"]}
    assert policies == ({"mixed_float16", "float32"} if name.endswith("-kept") else {"float32"})


def test_the_metadata_travels_in_the_file(exported):
    jax_meta = read_metadata(exported["jax-acgan_cifar-float32"][0])
    assert jax_meta["format"] == "acgan-generator/1" and jax_meta["noise_dim"] == 100
    assert (
        jax_meta["image_shape"] == [32, 32, 3]
        and jax_meta["num_classes"] == len(jax_meta["class_names"]) == 10
    )
    assert (jax_meta["arch"], jax_meta["run_backend"], jax_meta["exported_on"]) == (
        "acgan_cifar",
        "jax",
        "jax",
    )
    # the run's average of G (api_runs.JAX_TINY)
    assert (jax_meta["generator"], jax_meta["ema_decay"]) == (
        "ema",
        0.9,
    )
    tf_meta = read_metadata(exported["tensorflow-reference-mixed_float16-as-float32"][0])
    assert (tf_meta["noise_dim"], tf_meta["image_shape"], tf_meta["arch"]) == (
        62,
        [28, 28, 1],
        "reference",
    )
    assert (tf_meta["policy"], tf_meta["run_policy"], tf_meta["step"]) == (
        "float32",
        "mixed_float16",
        2,
    )
    assert (
        read_metadata(exported["tensorflow-reference-mixed_float16-kept"][0])["policy"]
        == "mixed_float16"
    )


def test_the_exported_generator_holds_only_built_in_layers(exported):
    for model, _ in exported.values():
        config = json.loads(zipfile.ZipFile(model).read("config.json"))
        modules = {layer["module"] for layer in config["config"]["layers"]}
        assert all(m.startswith("keras") for m in modules), modules


@pytest.mark.parametrize("arch, shape", [("reference", (28, 28, 1)), ("acgan_cifar", (32, 32, 3))])
def test_portable_generator_computes_what_the_generator_does(arch, shape, set_policy):
    """Both presets' generators with large random weights (images across [0, 1], unlike a two-step run's
    near 0.5), cloned into built-in layers: float32 as float32, and mixed_float16 kept as such, exactly."""
    from acgan.model.networks import build_models
    from acgan.training.export import portable_generator

    rng = np.random.default_rng(0)
    for policy in ("float32", "mixed_float16"):
        set_policy(policy)
        generator = build_models(shape, 10, width=0.125, arch=arch).generator
        for variable in generator.weights:  # batch norms' variances positive
            positive = "variance" in variable.path
            draw = (
                rng.uniform(0.5, 2.0, variable.shape)
                if positive
                else rng.normal(0, 0.5, variable.shape)
            )
            variable.assign(draw.astype(np.float32))
        z = rng.uniform(-1, 1, (20, generator.inputs[0].shape[1])).astype(np.float32)
        labels = np.arange(20, dtype=np.int32) % 10
        images = np.asarray(generator([z, labels], training=False))
        assert np.ptp(images) > 0.5
        clone = portable_generator(generator, keep_policy=policy != "float32")
        assert all(type(layer).__module__.startswith("keras.") for layer in clone.layers)
        np.testing.assert_array_equal(np.asarray(clone([z, labels], training=False)), images)
    # the mixed one
    as_float32 = np.asarray(portable_generator(generator)([z, labels], training=False))
    assert 0 < np.abs(as_float32 - images).mean() < 0.01  # only float16's rounding is gone


def test_savedmodel_serves_the_same_images(tf_run, tmp_path_factory):
    import tensorflow as tf

    run = tf_run
    out = tmp_path_factory.mktemp("savedmodel") / "generator"
    exported = acgan.export(run, out=out, format="savedmodel")
    assert exported.metadata == read_metadata(out) and exported.metadata["noise_dim"] == 62
    samples = acgan.generate(run, per_class=1, seed=5)
    serve = tf.saved_model.load(str(out)).signatures["serving_default"]
    images = serve(z=tf.constant(samples.noise), labels=tf.constant(samples.labels))[
        "output_0"
    ].numpy()
    assert (
        np.abs(images - samples.images).max()
        <= EXPORTS["tensorflow-reference-mixed_float16-as-float32"]
    )
    with pytest.raises(
        acgan.UserError,
        match=f"--out {out} already exists: --format savedmodel writes a new folder",
    ):
        acgan.export(run, out=out, format="savedmodel")


# ONNX: how closely onnxruntime's images match acgan.generate's (measured: 1.2e-7 from the TensorFlow run,
# which is mixed_float16 exported in float32, so up to float16's rounding as above; 6e-8 from the JAX run).
ONNX = {
    "jax-acgan_cifar-float32": ("jax", 1e-5),
    "tensorflow-reference-mixed_float16-as-float32": (
        "tensorflow",
        EXPORTS["tensorflow-reference-mixed_float16-as-float32"],
    ),
}


def onnx_snippet():
    """docs/api.md's three lines that load an exported ONNX file in onnxruntime and sample ten images."""
    lines = (ROOT / "docs" / "api.md").read_text().splitlines()
    start = lines.index("    import numpy as np, onnxruntime")
    assert lines[start + 1].startswith("    session = onnxruntime.InferenceSession(")
    return "\n".join(line[4:] for line in lines[start : start + 3])


@pytest.fixture(scope="module")
def onnx_files(exported, jax_run, tf_run, tmp_path_factory):
    """{name: (ONNX file, acgan.generate's npz)}: the TensorFlow run exported here by acgan.export (tf2onnx),
    the JAX run by the `acgan export --format onnx` command in its child (jax2onnx)."""
    path = tmp_path_factory.mktemp("onnx") / "tf.onnx"
    assert acgan.export(tf_run, out=path, format="onnx").path == path
    jax_dir, _ = jax_run.finished()
    return {
        "jax-acgan_cifar-float32": (
            jax_dir / "generator.onnx",
            exported["jax-acgan_cifar-float32"][1],
        ),
        "tensorflow-reference-mixed_float16-as-float32": (
            path,
            exported["tensorflow-reference-mixed_float16-as-float32"][1],
        ),
    }


@pytest.mark.parametrize("name", ONNX)
def test_the_onnx_file_samples_what_generate_does_in_onnxruntime(onnx_files, name):
    import onnxruntime

    backend, tolerance = ONNX[name]
    path, inputs = onnx_files[name]
    session = onnxruntime.InferenceSession(str(path))
    assert [(i.name, i.type, len(i.shape)) for i in session.get_inputs()] == [
        ("z", "tensor(float)", 2),
        ("labels", "tensor(int32)", 1),
    ]
    with np.load(inputs) as generated:
        images = session.run(None, {"z": generated["noise"], "labels": generated["labels"]})[0]
        expected = generated["images"]
    # the batch is not fixed at export
    assert images.shape == expected.shape and images.dtype == np.float32
    difference = np.abs(images - expected).max()
    assert difference <= tolerance, difference
    assert np.ptp(expected) > 10 * tolerance
    meta = json.loads(session.get_modelmeta().custom_metadata_map["acgan.json"])
    assert meta == read_metadata(path)
    assert (meta["format"], meta["policy"], meta["exported_on"]) == (
        "acgan-generator/1",
        "float32",
        backend,
    )
    docs = {}  # docs/api.md's three lines, as printed there
    exec(onnx_snippet().replace('"generator.onnx"', repr(str(path))), docs)
    assert (
        docs["images"].shape == (10, *meta["image_shape"])
        and 0 <= docs["images"].min() <= docs["images"].max() <= 1
    )


def test_onnx_without_its_converter_is_one_line(tmp_path, monkeypatch):
    """Keras converts with tf2onnx on TensorFlow: where it is missing, one line naming it and the extra."""
    import importlib.util

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(Config(dataset="doodles").to_json())
    (tmp_path / "run" / "dataset.json").write_text(
        json.dumps({"class_names": ["a", "b"], "image_shape": [28, 28, 1]})
    )
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tf2onnx" else find_spec(name, *a),
    )
    with pytest.raises(acgan.UserError) as error:
        acgan.export(tmp_path / "run", out=tmp_path / "g.onnx", format="onnx")
    assert str(error.value) == (
        "--format onnx on tensorflow needs tf2onnx, which is not installed: in the acgan "
        "checkout, pip install -c constraints.txt -e '.[onnx]'"
    )
    assert not (tmp_path / "g.onnx").exists()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(out="g.keras"), "--run is required: the folder of a training run"),
        (dict(run="r"), "--out is required: the file to write, e.g. generator.keras"),
        (
            dict(run="r", out="g.keras", format="tflite"),
            "unknown format 'tflite': choose keras, savedmodel or onnx",
        ),
        (
            dict(run="r", out="g.keras", format="onnx"),
            "--out must name a .onnx file with --format onnx, not 'g.keras'",
        ),
        (
            dict(run="r", out="g.onnx", format="onnx", keep_policy=True),
            "--keep_policy cannot go with --format onnx: Keras exports ONNX from float32 models only",
        ),
    ],
    ids=["no run", "no out", "unknown format", "onnx: not a .onnx file", "onnx: keep_policy"],
)
def test_export_errors_are_one_line(kwargs, message):
    with pytest.raises(acgan.UserError) as error:
        acgan.export(**kwargs)
    assert str(error.value) == message


def test_a_run_without_a_checkpoint_is_one_line(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "config.json").write_text(Config(dataset="doodles").to_json())
    (tmp_path / "run" / "dataset.json").write_text(
        json.dumps({"class_names": ["a", "b"], "image_shape": [28, 28, 1]})
    )
    with pytest.raises(acgan.UserError, match="has no checkpoint yet"):
        acgan.export(tmp_path / "run", out=tmp_path / "g.keras")
    assert not (tmp_path / "g.keras").exists()


def test_a_jax_runs_checkpoints_read_on_tensorflow(jax_run, set_policy):
    """The JAX run's .npz checkpoints load into this TensorFlow process's models, for acgan.generate and
    acgan.evaluate (the JAX session reads them on JAX: tests/jax/test_jax_training.py)."""
    from acgan.training import sampling

    folder, _ = jax_run.finished()
    _, info, trainer = sampling.load_run(folder / "run")
    z, labels = sampling.generator_inputs(len(info["class_names"]), trainer.noise_dim, 2, seed=0)
    images = sampling.generate_images(trainer, z, labels)
    assert images.shape == (20, 32, 32, 3) and images.dtype == np.uint8 and images.std() > 0
    assert sorted(labels.tolist()) == sorted(list(range(10)) * 2)
