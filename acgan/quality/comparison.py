"""The original experiment as one command: train each dtype policy on the same budget, judge each, compare.

Each policy trains in its own `python -m acgan.train` process (the dtype policy is process-global, and a
fresh process keeps one run's memory, threads and crashes out of the next one's timing). By default the
runs go one after another, never side by side, so they do not share the machine while being timed. With
parallel > 1 up to that many train at once (many seeds on one GPU whose small steps leave it idle, or two
20-minute runs on a 2-core CPU): each run's time per batch is then a shared-machine time, which the page
says; at equal steps the samples do not depend on the run beside it. Then each run is evaluated in this
process with one shared judge (acgan.quality.evaluation.evaluate_run), and the page compare.md, the figure
compare.png and compare.json are written to the output folder.

With seeds > 1 every policy trains once per training seed (seed, seed + 1, ...; the policies interleaved
seed by seed, so a drift in the machine's load touches them alike); a policy's row holds the means over its
seeds, the verdict is on those means, and each seed's numbers stay in the row (`across_seeds`), with the
seeds' paired changes as a mean and standard error placed against each margin (paired_summary).

With resume the output folder may already hold runs (run_states): finished ones are judged as they are,
interrupted ones go on from their checkpoints, missing ones train; so an interrupted comparison can be
finished, or given more seeds.
"""
import dataclasses
import io
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from concurrent import futures
from datetime import datetime
from pathlib import Path
from typing import Optional

from acgan.config import POLICIES, Config, auto_arch, validate_policy
from acgan.errors import UserError
from acgan.quality.evaluation import ACROSS_JUDGES, span_text, spread  # numpy only: no framework loads
from acgan.presets import adversarial_loss  # no framework either
from acgan.training.run_dir import RESUME_FIXED, read_run  # no framework loads either
from acgan.util.children import child_env, last_log_line
from acgan.util.files import write_atomically, write_json

QUALITY_TOLERANCE = 0.03  # conditional accuracy may trail the baseline by at most 3 points
# The Fréchet distance (judge features) may exceed the baseline's by at most FD_RELATIVE_TOLERANCE of it,
# or by FD_REFERENCE_MULTIPLE real-vs-real reference distances where that is more (a baseline close to the
# data, whose distance is mostly finite-sample noise). 15% is about ten times what evaluation noise and a
# rerun of the same command move the distance, and half the gap mixed_float16 showed on doodles
# (docs/quality.md). Seed-to-seed training spread can be larger (GANs): `--seeds N` rules on the means over
# N training seeds.
FD_RELATIVE_TOLERANCE = 0.15
FD_REFERENCE_MULTIPLE = 3.0


@dataclasses.dataclass(frozen=True)
class CompareSettings:
    policies: tuple = ("float32", "mixed_float16")
    steps: Optional[int] = None       # exactly one of steps / minutes
    minutes: Optional[float] = None
    batch: int = 64
    dataset: str = "doodles"
    classes: Optional[tuple] = None
    max_per_class: Optional[int] = None
    data_dir: str = "data"
    width: float = 1.0
    arch: str = "auto"                # model preset (acgan.model.networks), resolved by each run from the data
    loss: str = "auto"                # D's and G's real/fake loss (acgan.step.losses); auto: the preset's
    jit: bool = True
    seed: int = 0
    backend: str = "tensorflow"       # every run trains, and is judged, on this Keras backend
    price_per_hour: Optional[float] = None
    num_samples: int = 10_000         # generated samples judged per run (real test images: as many, or all)
    judges: int = 1                   # judges (seeds 0..judges-1) per run; the verdict stays judge 0's
    seeds: int = 1                    # training seeds per policy (seed..seed+seeds-1); the verdict is on their means
    cas: bool = False                 # also each run's classification accuracy score (shown; not in the verdict)
    parallel: int = 1                 # runs trained at once (1: one after another, each alone on the machine)
    labels: bool = True               # class names beside the grids' rows (acgan.train --no-labels otherwise)
    output_dir: Optional[str] = None
    resume: bool = False              # go on with the comparison in output_dir (see run_states)

    def validate(self):
        """UserError on the first bad setting; loads no data and starts nothing."""
        if not self.policies:
            raise UserError(f"--policies needs at least one of {', '.join(POLICIES)}")
        for policy in self.policies:
            validate_policy(policy)
        if len(set(self.policies)) != len(self.policies):
            raise UserError(f"--policies names a policy twice: {','.join(self.policies)}")
        if (self.steps is None) == (self.minutes is None):
            raise UserError("give exactly one of --steps (equal steps) or --minutes (equal time)")
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples < 2:
            raise UserError(f"--num_samples must be an integer of at least 2, got {self.num_samples!r}")
        if isinstance(self.judges, bool) or not isinstance(self.judges, int) or self.judges < 1:
            raise UserError(f"--judges must be an integer of at least 1, got {self.judges!r}")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise UserError(f"--seeds must be an integer of at least 1, got {self.seeds!r}")
        if isinstance(self.parallel, bool) or not isinstance(self.parallel, int) or self.parallel < 1:
            raise UserError(f"--parallel must be an integer of at least 1, got {self.parallel!r}")
        if self.resume and not self.output_dir:
            raise UserError("--resume needs --output_dir: the folder of the comparison to go on with")
        for policy in self.policies:
            self.train_config(policy).validate()
        from acgan import data

        data.validate_dataset_name(self.dataset, classes=self.classes)
        return self

    def train_config(self, policy, output_dir=None):
        return Config(dataset=self.dataset, classes=self.classes, data_dir=self.data_dir,
                      max_per_class=self.max_per_class, policy=policy, batch=self.batch, width=self.width,
                      arch=self.arch, loss=self.loss, steps=self.steps, minutes=self.minutes, jit=self.jit, seed=self.seed,
                      backend=self.backend, price_per_hour=self.price_per_hour, output_dir=output_dir, labels=self.labels)

    def budget(self):
        return f"{self.steps:,} steps" if self.steps is not None else f"{self.minutes:g} minutes"

    def training_seeds(self):
        return [self.seed + k for k in range(self.seeds)]

    def runs(self, out):
        """(policy, training seed, run folder) for every run, in training order: seed by seed, every policy
        at each; the first seed's run of a policy is out/POLICY (as with one seed), the others out/POLICY-seedN."""
        first = self.seed
        return [(policy, seed, out / (policy if seed == first else f"{policy}-seed{seed}"))
                for seed in self.training_seeds() for policy in self.policies]


