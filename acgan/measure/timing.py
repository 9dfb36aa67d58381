"""Timing and cost figures: pure functions of measured step times and a price."""

import statistics
import time

SECONDS_PER_HOUR = 3600.0


def bare_step_seconds(trainer, inputs, steps):
    """Seconds per step of `steps` steps of `trainer` run back to back on the same `inputs`, timed to the
    device sync that ends them (a metrics read): the bare compiled step. The device must be idle when it
    starts (a read just before). The benchmark's timings and a training report's bare step are this."""
    tick = time.perf_counter()
    for _ in range(steps):
        metrics = trainer.train_step(*inputs)
    values = metrics.read()
    return (time.perf_counter() - tick) / steps, values


def cost_per_million_batches(seconds_per_batch, price_per_hour):
    """USD to run 10^6 batches at `seconds_per_batch` on a machine costing `price_per_hour` USD/h."""
    return seconds_per_batch * 1e6 / SECONDS_PER_HOUR * price_per_hour


def timing_summary(step_seconds, batch, replicas=1, window_means=None):
    """Figures from per-step wall times, warm-up already removed.

    `batch` is the global batch; each of the `replicas` processes batch / replicas samples per step.
    The median, min and max are over `window_means` when given (per-step means of the windows between
    device syncs: one step's own time is only meaningful when every step ends on a sync), else over
    the steps; "spread_windows" says how many values they summarise.
    """
    if not step_seconds:
        return {"measured_steps": 0}
    mean = statistics.fmean(step_seconds)
    spread = window_means or step_seconds
    return {
        "measured_steps": len(step_seconds),
        "time_per_batch_ms": mean * 1e3,
        "time_per_batch_median_ms": statistics.median(spread) * 1e3,
        "time_per_batch_min_ms": min(spread) * 1e3,
        "time_per_batch_max_ms": max(spread) * 1e3,
        "spread_windows": len(spread),
        "time_per_1000_samples_ms": mean * 1e3 * 1000.0 / batch,
        "samples_per_second": batch / mean,
        "replicas": replicas,
        "samples_per_second_per_replica": batch / mean / replicas,
    }


def cost_summary(time_per_batch_ms, price_per_hour, units=1, unit="machine", basis=None):
    """Cost of 10^6 batches when `units` machines or accelerators each cost `price_per_hour`.

    "price_per_hour" in the result is the total for all of them; None where no price is known.
    """
    total = None if price_per_hour is None else price_per_hour * units
    cost = (
        None
        if total is None or time_per_batch_ms is None
        else cost_per_million_batches(time_per_batch_ms / 1e3, total)
    )
    return {
        "price_per_hour": total,
        "price_per_hour_each": price_per_hour,
        "priced_units": units,
        "priced_unit": unit,
        "price_basis": basis,
        "cost_per_million_batches": cost,
    }
