"""Divergence detection from each step's metrics: NaN/Inf losses, endless loss-scale skips, a scale below 1."""

import math

from acgan.step.common import OPTIMIZER_NAMES


def divergence(step, metrics, loss_scaled, max_skipped_in_a_row):
    """A one-line message when a metrics read (`metrics`, of `step`) shows the run diverged, else None.
    Reads may be some steps apart: the step counts skips in a row itself (`{name}_skipped_in_a_row`),
    and a non-finite loss or weight stays non-finite until the next read.

    Under mixed_float16 (loss_scaled) a non-finite loss or gradient is normal now and then: the
    loss-scale optimizer skips the step and halves its scale. It becomes divergence when the skips never
    stop (Keras's scale has no floor and would halve forever). Without loss scaling a NaN/Inf loss is
    final.
    """
    for name in OPTIMIZER_NAMES:
        loss = metrics[f"{name}_loss"]
        if not loss_scaled and not math.isfinite(loss):
            return (
                f"{name} loss is {loss} at step {step}: training diverged (too high a learning "
                "rate, or an overflow in the forward pass); the last good checkpoint is kept"
            )
        if not loss_scaled:
            continue
        in_a_row = int(metrics.get(f"{name}_skipped_in_a_row", 0))
        scale = metrics[f"{name}_loss_scale"]
        if in_a_row > max_skipped_in_a_row:
            return (
                f"{name}_optimizer skipped {in_a_row} steps in a row at step {step} "
                f"(loss scale {scale:g}, {name} loss {loss:.4g}): the loss or gradients are "
                "non-finite at any scale, likely a float16 overflow in the forward pass or a "
                "diverged model; try mixed_bfloat16 or float32. The last good checkpoint is kept"
            )
        if scale < 1.0:
            return (
                f"{name}_optimizer's loss scale fell to {scale:g} at step {step}: gradients overflow "
                "even unscaled, likely a float16 overflow in the forward pass; try mixed_bfloat16 "
                "or float32. The last good checkpoint is kept"
            )
    return None
