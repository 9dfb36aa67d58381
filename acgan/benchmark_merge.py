"""CLI: python -m acgan.benchmark_merge FILE... [--output_dir DIR]: one comparison of benchmark.json files."""

import functools

from absl import flags

from acgan import cli
from acgan.bench import results, sweep, tables
from acgan.errors import UserError


@functools.cache
def define_flags():
    """The command's flag; cli.run_main defines it before parsing (importing the module defines none)."""
    flags.DEFINE_string("output_dir", None, "Output folder (default: outputs/report-<timestamp>/).")


def main(argv):
    files = argv[1:]
    if not files:
        raise UserError(
            "give one or more benchmark.json files: python -m acgan.benchmark_merge FILE... [--output_dir DIR]"
        )
    docs = [results.load_benchmark(f) for f in files]
    output_dir = sweep.prepare_output_dir(
        flags.FLAGS.output_dir or sweep.default_output_dir("report")
    )
    doc = results.merge(docs, sources=files, command=cli.command_line())
    tables.write_outputs(doc, output_dir)
    print(tables.render_markdown(doc))
    print(f"report folder: {output_dir}  (report: {output_dir / 'benchmark.md'})")


if __name__ == "__main__":
    cli.run_main(main, positional=True)  # the benchmark files are positional arguments
