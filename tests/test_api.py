"""The Python API in this process: acgan.train, generate and evaluate on a tiny run; a bad argument is
acgan.UserError with the command's one-line message; one backend per process; every call's settings are
its command's flags, with the same defaults; the `acgan` command and its subcommands."""

import inspect
import json
import subprocess
import sys

import keras
import numpy as np
import pytest

import acgan
from acgan.training.grids import to_uint8
from api_runs import ROOT, acgan_command, child_env, command_flags

CALLS = ("train", "generate", "evaluate", "compare", "benchmark", "export")


@pytest.fixture(scope="module")
def run(tf_run):
    return tf_run


@pytest.mark.slow
def test_train_returns_the_run_with_its_report_config_and_grid(run):
    assert isinstance(run, acgan.Run) and run.message is None
    report = run.report
    assert (
        run.status == "completed"
        and report["status"] == "completed"
        and report["steps"] == 2
        and report["config"]["policy"] == "mixed_float16"
        and report["config"]["backend"] == "tensorflow"
    )
    assert report["command"].startswith("acgan.train(policy='mixed_float16', jit=True, output_dir=")
    assert run.config["policy"] == "mixed_float16" and run.config["arch"] == "reference"
    assert run.config["ema_decay"] == report["ema_decay"] == 0.9  # api_runs.TINY's
    assert run.config["ema_statistics"] == report["ema_statistics"] == "g"  # the preset's
    assert (
        "grids and evaluations from a moving average of G's weights (decay 0.9, with G's own "
        "batch-norm statistics)" in (run.folder / "report.md").read_text()
    )
    grid = run.grid()  # what a notebook shows: ten rows of 28-pixel doodles at 2x
    assert grid.height == 2 * (10 * 30 + 2) and grid.width > grid.height
    assert run.grid(step=2).size == grid.size
    with pytest.raises(acgan.UserError, match="step_0000001.png does not exist"):
        run.grid(step=1)
    assert keras.mixed_precision.global_policy().name == "float32"  # the caller's policy, put back
    assert acgan.Run(str(run.folder)).report == report  # an existing run folder, opened


def test_generate_returns_numpy_samples_and_writes_what_the_command_writes(run, tmp_path):
    samples = acgan.generate(run, per_class=3, seed=1)
    assert samples.images.shape == (30, 28, 28, 1) and samples.images.dtype == np.float32
    assert 0 <= samples.images.min() and samples.images.max() <= 1
    assert samples.labels.tolist() == [c for c in range(10) for _ in range(3)]  # class-major
    assert samples.noise.shape == (30, 62) and np.abs(samples.noise).max() <= 1
    assert len(samples.class_names) == 10 and samples.path is None
    # one row per class, three columns, at 2x; grid() adds the names
    bare = samples.grid(labels=False)
    assert bare.size == (2 * (3 * 30 + 2), 2 * (10 * 30 + 2)) and samples.grid().width > bare.width
    written = acgan.generate(str(run.folder), per_class=3, seed=1, out=tmp_path / "samples.npz")
    with np.load(written.path) as npz:
        np.testing.assert_array_equal(npz["images"], to_uint8(samples.images))
        np.testing.assert_array_equal(npz["labels"], samples.labels)
    # the same seed draws the same noise
    np.testing.assert_array_equal(written.noise, samples.noise)
    assert acgan.generate(run, per_class=1, out=tmp_path / "grid.png").path.is_file()
    assert keras.mixed_precision.global_policy().name == "float32"
    # The run keeps an average of G (api_runs.TINY): what reads it samples the average; ema=False, G's own
    # weights. (Its two mixed_float16 steps skip while the loss scale falls, so here the two are equal:
    # tests/step/test_ema.py tests the average itself.)
    from acgan.model import precision
    from acgan.training import sampling

    with precision.float32_policy():
        _, _, average = sampling.load_run(run.folder)
        _, _, own = sampling.load_run(run.folder, ema=False)
    assert sampling.sampled_generator(average) == "ema" and sampling.sampled_generator(own) == "raw"
    assert average.generator_holds_ema and not (own.generator_holds_ema or own.samples_from_ema)
    np.testing.assert_array_equal(
        np.concatenate([w.ravel() for w in average.ema_values()]),
        np.concatenate([v.numpy().ravel() for v in average.g_variables]),
    )


