"""acgan.compare's runs: the output folder and its run folders, which runs a resumed comparison still has
to train (run_states), and training each policy in its own `python -m acgan.train` process.

A fresh process per run: the dtype policy is process-global, and a fresh process keeps one run's memory,
threads and crashes out of the next one's timing. Up to settings.parallel runs train at once (1: one
after another, each alone on the machine).
"""

import dataclasses
import json
import subprocess
import sys
import threading
import time
from concurrent import futures
from datetime import datetime
from pathlib import Path

from acgan import presets
from acgan.data import path_name
from acgan.errors import DIVERGED_STATUS, UserError
from acgan.presets import adversarial_loss  # no framework loads
from acgan.training.run_dir import RESUME_FIXED, read_run  # no framework loads either
from acgan.util.children import child_env, last_log_line
from acgan.util.files import write_atomically


def default_output_dir(settings):
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    dataset = path_name(settings.base.dataset)
    return Path("outputs") / f"{stamp}-compare-{dataset}-b{settings.base.batch}"


def prepare_output_dir(settings):
    out = Path(settings.output_dir) if settings.output_dir else default_output_dir(settings)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir {out} is a file, not a folder")
    runs = settings.runs(out)
    if settings.resume:
        if not out.is_dir():
            raise UserError(
                f"--resume: there is no comparison in {out} to go on with (no such folder)"
            )
    else:
        taken = [
            p
            for p in [out / "compare.md"] + [run_dir / "config.json" for _, _, run_dir in runs]
            if p.exists()
        ]
        if taken:
            raise UserError(
                f"{out} already holds a comparison ({taken[0]}); choose another --output_dir, "
                "or go on with it with --resume"
            )
    try:
        for _, _, run_dir in runs:
            run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write to output folder {out}: {e.strerror}") from None
    return out


# What a reused run must share with the comparison's own runs: what a resumed acgan.train run keeps (its
# model, data and training), and XLA and the budget.
REUSE_FIXED = RESUME_FIXED + ("ema_statistics", "jit", "steps", "minutes")
# a report with either status is a run's end (a diverged run is judged too)
FINISHED = (
    "completed",
    "diverged",
)


def run_states(settings, runs):
    """For each (policy, seed, run folder): "train" (no run there yet), "resume" (a run with this
    comparison's settings that stopped before its end: interrupted, or killed before its report) or "done"
    (its report says completed or diverged: judged as it is). UserError naming the first run folder that
    holds a run with other settings. Without settings.resume every run is "train"."""
    return [_run_state(settings, *run) for run in runs]


def _run_state(settings, policy, seed, run_dir):
    if not (settings.resume and (run_dir / "config.json").is_file()):
        return "train"
    saved, info = read_run(run_dir)
    # The run saved its preset and loss resolved ("auto" from the image shape its dataset.json records).
    wanted = settings.train_config(policy)
    arch = presets.auto_name(wanted.arch, info["image_shape"])
    wanted = dataclasses.replace(
        wanted, seed=seed, arch=arch, loss=adversarial_loss(arch, wanted.loss)
    )
    changed = [
        f"--{k} {getattr(saved, k)!r}, not {getattr(wanted, k)!r}"
        for k in REUSE_FIXED
        if getattr(saved, k) != getattr(wanted, k)
    ]
    if changed:
        raise UserError(
            f"--resume: {run_dir} holds a run trained with {'; '.join(changed)}; give the "
            "comparison's own settings, or choose another --output_dir"
        )
    if _report_status(run_dir) in FINISHED:
        return "done"
    if (
        settings.base.minutes is not None
    ):  # acgan.train's --minutes is per session: it would train them all again
        raise UserError(
            f"--resume: {run_dir} stopped before the end of its {settings.base.minutes:g} minutes, and a "
            "resumed run would train another full budget, so it cannot rejoin an equal-time "
            "comparison; remove that run folder to train it afresh"
        )
    return "resume"


def train_command(settings, policy, run_dir, seed=None):
    """The `python -m acgan.train` command for one policy (at the training seed given, else --seed): its
    Config written to run_dir/train-config.json, which the command reads (--config)."""
    config = dataclasses.replace(
        settings.train_config(policy), seed=settings.base.seed if seed is None else seed
    )
    path = run_dir / "train-config.json"
    write_atomically(path, config.to_json())
    return [
        sys.executable,
        "-m",
        "acgan.train",
        "--config",
        str(path),
        "--output_dir",
        str(run_dir),
    ]


def train_policy(settings, policy, run_dir, echo=print, seed=None, resume=False):
    """Trains one policy in a fresh process, its output in run_dir/train.log (appended to when `resume`:
    the run goes on from its last checkpoint); UserError if it fails."""
    log_path = run_dir / "train.log"
    env = child_env()
    if (
        settings.parallel > 1
    ):  # runs sharing a GPU: each takes memory as it needs it, not most of the device
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
        except (
            KeyboardInterrupt
        ):  # the child got the SIGINT too: it saves a checkpoint and its report
            proc.wait()
            raise UserError(
                f"interrupted while training {policy}; its checkpoint, report and log are in "
                f"{run_dir}{_go_on_text(settings, run_dir.parent)}"
            ) from None
    if returncode == DIVERGED_STATUS and _report_status(run_dir) == "diverged":
        # A finding, not a failure: the page shows it, judged at the last good checkpoint.
        echo(f"{policy}: diverged ({last_log_line(log_path)}); judging its last good checkpoint")
        return
    if returncode != 0 or not (run_dir / "report.json").exists():
        how = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        last = last_log_line(log_path)
        raise UserError(
            f"training under {policy} failed ({how}{': ' + last if last else ''}); see {log_path}"
        )
    echo(
        f"{policy}{'' if seed is None else f' (seed {seed})'}: trained in {time.perf_counter() - started:.0f} s"
    )


def _go_on_text(settings, out):
    """How to finish an interrupted comparison (under --minutes a resumed run would not be equal-time)."""
    if settings.base.minutes is not None:
        return ""
    return f" (the same acgan.compare command with --output_dir {out} --resume goes on)"


def _report_status(run_dir):
    try:
        return json.loads((run_dir / "report.json").read_text()).get("status")
    except (OSError, ValueError):
        return None


def train_all(settings, runs, out, states, echo=print):
    """Trains every (policy, seed, run folder) of `runs` in order, up to settings.parallel at once, by
    their `states` (run_states): a "done" run is left as it is, a "resume" run goes on from its checkpoint.
    After a failure no further run starts; those already training finish (nothing is lost), then the first
    failure in run order is raised."""
    several = settings.seeds > 1

    def train(i, policy, seed, run_dir):
        at = f" at seed {seed}" if several else ""
        state = states[i - 1]
        if state == "done":
            echo(
                f"[{i}/{len(runs)}] {policy}{at}: trained earlier ({_report_status(run_dir)}), judged as it is"
            )
            return
        how = "resuming" if state == "resume" else "training"
        echo(
            f"[{i}/{len(runs)}] {how} {policy}{at} for {settings.budget()} (log: {run_dir / 'train.log'})"
        )
        train_policy(
            settings,
            policy,
            run_dir,
            echo,
            seed=seed if several else None,
            resume=state == "resume",
        )

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
        except (
            KeyboardInterrupt
        ):  # the children got the SIGINT too: each saves a checkpoint and its report
            stop.set()  # the runs not started return at once
            futures.wait(jobs)
            raise UserError(
                f"interrupted while training; each run's checkpoint, report and log are in its folder "
                f"under {out}{_go_on_text(settings, out)}"
            ) from None
    for job in jobs:
        job.result()  # the first failure in run order, if any
