"""The `acgan` command: `acgan COMMAND [FLAGS]` runs python -m acgan.COMMAND [FLAGS] (both forms work);
`acgan --help` lists the commands, `acgan COMMAND --help` a command's flags."""

import runpy
import sys

# The commands, in the order a user meets them, each with its one line for `acgan --help`.
COMMANDS = {
    "train": "train an AC-GAN under a dtype policy; report time, cost, memory and sample grids",
    "generate": "samples from a run: a PNG grid (one row per class) or an npz",
    "evaluate": "the sample quality of a run (conditional accuracy, Fréchet distance, ...)",
    "compare": "train every policy on the same budget, judge each, and write one page",
    "benchmark": "time backend x policy x batch x XLA, each configuration in a fresh process",
    "benchmark_merge": "merge benchmark.json files from several machines into one report",
    "export": "a run's generator as one file that loads without acgan (Keras, SavedModel or ONNX)",
}


def usage():
    width = max(len(name) for name in COMMANDS)
    lines = [
        "usage: acgan COMMAND [FLAGS]   (or: python -m acgan.COMMAND [FLAGS])",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    lines += [
        "",
        "acgan COMMAND --help lists a command's flags; from Python: acgan.train(...) etc. (docs/api.md).",
    ]
    return "\n".join(lines)


def main(argv=None):
    """Runs the command named by argv[0] (default: sys.argv[1:]) with the rest as its flags, as
    python -m acgan.COMMAND would: it exits with the command's status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name = argv[0]
    if name not in COMMANDS:
        sys.stderr.write(
            f"error: unknown command {name!r}: choose one of {', '.join(COMMANDS)} (acgan --help)\n"
        )
        return 2
    sys.argv = [f"acgan {name}", *argv[1:]]  # what --help and the reports show as the command
    runpy.run_module(f"acgan.{name}", run_name="__main__")  # as python -m acgan.COMMAND runs it
    return 0


if __name__ == "__main__":
    sys.exit(main())
