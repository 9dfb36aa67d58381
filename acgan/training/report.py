"""The run report: report.json (everything, assembled from the set-up and the loop's outcome) and
report.md (a readable table), with the pieces that price the run."""

import dataclasses
import time

from acgan.measure import device, flops, prices, timing
from acgan.presets import EMA_STATISTICS
from acgan.step.common import OPTIMIZER_NAMES
from acgan.util import markdown
from acgan.util.files import write_atomically, write_json


def assemble_report(setup, outcome, config, command, started):
    """report.json's content: settings, machine, this session's timing and cost, memory, the final state.

    Timing and cost are this session's alone; the sessions before a resume are listed apart (they may
    have run on another device, replica count or XLA setting), never blended in.
    """
    s, clock = setup, outcome.clock
    times = clock.summary(config.batch, s.runtime.replicas)
    return {
        "run_dir": str(s.run_dir),
        "command": command or "acgan.training.loop.run",
        "status": outcome.status,
        "message": outcome.message,
        "config": dataclasses.asdict(config),
        "device": s.machine,
        "advice": s.notes,
        # what the step's optimizers use
        "learning_rates": dict(zip(OPTIMIZER_NAMES, s.trainer.learning_rates)),
        "q_learns_from_fakes": s.trainer.preset.q_learns_from_fakes,
        "g_learns_from_q": s.trainer.g_learns_from_q,
        "learning_rate_decay": s.learning_rate_decay,  # the last fraction of the run they fall over
        "final_learning_rate_scale": s.trainer.learning_rate_scale,
        "adam_beta_1": s.trainer.beta_1,
        "diff_augment": list(s.trainer.augment)
        if s.trainer.augment
        else None,  # what D's inputs are augmented with
        "ema_decay": s.trainer.ema_decay,  # G's moving average that grids and evaluations sample from (0: none)
        "ema_statistics": s.trainer.ema_statistics,  # the batch-norm statistics it samples with
        "distribution": s.layout,
        "steps": outcome.step,
        "session_steps": outcome.step - s.start_step,
        "resumed_from": s.resumed_from,
        "compile_seconds": clock.compile_seconds,
        "compile_seconds_per_session": [e.get("compile_seconds") for e in s.earlier_sessions]
        + [clock.compile_seconds],
        "timing": times,
        "maintenance_seconds": dict(clock.maintenance),
        "earlier_sessions": s.earlier_sessions,
        "cost": run_cost(
            times.get("time_per_batch_ms"), config.price_per_hour, s.machine, s.layout
        ),
        "arithmetic": run_arithmetic(s.trainer, config, times, s.machine, s.layout),
        "peak_memory_bytes": device.peak_memory_bytes(),
        "loop_seconds": outcome.loop_seconds,
        "wall_seconds": time.perf_counter() - started,
        "final_metrics": outcome.last_values,
        "quality_during_training": s.evaluator.last if s.evaluator else None,
        "best_checkpoint": s.best.record,  # best.json: its step, the rule and its numbers
        "last_checkpoint": s.checkpoints.latest_checkpoint,
        "weights_fingerprint": outcome.weights_fingerprint,
    }


def run_cost(time_per_batch_ms, price_per_hour, machine, layout):
    """Cost of a million global batches on everything the run used (prices.priced_units)."""
    price = prices.choose_price(machine["name"], machine["kind"], price_per_hour)
    units, unit = prices.priced_units(price, layout["replicas"], layout["workers"], machine)
    return timing.cost_summary(
        time_per_batch_ms, price["usd_per_hour"], units=units, unit=unit, basis=price["description"]
    )


def run_arithmetic(trainer, config, times, machine, layout):
    """The step's FLOPs per batch (counted from the layers), the TFLOP/s of the wall time per batch and of
    the bare step, and their shares of the peak of every replica's device."""
    count = flops.step_flops_from_layers(
        trainer.models, config.batch, trainer.preset.q_learns_from_fakes, trainer.g_learns_from_q
    )
    wall = flops.arithmetic_summary(
        count, "layers", times.get("time_per_batch_ms"), machine, config.policy, layout["replicas"]
    )
    bare = flops.utilisation(count, times.get("bare_step_ms"), wall["peak_tflops"])
    return dict(wall, bare_tflops=bare["tflops"], bare_share_of_peak=bare["share_of_peak"])


def _arithmetic(arithmetic):
    text = flops.describe(arithmetic)
    if arithmetic.get("bare_tflops") is not None:
        text += f"; bare step {arithmetic['bare_tflops']:,.2f} TFLOP/s"
        if arithmetic.get("bare_share_of_peak") is not None:
            text += f" ({arithmetic['bare_share_of_peak']:.1%})"
    return text


