"""The original experiment as one command: train each dtype policy on the same budget, judge each, compare.

Each policy trains in its own `python -m acgan.train` process (the dtype policy is process-global, and a
fresh process keeps one run's memory, threads and crashes out of the next one's timing). By default the
runs go one after another, never side by side, so they do not share the machine while being timed. With
parallel > 1 up to that many train at once (many seeds on one GPU whose small steps leave it idle, or two
20-minute runs on a 2-core CPU): each run's time per batch is then a shared-machine time, which the page
says; at equal steps the samples do not depend on the run beside it. Then each run is evaluated in this
process with one shared judge (acgan.quality.run_evaluation.evaluate_run), and the page compare.md, the figure
compare.png and compare.json are written to the output folder.

The pieces: this module (the settings, and train_runs: the first half), compare_runs (run folders, resume,
the training processes), compare_judging (the second half: judging, the page; it loads Keras, so
acgan.api.compare chooses the backend between the halves, once every timed run has finished),
verdict (the statistics, pure), compare_page (compare.md and compare.png).

With seeds > 1 every policy trains once per training seed (seed, seed + 1, ...; the policies interleaved
seed by seed, so a drift in the machine's load touches them alike); a policy's row holds the means over its
seeds, the verdict is on those means, and each seed's numbers stay in the row (`across_seeds`), with the
seeds' paired changes as a mean and standard error placed against each margin (verdict.paired_summary).

With resume the output folder may already hold runs (compare_runs.run_states): finished ones are judged
as they are, interrupted ones go on from their checkpoints, missing ones train; so an interrupted
comparison can be finished, or given more seeds.
"""

import dataclasses
from typing import ClassVar, Optional

from acgan import data
from acgan.config import POLICIES, Config, setting
from acgan.errors import UserError
from acgan.quality import compare_runs  # no framework loads: the runs train in their own processes


@dataclasses.dataclass(frozen=True)
class CompareSettings:
    """acgan.compare's settings: its flags and keyword arguments. `base` holds every run's training
    settings, its flags Config's (TRAINING_SETTINGS); each run is `base` with its policy, its training
    seed and its folder (train_config). Every run trains, and is judged, on base.backend."""

    TRAINING_SETTINGS: ClassVar[tuple] = (
        "steps",
        "minutes",
        "batch",
        "dataset",
        "classes",
        "max_per_class",
        "data_dir",
        "width",
        "arch",
        "loss",
        "ema_decay",
        "ema_statistics",
        "jit",
        "seed",
        "backend",
        "price_per_hour",
        "labels",
    )
    # The help of the flags whose meaning the comparison gives.
    HELPS: ClassVar[dict] = {
        "steps": "Train every policy this many steps (equal steps).",
        "minutes": "Train every policy this long (equal wall-clock time).",
        "seed": "Seed shared by every policy's run and by the evaluation.",
    }
    base: Config = dataclasses.field(default_factory=Config)

    policies: tuple = setting(
        ("float32", "mixed_float16"), "Dtype policies to compare, comma-separated."
    )
    ema: bool = setting(
        True,
        "Sample from the moving average of G's weights where the run kept one (--no-ema: "
        "from G's own weights).",
    )
    num_samples: int = setting(
        10_000, "Generated samples judged per run (real test images: as many, or all)."
    )
    judges: int = setting(
        1,
        "Judge every run with this many judges (seeds 0, 1, ...) and show how the accuracy and "
        "its change move with the judge; the verdict stays judge 0's.",
    )
    seeds: int = setting(
        1,
        "Train every policy at this many training seeds (--seed, --seed + 1, ...) and rule on "
        "the means; each seed's numbers stay on the page.",
    )
    cas: bool = setting(
        False,
        "Also each run's classification accuracy score (acgan.evaluate --cas): shown on the "
        "page, not part of the verdict.",
    )
    parallel: int = setting(
        1,
        "Train this many runs at once (default: one after another, each alone on the "
        "machine). Quality at equal --steps does not depend on the run beside it; times do.",
    )
    # Not a training setting (Config's RUN_PLACE): the comparison's own folder.
    output_dir: Optional[str] = setting(
        None, "Folder for the runs and the page (default: a new folder under outputs/)."
    )
    resume: bool = setting(
        False,
        "Go on with the comparison in --output_dir: runs finished there are judged as they "
        "are, interrupted ones resume (at --steps), missing ones train (e.g. after Ctrl-C, or with "
        "more --seeds); each must have been trained with this command's settings.",
    )

    def validate(self):
        """UserError on the first bad setting; loads no data and starts nothing."""
        if not self.policies:
            raise UserError(f"--policies needs at least one of {', '.join(POLICIES)}")
        if len(set(self.policies)) != len(self.policies):
            raise UserError(f"--policies names a policy twice: {','.join(self.policies)}")
        if (self.base.steps is None) == (self.base.minutes is None):
            raise UserError("give exactly one of --steps (equal steps) or --minutes (equal time)")
        for name, lowest in (("num_samples", 2), ("judges", 1), ("seeds", 1), ("parallel", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise UserError(f"--{name} must be an integer of at least {lowest}, got {value!r}")
        if self.resume and not self.output_dir:
            raise UserError(
                "--resume needs --output_dir: the folder of the comparison to go on with"
            )
        for policy in self.policies:  # Config.validate checks the policy first
            self.train_config(policy).validate()
        data.validate_dataset_name(self.base.dataset, classes=self.base.classes)
        return self

    def train_config(self, policy, output_dir=None):
        """The Config of one policy's run: the base with the policy and the folder."""
        return dataclasses.replace(self.base, policy=policy, output_dir=output_dir)

    def budget(self):
        return (
            f"{self.base.steps:,} steps"
            if self.base.steps is not None
            else f"{self.base.minutes:g} minutes"
        )

    def runs(self, out):
        """(policy, training seed, run folder) for every run, in training order: seed by seed, every policy
        at each; the first seed's run of a policy is out/POLICY (as with one seed), the others out/POLICY-seedN."""
        first = self.base.seed
        return [
            (policy, seed, out / (policy if seed == first else f"{policy}-seed{seed}"))
            for seed in range(first, first + self.seeds)
            for policy in self.policies
        ]


def train_runs(settings, echo=print):
    """acgan.compare's first half on validated settings (acgan.api.compare validates them): every
    run trained, each in its own `python -m acgan.train` process (with resume: resumed or kept as it
    is); this process loads no framework. Returns (the output folder, settings.runs(out), their states
    before training: compare_runs.run_states)."""
    out = compare_runs.prepare_output_dir(settings)
    runs = settings.runs(out)
    states = compare_runs.run_states(settings, runs)
    compare_runs.train_all(settings, runs, out, states, echo)
    return out, runs, states
