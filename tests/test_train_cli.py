"""The train command end to end: bad input (one line, exit status 2), a diverged run (exit status 3), the
acgan_cifar preset's learning-rate decay across a resume, with evaluate --inception on its run.

The train command runs in this process (api_runs.train_command_in_process: cli.run_main, as the command
runs, with its exit statuses and one-line errors), so TensorFlow loads once; a process is started only
for the generate and evaluate commands, whose own output is tested. Sizes: width 0.125, batch 16, eager
steps, 20 swatches a class, 8 + 4 steps (the decay's last quarter has to show two distinct rates)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from api_runs import train_command_in_process
from inception_graph import write_graph

TINY = [
    "--steps",
    "4",
    "--batch",
    "16",
    "--width",
    "0.125",
    "--sample_every",
    "2",
    "--checkpoint_every",
    "2",
    "--warmup_steps",
    "1",
]


def _run(module, *args, cwd=None, env=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


def _npz(tmp_path, name="d.npz", images=None, labels=None, **extra):
    rng = np.random.default_rng(0)
    arrays = {
        "images": rng.integers(0, 256, (40, 28, 28), dtype=np.uint8) if images is None else images,
        "labels": np.arange(40) % 4 if labels is None else labels,
        **extra,
    }
    arrays = {k: v for k, v in arrays.items() if v is not False}
    np.savez(tmp_path / name, **arrays)
    return f"npz:{tmp_path / name}"


def _truncated_npz(tmp_path):
    path = _npz(tmp_path)[4:]
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    return f"npz:{path}"


def _folder(tmp_path, classes):
    root = tmp_path / "imgs"
    for c in range(classes):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((28, 28), i * 40, np.uint8)).save(root / f"c{c}" / f"{i}.png")
    return f"folder:{root}"


def _a_file(tmp_path):
    (tmp_path / "plain").write_text("x")
    return str(tmp_path / "plain")


BAD_INPUTS = {
    "unknown policy": (lambda t: ["--policy", "float8"], "--policy"),
    "unknown dataset": (lambda t: ["--dataset", "mnist"], "unknown dataset 'mnist'"),
    "unknown class": (
        lambda t: ["--dataset", "quickdraw", "--classes", "airplane,dragonn"],
        "dragonn",
    ),
    "duplicate classes": (
        lambda t: ["--dataset", "quickdraw", "--classes", "cow,dog,cow"],
        "listed more than once: cow",
    ),
    "zero batch": (lambda t: ["--batch", "0"], "--batch must be a positive integer"),
    "negative batch": (lambda t: ["--batch", "-3"], "--batch must be a positive integer"),
    "non-integer batch": (lambda t: ["--batch", "abc"], "--batch"),
    "batch above dataset": (lambda t: ["--batch", "1000000"], "larger than the dataset"),
    "zero steps": (lambda t: ["--steps", "0"], "--steps must be a positive integer"),
    "negative minutes": (lambda t: ["--minutes", "-2"], "--minutes must be a positive number"),
    "zero sample interval": (
        lambda t: ["--sample_every", "0"],
        "--sample_every must be a positive integer",
    ),
    "steps with minutes": (
        lambda t: ["--steps", "10", "--minutes", "1"],
        "only one of --steps, --epochs, --minutes",
    ),
    "bad price": (
        lambda t: ["--price_per_hour", "-1"],
        "--price_per_hour must be a positive number",
    ),
    "stray argument": (lambda t: ["stray"], "unexpected arguments"),
    "unknown loss": (
        lambda t: ["--loss", "wgan"],
        "unknown loss 'wgan': choose auto, nonsaturating, hinge",
    ),
    "unknown arch": (
        lambda t: ["--arch", "dcgan"],
        "unknown arch 'dcgan': choose auto, reference, acgan_cifar",
    ),
    "colour preset on 28x28 data": (
        lambda t: ["--arch", "acgan_cifar", "--max_per_class", "20"],
        "divides by 8",
    ),
    "missing npz": (lambda t: ["--dataset", f"npz:{t / 'none.npz'}"], "does not exist"),
    "truncated npz": (lambda t: ["--dataset", _truncated_npz(t)], "d.npz"),
    "npz without labels": (lambda t: ["--dataset", _npz(t, labels=False)], "labels"),
    "npz without images": (lambda t: ["--dataset", _npz(t, images=False)], "images"),
    "npz labels out of range": (
        lambda t: ["--dataset", _npz(t, labels=np.arange(40) - 1)],
        "label",
    ),
    "npz length mismatch": (lambda t: ["--dataset", _npz(t, labels=np.arange(39) % 4)], "40"),
    "npz float images": (
        lambda t: ["--dataset", _npz(t, images=np.zeros((40, 28, 28), np.float32))],
        "uint8",
    ),
    "unsupported image size": (
        lambda t: ["--dataset", _npz(t, images=np.zeros((40, 30, 30), np.uint8))],
        "30x30",
    ),
    "folder with one class": (lambda t: ["--dataset", _folder(t, 1)], "class"),
    "empty folder": (lambda t: ["--dataset", f"folder:{t}"], "folder"),
    "quickdraw offline": (
        lambda t: ["--dataset", "quickdraw", "--classes", "cow", "--data_dir", str(t / "qd")],
        "cow",
    ),
    "output folder is a file": (lambda t: ["--output_dir", _a_file(t)], "is a file"),
    "output folder unwritable": (lambda t: ["--output_dir", _a_file(t) + "/run"], "cannot write"),
    "resume with nothing": (
        lambda t: ["--resume", "--output_dir", str(t / "none")],
        "nothing to resume",
    ),
    "batch not divisible by replicas": (
        lambda t: ["--devices", "cpu:0,cpu:1", "--batch", "15"],
        "--batch 15 does not divide by the 2 replicas",
    ),
    "unknown device": (lambda t: ["--devices", "gpu:7"], "no device 'gpu:7'"),
    "devices without mirrored": (
        lambda t: ["--strategy", "default", "--devices", "cpu:0"],
        "--devices applies",
    ),
    "multi_worker without TF_CONFIG": (lambda t: ["--strategy", "multi_worker"], "needs TF_CONFIG"),
    "no TPU": (lambda t: ["--strategy", "tpu"], "no TPU found"),
    "bad profile range": (
        lambda t: ["--profile_steps", "5:2"],
        "--profile_steps: '5:2' is not a step range A:B",
    ),
}


def _run_in_process(argv, monkeypatch, capsys):
    """The train CLI in this process (TensorFlow is loaded once): (exit status, stderr)."""
    status, _, err = train_command_in_process(argv, monkeypatch, capsys)
    return status, err


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_gives_one_line_and_exit_2(
    case, tmp_path, monkeypatch, capsys, set_policy, doodles_cache
):
    make_args, message = BAD_INPUTS[case]
    args = make_args(tmp_path)
    if "--output_dir" not in args:
        args += ["--output_dir", str(tmp_path / "run")]
    if "--data_dir" not in args:  # the doodles drawn once, not again for each case that loads them
        args += ["--data_dir", str(doodles_cache)]
    if not {"--steps", "--minutes"} & set(args):
        args += ["--steps", "3"]
    # a closed port: never the internet
    monkeypatch.setenv("ACGAN_QUICKDRAW_URL", "http://127.0.0.1:9/")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    status, stderr = _run_in_process(args, monkeypatch, capsys)
    assert status == 2, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], stderr[
        -2000:
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_diverged_run_exits_3_with_one_line(
    tmp_path, monkeypatch, capsys, set_policy, doodles_cache
):
    """The command's exit status for a run whose losses turn non-finite (D's loss NaN from the first step):
    3, one line, no checkpoint (the JAX session checks the same run's report in its own process)."""
    from acgan.errors import DIVERGED_STATUS
    from acgan.step import losses

    honest = losses.bce
    monkeypatch.setattr(losses, "bce", lambda target, logits: honest(target, logits) * float("nan"))
    run_dir = tmp_path / "run"
    status, stderr = _run_in_process(
        [
            "--steps",
            "6",
            "--batch",
            "16",
            "--width",
            "0.125",
            "--no-jit",
            "--checkpoint_every",
            "2",
            "--sample_every",
            "1000",
            "--warmup_steps",
            "0",
            "--output_dir",
            str(run_dir),
            "--data_dir",
            str(doodles_cache),
        ],
        monkeypatch,
        capsys,
    )
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert status == DIVERGED_STATUS and len(errors) == 1, stderr[-2000:]
    assert "non-finite" in errors[0] or "diverged" in errors[0].lower()
    assert not list((run_dir / "checkpoints").glob("ckpt-*"))
    assert json.loads((run_dir / "report.json").read_text())["status"] == "diverged"


def test_generate_refuses_a_folder_without_a_run(tmp_path):
    result = _run("acgan.generate", "--run", str(tmp_path), "--out", str(tmp_path / "x.png"))
    assert result.returncode == 2 and "not a readable acgan run folder" in result.stderr


@pytest.mark.slow
def test_acgan_cifar_learning_rates_fall_to_zero_over_the_last_quarter(
    tmp_path, monkeypatch, capsys, set_policy
):
    """The preset's decay in a real run (8 steps): full rates to step 6, then 50% and 0 at steps 7 and 8,
    logged to TensorBoard; the report says so. Resumed to 12 steps, the rates are set from the new length
    (the checkpoint held the last step's zero): full again at step 8, then down to 0 at step 12.

    The two training sessions are the train command in this process (train_command_in_process: a process
    each would load TensorFlow twice more for nothing it tests); evaluate is a process of its own, as its
    command's printed lines are tested (its flags and train's cannot both be defined in one process)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    common = [
        "--output_dir",
        str(run_dir),
        "--no-jit",
        "--batch",
        "16",
        "--width",
        "0.125",
        "--sample_every",
        "8",
        "--checkpoint_every",
        "8",
        "--warmup_steps",
        "1",
    ]
    status, _, err = train_command_in_process(
        [
            "--dataset",
            "swatches",
            "--arch",
            "acgan_cifar",
            "--max_per_class",
            "20",
            "--data_dir",
            str(tmp_path / "data"),
            "--steps",
            "8",
            *common,
        ],
        monkeypatch,
        capsys,
    )
    assert status == 0, err[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["learning_rate_decay"] == 0.25 and report["final_learning_rate_scale"] == 0.0
    assert (
        "learning rates falling linearly to zero over the last 25% of the run (x0 at its end)"
        in (run_dir / "report.md").read_text()
    )
    assert report["diff_augment"] == ["color", "translation", "cutout"]
    assert (
        "D's inputs augmented (DiffAugment: color, translation, cutout)"
        in (run_dir / "report.md").read_text()
    )
    # Its projection head gives D's class margins: in the summary line, quality.json and the report.
    # --inception: the standard FID and Inception score, with a small graph of the 2015 Inception graph's names.
    graph = write_graph(tmp_path / "classify_image_graph_def.pb")
    result = _run(
        "acgan.evaluate",
        "--run",
        str(run_dir),
        "--num_samples",
        "200",  # every test image
        "--inception",
        str(graph),
        "--inception_samples",
        "100",
        "--inception_stats",
        str(tmp_path / "stats" / "swatches.npz"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "D's class margin " in result.stdout and "(lowest: " in result.stdout, result.stdout
    quality = json.loads((run_dir / "quality.json").read_text())
    assert set(quality["d_class_margin_per_class"]) == set(
        quality["conditional_accuracy_per_class"]
    )
    assert quality["d_class_margin_mean"] == pytest.approx(
        np.mean(list(quality["d_class_margin_per_class"].values()))
    )
    assert "| D's class margin (mean over classes) |" in (run_dir / "report.md").read_text()
    _check_inception(quality["inception"], run_dir, graph, result.stdout, tmp_path)
    status, _, err = train_command_in_process(
        ["--resume", "--steps", "12", *common], monkeypatch, capsys
    )
    assert status == 0, err[-3000:]
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    # Each session sets the rates before its first step, then after every step that changes them.
    assert [(e.step, round(e.value, 2)) for e in events.Scalars("learning_rate_scale")] == [
        (0, 1.0),
        (7, 0.5),
        (8, 0.0),
        (8, 1.0),
        (10, 0.67),
        (11, 0.33),
        (12, 0.0),
    ]


def _check_inception(entry, run_dir, graph, stdout, tmp_path):
    """acgan.evaluate --inception's entry: 100 generated against every train image (20 a class), the graph's
    path and sha256, KID and the per-class FID, the statistics file written, printed, in the report (its
    rows as report_section renders them) and TensorBoard."""
    import hashlib

    from acgan.data import load_dataset
    from acgan.quality import evaluation
    from acgan.quality.report_section import inception_rows, inception_text

    data_dir, stats = tmp_path / "data", tmp_path / "stats" / "swatches.npz"
    train = load_dataset("swatches", split="train", data_dir=str(data_dir), max_per_class=20)
    assert (
        entry["num_generated"] == 100
        and entry["num_real"] == len(train) == 200
        and entry["splits"] == 10
    )
    assert entry["fid"] > 0 and entry["inception_score"] >= 1 and entry["real_inception_score"] >= 1
    assert (
        entry["graph"] == str(graph)
        and entry["sha256"] == hashlib.sha256(graph.read_bytes()).hexdigest()
    )
    assert inception_text(entry) in stdout
    assert (
        f"standard FID {entry['fid']:.2f} (100 generated vs 200 real train images), KID " in stdout
    )
    assert entry["kernel_distance"]["subset_size"] == 100 and len(entry["fid_per_class"]) == 10
    assert (
        entry["num_generated_per_class"] == [10] * 10 and entry["num_real_per_class"] == [20] * 10
    )
    assert entry["real_statistics"] == {
        "file": str(stats),
        "sha256": hashlib.sha256(stats.read_bytes()).hexdigest(),
        "read": False,
    }
    report = (run_dir / "report.md").read_text()
    for name, value in inception_rows(entry):
        assert f"| {name} | {value} |" in report
    assert (
        f"| {entry['fid']:.2f} (100 generated vs 200 real train images; on swatches, comparable only"
        in report
    )
    assert (
        f"| Inception score, standard | {entry['inception_score']:.2f} ± {entry['inception_score_std']:.2f} "
        f"(mean ± standard deviation over 10 splits of the 100 generated; real train images: "
        f"{entry['real_inception_score']:.2f} ± {entry['real_inception_score_std']:.2f}) |"
    ) in report
    # the real side, cached
    assert len(list((data_dir / "judges").glob("inception-real-*.npz"))) == 1
    scalars = evaluation.scalars(json.loads((run_dir / "quality.json").read_text()))
    assert scalars["quality/inception_fid"] == entry["fid"]
    assert scalars["quality/inception_score"] == entry["inception_score"]
    assert scalars["quality/inception_fid_class_mean"] == entry["fid_class_mean"]
    assert "| iFID, standard |" in report


def test_settings_are_read_from_the_flags_named_as_their_fields(monkeypatch):
    from absl import flags

    from acgan import api, cli

    values = flags.FlagValues()
    flags.DEFINE_string("dataset", "doodles", "", flag_values=values)
    flags.DEFINE_list("classes", None, "", flag_values=values)
    flags.DEFINE_list("devices", None, "", flag_values=values)
    flags.DEFINE_integer("batch", 64, "", flag_values=values)
    values(["prog", "--dataset", "swatches", "--classes", "bee,cow", "--devices="])
    monkeypatch.setattr(flags, "FLAGS", values)

    def call(dataset="doodles", classes=None, devices=None, batch=64):
        pass

    # the flags named as the call's parameters; typed_only: the ones typed
    assert cli.flag_arguments(call) == {
        "dataset": "swatches",
        "classes": ["bee", "cow"],
        "devices": [],
        "batch": 64,
    }
    typed = cli.flag_arguments(call, typed_only=True)
    assert typed == {"dataset": "swatches", "classes": ["bee", "cow"], "devices": []}
    # the call builds its settings from them: a list flag gives a tuple (an empty one None), the
    # settings not typed keep their defaults
    config = api.training_config(**typed)
    assert (config.dataset, config.classes, config.devices) == ("swatches", ("bee", "cow"), None)
    assert config.batch == 64 and config.jit is True