def default_output_dir(settings, now=None):
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    dataset = re.sub(r"[^A-Za-z0-9_.-]+", "_", settings.dataset.split(":")[-1].rstrip("/"))
    return Path("outputs") / f"{stamp}-compare-{dataset}-b{settings.batch}"


def prepare_output_dir(settings):
    out = Path(settings.output_dir) if settings.output_dir else default_output_dir(settings)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir {out} is a file, not a folder")
    runs = settings.runs(out)
    if settings.resume:
        if not out.is_dir():
            raise UserError(f"--resume: there is no comparison in {out} to go on with (no such folder)")
    else:
        taken = [p for p in [out / "compare.md"] + [run_dir / "config.json" for _, _, run_dir in runs] if p.exists()]
        if taken:
            raise UserError(f"{out} already holds a comparison ({taken[0]}); choose another --output_dir, "
                            "or go on with it with --resume")
    try:
        for _, _, run_dir in runs:
            run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write to output folder {out}: {e.strerror}") from None
    return out


# What a reused run must share with the comparison's own runs: what a resumed acgan.train run keeps (its
# model, data and training), and XLA and the budget.
REUSE_FIXED = RESUME_FIXED + ("jit", "steps", "minutes")
FINISHED = ("completed", "diverged")  # a report with either status is a run's end (a diverged run is judged too)


def run_states(settings, runs):
    """For each (policy, seed, run folder): "train" (no run there yet), "resume" (a run with this
    comparison's settings that stopped before its end: interrupted, or killed before its report) or "done"
    (its report says completed or diverged: judged as it is). UserError naming the first run folder that
    holds a run with other settings. Without settings.resume every run is "train"."""
    states = []
    for policy, seed, run_dir in runs:
        if not (settings.resume and (run_dir / "config.json").is_file()):
            states.append("train")
            continue
        saved, info = read_run(run_dir)
        # The run saved its preset and loss resolved ("auto" from the image shape its dataset.json records).
        wanted = settings.train_config(policy)
        arch = auto_arch(wanted.arch, info["image_shape"])
        wanted = dataclasses.replace(wanted, seed=seed, arch=arch, loss=adversarial_loss(arch, wanted.loss))
        changed = [f"--{k} {getattr(saved, k)!r}, not {getattr(wanted, k)!r}"
                   for k in REUSE_FIXED if getattr(saved, k) != getattr(wanted, k)]
        if changed:
            raise UserError(f"--resume: {run_dir} holds a run trained with {'; '.join(changed)}; give the "
                            "comparison's own settings, or choose another --output_dir")
        if _report_status(run_dir) in FINISHED:
            states.append("done")
        elif settings.minutes is not None:  # acgan.train's --minutes is per session: it would train them all again
            raise UserError(f"--resume: {run_dir} stopped before the end of its {settings.minutes:g} minutes, and a "
                            "resumed run would train another full budget, so it cannot rejoin an equal-time "
                            "comparison; remove that run folder to train it afresh")
        else:
            states.append("resume")
    return states


def train_command(settings, policy, run_dir, seed=None):
    """The `python -m acgan.train` command line for one policy (at the training seed given, else --seed)."""
    s = settings
    args = [sys.executable, "-m", "acgan.train", "--policy", policy, "--output_dir", str(run_dir),
            "--dataset", s.dataset, "--data_dir", s.data_dir, "--batch", str(s.batch), "--width", repr(s.width),
            "--arch", s.arch, "--loss", s.loss, "--seed", str(s.seed if seed is None else seed), "--jit" if s.jit else "--nojit",
            "--backend", s.backend]
    args += ["--steps", str(s.steps)] if s.steps is not None else ["--minutes", repr(s.minutes)]
    if s.classes:
        args += ["--classes", ",".join(s.classes)]
    if s.max_per_class is not None:
        args += ["--max_per_class", str(s.max_per_class)]
    if s.price_per_hour is not None:
        args += ["--price_per_hour", repr(s.price_per_hour)]
    if not s.labels:
        args += ["--nolabels"]
    return args


