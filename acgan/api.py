"""The Python API: each command as a call that a notebook or a script makes, and that the command itself
makes after reading its flags.

    import acgan

    run = acgan.train(steps=500, policy="mixed_float16")  # python -m acgan.train --steps 500 --policy ...
    run.grid()                                             # the final sample grid, a PIL image
    quality = acgan.evaluate(run, num_samples=2000)        # a dict, as quality.json holds it
    samples = acgan.generate(run, per_class=4)             # numpy arrays
    acgan.export(run, out="generator.keras")               # a file that loads without acgan

Each call takes its command's flags as keyword arguments, with the same names and defaults (a list flag
takes a list, a tuple or a comma-separated string), and raises acgan.UserError with the command's one-line
message where the command exits with status 2. docs/api.md documents every call.

Backend: `backend=None` is the one Keras already runs on in this process, else KERAS_BACKEND, else
tensorflow (for the calls that read a run: else the run's own). Keras takes one backend per process, so a
later call naming the other raises UserError. Dtype policy: a call sets the run's while it works and puts
back the one it found.
"""

import dataclasses
import inspect
import os
import types
from pathlib import Path
from typing import Any, Optional

from PIL import Image

# None of these loads Keras, TensorFlow or JAX: the backend is chosen per call, before they load
# (_keras_side imports those that do).
from acgan import backend as backend_lib
from acgan import cli, data
from acgan import config as config_lib
from acgan.bench import sweep, tables
from acgan.bench.sweep import SweepSettings, parse_backends, parse_batches, parse_jit
from acgan.config import Config, start_from_file
from acgan.errors import UserError
from acgan.quality import inception as inception_lib
from acgan.quality.comparison import CompareSettings, train_runs
from acgan.training import best, export_request, grids
from acgan.training.run_dir import config_to_resume, read_run
from acgan.util import disk
from acgan.util.files import read_json

# ---- What the calls return ----


@dataclasses.dataclass(frozen=True)
class Run:
    """A run folder. `report`, `quality` and `config` are read from its files when asked, so they show
    what a later acgan.evaluate added. acgan.Run("outputs/...") opens an existing run; a Run is accepted
    wherever a run folder is (it is os.PathLike)."""

    folder: Path
    status: Optional[str] = None  # acgan.train's: "completed", "interrupted" or "diverged"
    message: Optional[str] = None  # why it stopped early
    signal: Optional[int] = None  # the signal that interrupted it
    chief: bool = True  # False on a multi-worker task whose files the chief keeps
    weights_fingerprint: Optional[str] = None

    def __post_init__(self):
        object.__setattr__(self, "folder", Path(self.folder))

    def __fspath__(self):
        return os.fspath(self.folder)

    @property
    def config(self):
        """config.json: every setting the run trained with."""
        return read_json(self.folder / "config.json")

    @property
    def report(self):
        """report.json: timing, cost, memory, final metrics (None before the run has written it)."""
        return read_json(self.folder / "report.json")

    @property
    def quality(self):
        """quality.json: the last acgan.evaluate's result (None before one)."""
        return read_json(self.folder / "quality.json")

    def grid(self, step=None):
        """The sample grid saved at the end (or at `step`) as a PIL image, which a notebook shows."""
        path = self.folder / "samples" / ("final.png" if step is None else f"step_{step:07d}.png")
        if not path.is_file():
            raise UserError(
                f"{path} does not exist (the grids are saved every --sample_every steps and at the end)"
            )
        with Image.open(path) as picture:
            return picture.copy()


@dataclasses.dataclass(frozen=True, eq=False)  # arrays: no element-wise ==
class Samples:
    """acgan.generate's samples, class-major (per_class of class 0, then of class 1, ...)."""

    images: Any  # float32 [N, H, W, C] in [0, 1], as G (and an exported generator) returns them
    labels: Any  # int32 [N]
    noise: Any  # float32 [N, noise_dim], uniform in [-1, 1]: G's input for these images
    class_names: tuple
    path: Optional[Path] = None  # the file written (`out`), if any

    def grid(self, labels=True):
        """One row per class as a PIL image, like the PNG acgan.generate writes (labels: class names beside)."""
        grid = grids.make_grid(grids.to_uint8(self.images), len(self.class_names))
        return grids.grid_picture(grids.label_rows(grid, self.class_names) if labels else grid)


