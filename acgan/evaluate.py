"""CLI: python -m acgan.evaluate --run DIR [--num_samples 10000] [--seed 0] [--judge_seed 0] [--judges 1] [--cas]:
the sample quality of a run."""
from absl import flags

from acgan import cli

flags.DEFINE_string("run", None, "A run folder written by acgan.train.")
flags.DEFINE_integer("num_samples", 10_000, "Generated samples to judge; real test images: as many, or all if fewer.")
flags.DEFINE_integer("seed", 0, "Seed for the noise and the real test subset.")
flags.DEFINE_integer("judge_seed", 0, "Seed of the judge (its initialisation and data order); each seed's judge "
                     "trains once and is cached. 0 is the one every other command uses.")
flags.DEFINE_integer("judges", 1, "Judge the same samples with this many judges (seeds judge_seed, judge_seed + 1, "
                     "...) and report how far the numbers move; the headline numbers stay the first judge's.")
flags.DEFINE_string("data_dir", None, "Folder of datasets and cached judges (default: the run's --data_dir).")
flags.DEFINE_bool("cas", False, "Also the classification accuracy score: the judge's CNN trained on the samples "
                  "and scored on the real test images, beside the same training on real images (two trainings: "
                  "~1.5 minutes for 10,000 swatches samples on 2 CPU cores).")
cli.define_backend_flag(of_run=True)
FLAGS = flags.FLAGS


def main(argv):
    from pathlib import Path

    from acgan.errors import UserError

    if not FLAGS.run:
        raise UserError("--run is required: the folder of a training run")
    if FLAGS.num_samples < 2:
        raise UserError(f"--num_samples must be at least 2 (a covariance needs two), got {FLAGS.num_samples}")
    if FLAGS.seed < 0:
        raise UserError(f"--seed must be non-negative, got {FLAGS.seed}")
    if FLAGS.judge_seed < 0:
        raise UserError(f"--judge_seed must be non-negative, got {FLAGS.judge_seed}")
    if FLAGS.judges < 1:
        raise UserError(f"--judges must be at least 1, got {FLAGS.judges}")
    if not Path(FLAGS.run).is_dir():
        raise UserError(f"--run {FLAGS.run} is not a folder")
    from acgan import backend

    backend.use_for_run(FLAGS.backend, Path(FLAGS.run))
    from acgan.quality import evaluation  # Keras loads here, after the flags are known good.

    run_dir = Path(FLAGS.run)
    result = evaluation.evaluate_run(run_dir, FLAGS.num_samples, FLAGS.seed, data_dir=FLAGS.data_dir,
                                     command=cli.command_line(), judge_seed=FLAGS.judge_seed, judges=FLAGS.judges,
                                     cas=FLAGS.cas)
    print(summary_line(result))
    if result.get("across_judges"):
        across = result["across_judges"]
        print(f"across {len(across['judges'])} judges: {evaluation.across_judges_text(across)}")
    if evaluation.has_report(run_dir):
        print(f"wrote {run_dir / 'quality.json'} and the \"Sample quality\" section of {run_dir / 'report.md'}")
    else:  # a run stopped before its report (killed, or still training): only quality.json to write into
        print(f"wrote {run_dir / 'quality.json'} (no report.md: the run has not written its report yet)")


def summary_line(result):
    from acgan.quality.evaluation import cas_text, lowest_margin

    reference = result.get("real_reference") or {}

    def ref(key):
        return f" (real vs real {reference[key]:.2f})" if reference.get(key) is not None else ""

    class_mean = result.get("frechet_distance_class_mean")
    return (f"step {result['step']}: conditional accuracy {result['conditional_accuracy']:.1%} "
            f"(chance {result['chance']:.0%}), Fréchet distance {result['frechet_distance']:.2f}"
            f"{ref('frechet_distance')} ({result['num_real']} real vs {result['num_generated']} generated), "
            + (f"mean per-class Fréchet distance {class_mean:.2f}{ref('frechet_distance_class_mean')}, "
               if class_mean is not None else "")
            + f"classifier score "
            f"{result['classifier_score']:.2f}, Q on real test images {result['q_accuracy_real']:.1%}, "
            f"Q on the generated samples {result['q_accuracy_generated']:.1%}"
            + (f", D's class margin {result['d_class_margin_mean']:+.2f} ({lowest_margin(result)})"
               if result.get("d_class_margin_mean") is not None else "")
            + (f", classification accuracy score {cas_text(result['classification_accuracy_score'])}"
               if result.get("classification_accuracy_score") else ""))


if __name__ == "__main__":
    cli.run_main(main)
