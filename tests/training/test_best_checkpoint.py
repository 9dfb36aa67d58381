"""The best checkpoint (acgan/training/best.py): the rule on constructed numbers; the record written whole
and in order; and a tiny TensorFlow run whose evaluations give chosen distances (a stand-in for the judge,
so which step is best is known): rotation keeps the best, a resume goes on comparing with its record, and
generate, evaluate and export read it with checkpoint="best". The JAX run with a real judge:
tests/jax/test_jax_training.py."""

import json
import math

import numpy as np
import pytest

import acgan
from acgan.config import Config
from acgan.quality import evaluation, judge
from acgan.quality.run_evaluation import evaluate_run
from acgan.training import best
from api_runs import TINY, acgan_command

# The distance each evaluation gives, by step: step 4 is best in the first session (8 steps); the resumed
# session's (to 12) are worse, so a run that forgot its record would take step 10.
DISTANCES = {2: 5.0, 4: 3.0, 6: 4.0, 8: 6.0, 10: 4.5, 12: 5.0}


class GivenDistances:
    """Stands in for evaluation.TrainingEvaluator: each evaluation's Fréchet distance is DISTANCES'."""

    def __init__(self, config):
        self.last = None

    def evaluate(self, trainer, step, writer):
        self.last = {
            "step": step,
            "frechet_distance": DISTANCES[step],
            "conditional_accuracy": 0.5,
            "num_generated": 20,
        }


def test_the_rule_keeps_the_lowest_finite_distance_and_the_earlier_of_a_tie():
    record = None
    for step, distance in enumerate([5.0, 3.0, math.nan, 3.0, None, math.inf, 4.0]):
        if best.is_better({"frechet_distance": distance}, record):
            record = {"step": step, "frechet_distance": distance}
    assert record == {"step": 1, "frechet_distance": 3.0}


class FakeCheckpoints:
    """A runtime's checkpoints: save_apart writes an .npz-like file (the JAX backend's naming)."""

    trainer = type("Trainer", (), {"ema_decay": 0.0})

    def save_apart(self, prefix, sessions):
        path = prefix.parent / f"{prefix.name}.npz"
        path.write_text("whole")
        return path


def _killed(*args):
    raise KeyboardInterrupt


