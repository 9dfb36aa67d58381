"""CLI: python -m acgan.export --run DIR --out generator.keras [--keep_policy] [--format keras|savedmodel|onnx]:
the run's generator as one file that loads without acgan (keras.saving.load_model, TensorFlow or JAX; an
ONNX file: onnxruntime).

From Python: acgan.export(run, out="generator.keras", ...) returns an acgan.api.Exported."""

import functools

from absl import flags

from acgan import api, cli


@functools.cache
def define_flags():
    """The command's flags; cli.run_main defines them before parsing (importing the module defines none)."""
    flags.DEFINE_string(
        "out",
        None,
        "The file to write: a .keras file (--format savedmodel: a new folder; "
        "--format onnx: a .onnx file).",
    )
    flags.DEFINE_boolean(
        "keep_policy",
        False,
        "Keep the run's dtype policy in every layer (default: float32, "
        "which samples the same on any machine).",
    )
    flags.DEFINE_string(
        "format",
        "keras",
        "keras: one .keras file for keras.saving.load_model; savedmodel: a "
        "TensorFlow SavedModel folder for TF Serving (needs TensorFlow); onnx: one .onnx file for "
        "onnxruntime (float32; needs the onnx extra).",
    )
    cli.define_run_flags()


def main(argv):
    exported = api.export(**cli.flag_arguments(api.export))
    meta = exported.metadata
    shape = "x".join(str(n) for n in meta["image_shape"])
    which = "G's moving average" if meta["generator"] == "ema" else "the generator"
    best = " (the best checkpoint)" if meta["checkpoint"] == "best" else ""
    print(
        f"wrote {exported.path}: {which} at step {meta['step']}{best}, {meta['policy']}; noise {meta['noise_dim']} "
        f"(uniform in [-1, 1]), {meta['num_classes']} classes, images {shape} in [0, 1] (acgan.json inside)"
    )


if __name__ == "__main__":
    cli.run_main(main)