def _strategy(layout):
    text = f"{layout['strategy']}: {layout['replicas']} replica(s)"
    if layout["workers"] > 1:
        text += f" on {layout['workers']} workers"
    text += f" ({', '.join(layout['replica_devices'])})"
    if layout["synchronized_batch_norm"]:
        text += ", batch norm synchronized"
    return text


def _xla(report):
    layout = report["distribution"]
    mode = {
        "step": "on (whole step)",
        "forward_backward": "on (each replica's forward/backward pass)",
        "tpu": "on (TPU)",
        "off": "off",
    }[layout["xla"]]
    # asked for, but the strategy ruled it out
    if layout["xla"] == "off" and report["config"]["jit"]:
        mode += f": {layout['xla_reason']}"
    return mode


def _bare(timing):
    if timing.get("bare_step_ms") is None:
        return "n/a (no warm-up this session, or it ended first)"
    text = markdown.na(timing["bare_step_ms"], ",.2f", " ms")
    if timing.get("wall_over_bare"):
        text += f" (wall / bare: {timing['wall_over_bare']:.2f})"
    return text


def _median(timing):
    text = markdown.na(timing.get("time_per_batch_median_ms"), ",.2f", " ms")
    if timing.get("spread_windows"):
        text += f" (of {timing['spread_windows']} read-to-read windows)"
    return text


def _backend(report, device):
    if report["config"].get("backend", "tensorflow") == "jax":
        return (
            f"JAX {device.get('jax')}, Keras {device.get('keras')}; float32 matmul precision "
            f"{device.get('jax_matmul_precision')}"
        )
    return f"TensorFlow {device.get('tensorflow')}, Keras {device.get('keras')}"


def _maintenance(seconds):
    if not seconds:
        return "none"
    return (
        ", ".join(f"{what} {value:,.1f} s" for what, value in sorted(seconds.items()))
        + " (left out of the timing)"
    )


def render_markdown(report):
    lines = [f"# Run report: {report['run_dir']}", "", f"`{report['command']}`", ""]
    lines += markdown.table(["", ""], summary_rows(report)) + [
        "",
        "Time per batch is wall time per iteration, loop top to loop top: the step, the input pipeline, "
        "metric reads, TensorBoard and the progress bar, less only the time spent on grids, evaluations "
        "and checkpoints. Cost uses it. All timing is this session's.",
    ]
    if report.get("earlier_sessions"):
        lines += [
            "",
            "Earlier sessions of this run (resumed since; not blended into the figures above):",
            "",
        ] + markdown.table(
            [
                "session",
                "steps",
                "device",
                "strategy",
                "replicas",
                "XLA",
                "ms per batch (wall, mean)",
                "bare step ms",
            ],
            [
                [
                    e["session"],
                    f"{e['start_step']}–{e['end_step']}",
                    f"{e['device_kind']}: {e['device']}",
                    e["strategy"],
                    e["replicas"],
                    e["xla"],
                    markdown.na((e.get("timing") or {}).get("time_per_batch_ms"), ",.2f"),
                    markdown.na((e.get("timing") or {}).get("bare_step_ms"), ",.2f"),
                ]
                for e in report["earlier_sessions"]
            ],
            align="rlllrlrr",
        )
    if report.get("quality_during_training"):
        lines += ["", _quality_during_training(report["quality_during_training"])]
    if report.get("best_checkpoint"):
        lines += ["", _best_checkpoint(report["best_checkpoint"])]
    if report.get("advice"):
        lines += ["", "Hardware advice:", ""] + [f"- {line}" for line in report["advice"]]
    if report.get("final_metrics"):
        lines += ["", "Final metrics:", ""] + markdown.table(
            ["metric", "value"], [[k, f"{v:.4g}"] for k, v in report["final_metrics"].items()]
        )
    return "\n".join(lines) + "\n"