@pytest.mark.slow
def test_evaluate_returns_the_quality_and_records_it_in_the_run(run):
    result = acgan.evaluate(run, num_samples=20)
    assert result["step"] == 2 and result["num_generated"] == 20
    assert 0 <= result["conditional_accuracy"] <= 1 and result["frechet_distance"] >= 0
    assert run.quality["conditional_accuracy"] == result["conditional_accuracy"]
    assert run.quality["command"].startswith("acgan.evaluate(run=")
    section = (run.folder / "report.md").read_text()
    assert "## Sample quality" in section
    assert (
        "G's moving average (decay 0.9, with G's own batch-norm statistics), its newest checkpoint "
        "(step 2)" in section
    )
    assert result["generator"] == "ema" and result["ema_decay"] == 0.9
    # G's own weights: beside the run's result, not over it
    own = acgan.evaluate(run, num_samples=20, ema=False)
    assert own["generator"] == "raw" and run.quality["generator"] == "ema"
    assert json.loads((run.folder / "quality_no_ema.json").read_text())["generator"] == "raw"
    # the average with other batch-norm statistics: beside the run's result too
    standing = acgan.evaluate(run, num_samples=20, ema_statistics="standing")
    assert standing["ema_statistics"] == "standing" and run.quality["ema_statistics"] == "g"
    assert (run.folder / "quality_ema_standing.json").is_file()