@dataclasses.dataclass(frozen=True)
class Exported:
    """acgan.export's file (.keras or .onnx, or a SavedModel folder) and the metadata it carries (acgan.json)."""

    path: Path
    metadata: dict

    def load(self):
        """The exported generator as a Keras model (a .keras file; a SavedModel loads with tf.saved_model.load,
        an ONNX file with onnxruntime.InferenceSession)."""
        if self.path.is_dir():
            raise UserError(f"{self.path} is a SavedModel: load it with tf.saved_model.load")
        if self.path.suffix.lower() == ".onnx":
            raise UserError(
                f"{self.path} is an ONNX file: load it with onnxruntime.InferenceSession"
            )
        import keras  # here: Keras loads on the backend this process chose

        return keras.saving.load_model(self.path)


@dataclasses.dataclass(frozen=True)
class Report:
    """acgan.compare's or acgan.benchmark's output folder and its JSON (compare.json, benchmark.json)."""

    folder: Path
    report: dict

    def __fspath__(self):
        return os.fspath(self.folder)

    def figure(self, name=None):
        """A figure of the folder as a PIL image: compare.png, or benchmark's time_per_batch.png (name: any
        PNG of the folder, e.g. "cost_per_million_batches.png")."""
        names = [name] if name else ["compare.png", "time_per_batch.png"]
        for candidate in names:
            if (self.folder / candidate).is_file():
                with Image.open(self.folder / candidate) as picture:
                    return picture.copy()
        raise UserError(f"{self.folder} holds no {' or '.join(names)}")


# ---- The calls ----


def train(config=None, **settings):
    """Trains (or resumes) one AC-GAN, as python -m acgan.train does; the settings are its flags (every
    field of acgan.config.Config), `config` a settings file to start from (--config). Returns a Run; a
    run that diverged or was interrupted (Ctrl-C: it saves a checkpoint and its report) returns too, with
    its status and message."""
    command = cli.command_text(
        "train", dict(settings, **({"config": str(config)} if config is not None else {}))
    )
    return train_with(training_config(config, **settings), command=command)


def training_config(config=None, **settings):
    """The Config acgan.train(config, **settings) trains with, as python -m acgan.train resolves it from
    its --config and the flags typed: the settings over the settings file `config`, validated; for a run
    folder to resume, the saved run's settings overridden by those named in `settings`."""
    values = config_lib.settings_from(Config, "train", settings)
    values["backend"] = backend_lib.chosen(values.get("backend"))
    start, given = Config(**values), set(settings)
    if config is not None:
        start, given = start_from_file(config, start, given)
    start = start.validate()
    if start.resume or (start.output_dir and Path(start.output_dir, "config.json").is_file()):
        start = config_to_resume(start, given).validate()
    return start


def train_with(config, command=None):
    """Trains as a resolved Config says (training_config): what python -m acgan.train and acgan.train
    both do. command: what the report records as the command."""
    data.validate_dataset_name(config.dataset, classes=config.classes)
    # after the settings are known good; a resumed run keeps its backend
    side = _keras_side(config.backend)
    disk.ignore_file_size_signal()  # past a file-size limit a write fails (EFBIG) instead of killing us
    with backend_lib.policy_restored():
        result = side.loop.run(
            config, command=command, make_evaluator=side.evaluation.TrainingEvaluator
        )
    return Run(
        result.run_dir,
        result.status,
        result.message,
        result.signal,
        result.chief,
        result.weights_fingerprint,
    )


def generate(
    run=None,
    per_class=10,
    out=None,
    seed=0,
    labels=True,
    ema=True,
    checkpoint="latest",
    backend=None,
):
    """Samples from a run's newest checkpoint (checkpoint="best": the one --eval_every judged best), as
    python -m acgan.generate does: per_class images of every class from noise drawn with `seed`. out:
    also write them, a .png grid (row names unless labels=False) or an .npz (uint8 images, labels,
    class names). ema: from G's moving average where the run kept one (False: G's own). Returns Samples."""
    _require_run(run, checkpoint)
    if out is not None and Path(out).suffix.lower() not in (".png", ".npz"):
        raise UserError("--out must name a .png or .npz file")
    config_lib.check_int(
        "per_class", per_class, 1, f"--per_class must be a positive integer, got {per_class}"
    )
    config_lib.check_int("seed", seed, 0, f"--seed must be non-negative, got {seed}")
    sampling = _keras_side(_backend_for_run(backend, run, checkpoint)).sampling
    with backend_lib.policy_restored():
        _, info, trainer = sampling.load_run(Path(run), ema=ema, checkpoint=checkpoint)
        class_names = tuple(info["class_names"])
        z, labels_of = sampling.generator_inputs(
            len(class_names), trainer.noise_dim, per_class, seed
        )
        images = sampling.generator_images(trainer, z, labels_of)
    if out is not None:
        sampling.write_samples(
            grids.to_uint8(images), labels_of, list(class_names), Path(out), row_names=labels
        )
    return Samples(images, labels_of, z, class_names, Path(out) if out is not None else None)