def summary_rows(report):
    """The report's (name, value) table: status, device, model, timing, memory, cost."""
    device = report["device"]
    accelerator = device["name"]
    if device.get("compute_capability"):
        accelerator += f" (compute capability {device['compute_capability']})"
    timing = report["timing"]
    status = report.get("status", "completed")
    if report.get("message"):
        status += f": {report['message']}"
    resumed = report.get("resumed_from")
    return [
        ("status", status),
        ("resumed from", f"step {resumed['step']}" if resumed else "no (a fresh run)"),
        ("device", f"{device['kind']}: {accelerator}"),
        ("backend", _backend(report, device)),
        ("policy", report["config"]["policy"]),
        ("model", _model(report)),
        ("XLA", _xla(report)),
        ("strategy", _strategy(report["distribution"])),
        ("batch", report["config"]["batch"]),
        ("steps", report["steps"]),
        ("compile time", markdown.na(report["compile_seconds"], ",.2f", " s")),
        (
            "time per batch (wall, mean)",
            markdown.na(timing.get("time_per_batch_ms"), ",.2f", " ms"),
        ),
        ("time per batch (wall, median)", _median(timing)),
        ("bare device step (back to back)", _bare(timing)),
        (
            "time per 1000 samples",
            markdown.na(timing.get("time_per_1000_samples_ms"), ",.1f", " ms"),
        ),
        ("samples per second", markdown.na(timing.get("samples_per_second"))),
        (
            "samples per second per replica",
            markdown.na(timing.get("samples_per_second_per_replica")),
        ),
        ("arithmetic (wall time per batch)", _arithmetic(report["arithmetic"])),
        (
            "measured steps",
            f"{timing.get('measured_steps', 0)} of this session's {report.get('session_steps', '?')} "
            f"(the compile step, {report['config']['warmup_steps']} warm-up steps and as many timing the bare step excluded)",
        ),
        ("grids, evaluation, checkpoints", _maintenance(report.get("maintenance_seconds") or {})),
        ("peak memory", markdown.na(report["peak_memory_bytes"] / 2**20, ",.1f", " MiB")),
        ("cost of 10^6 batches", _cost(report["cost"])),
        ("wall time", markdown.na(report["wall_seconds"], ",.1f", " s")),
    ]


def _cost(cost):
    if cost["price_per_hour"] is None:
        return "n/a (no price known for this device; pass --price_per_hour)"
    if cost["cost_per_million_batches"] is None:
        return "n/a (too few steps to time)"
    text = f"${cost['cost_per_million_batches']:,.2f} at ${cost['price_per_hour']:g}/h"
    units = cost.get("priced_units", 1)
    if units > 1:
        text += f" ({units} {cost['priced_unit']}s at ${cost['price_per_hour_each']:g}/h each)"
    return text


def _quality_during_training(during):
    """The last --eval_every evaluation, as one sentence (acgan.evaluate measures it in full)."""
    reference = during.get("real_reference") or {}
    text = (
        f"Sample quality at step {during['step']} ({during['num_generated']} samples; "
        "`python -m acgan.evaluate` for the full measurement): conditional accuracy "
        f"{during['conditional_accuracy']:.1%}, Fréchet distance {during['frechet_distance']:.1f}"
        + _real_vs_real(reference, "frechet_distance")
    )
    class_mean = during.get("frechet_distance_class_mean")
    if class_mean is not None:
        text += f", mean per-class Fréchet distance {class_mean:.1f}" + _real_vs_real(
            reference, "frechet_distance_class_mean"
        )
    if during.get("precision") is not None:  # None with k or fewer samples (acgan.quality.prdc)
        text += ", precision / recall / density / coverage " + _prdc(during)
        if reference.get("precision") is not None:
            text += f" (real vs real {_prdc(reference)})"
    return text + "."


def _best_checkpoint(best):
    """The best checkpoint's step and numbers, as one sentence."""
    return (
        f"Best checkpoint: step {best['step']} (conditional accuracy "
        f"{best['conditional_accuracy']:.1%}, Fréchet distance {best['frechet_distance']:.1f}, "
        f"{best['num_generated']} samples; {best['rule']}), kept in `{best['checkpoint']}`: "
        "`--checkpoint best` reads it."
    )


def _prdc(values):
    return " / ".join(
        f"{values[name]:.2f}" for name in ("precision", "recall", "density", "coverage")
    )


def _real_vs_real(reference, key):
    return f" (real vs real {reference[key]:.1f})" if reference.get(key) is not None else ""


def _model(report):
    """The model preset, its width, its real/fake loss and its Adam learning rates."""
    config = report["config"]
    text = f"{config['arch']}, width {config['width']:g}, {config['loss']} loss for D and G"
    text += ", Adam learning rates " + ", ".join(
        f"{name.upper()} {rate:g}" for name, rate in report["learning_rates"].items()
    )
    text += f", Adam beta_1 {report['adam_beta_1']:g}"
    if report.get("q_learns_from_fakes") is False:
        text += ", Q learns classes from real images only"
    if report.get("g_learns_from_q") is False:
        text += ", G learns its classes from D's projection alone (not from Q)"
    if report.get("diff_augment"):
        text += f", D's inputs augmented (DiffAugment: {', '.join(report['diff_augment'])})"
    if report.get("learning_rate_decay"):
        text += (
            f", learning rates falling linearly to zero over the last {report['learning_rate_decay']:.0%} "
            f"of the run (x{report.get('final_learning_rate_scale', 1.0):g} at its end)"
        )
    if report.get("ema_decay"):
        text += (
            f", grids and evaluations from a moving average of G's weights (decay {report['ema_decay']:g}, "
            f"{EMA_STATISTICS[report['ema_statistics']]})"
        )
    return text


def write_report(run_dir, report):
    write_json(run_dir / "report.json", report)
    write_atomically(run_dir / "report.md", render_markdown(report))
