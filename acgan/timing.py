"""Timing and cost figures: pure functions of measured step times and a price."""
import statistics

SECONDS_PER_HOUR = 3600.0


def cost_per_million_batches(seconds_per_batch, price_per_hour):
    """USD to run 10^6 batches at `seconds_per_batch` on a machine costing `price_per_hour` USD/h."""
    return seconds_per_batch * 1e6 / SECONDS_PER_HOUR * price_per_hour


def timing_summary(step_seconds, batch):
    """Figures from per-step wall times (each ending on a device sync), warm-up already removed."""
    if not step_seconds:
        return {"measured_steps": 0}
    mean = statistics.fmean(step_seconds)
    return {
        "measured_steps": len(step_seconds),
        "time_per_batch_ms": mean * 1e3,
        "time_per_batch_median_ms": statistics.median(step_seconds) * 1e3,
        "time_per_batch_min_ms": min(step_seconds) * 1e3,
        "time_per_batch_max_ms": max(step_seconds) * 1e3,
        "time_per_1000_samples_ms": mean * 1e3 * 1000.0 / batch,
        "samples_per_second": batch / mean,
    }


def cost_summary(time_per_batch_ms, price_per_hour):
    if price_per_hour is None or time_per_batch_ms is None:
        return {"price_per_hour": price_per_hour, "cost_per_million_batches": None}
    return {
        "price_per_hour": price_per_hour,
        "cost_per_million_batches": cost_per_million_batches(time_per_batch_ms / 1e3, price_per_hour),
    }