def test_the_record_names_a_whole_checkpoint_whenever_the_writes_stop(tmp_path, monkeypatch):
    keeper = best.BestCheckpoint(FakeCheckpoints(), tmp_path)
    keeper.offer({"frechet_distance": 2.0}, 3, [])
    assert keeper.record["step"] == 3
    keeper.offer({"frechet_distance": 2.5}, 6, [])  # not better: the record stays
    assert (
        keeper.record["step"] == 3 and json.loads((tmp_path / best.RECORD).read_text())["step"] == 3
    )
    folder = tmp_path / best.FOLDER
    (folder / ".ckpt-5.npz.x.tmp").write_text("half")  # a killed save's leftover
    # Killed after the new checkpoint, before the record: the record still names the old, whole one.
    monkeypatch.setattr(best, "write_json", _killed)
    with pytest.raises(KeyboardInterrupt):
        keeper.offer({"frechet_distance": 1.0}, 9, [])
    record = json.loads((tmp_path / best.RECORD).read_text())
    assert record["step"] == 3 and (tmp_path / record["checkpoint"]).read_text() == "whole"
    monkeypatch.undo()
    # The next best is written, then everything else in the folder goes.
    best.BestCheckpoint(FakeCheckpoints(), tmp_path, resumed=tmp_path).offer(
        {"frechet_distance": 1.5}, 12, []
    )
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-12.npz"]
    assert json.loads((tmp_path / best.RECORD).read_text()) == {
        "step": 12,
        "checkpoint": "checkpoints/best/ckpt-12.npz",
        "rule": best.RULE,
        "generator": "raw",
        "frechet_distance": 1.5,
        **{key: None for key in best.NUMBERS if key != "frechet_distance"},
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The tiny run (api_runs.TINY, with G's average) for 8 steps, then resumed to 12: an evaluation every
    2 steps, a checkpoint every 4 (so the first best ones come before the first checkpoint), only the
    newest kept. Returns the run and its first report."""
    folder = tmp_path_factory.mktemp("best-run")
    settings = dict(
        TINY,
        steps=8,
        eval_every=2,
        checkpoint_every=4,
        keep_checkpoints=1,
        sample_every=100,
        output_dir=str(folder / "run"),
        data_dir=str(folder / "data"),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evaluation, "TrainingEvaluator", GivenDistances)
        first = acgan.train(**settings)
        report = first.report
        resumed = acgan.train(output_dir=settings["output_dir"], steps=12)
    assert first.status == resumed.status == "completed", resumed.message
    return resumed, report


def _saved(run, *under):
    return sorted(p.name for p in run.folder.joinpath("checkpoints", *under).glob("ckpt-*"))


@pytest.mark.slow
def test_the_run_keeps_the_best_checkpoint_apart_from_the_rotation_and_across_a_resume(run):
    run, first = run
    assert first["best_checkpoint"]["step"] == 4 and first["best_checkpoint"]["generator"] == "ema"
    assert _saved(run) == ["ckpt-12.data-00000-of-00001", "ckpt-12.index"]  # --keep_checkpoints 1
    assert _saved(run, "best") == ["ckpt-4.data-00000-of-00001", "ckpt-4.index"]
    record = json.loads((run.folder / best.RECORD).read_text())
    assert record == run.report["best_checkpoint"]
    assert record["step"] == 4 and record["frechet_distance"] == 3.0 and record["rule"] == best.RULE
    assert (
        "Best checkpoint: step 4 (conditional accuracy 50.0%, Fréchet distance 3.0, 20 samples; "
        in (run.folder / "report.md").read_text()
    )


@pytest.mark.slow
def test_the_commands_read_the_best_checkpoint_with_checkpoint_best(run, tmp_path):
    run, _ = run
    latest = acgan.generate(run, per_class=1)
    chosen = acgan.generate(run, per_class=1, checkpoint="best")
    assert not np.array_equal(latest.images, chosen.images)
    exported = acgan.export(run, out=tmp_path / "g.keras", checkpoint="best")
    assert exported.metadata["step"] == 4 and exported.metadata["checkpoint"] == "best"
    # Judged (by an untrained judge: the numbers do not matter here) and recorded beside quality.json.
    names = json.loads((run.folder / "dataset.json").read_text())["class_names"]
    untrained = judge.Judge(judge.build_model((28, 28, 1), 10), {"class_names": names})
    result = evaluate_run(run.folder, num_samples=20, judge=untrained, checkpoint="best")
    assert result["step"] == 4 and result["checkpoint"] == "best"
    assert json.loads((run.folder / "quality_best.json").read_text())["step"] == 4
    assert run.quality is None and "quality" not in run.report


def _run_without_evaluations(folder):
    (folder / "config.json").write_text(Config().to_json())
    (folder / "dataset.json").write_text(json.dumps({"class_names": ["a"], "image_shape": [1]}))
    return (
        f"--checkpoint best: {folder} has no best checkpoint (a run keeps one from its first "
        "--eval_every evaluation on); use --checkpoint latest"
    )


def test_checkpoint_best_on_a_run_that_keeps_none_is_one_line(tmp_path):
    message = _run_without_evaluations(tmp_path)
    for call, more in (
        (acgan.generate, {}),
        (acgan.evaluate, {}),
        (acgan.export, {"out": tmp_path / "g.keras"}),
    ):
        with pytest.raises(acgan.UserError) as error:
            call(tmp_path, checkpoint="best", **more)
        assert str(error.value) == message


@pytest.mark.slow
def test_the_command_exits_2_with_that_line(tmp_path):
    message = _run_without_evaluations(tmp_path)
    done = acgan_command("generate", "--run", tmp_path, "--checkpoint", "best", "--out", "x.png")
    assert done.returncode == 2 and done.stderr.splitlines() == [f"error: {message}"]