def evaluate(
    run=None,
    num_samples=10_000,
    seed=0,
    judge_seed=0,
    judges=1,
    data_dir=None,
    cas=False,
    inception=None,
    inception_samples=inception_lib.SAMPLES,
    ema=True,
    ema_statistics=None,
    checkpoint="latest",
    backend=None,
    inception_stats=None,
):
    """The sample quality of a run's newest checkpoint, as python -m acgan.evaluate judges it and records
    it in the run (quality.json, report.md); returns that result as a dict. inception: the path of the 2015
    Inception graph, for the standard FID and Inception score of inception_samples samples (on TensorFlow);
    inception_stats: an .npz of the real side's statistics in TTUR's format, read when it exists, else
    written.
    ema: judge the moving average of G's weights where the run kept one; False: G's own (recorded in
    quality_no_ema.json, beside the average's). ema_statistics: the average's batch-norm statistics
    (presets.EMA_STATISTICS; None: the run's own choice; another is recorded in quality_ema_CHOICE.json).
    checkpoint="best": the checkpoint --eval_every judged best (recorded in quality_best.json)."""
    _require_run(run, checkpoint)
    if ema_statistics is not None:
        config_lib.Config(ema_statistics=ema_statistics).validate()
    for name, lowest, why in (
        ("num_samples", 2, " (a covariance needs two)"),
        ("seed", 0, ""),
        ("judge_seed", 0, ""),
        ("judges", 1, ""),
        ("inception_samples", inception_lib.SPLITS, " (the Inception score's splits)"),
    ):
        value, bound = locals()[name], "non-negative" if lowest == 0 else f"at least {lowest}"
        config_lib.check_int(name, value, lowest, f"--{name} must be {bound}{why}, got {value}")
    settings = config_lib.changed(evaluate, dict(locals()))
    if inception_stats is not None and inception is None:
        raise UserError("--inception_stats needs --inception: they are statistics of its features")
    if inception is not None:
        inception_lib.graph_path(inception)  # a missing file: refused before anything loads
        backend = inception_lib.backend_for(backend, run)
    run_evaluation = _keras_side(_backend_for_run(backend, run, checkpoint)).run_evaluation
    # Loads TensorFlow:
    graph = inception_lib.read_graph(inception, inception_stats) if inception is not None else None
    with backend_lib.policy_restored():
        return run_evaluation.evaluate_run(
            Path(run),
            num_samples,
            seed,
            data_dir=data_dir,
            command=cli.command_text("evaluate", settings),
            judge_seed=judge_seed,
            judges=judges,
            cas=cas,
            inception=graph,
            inception_samples=inception_samples,
            ema=ema,
            ema_statistics=ema_statistics,
            checkpoint=checkpoint,
        )


def compare(**settings):
    """Trains every policy on the same budget (each in its own python -m acgan.train process), judges each
    and writes the page, as python -m acgan.compare does; the settings are its flags (every field of
    acgan.quality.comparison.CompareSettings). Returns a Report of compare.json."""
    values = config_lib.settings_from(CompareSettings, "compare", settings)
    values["backend"] = backend_lib.chosen(values.get("backend"))
    if "policies" in values:
        values["policies"] = values["policies"] or ()
    # The runs train in their own processes; this one loads Keras only then, so none of it runs beside a
    # timed run.
    comparison = config_lib.composed(CompareSettings, values).validate()
    out, runs, states = train_runs(comparison)
    _keras_side(comparison.base.backend).compare_judging.judge_runs(
        comparison, out, runs, states, command=cli.command_text("compare", settings)
    )
    return Report(out, read_json(out / "compare.json"))


