"""The original experiment as one command: train each dtype policy on the same budget, judge each, compare.

Each policy trains in its own `python -m acgan.train` process (the dtype policy is process-global, and a
fresh process keeps one run's memory, threads and crashes out of the next one's timing). By default the
runs go one after another, never side by side, so they do not share the machine while being timed. With
parallel > 1 up to that many train at once (many seeds on one GPU whose small steps leave it idle, or two
20-minute runs on a 2-core CPU): each run's time per batch is then a shared-machine time, which the page
says; at equal steps the samples do not depend on the run beside it. Then each run is evaluated in this
process with one shared judge (acgan.quality.evaluation.evaluate_run), and the page compare.md, the figure
compare.png and compare.json are written to the output folder.

The pieces: compare_runs (run folders, resume, the training processes), verdict (the statistics, pure),
compare_page (compare.md and compare.png); this module holds the settings and runs them in order.

With seeds > 1 every policy trains once per training seed (seed, seed + 1, ...; the policies interleaved
seed by seed, so a drift in the machine's load touches them alike); a policy's row holds the means over its
seeds, the verdict is on those means, and each seed's numbers stay in the row (`across_seeds`), with the
seeds' paired changes as a mean and standard error placed against each margin (verdict.paired_summary).

With resume the output folder may already hold runs (compare_runs.run_states): finished ones are judged
as they are, interrupted ones go on from their checkpoints, missing ones train; so an interrupted
comparison can be finished, or given more seeds.
"""
import dataclasses
import json
import os
from typing import Optional

from acgan import backend, data
from acgan.config import POLICIES, RUN_PLACE, Config, same_setting, setting, validate_policy
from acgan.errors import UserError
from acgan.quality import compare_runs, evaluation  # numpy only: no framework loads
from acgan.quality.compare_page import render_markdown, write_figure
from acgan.quality.verdict import PRDC_KEYS, add_baseline, combine_seeds
from acgan.util.files import write_atomically, write_json


@dataclasses.dataclass(frozen=True)
class CompareSettings:
    """acgan.compare's settings: its flags and keyword arguments. The fields it shares with Config (the same
    names, defaults and help unless given here) are every run's training settings (train_config)."""
    policies: tuple = setting(("float32", "mixed_float16"), "Dtype policies to compare, comma-separated.")
    steps: Optional[int] = same_setting(Config, "steps", help="Train every policy this many steps (equal steps).")
    minutes: Optional[float] = same_setting(Config, "minutes", help="Train every policy this long (equal wall-clock "
                                            "time).")
    batch: int = same_setting(Config, "batch")
    dataset: str = same_setting(Config, "dataset")
    classes: Optional[tuple] = same_setting(Config, "classes")
    max_per_class: Optional[int] = same_setting(Config, "max_per_class")
    data_dir: str = same_setting(Config, "data_dir")
    width: float = same_setting(Config, "width")
    arch: str = same_setting(Config, "arch")  # resolved by each run from the data
    loss: str = same_setting(Config, "loss")
    ema_decay: Optional[float] = same_setting(Config, "ema_decay")
    ema: bool = setting(True, "Sample from the moving average of G's weights where the run kept one (--no-ema: "
                        "from G's own weights).")
    jit: bool = same_setting(Config, "jit")
    seed: int = same_setting(Config, "seed", help="Seed shared by every policy's run and by the evaluation.")
    backend: str = same_setting(Config, "backend")  # every run trains, and is judged, on this Keras backend
    price_per_hour: Optional[float] = same_setting(Config, "price_per_hour")
    num_samples: int = setting(10_000, "Generated samples judged per run (real test images: as many, or all).")
    judges: int = setting(1, "Judge every run with this many judges (seeds 0, 1, ...) and show how the accuracy and "
                          "its change move with the judge; the verdict stays judge 0's.")
    seeds: int = setting(1, "Train every policy at this many training seeds (--seed, --seed + 1, ...) and rule on "
                         "the means; each seed's numbers stay on the page.")
    cas: bool = setting(False, "Also each run's classification accuracy score (acgan.evaluate --cas): shown on the "
                        "page, not part of the verdict.")
    parallel: int = setting(1, "Train this many runs at once (default: one after another, each alone on the "
                            "machine). Quality at equal --steps does not depend on the run beside it; times do.")
    labels: bool = same_setting(Config, "labels")
    # Not a training setting (Config's RUN_PLACE): the comparison's own folder.
    output_dir: Optional[str] = setting(None, "Folder for the runs and the page (default: a new folder under "
                                        "outputs/).")
    resume: bool = setting(False, "Go on with the comparison in --output_dir: runs finished there are judged as they "
                           "are, interrupted ones resume (at --steps), missing ones train (e.g. after Ctrl-C, or with "
                           "more --seeds); each must have been trained with this command's settings.")

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
        data.validate_dataset_name(self.dataset, classes=self.classes)
        return self

    def train_config(self, policy, output_dir=None):
        """The Config of one policy's run: every setting compare shares with Config, the policy, the folder."""
        shared = {name: getattr(self, name) for name in TRAINING_SETTINGS}
        return Config(**shared, policy=policy, output_dir=output_dir)

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


# The settings every run trains with as the comparison says (train_config): the fields shared with Config.
TRAINING_SETTINGS = tuple(f.name for f in dataclasses.fields(CompareSettings)
                          if f.name in Config.__dataclass_fields__ and f.name not in RUN_PLACE)


def run_compare(settings, command=None, echo=print):
    """Trains, evaluates and compares every policy; returns the output folder."""
    settings.validate()
    out = compare_runs.prepare_output_dir(settings)
    runs = settings.runs(out)
    several = settings.seeds > 1
    n = len(runs)
    states = compare_runs.run_states(settings, runs)
    compare_runs.train_all(settings, runs, out, echo, states)

    backend.use(settings.backend)  # Keras loads here, after every timed run has finished
    from acgan.quality import judge as judge_lib  # loads Keras: after the backend is chosen

    judge = judge_lib.load_or_train(settings.dataset, data_dir=settings.data_dir, classes=settings.classes,
                                    max_per_class=settings.max_per_class, echo=echo)
    per_run = {}
    for i, (policy, seed, run_dir) in enumerate(runs, 1):
        echo(f"[{i}/{n}] judging {policy}{f' at seed {seed}' if several else ''}")
        # The same generator inputs (settings.seed) for every run: only the training seed differs.
        result = evaluation.evaluate_run(run_dir, settings.num_samples, settings.seed, data_dir=settings.data_dir,
                                         judge=judge, command=command, echo=echo, judges=settings.judges,
                                         cas=settings.cas, ema=settings.ema)
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
        **{key: result.get(key) for key in PRDC_KEYS},
        "q_accuracy_real": result.get("q_accuracy_real"),
        "q_accuracy_generated": result.get("q_accuracy_generated"),
        "inception_fid": result["inception"].get("fid"),
        "inception_note": result["inception"].get("note"),
        "num_real": result["num_real"],
        "num_generated": result["num_generated"],
        "generator": result.get("generator"),  # "ema": G's moving average judged; "raw": G's own weights
        "ema_decay": result.get("ema_decay"),
        "real_reference": result.get("real_reference"),
        "judge": result["judge"],
        "across_judges": result.get("across_judges"),
        "classification_accuracy_score": cas.get("accuracy"),
        "classification_accuracy_score_real": (cas.get("real_reference") or {}).get("accuracy"),
    }
