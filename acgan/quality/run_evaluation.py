"""Judging a run folder: `evaluate_run` scores its latest checkpoint with the judge (evaluation.py),
optionally with more judges, the classification accuracy score and Inception's standard scores, and
records the result in the run: quality.json, report.json, report.md and TensorBoard.

Importing it loads Keras (the judge, the models, sampling): its callers choose the backend first.
"""

import functools
import json
import time
from pathlib import Path

from acgan.errors import UserError
from acgan.quality import cas as cas_lib
from acgan.quality import inception as inception_lib
from acgan.quality import judge as judge_lib
from acgan.quality.evaluation import (
    evaluate_gan,
    load_splits,
    real_reference,
    sample_inputs,
    scalars,
)
from acgan.quality.report_section import (
    render_markdown,
    result_file,
)
from acgan.quality.verdict import ACROSS_JUDGES, spread
from acgan.training import report as run_report
from acgan.training import sampling
from acgan.training.tensorboard import SummaryWriter
from acgan.util.files import write_atomically, write_json


def evaluate_run(
    run_dir,
    num_samples=10_000,
    seed=0,
    data_dir=None,
    judge=None,
    command=None,
    echo=print,
    judge_seed=0,
    judges=1,
    cas=False,
    inception=None,
    inception_samples=inception_lib.SAMPLES,
    ema=True,
    ema_statistics=None,
    checkpoint="latest",
):
    """Evaluates a run folder's latest checkpoint and records the result in the run; returns the dict.

    Sets the global dtype policy to the run's (acgan.training.sampling.load_run). `judge` may be passed in to share
    one judge among runs on the same dataset; otherwise the cached one of seed `judge_seed` is loaded (or
    trained): judges of other seeds are the same CNN trained from another initialisation and data order,
    to see how much a verdict depends on the judge. judges > 1: the same samples are judged again by the
    judges of the next judges - 1 seeds (result["across_judges"]); the headline numbers stay the first's.
    cas: also the classification accuracy score of the same samples (acgan.quality.cas; its classifiers
    train from seed `judge_seed`), in result["classification_accuracy_score"]. inception: an
    acgan.quality.inception.InceptionGraph, for the standard FID and IS of inception_samples (standard_scores).
    ema, ema_statistics, checkpoint: which generator from which checkpoint (sampling.load_run), recorded
    where result_file says."""
    started = time.perf_counter()
    run_dir = Path(run_dir)
    config, info, trainer = sampling.load_run(
        run_dir, ema=ema, ema_statistics=ema_statistics, checkpoint=checkpoint
    )
    data_dir = data_dir or config.data_dir
    test_set, train_set = load_splits(config, data_dir)
    if list(test_set.class_names) != list(info["class_names"]):
        raise UserError(
            f"the test split of {config.dataset} has other classes than {run_dir} was trained on"
        )

    # the judge of a seed, loaded or trained once and cached
    cached_judge = functools.partial(
        judge_lib.load_or_train,
        config.dataset,
        data_dir,
        config.classes,
        config.max_per_class,
        test_set,
    )
    judge = judge or cached_judge(seed=judge_seed, echo=echo)
    # The samples, once: every judge (and Inception) scores these same images.
    z, labels = sample_inputs(test_set.num_classes, trainer.noise_dim, num_samples, seed)
    fake = sampling.generate_images(trainer, z, labels)

    def judged_by(judge, with_q=True):
        judged = evaluate_gan(trainer, test_set, judge, num_samples, seed, with_q=with_q, fake=fake)
        judged["real_reference"] = real_reference(judge, test_set, train_set, num_samples, seed)
        judged["judge"] = {k: judge.info.get(k) for k in JUDGE_FIELDS}
        return judged

    result = judged_by(judge)
    result["inception"] = standard_scores(
        inception, trainer, config.dataset, train_set, inception_samples, seed, data_dir, echo
    )
    result.update(_about(run_dir, command, config, trainer), checkpoint=checkpoint)
    if cas:
        echo(f"classification accuracy score: the judge's CNN trained on the {len(fake):,} samples")
        result["classification_accuracy_score"] = cas_lib.classification_accuracy_score(
            fake, labels, test_set, train_set, seed=judge_seed, cache_dir=Path(data_dir) / "judges"
        )
    if judges > 1:  # the same samples, judged again by the judges of the next seeds
        others = [
            judged_by(cached_judge(seed=other_seed, echo=echo), with_q=False)
            for other_seed in range(judge_seed + 1, judge_seed + judges)
        ]
        result["across_judges"] = across_judges([result, *others])
    result["seconds"] = time.perf_counter() - started
    record(run_dir, result)
    return result