def train_policy(settings, policy, run_dir, echo=print, seed=None, resume=False):
    """Trains one policy in a fresh process, its output in run_dir/train.log (appended to when `resume`:
    the run goes on from its last checkpoint); UserError if it fails."""
    log_path = run_dir / "train.log"
    env = child_env()
    if settings.parallel > 1:  # runs sharing a GPU: each takes memory as it needs it, not most of the device
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    command = train_command(settings, policy, run_dir, seed) + (["--resume"] if resume else [])
    started = time.perf_counter()
    with open(log_path, "a" if resume else "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            returncode = proc.wait()
        except KeyboardInterrupt:  # the child got the SIGINT too: it saves a checkpoint and its report
            proc.wait()
            raise UserError(f"interrupted while training {policy}; its checkpoint, report and log are in "
                            f"{run_dir}{_go_on_text(settings, run_dir.parent)}") from None
    if returncode == DIVERGED_STATUS and _report_status(run_dir) == "diverged":
        # A finding, not a failure: the page shows it, judged at the last good checkpoint.
        echo(f"{policy}: diverged ({last_log_line(log_path)}); judging its last good checkpoint")
        return run_dir
    if returncode != 0 or not (run_dir / "report.json").exists():
        how = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        last = last_log_line(log_path)
        raise UserError(f"training under {policy} failed ({how}{': ' + last if last else ''}); "
                        f"see {log_path}")
    echo(f"{policy}{'' if seed is None else f' (seed {seed})'}: trained in {time.perf_counter() - started:.0f} s")
    return run_dir


DIVERGED_STATUS = 3  # acgan.train's exit status when a run diverged


def _go_on_text(settings, out):
    """How to finish an interrupted comparison (under --minutes a resumed run would not be equal-time)."""
    if settings.minutes is not None:
        return ""
    return f" (the same acgan.compare command with --output_dir {out} --resume goes on)"


def _report_status(run_dir):
    try:
        return json.loads((run_dir / "report.json").read_text()).get("status")
    except (OSError, ValueError):
        return None




def train_all(settings, runs, out, echo=print, states=None):
    """Trains every (policy, seed, run folder) of `runs` in order, up to settings.parallel at once; with
    `states` (run_states) a "done" run is left as it is and a "resume" run goes on from its checkpoint.
    After a failure no further run starts; those already training finish (nothing is lost), then the first
    failure in run order is raised."""
    several = settings.seeds > 1
    states = states or ["train"] * len(runs)

    def train(i, policy, seed, run_dir):
        at = f" at seed {seed}" if several else ""
        state = states[i - 1]
        if state == "done":
            echo(f"[{i}/{len(runs)}] {policy}{at}: trained earlier ({_report_status(run_dir)}), judged as it is")
            return
        how = "resuming" if state == "resume" else "training"
        echo(f"[{i}/{len(runs)}] {how} {policy}{at} for {settings.budget()} (log: {run_dir / 'train.log'})")
        train_policy(settings, policy, run_dir, echo, seed=seed if several else None, resume=state == "resume")

    if settings.parallel == 1:
        for i, run in enumerate(runs, 1):
            train(i, *run)
        return
    stop = threading.Event()

    def guarded(i, *run):
        if stop.is_set():
            return
        try:
            train(i, *run)
        except BaseException:
            stop.set()
            raise

    with futures.ThreadPoolExecutor(settings.parallel) as pool:
        jobs = [pool.submit(guarded, i, *run) for i, run in enumerate(runs, 1)]
        try:
            futures.wait(jobs)
        except KeyboardInterrupt:  # the children got the SIGINT too: each saves a checkpoint and its report
            stop.set()
            for job in jobs:
                job.cancel()
            futures.wait(jobs)
            raise UserError(f"interrupted while training; each run's checkpoint, report and log are in its folder "
                            f"under {out}{_go_on_text(settings, out)}") from None
    for job in jobs:
        job.result()  # the first failure in run order, if any


def run_compare(settings, command=None, echo=print):
    """Trains, evaluates and compares every policy; returns the output folder."""
    settings.validate()
    out = prepare_output_dir(settings)
    runs = settings.runs(out)
    several = settings.seeds > 1
    n = len(runs)
    states = run_states(settings, runs)
    train_all(settings, runs, out, echo, states)

    from acgan import backend

    backend.use(settings.backend)  # Keras loads here, after every timed run has finished
    from acgan.quality import evaluation
    from acgan.quality import judge as judge_lib

    judge = judge_lib.load_or_train(settings.dataset, data_dir=settings.data_dir, classes=settings.classes,
                                    max_per_class=settings.max_per_class, echo=echo)
    per_run = {}
    for i, (policy, seed, run_dir) in enumerate(runs, 1):
        echo(f"[{i}/{n}] judging {policy}{f' at seed {seed}' if several else ''}")
        # The same generator inputs (settings.seed) for every run: only the training seed differs.
        result = evaluation.evaluate_run(run_dir, settings.num_samples, settings.seed, data_dir=settings.data_dir,
                                         judge=judge, command=command, echo=echo, judges=settings.judges,
                                         cas=settings.cas)
        report = json.loads((run_dir / "report.json").read_text())
        per_run.setdefault(policy, []).append(dict(make_row(policy, run_dir, report, result, out), seed=seed))
    rows = [combine_seeds(per_run[policy]) for policy in settings.policies]
    add_baseline(rows)
    doc = {
        "format": "acgan-compare/1",
        "command": command or "acgan.quality.comparison.run_compare",
        "settings": dataclasses.asdict(settings),
        # With --resume: the runs judged as an earlier command left them (their times are that command's).
        "reused_runs": [str(run_dir) for (_, _, run_dir), state in zip(runs, states) if state == "done"],
        "device": rows[0]["device"],
        "judge": rows[0]["judge"],
        "rows": rows,
    }
    write_json(out / "compare.json", doc)
    write_figure(rows, out / "compare.png", title=f"{settings.dataset}, batch {settings.batch}, "
                                                  f"width {settings.width:g}, {settings.budget()} each"
                                                  + (f"; means of {settings.seeds} seeds, grids of seed "
                                                     f"{settings.seed}" if several else ""))
    write_atomically(out / "compare.md", render_markdown(doc))
    return out


def make_row(policy, run_dir, report, result, out):
    timing, cost = report.get("timing") or {}, report.get("cost") or {}
    cas = result.get("classification_accuracy_score") or {}
    metrics = report.get("final_metrics") or {}
    return {
        "policy": policy,
        "status": report.get("status", "completed"),
        "run_dir": str(run_dir),
        "report_md": os.path.relpath(run_dir / "report.md", out),
        "grid": str(run_dir / "samples" / "final.png"),
        "device": report.get("device"),
        "jit": report.get("jit"),
        "steps": report.get("steps"),
        "loop_seconds": report.get("loop_seconds"),
        "compile_seconds": report.get("compile_seconds"),
        "time_per_batch_ms": timing.get("time_per_batch_ms"),
        "time_per_batch_median_ms": timing.get("time_per_batch_median_ms"),
        "time_per_1000_samples_ms": timing.get("time_per_1000_samples_ms"),
        "cost_per_million_batches": cost.get("cost_per_million_batches"),
        "price_per_hour": cost.get("price_per_hour"),
        "peak_memory_bytes": report.get("peak_memory_bytes"),
        "skipped_steps": sum(metrics.get(f"{n}_skipped", 0) for n in ("d", "g", "q")),
        "conditional_accuracy": result["conditional_accuracy"],
        "frechet_distance": result["frechet_distance"],
        "frechet_distance_class_mean": result.get("frechet_distance_class_mean"),
        "frechet_distance_per_class": result.get("frechet_distance_per_class"),
        "classifier_score": result["classifier_score"],
        "q_accuracy_real": result.get("q_accuracy_real"),
        "q_accuracy_generated": result.get("q_accuracy_generated"),
        "inception_fid": result["inception"].get("fid"),
        "inception_note": result["inception"].get("note"),
        "num_real": result["num_real"],
        "num_generated": result["num_generated"],
        "real_reference": result.get("real_reference"),
        "judge": result["judge"],
        "across_judges": result.get("across_judges"),
        "classification_accuracy_score": cas.get("accuracy"),
        "classification_accuracy_score_real": (cas.get("real_reference") or {}).get("accuracy"),
    }


# A policy's row over several training seeds: these are averaged; the run folder, grid, judge and
# references stay the first seed's (the references depend on the judge and the sample sizes, not the run).
MEAN_OVER_SEEDS = ("steps", "loop_seconds", "compile_seconds", "time_per_batch_ms", "time_per_batch_median_ms",
                   "time_per_1000_samples_ms", "cost_per_million_batches", "peak_memory_bytes",
                   "conditional_accuracy", "frechet_distance", "frechet_distance_class_mean", "classifier_score",
                   "q_accuracy_real", "q_accuracy_generated", "inception_fid", "classification_accuracy_score",
                   "classification_accuracy_score_real")
PER_SEED = ("seed", "steps", "run_dir", "status", "time_per_batch_median_ms", "conditional_accuracy",
            "frechet_distance", "frechet_distance_class_mean")


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _relative(a, b):
    """a's change against b as a fraction (None where either is missing or b is 0)."""
    return None if a is None or not b else a / b - 1.0


def combine_seeds(runs):
    """One policy's row from its runs at several training seeds (a single run is returned as it is): the
    means of MEAN_OVER_SEEDS, skipped updates summed, the per-class distances and, with several judges,
    each judge's numbers averaged over the seeds; each seed's own numbers in row["across_seeds"]."""
    if len(runs) == 1:
        return runs[0]
    row = dict(runs[0])
    for key in MEAN_OVER_SEEDS:
        row[key] = _mean([r.get(key) for r in runs])  # None where no run has it (CAS without --cas)
    row["steps"] = round(row["steps"])
    row["skipped_steps"] = sum(r["skipped_steps"] for r in runs)
    row["status"] = next((r["status"] for r in runs if r["status"] != "completed"), "completed")
    if all(r.get("frechet_distance_per_class") for r in runs):
        row["frechet_distance_per_class"] = {k: _mean([r["frechet_distance_per_class"][k] for r in runs])
                                             for k in runs[0]["frechet_distance_per_class"]}
    if all(r.get("across_judges") for r in runs):
        judges = []
        for j, first in enumerate(runs[0]["across_judges"]["judges"]):
            judge = dict(first)
            for key in ACROSS_JUDGES:
                judge[key] = _mean([r["across_judges"]["judges"][j][key] for r in runs])
            judge["conditional_accuracy_per_class"] = {
                k: _mean([r["across_judges"]["judges"][j]["conditional_accuracy_per_class"][k] for r in runs])
                for k in first["conditional_accuracy_per_class"]}
            judges.append(judge)
        row["across_judges"] = {"judges": judges, **{key: spread([j[key] for j in judges]) for key in ACROSS_JUDGES}}
    row["across_seeds"] = {"runs": [{k: r.get(k) for k in PER_SEED} for r in runs],
                           **{key: spread([r[key] for r in runs]) for key in ACROSS_JUDGES}}
    return row


def frechet_limit(base_distance, reference_distance=None):
    """The largest Fréchet distance that still counts as held against a baseline's."""
    limit = base_distance * (1.0 + FD_RELATIVE_TOLERANCE)
    if reference_distance is not None:
        limit = max(limit, base_distance + FD_REFERENCE_MULTIPLE * reference_distance)
    return limit


def add_baseline(rows):
    """Speed-up, conditional-accuracy and Fréchet-distance change against float32 (or the first policy
    without it), and the verdict: quality held when the accuracy, the overall distance and (where both
    runs have it) the mean per-class distance held, each distance by the same rule against its own
    real-vs-real reference."""
    base = next((r for r in rows if r["policy"] == "float32"), rows[0])
    reference = (base.get("real_reference") or {}).get("frechet_distance")
    limit = frechet_limit(base["frechet_distance"], reference)
    base_class = base.get("frechet_distance_class_mean")
    class_limit = None if base_class is None else frechet_limit(
        base_class, (base.get("real_reference") or {}).get("frechet_distance_class_mean"))
    for r in rows:
        r["baseline"] = base["policy"]
        t, bt = r["time_per_batch_median_ms"], base["time_per_batch_median_ms"]
        r["speedup"] = bt / t if t and bt else None
        r["accuracy_change"] = r["conditional_accuracy"] - base["conditional_accuracy"]
        r["accuracy_held"] = r["accuracy_change"] >= -QUALITY_TOLERANCE
        r["frechet_change"] = _relative(r["frechet_distance"], base["frechet_distance"])
        r["frechet_limit"] = limit
        r["frechet_held"] = r["frechet_distance"] <= limit
        mean = r.get("frechet_distance_class_mean")
        r["class_frechet_change"] = _relative(mean, base_class)
        r["class_frechet_limit"] = class_limit
        r["class_frechet_held"] = None if mean is None or class_limit is None else mean <= class_limit
        r["quality_held"] = r["accuracy_held"] and r["frechet_held"] and r["class_frechet_held"] is not False
        # With several judges: the accuracy change under each judge (the same judge on both sides), so a
        # reader sees whether a verdict near the margin would survive another judge.
        judges, base_judges = ((x.get("across_judges") or {}).get("judges") for x in (r, base))
        r["accuracy_change_across_judges"] = (
            [a["conditional_accuracy"] - b["conditional_accuracy"] for a, b in zip(judges, base_judges)]
            if judges and base_judges and len(judges) == len(base_judges) else None)
        # With several training seeds: the change at each seed (the same seed on both sides), and the
        # distances' changes likewise, so a reader sees how far one pair of runs could have misled.
        seeds, base_seeds = ((x.get("across_seeds") or {}).get("runs") for x in (r, base))
        paired = seeds and base_seeds and [a["seed"] for a in seeds] == [b["seed"] for b in base_seeds]
        for key, change in (("conditional_accuracy", lambda a, b: a - b),
                            ("frechet_distance", _relative), ("frechet_distance_class_mean", _relative)):
            r[f"{key}_change_across_seeds"] = (
                [change(a[key], b[key]) for a, b in zip(seeds, base_seeds)] if paired else None)
        # The seeds' paired changes as a mean and its standard error, placed against each margin, so a
        # reader sees whether this many seeds can decide the verdict at all.
        for key, margin, held_above in PAIRED_MARGINS:
            r[f"{key}_change_paired"] = paired_summary(r[f"{key}_change_across_seeds"], margin, held_above)


# Each criterion's per-seed change, its margin, and whether a change above the margin holds: accuracy may
# fall at most 3 points; a distance may grow at most 15% (the rule's relative part: the reference part
# matters only for a baseline almost at the data).
PAIRED_MARGINS = (("conditional_accuracy", -QUALITY_TOLERANCE, True),
                  ("frechet_distance", FD_RELATIVE_TOLERANCE, False),
                  ("frechet_distance_class_mean", FD_RELATIVE_TOLERANCE, False))
DECIDED_AT = 2.0  # standard errors between the mean paired change and a margin for the seeds to decide it


def paired_summary(changes, margin, held_above):
    """Several seeds' paired changes (a policy's run minus the baseline's at the same seed) against a
    margin: their mean, the mean's standard error (sample standard deviation / sqrt(pairs)), how many
    standard errors the mean lies on the held side of the margin (negative: the failing side; None
    without spread), and about how many pairs would put DECIDED_AT standard errors between the mean and
    the margin if the mean and spread stayed as they are. None for fewer than two pairs."""
    if not changes or len(changes) < 2 or any(c is None for c in changes):
        return None
    n = len(changes)
    mean = sum(changes) / n
    sd = math.sqrt(sum((c - mean) ** 2 for c in changes) / (n - 1))
    gap = (mean - margin) if held_above else (margin - mean)
    se = sd / math.sqrt(n)
    return {"pairs": n, "mean": mean, "standard_error": se, "margin": margin,
            "held_side_in_standard_errors": gap / se if se else None,
            "pairs_to_decide": math.ceil((DECIDED_AT * sd / gap) ** 2) if se and gap else None}


def verdict(rows):
    """One paragraph: did quality hold for every policy, and if not, which criterion failed where."""
    base = next(r for r in rows if r["policy"] == r["baseline"])
    reference = (base.get("real_reference") or {}).get("frechet_distance")
    rule = (f"conditional accuracy at most {100 * QUALITY_TOLERANCE:.0f} points below {base['policy']}'s, and "
            f"Fréchet distance at most {rows[0]['frechet_limit']:.2f} = the larger of {base['policy']}'s "
            f"{base['frechet_distance']:.2f} + {FD_RELATIVE_TOLERANCE:.0%}")
    rule += (f" and {base['policy']}'s + {FD_REFERENCE_MULTIPLE:g} x the real-vs-real reference {reference:.2f}"
             if reference is not None else " (no real-vs-real reference measured)")
    missed = []
    for r in rows:
        why = []
        if not r["accuracy_held"]:
            why.append(f"conditional accuracy {100 * r['accuracy_change']:+.1f} points")
        if not r["frechet_held"]:
            why.append(f"Fréchet distance {r['frechet_distance']:.2f} ({100 * r['frechet_change']:+.0f}%)")
        if r.get("class_frechet_held") is False:
            why.append(f"mean per-class Fréchet distance {r['frechet_distance_class_mean']:.2f} "
                       f"({100 * r['class_frechet_change']:+.0f}%, limit {r['class_frechet_limit']:.2f})")
        if why:
            missed.append(f"{r['policy']} ({', '.join(why)})")
    if base.get("class_frechet_limit") is not None:
        rule += (f"; and the mean per-class Fréchet distance likewise, at most {base['class_frechet_limit']:.2f} "
                 f"against {base['policy']}'s {base['frechet_distance_class_mean']:.2f}")
    others = [r for r in rows if r is not base]
    seeds = _accuracy_changes_text(others, "conditional_accuracy_change_across_seeds", "at", "seeds")
    judges = _accuracy_changes_text(others, "accuracy_change_across_judges", "under", "judges")
    n_seeds = seeds and len(others[0]["conditional_accuracy_change_across_seeds"])
    spread = ((f" The verdict is on the means over {n_seeds} training seeds; seed by seed (each against {base['policy']} "
               f"at the same seed): {seeds}." if seeds else "")
              + _paired_text(others, base["policy"])
              + (f" Judged again by judges of other seeds (the verdict is judge 0's): {judges}." if judges else ""))
    if missed:
        return f"Quality did not hold for {'; '.join(missed)}. Held means: {rule}.{spread}"
    return f"Quality held for every policy: {rule}.{spread}"


def _pm(summary, unit):
    """"-2.7 ± 4.5 points" or "+35% ± 16%": a paired summary's mean and standard error."""
    digits = 1 if unit == " points" else 0
    return f"{100 * summary['mean']:+.{digits}f} ± {100 * summary['standard_error']:.{digits}f}{unit}"


def _paired_change_text(summary, what, unit):
    """"accuracy -2.7 ± 4.5 points, 0.1 standard errors on the held side of -3": one criterion's paired
    summary (paired_summary), in points or percent."""
    z = summary["held_side_in_standard_errors"]
    margin = f"{100 * summary['margin']:+.0f}{unit}"
    where = ("no spread between the seeds" if z is None else
             f"{abs(z):.1f} standard errors on the {'held' if z >= 0 else 'failing'} side of {margin}")
    return f"{what} {_pm(summary, unit)}, {where}"


def _paired_text(rows, base):
    """The paired summaries of every policy's criteria, and which of them these seeds cannot decide
    ('' with one seed)."""
    parts, open_, pairs = [], [], None
    for r in rows:
        summaries = [(r.get(f"{key}_change_paired"), what, unit) for (key, _, _), what, unit in zip(
            PAIRED_MARGINS, ("accuracy", "distance", "per-class distance"), (" points", "%", "%"))]
        if not summaries[0][0]:
            continue
        pairs = summaries[0][0]["pairs"]
        parts.append(f"{r['policy']}'s " + "; ".join(_paired_change_text(*x) for x in summaries if x[0]))
        for summary, what, _ in summaries:
            z = summary and summary["held_side_in_standard_errors"]
            if z is not None and abs(z) < DECIDED_AT:
                needed = summary["pairs_to_decide"]
                needs = f" (about {needed:,} pairs at this spread)" if needed else ""
                open_.append(f"{r['policy']}'s {what}{needs}")
    if not parts:
        return ""
    text = (f" Paired over the {pairs} seeds (each seed's change against {base} at that seed; mean ± standard "
            f"error): {'; '.join(parts)}.")
    if open_:
        text += (f" Less than {DECIDED_AT:g} standard errors from its margin, these seeds cannot tell on which side "
                 f"the policy is: {', '.join(open_)}.")
    return text


def _accuracy_changes_text(rows, key, preposition, what):
    """"P's accuracy change was a to b points, within the margin at k of n seeds; ..." ('' without them)."""
    if not rows or not all(r.get(key) for r in rows):
        return ""
    return "; ".join(f"{r['policy']}'s accuracy change was {100 * min(r[key]):+.1f} to {100 * max(r[key]):+.1f} "
                     f"points, within the margin {preposition} {sum(x >= -QUALITY_TOLERANCE for x in r[key])} "
                     f"of {len(r[key])} {what}" for r in rows)


def _f(value, fmt, suffix=""):
    return "n/a" if value is None else f"{value:{fmt}}{suffix}"


def caption(row):
    ms = row["time_per_batch_median_ms"]
    speed = f"{ms:,.1f} ms/batch" if ms is not None else "too few steps to time"
    if row["cost_per_million_batches"] is not None:
        cost = f"${row['cost_per_million_batches']:,.2f} per 10^6 batches"
    elif row["price_per_hour"] is None:
        cost = "cost: n/a (no --price_per_hour)"
    else:
        cost = "cost: n/a (too few steps to time)"
    status = "DIVERGED at " if row.get("status") == "diverged" else ""
    class_fd = row.get("frechet_distance_class_mean")
    lines = [f"{status}{row['steps']:,} steps, {speed}", cost,
             f"cond. acc. {row['conditional_accuracy']:.1%}, FD {row['frechet_distance']:.1f}"
             + (f", per class {class_fd:.1f}" if class_fd is not None else "")]
    if row["inception_fid"] is not None:
        lines.append(f"Inception FID {row['inception_fid']:.1f}")
    return "\n".join(lines)


def write_figure(rows, path, title=""):
    """Each policy's final sample grid side by side, captioned with its speed, cost and quality."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 5.4), squeeze=False)
    for ax, row in zip(axes[0], rows):
        try:
            grid = np.asarray(Image.open(row["grid"]))
            ax.imshow(grid, cmap="gray" if grid.ndim == 2 else None, vmin=0, vmax=255, interpolation="nearest")
        except OSError:
            ax.text(0.5, 0.5, "no sample grid", ha="center", va="center")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(row["policy"], fontsize=12)
        ax.set_xlabel(caption(row), fontsize=9)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    write_atomically(path, buffer.getvalue())


def _reference_sizes(row):
    reference = row.get("real_reference")
    if not reference:
        return "real test and real train images (not measured for these runs)"
    return f"{reference['num_real']:,} real test images and {reference['num_train']:,} real train images"


def _seeds_text(s):
    seeds = s.get("seeds", 1)
    if seeds == 1:
        return f"seed {s['seed']}"
    return f"training seeds {s['seed']} to {s['seed'] + seeds - 1} (every run judged on the same generator inputs)"


def _alone_text(s, seeds):
    same = f"on the same data and seed{'s' if seeds > 1 else ''}; times exclude compilation and warm-up."
    parallel = s.get("parallel", 1)
    if parallel == 1:
        return f"Each policy trained alone, in its own process, {same}"
    steps = (" and, under a budget of minutes, the steps each reached" if s.get("minutes") is not None else "")
    return (f"Runs trained {parallel} at a time, each in its own process, {same} Runs side by side share the "
            f"machine, so their times per batch, speed-ups and costs{steps} are shared-machine figures: compare "
            "speeds from runs trained alone (--parallel 1) or from acgan.benchmark.")


def _training_text(doc, seeds):
    """How the runs were trained: by this command (alone, or side by side), or, with --resume, some or all
    of them by an earlier command, whose conditions this page cannot know."""
    s = doc["settings"]
    reused = doc.get("reused_runs") or []
    runs = len(s["policies"]) * seeds
    earlier = (" trained by an earlier command in this folder (--resume), so the times are from each run's own "
               "training, beside whatever shared the machine then (compare speeds from acgan.benchmark).")
    if reused and len(reused) == runs:
        return "Every run was" + earlier
    text = _alone_text(s, seeds)
    if reused:
        text += f" The exception: {len(reused)} of the {runs} runs were" + earlier
    return text


def render_markdown(doc):
    rows, s = doc["rows"], doc["settings"]
    base = rows[0]["baseline"]
    device = doc["device"] or {}
    budget = f"{s['steps']:,} steps" if s["steps"] is not None else f"{s['minutes']:g} minutes"
    seeds = s.get("seeds", 1)
    seeded = seeds > 1 and all(r.get("across_seeds") for r in rows)
    sizes = f"{rows[0]['num_real']:,} real test images vs {rows[0]['num_generated']:,} generated"

    def line(name, fn):
        return f"| {name} | " + " | ".join(fn(r) for r in rows) + " |"

    table = [
        "| | " + " | ".join(r["policy"] for r in rows) + " |",
        "|---|" + "---|" * len(rows),
        line("status", lambda r: r.get("status", "completed")),
        line("steps reached", lambda r: f"{r['steps']:,}"),
        line("time per batch (median)", lambda r: _f(r["time_per_batch_median_ms"], ",.1f", " ms")),
        line("time per batch (mean)", lambda r: _f(r["time_per_batch_ms"], ",.1f", " ms")),
        line(f"speed-up vs {base}", lambda r: _f(r["speedup"], ".2f", "x")),
        line("time per 1000 samples", lambda r: _f(r["time_per_1000_samples_ms"], ",.0f", " ms")),
        line("cost of 10^6 batches", lambda r: "n/a" if r["cost_per_million_batches"] is None
             else f"${r['cost_per_million_batches']:,.2f}"),
        line("compile time", lambda r: _f(r["compile_seconds"], ".1f", " s")),
        line("peak memory", lambda r: _f(r["peak_memory_bytes"] and r["peak_memory_bytes"] / 2**20, ",.0f", " MiB")),
        line("skipped (non-finite) updates", lambda r: f"{r['skipped_steps']:g}"),
        line("**conditional accuracy (judge)**", lambda r: f"**{r['conditional_accuracy']:.1%}**"),
        line(f"change vs {base}", lambda r: f"{100 * r['accuracy_change']:+.1f} points"),
        *([line(f"accuracy at each of {seeds} seeds", lambda r: ", ".join(
              f"{x['conditional_accuracy']:.1%}" for x in r["across_seeds"]["runs"])),
           line(f"change vs {base} at each seed", lambda r: ", ".join(
              f"{100 * c:+.1f}" for c in r["conditional_accuracy_change_across_seeds"] or []) or "n/a"),
           line(f"distance / per-class distance change vs {base} at each seed", lambda r: ", ".join(
              f"{_f(a and 100 * a, '+.0f', '%')} / {_f(b and 100 * b, '+.0f', '%')}" for a, b in zip(
                  r["frechet_distance_change_across_seeds"] or [], r["frechet_distance_class_mean_change_across_seeds"]
                  or [])) or "n/a"),
           line(f"accuracy / distance / per-class change vs {base} over the seed pairs (mean ± standard error)",
                lambda r: "baseline" if r["policy"] == base else " / ".join(
                    _pm(x, unit) if x else "n/a" for x, unit in zip(
                        (r.get(f"{key}_change_paired") for key, _, _ in PAIRED_MARGINS), (" points", "%", "%"))))]
          if seeded else []),
        *([line(f"accuracy across {len(rows[0]['across_judges']['judges'])} judges (min-max)",
                lambda r: span_text(r["across_judges"]["conditional_accuracy"], ".1%")),
           line(f"change vs {base} under each judge",
                lambda r: ", ".join(f"{100 * c:+.1f}" for c in r["accuracy_change_across_judges"] or []) or "n/a")]
          if all(r.get("across_judges") for r in rows) else []),
        line("Fréchet distance, judge features", lambda r: f"{r['frechet_distance']:.2f}"),
        line(f"change vs {base}", lambda r: _f(r["frechet_change"] and 100 * r["frechet_change"], "+.0f", "%")),
        line("Fréchet distance, real vs real (reference)",
             lambda r: _f((r.get("real_reference") or {}).get("frechet_distance"), ".2f")),
        line("mean per-class Fréchet distance", lambda r: _f(r.get("frechet_distance_class_mean"), ".2f")),
        line(f"change vs {base}", lambda r: _f(r.get("class_frechet_change") and 100 * r["class_frechet_change"],
                                              "+.0f", "%")),
        line("mean per-class, real vs real (reference)",
             lambda r: _f((r.get("real_reference") or {}).get("frechet_distance_class_mean"), ".2f")),
        line("quality held", lambda r: "yes" if r["quality_held"] else "**no**"),
        line("classifier score", lambda r: f"{r['classifier_score']:.2f}"),
        line("Q's accuracy on real test images", lambda r: _f(r["q_accuracy_real"], ".1%")),
        line("Q's accuracy on the generated samples", lambda r: _f(r.get("q_accuracy_generated"), ".1%")),
        *([line("classification accuracy score (CAS)", lambda r: _f(r["classification_accuracy_score"], ".1%")),
           line("CAS, real train images instead (reference)",
                lambda r: _f(r["classification_accuracy_score_real"], ".1%"))]
          if all(r.get("classification_accuracy_score") is not None for r in rows) else []),
        line("Inception FID", lambda r: _f(r["inception_fid"], ".2f")),
        line("run", lambda r: f"[report]({r['report_md']})"),
    ]
    page_verdict = verdict(rows)
    judge = doc["judge"] or {}
    price = f"${s['price_per_hour']}/h" if s["price_per_hour"] else "no --price_per_hour given"
    lines = [
        f"# Mixed precision compared: {s['dataset']}, batch {s['batch']}, width {s['width']:g}, {budget} each"
        + (f", {seeds} seeds" if seeds > 1 else "") + (f", {s['loss']} loss" if s.get("loss", "auto") != "auto" else ""),
        "",
        f"`{doc['command']}`",
        "",
        f"Device: {device.get('kind', '?')}: {device.get('name', '?')}. XLA {'on' if s['jit'] else 'off'}; "
        f"{_seeds_text(s)}; {price}. " + _training_text(doc, seeds),
        "",
        *([f"Every number is the mean over the {seeds} training seeds' runs of each policy (the grids are seed "
           f"{s['seed']}'s; the other seeds' runs are in POLICY-seedN/); the rows \"at each seed\" pair each "
           f"seed's run with {base}'s at the same seed.", ""] if seeded else []),
        *table,
        "",
        page_verdict,
        "",
        f"Quality is judged by a float32 reference CNN trained on the real train split "
        f"({_f(judge.get('test_accuracy'), '.2%')} on {judge.get('num_test') or 0:,} held-out test images; "
        f"never the GAN's own Q). Fréchet distance: {sizes} in the judge's 128-d penultimate features; "
        "compare it only between runs judged at the same sample sizes. The reference is the distance between "
        f"{_reference_sizes(rows[0])} in the same features: where a generator drawing the data exactly would land. "
        "The mean per-class distance averages each class's distance between its real test images and the samples "
        "generated for it (intra-class diversity: a class collapsed to one image scores high there even when the "
        "overall distance looks fine); its reference draws as many real train images per class as were generated.",
    ]
    notes = {r["inception_note"] for r in rows if r["inception_fid"] is None and r["inception_note"]}
    if notes:
        lines += ["", "Inception FID: " + "; ".join(sorted(notes)) + "."]
    lines += ["", "![final sample grids](compare.png)", ""]
    return "\n".join(lines)
