"""report.json's content, assembled from the set-up and the loop's outcome (report.py writes it)."""

import dataclasses
import time

from acgan.measure import device
from acgan.step.common import OPTIMIZER_NAMES
from acgan.training import report as run_report


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
        "cost": run_report.run_cost(
            times.get("time_per_batch_ms"), config.price_per_hour, s.machine, s.layout
        ),
        "arithmetic": run_report.run_arithmetic(s.trainer, config, times, s.machine, s.layout),
        "peak_memory_bytes": device.peak_memory_bytes(),
        "loop_seconds": outcome.loop_seconds,
        "wall_seconds": time.perf_counter() - started,
        "final_metrics": outcome.last_values,
        "quality_during_training": s.evaluator.last if s.evaluator else None,
        "best_checkpoint": s.best.record,  # best.json: its step, the rule and its numbers
        "last_checkpoint": s.checkpoints.latest_checkpoint,
        "weights_fingerprint": outcome.weights_fingerprint,
    }