JUDGE_FIELDS = (
    "path",
    "test_accuracy",
    "num_test",
    "num_train",
    "epochs",
    "seed",
    "train_seconds",
    "feature_dim",
)


def _about(run_dir, command, config, trainer):
    """What a result says of what it judged: the run, its step and which generator."""
    return {
        "format": "acgan-quality/1",
        "run_dir": str(run_dir),
        "command": command or "acgan.quality.run_evaluation.evaluate_run",
        "dataset": config.dataset,
        "policy": config.policy,
        "step": int(trainer.step.numpy()),
        # "ema": G's moving average; "raw": G's own weights
        "generator": sampling.sampled_generator(trainer),
        "ema_decay": config.ema_decay,
        # the average's batch-norm statistics (with "ema"), and the run's own choice
        "ema_statistics": trainer.ema_statistics,
        "run_ema_statistics": config.ema_statistics,
    }


def standard_scores(
    graph, trainer, dataset, train_set, num_samples, seed=0, data_dir="data", echo=print
):
    """A result's "inception" entry: with `graph` (an acgan.quality.inception.InceptionGraph), the standard FID,
    KID, per-class FID and Inception score of num_samples class-balanced samples (sample_inputs' noise and
    labels for `seed`) against every train image, the real side cached beside the judges (or read from, or
    written to, graph.stats' file); without it, why there are none."""
    if graph is None or train_set.image_shape[-1] != 3:
        return inception_lib.unavailable(dataset, train_set.image_shape)
    z, labels = sample_inputs(train_set.num_classes, trainer.noise_dim, num_samples, seed)
    return inception_lib.scores(
        graph,
        sampling.generate_images(trainer, z, labels),
        labels,
        train_set,
        dataset,
        cache_dir=Path(data_dir) / "judges",
        stats=graph.stats,
        echo=echo,
        seed=seed,
    )


def across_judges(results):
    """How much the numbers move with the judge: each judge's seed, accuracy on real test images and
    numbers (per-class accuracy included), then min / max / mean of ACROSS_JUDGES over the judges."""
    per_judge = [
        {
            "seed": r["judge"].get("seed") or 0,
            "test_accuracy": r["judge"].get("test_accuracy"),
            "conditional_accuracy_per_class": r["conditional_accuracy_per_class"],
            "real_reference": {
                k: r["real_reference"][k]
                for k in ("frechet_distance", "frechet_distance_class_mean")
            },
            **{k: r[k] for k in ACROSS_JUDGES},
        }
        for r in results
    ]
    spreads = {key: spread([j[key] for j in per_judge]) for key in ACROSS_JUDGES}
    return {"judges": per_judge, **{key: s for key, s in spreads.items() if s}}


def record(run_dir, result):
    """Writes quality.json, merges "quality" into report.json and a section into report.md, logs scalars.
    The best checkpoint's result, or G's own weights judged on a run that samples from their average
    (--no-ema): their own file only (result_file), so the run's own result stays where the report and
    compare read it."""
    write_json(run_dir / result_file(result), result)
    if result_file(result) != "quality.json":
        return
    report_path = run_dir / "report.json"
    if report_path.exists():
        report = json.loads(report_path.read_text())
        report["quality"] = result
        write_json(report_path, report)
        markdown = (
            run_report.render_markdown(report).rstrip("\n") + "\n\n" + render_markdown(result)
        )
        write_atomically(run_dir / "report.md", markdown)
    with SummaryWriter(run_dir / "tensorboard") as writer:
        writer.scalars(scalars(result), result["step"])