# Each call's settings as its command's flags: the same one-line message, as UserError instead of exit 2.
BAD = {
    "train: a bad batch": (
        "train",
        dict(batch=0),
        ["--batch", "0"],
        "--batch must be a positive integer, got 0",
    ),
    "train: two lengths": (
        "train",
        dict(steps=3, minutes=1.0),
        ["--steps", "3", "--minutes", "1"],
        "give only one of --steps, --epochs, --minutes (got steps, minutes)",
    ),
    "generate: no run": (
        "generate",
        dict(out="x.png"),
        ["--out", "x.png"],
        "--run is required: the folder of a training run",
    ),
    "generate: a bad file": (
        "generate",
        dict(run="r", out="x.txt"),
        ["--run", "r", "--out", "x.txt"],
        "--out must name a .png or .npz file",
    ),
    "evaluate: one sample": (
        "evaluate",
        dict(run="r", num_samples=1),
        ["--run", "r", "--num_samples", "1"],
        "--num_samples must be at least 2 (a covariance needs two), got 1",
    ),
    "evaluate: statistics that do not exist": (
        "evaluate",
        dict(run="r", ema_statistics="moving"),
        ["--run", "r", "--ema_statistics", "moving"],
        "--ema_statistics 'moving': choose one of g, averaged, standing",
    ),
    "compare: no budget": (
        "compare",
        dict(policies="float32"),
        ["--policies", "float32"],
        "give exactly one of --steps (equal steps) or --minutes (equal time)",
    ),
    "benchmark: a bad batch": (
        "benchmark",
        dict(batches=[0]),
        ["--batches", "0"],
        "--batches must be positive integers, got '0'",
    ),
    "export: not a .keras file": (
        "export",
        dict(run="r", out="g.h5"),
        ["--run", "r", "--out", "g.h5"],
        "--out must name a .keras file, not 'g.h5' (--format savedmodel writes a folder)",
    ),
    "export: a bad checkpoint": (
        "export",
        dict(run="r", out="g.keras", checkpoint="newest"),
        ["--run", "r", "--out", "g.keras", "--checkpoint", "newest"],
        "--checkpoint must be latest or best, got 'newest'",
    ),
    "export: no such run": (
        "export",
        dict(run="nowhere", out="g.keras"),
        ["--run", "nowhere", "--out", "g.keras"],
        "--run nowhere is not a folder",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_bad_argument_raises_user_error_with_the_commands_message(case, tmp_path, monkeypatch):
    name, kwargs, _, message = BAD[case]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(acgan.UserError) as error:
        getattr(acgan, name)(**kwargs)
    assert str(error.value) == message
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
def test_the_commands_print_the_same_messages(tmp_path):
    """One case of BAD per command as `acgan COMMAND FLAGS`, each in a child process (none loads Keras):
    exit status 2 and the call's message as the one line on stderr."""
    cases = [
        "train: a bad batch",
        "generate: a bad file",
        "evaluate: one sample",
        "compare: no budget",
        "benchmark: a bad batch",
        "export: not a .keras file",
        "export: a bad checkpoint",
    ]
    procs = {
        case: acgan_command(BAD[case][0], *BAD[case][2], cwd=tmp_path, wait=False) for case in cases
    }
    for case, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (case, err[-2000:])
        assert err.strip().splitlines() == [f"error: {BAD[case][3]}"], (case, err[-2000:])


def test_an_unknown_setting_and_a_second_backend_are_user_errors():
    with pytest.raises(acgan.UserError, match="acgan.train\\(\\) has no setting 'bacth'"):
        acgan.train(bacth=8)
    with pytest.raises(acgan.UserError, match="acgan.compare\\(\\) has no setting 'policy'"):
        acgan.compare(policy="float32", steps=1)
    assert keras.backend.backend() == "tensorflow"  # this process's: the first choice holds
    with pytest.raises(acgan.UserError) as error:
        acgan.train(backend="jax", steps=1)
    assert (
        str(error.value)
        == "Keras already runs on tensorflow in this process; --backend jax needs a new one"
    )


def test_jit_false_stays_a_bool_for_train_and_compare_and_a_list_for_the_benchmark():
    """jit=False turns XLA off (a one-element tuple, truthy, once turned it on), while the benchmark's jit
    is its list of XLA settings."""
    from acgan import api
    from acgan import config as config_lib
    from acgan.quality.comparison import CompareSettings

    assert api.training_config(jit=False).jit is False
    values = config_lib.settings_from(CompareSettings, "compare", {"jit": False})
    assert config_lib.composed(CompareSettings, values).base.jit is False
    with pytest.raises(acgan.UserError, match="--jit"):
        acgan.benchmark(jit=["sometimes"], steps=1)


def test_every_call_takes_its_commands_flags_with_the_same_defaults():
    flag_defaults = command_flags(*CALLS)
    for name in CALLS:
        parameters = inspect.signature(getattr(acgan, name)).parameters
        flags = {
            n: d
            for n, d in flag_defaults[name].items()
            if not (name == "benchmark" and n == "backend")
        }
        assert set(parameters) == set(flags), name  # (benchmark's --backend is --backends' alias)
        for flag, default in flags.items():
            expected = parameters[flag].default
            if flag in (
                "backend",
                "backends",
            ):  # None: as Keras runs, else KERAS_BACKEND, else tensorflow
                assert expected is None and default in (None, "tensorflow", ["tensorflow"]), (
                    name,
                    flag,
                )
            elif isinstance(expected, tuple):  # a list flag: strings
                assert default == [str(v) for v in expected], (name, flag)
            else:
                assert default == expected, (name, flag)


def test_the_acgan_command_lists_its_subcommands_and_runs_them():
    listed = acgan_command("--help")
    assert listed.returncode == 0
    for name in CALLS + ("benchmark_merge",):
        assert f"\n  {name} " in listed.stdout
    unknown = acgan_command("trian")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown command 'trian'")
    # --help (and -h) lists every flag of the command, its own and the shared ones (cli.define_*), exits 0
    helped = acgan_command("train", "--help")
    short = subprocess.run(
        [sys.executable, "-m", "acgan.train", "-h"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=60,
    )
    for proc, heading in ((helped, "\nacgan train:\n"), (short, "acgan/train.py:\n")):
        assert proc.returncode == 0 and proc.stdout.startswith("CLI: python -m acgan.train"), (
            proc.stderr[-2000:]
        )
        assert heading in proc.stdout and "--helpfull" in proc.stdout
        for flag in (
            "--dataset",
            "--arch",
            "--backend",
            "--seed",
            "--policy",
            "--strategy",
            "--loss",
            "--steps",
        ):
            assert f"\n  {flag}: " in proc.stdout, flag
    full = acgan_command("benchmark_merge", "--helpfull")  # absl's own flags too
    assert (
        full.returncode == 0
        and "--output_dir" in full.stdout
        and "\nabsl.logging:\n" in full.stdout
    )
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"acgan": "acgan.__main__:main"}
    # there once the package is installed with this pyproject
    console = ROOT / ".venv" / "bin" / "acgan"
    if console.exists():
        assert (
            "\n  export "
            in subprocess.run(
                [str(console), "--help"],
                capture_output=True,
                text=True,
                env=child_env(),
                timeout=60,
            ).stdout
        )


def test_importing_acgan_loads_no_framework_and_no_command():
    probe = (
        "import sys, acgan; print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'acgan.train', 'acgan.api') "
        "if m in sys.modules)); acgan.export; print('keras' in sys.modules, callable(acgan.export))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert proc.stdout.split("\n")[:2] == ["[]", "False True"], proc.stderr[-2000:]


@pytest.mark.parametrize(
    "call",
    [
        "generate(run=folder, out=folder + '/x.png')",
        "evaluate(run=folder)",
        "export(run=folder, out=folder + '/g.keras')",
    ],
)
def test_a_folder_without_a_run_is_refused_before_keras_loads(call, tmp_path):
    probe = (
        f"import sys, acgan\nfolder = {str(tmp_path)!r}\ntry:\n    acgan.{call}\n"
        "except acgan.UserError as e:\n    print(e)\nprint('keras' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert proc.stdout.split("\n")[:2] == [
        f"{tmp_path} is not a readable acgan run folder (FileNotFoundError)",
        "False",
    ], proc.stderr[-2000:]
