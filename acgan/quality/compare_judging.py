"""acgan.compare's second half, once its runs have trained (comparison.train_runs): every run judged in
this process with one shared judge (run_evaluation.evaluate_run), then compare.json, compare.png and
compare.md in the output folder. Importing it loads Keras: acgan.api.compare chooses the backend
first, once every timed run has finished."""

import json
import os

from acgan.config import flat_settings
from acgan.quality import judge as judge_lib
from acgan.quality import run_evaluation
from acgan.quality.compare_page import render_markdown, write_figure
from acgan.quality.verdict import PRDC_KEYS, add_baseline, combine_seeds
from acgan.util.files import write_atomically, write_json


def judge_runs(settings, out, runs, states, command=None, echo=print):
    """Judges every run of comparison.train_runs (out, runs, states) and writes the page."""
    several = settings.seeds > 1
    judge = judge_lib.load_or_train(
        settings.base.dataset,
        data_dir=settings.base.data_dir,
        classes=settings.base.classes,
        max_per_class=settings.base.max_per_class,
        echo=echo,
    )
    per_run = {}
    for i, (policy, seed, run_dir) in enumerate(runs, 1):
        echo(f"[{i}/{len(runs)}] judging {policy}{f' at seed {seed}' if several else ''}")
        # The same generator inputs (settings.base.seed) for every run: only the training seed differs.
        result = run_evaluation.evaluate_run(
            run_dir,
            settings.num_samples,
            settings.base.seed,
            data_dir=settings.base.data_dir,
            judge=judge,
            command=command,
            echo=echo,
            judges=settings.judges,
            cas=settings.cas,
            ema=settings.ema,
        )
        report = json.loads((run_dir / "report.json").read_text())
        per_run.setdefault(policy, []).append(
            dict(make_row(policy, run_dir, report, result, out), seed=seed)
        )
    rows = [combine_seeds(per_run[policy]) for policy in settings.policies]
    add_baseline(rows)
    doc = {
        "format": "acgan-compare/1",
        "command": command or "acgan.quality.compare_judging.judge_runs",
        "settings": flat_settings(settings),
        # With --resume: the runs judged as an earlier command left them (their times are that command's).
        "reused_runs": [
            str(run_dir) for (_, _, run_dir), state in zip(runs, states) if state == "done"
        ],
        "device": rows[0]["device"],
        "judge": rows[0]["judge"],
        "rows": rows,
    }
    write_json(out / "compare.json", doc)
    write_figure(
        rows,
        out / "compare.png",
        title=f"{settings.base.dataset}, batch {settings.base.batch}, "
        f"width {settings.base.width:g}, {settings.budget()} each"
        + (
            f"; means of {settings.seeds} seeds, grids of seed {settings.base.seed}"
            if several
            else ""
        ),
    )
    write_atomically(out / "compare.md", render_markdown(doc))


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
        "jit": report["config"]["jit"],
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
        **{key: result.get(key) for key in PRDC_KEYS},
        "q_accuracy_real": result.get("q_accuracy_real"),
        "q_accuracy_generated": result.get("q_accuracy_generated"),
        "inception_fid": result["inception"].get("fid"),
        "inception_note": result["inception"].get("note"),
        "num_real": result["num_real"],
        "num_generated": result["num_generated"],
        # "ema": G's moving average judged; "raw": G's own weights
        "generator": result.get("generator"),
        "ema_decay": result.get("ema_decay"),
        "real_reference": result.get("real_reference"),
        "judge": result["judge"],
        "across_judges": result.get("across_judges"),
        "classification_accuracy_score": cas.get("accuracy"),
        "classification_accuracy_score_real": (cas.get("real_reference") or {}).get("accuracy"),
    }
