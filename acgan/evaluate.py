"""CLI: python -m acgan.evaluate --run DIR [--num_samples 10000] [--seed 0] [--judge_seed 0] [--judges 1] [--cas]
[--inception PATH [--inception_samples 50000] [--inception_stats FILE.npz]]: the sample quality of a run.

From Python: acgan.evaluate(run, num_samples=10_000, ...) returns the result as a dict (quality.json's)."""

import functools
from pathlib import Path

from absl import flags

from acgan import api, cli
from acgan.presets import EMA_STATISTICS
from acgan.quality import inception as inception_lib  # numpy only
from acgan.quality.report_section import (
    across_judges_text,
    inception_text,
    result_file,
    summary_line,
)


@functools.cache
def define_flags():
    """The command's flags; cli.run_main defines them before parsing (importing the module defines none)."""
    flags.DEFINE_integer(
        "num_samples",
        10_000,
        "Generated samples to judge; real test images: as many, or all if fewer.",
    )
    flags.DEFINE_integer("seed", 0, "Seed for the noise and the real test subset.")
    flags.DEFINE_integer(
        "judge_seed",
        0,
        "Seed of the judge (its initialisation and data order); each seed's judge "
        "trains once and is cached. 0 is the one every other command uses.",
    )
    flags.DEFINE_integer(
        "judges",
        1,
        "Judge the same samples with this many judges (seeds judge_seed, judge_seed + 1, "
        "...) and report how far the numbers move; the headline numbers stay the first judge's.",
    )
    flags.DEFINE_string(
        "data_dir", None, "Folder of datasets and cached judges (default: the run's --data_dir)."
    )
    flags.DEFINE_bool(
        "cas",
        False,
        "Also the classification accuracy score: the judge's CNN trained on the samples "
        "and scored on the real test images, beside the same training on real images (two trainings: "
        "~1.5 minutes for 10,000 swatches samples on 2 CPU cores).",
    )
    flags.DEFINE_string(
        "inception",
        None,
        "The standard FID and Inception score, as papers print them: the path of "
        "classify_image_graph_def.pb, unpacked from inception-2015-12-05.tgz (docs/quality.md), or "
        "its folder. Runs on TensorFlow, for RGB datasets; slow without a GPU.",
    )
    flags.DEFINE_integer(
        "inception_samples",
        inception_lib.SAMPLES,
        "Generated samples for --inception, against every real train "
        "image (50,000: PyTorch-StudioGAN's table).",
    )
    flags.DEFINE_string(
        "inception_stats",
        None,
        "With --inception: the real train images' statistics in TTUR's format (an .npz of mu and "
        "sigma), read as the FID's real side when FILE exists, else written there.",
    )
    flags.DEFINE_string(
        "ema_statistics",
        None,
        f"The average's batch-norm statistics: {', '.join(EMA_STATISTICS)} (default: the run's; "
        "another choice is recorded in quality_ema_CHOICE.json).",
    )
    cli.define_run_flags()


def main(argv):
    result = api.evaluate(**cli.flag_arguments(api.evaluate))
    run_dir = Path(flags.FLAGS.run)
    print(summary_line(result))
    if (result.get("inception") or {}).get("fid") is not None:
        print(inception_text(result["inception"]))
    if across := result.get("across_judges"):
        print(f"across {len(across['judges'])} judges: {across_judges_text(across)}")
    if result_file(result) != "quality.json":  # not the run's own sampler at its newest checkpoint
        print(
            f"wrote {run_dir / result_file(result)} (beside quality.json, which the report shows)"
        )
    elif (run_dir / "report.json").exists():
        print(
            f'wrote {run_dir / "quality.json"} and the "Sample quality" section of {run_dir / "report.md"}'
        )
    else:  # a run stopped before its report (killed, or still training): only quality.json to write into
        print(
            f"wrote {run_dir / 'quality.json'} (no report.md: the run has not written its report yet)"
        )


if __name__ == "__main__":
    cli.run_main(main)