def benchmark(**settings):
    """Times every backend x policy x batch x XLA setting, each in a fresh worker process, as python -m
    acgan.benchmark does (this process never loads Keras); the settings are its flags. backends=None:
    KERAS_BACKEND, else tensorflow; jit takes "on", "off" (or True, False). Returns a Report of
    benchmark.json."""
    names = inspect.signature(benchmark).parameters
    values = config_lib.settings_from(SweepSettings, "benchmark", settings, names)
    output_dir = values.pop("output_dir", None)
    # backends=None: KERAS_BACKEND, else tensorflow; an empty list is refused, as --backends= is
    default = (backend_lib.default(),) if settings.get("backends") is None else ()
    values["backends"] = parse_backends(values.get("backends") or default)
    if "policies" in values:
        values["policies"] = tuple(dict.fromkeys(values["policies"] or ()))
    if "batches" in values:
        values["batches"] = parse_batches([str(b) for b in values["batches"] or ()])
    if "jit" in values:
        words = {True: "on", False: "off"}
        jits = values.pop("jit")
        jits = () if jits is None else config_lib.as_tuple(jits)
        values["jits"] = parse_jit([words.get(v, v) for v in jits])
    sweep_settings = config_lib.composed(SweepSettings, values).validate()
    if not sweep_settings.synthetic:
        data.validate_dataset_name(sweep_settings.base.dataset)
    folder, doc = sweep.run_sweep(
        sweep_settings, output_dir, command=cli.command_text("benchmark", settings)
    )
    tables.write_outputs(doc, folder)
    return Report(folder, read_json(folder / "benchmark.json"))


benchmark.__signature__ = config_lib.signature(
    SweepSettings,
    rename={"jits": "jit"},
    more={"output_dir": None},
    backends=None,
    jit=("on",),
)


def export(
    run=None,
    out=None,
    keep_policy=False,
    format="keras",
    ema=True,
    checkpoint="latest",
    backend=None,
):
    """The generator of a run's newest checkpoint (checkpoint="best": the one --eval_every judged best) as
    one file that loads without acgan, as python -m acgan.export writes it: keras.saving.load_model(out)
    on TensorFlow or JAX gives a model from (noise, labels) to images in [0, 1], with acgan.json inside
    (noise size, image shape, class names, the checkpoint and step). keep_policy: the layers keep the
    run's policy (default: float32). format="savedmodel": a SavedModel folder for TF Serving (needs
    TensorFlow); format="onnx": a .onnx file for onnxruntime (the onnx extra; float32 only). ema: the
    moving average of G's weights where the run kept one (False: G's own). Returns Exported."""
    _require_run(run, checkpoint)
    out = export_request.check_output(out, format, keep_policy)
    name = _backend_for_run(backend, run, checkpoint)
    export_request.check_installed(format, name)
    exporting = _keras_side(name).export
    with backend_lib.policy_restored():
        meta = exporting.export_run(
            Path(run), out, keep_policy=keep_policy, format=format, ema=ema, checkpoint=checkpoint
        )
    return Exported(out, meta)


# ---- Settings, backend, policy ----


train.__signature__ = config_lib.signature(Config, more={"config": None}, backend=None)
compare.__signature__ = config_lib.signature(CompareSettings, backend=None)


def _require_run(run, checkpoint):
    """UserError for no run folder or an unknown --checkpoint: the run commands' first checks."""
    if run is None or not os.fspath(run):
        raise UserError("--run is required: the folder of a training run")
    best.check_checkpoint(checkpoint)


def _backend_for_run(name, run, checkpoint="latest"):
    """The backend the run commands choose: the named one, else the one Keras runs on, else KERAS_BACKEND,
    else the run's own. No such folder, a folder that holds no run, or --checkpoint best on a run that
    keeps none, is refused (UserError), before Keras loads (seconds)."""
    if not Path(run).is_dir():
        raise UserError(f"--run {os.fspath(run)} is not a folder")
    config, _ = read_run(Path(run))
    if checkpoint == "best":
        best.record_of(run)
    return name or backend_lib.running() or os.environ.get("KERAS_BACKEND") or config.backend


def _keras_side(name):
    """Makes Keras run on `name` (backend_lib.use: UserError where it cannot), then returns the modules
    the calls need that load Keras, by their names."""
    backend_lib.use(name)
    # The one place this module imports them: Keras reads its backend once, when it is first imported.
    from acgan.quality import compare_judging, evaluation, run_evaluation
    from acgan.training import export, loop, sampling

    return types.SimpleNamespace(
        compare_judging=compare_judging,
        evaluation=evaluation,
        run_evaluation=run_evaluation,
        export=export,
        loop=loop,
        sampling=sampling,
    )
