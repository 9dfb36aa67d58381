"""Floating-point operations per training step, and the share of a device's peak they reach.

Two counts, and every figure says which it is:
- "xla": the compiled step's own cost analysis (JAX: `jit(step).lower(...).compile().cost_analysis()`),
  every operation XLA runs: matrix products and convolutions, and the elementwise rest. Used where it
  holds at least 90% of the layers' count: on a GPU it leaves out the convolutions and matrix products
  XLA hands to cuDNN and cuBLAS (an H200's float32 step counted 9 GFLOP of ~900), so there the layers'
  count stands.
- "layers": the models' matrix products and convolutions (Dense, Conv2D, Conv2DTranspose) counted from
  their shapes; the TensorFlow step's count, as its compiler gives none. Each forward pass of the
  iteration is counted with the backward its gradients need: weights and inputs twice the forward,
  inputs only (G's loss through D) once. tests/measure/test_flops.py checks it against "xla".

Peaks: the shipped table acgan/measure/device_peaks.json (dense, per GPU or TPU chip, vendor
datasheets); a device it does not name has an unknown peak, and no share is printed.
"""

import json
import math
from importlib import resources

from acgan.measure import prices

# The dtype a policy's matrix products run in, as the peak table names it. float32 on a GPU runs in
# TF32 where the backend allows it (JAX's default matmul precision, TensorFlow's default), else fp32.
POLICY_PEAK_DTYPE = {"mixed_float16": "fp16", "mixed_bfloat16": "bf16"}
MATMUL_LAYERS = ("Dense", "Conv2DTranspose", "Conv2D")
XLA_SHARE_NEEDED = (
    0.9  # XLA's count must hold this much of the layers' to stand (see the docstring)
)


def _valid_taps(size, out, kernel, stride, padding):
    """Kernel taps, summed over the output positions of one spatial axis, that fall on the input rather
    than on its padding (XLA counts only these)."""
    before = max((out - 1) * stride + kernel - size, 0) // 2 if padding == "same" else 0
    return sum(1 for i in range(out) for j in range(kernel) if 0 <= i * stride - before + j < size)


def layer_forward_flops(model):
    """Forward FLOPs per sample of `model`'s matrix products and convolutions (2 per multiply-add; a
    convolution's taps on padding are not counted)."""
    total = 0
    for layer in model.layers:
        kinds = [c.__name__ for c in type(layer).__mro__]  # acgan's own layers subclass Keras's
        kind = next((k for k in kinds if k in MATMUL_LAYERS), None)
        if kind is None:
            continue
        kernel = tuple(layer.kernel.shape)
        if kind == "Dense":
            total += 2 * kernel[0] * kernel[1]
            continue
        small, big = (
            (layer.input, layer.output)
            if kind == "Conv2DTranspose"
            else (layer.output, layer.input)
        )
        # A transposed convolution is the gradient of the convolution from its output back to its input:
        # the same taps. Kernel: [kh, kw, in, out] (Conv2D), [kh, kw, out, in] (Conv2DTranspose).
        taps = math.prod(
            _valid_taps(
                big.shape[axis],
                small.shape[axis],
                kernel[axis - 1],
                layer.strides[axis - 1],
                layer.padding,
            )
            for axis in (1, 2)
        )
        total += 2 * taps * kernel[2] * kernel[3]
    return total


def step_flops_from_layers(models, batch, q_learns_from_fakes=True, g_learns_from_q=True):
    """FLOPs of one training iteration (jax_step / tf_step: G once; D on real and fake; then G and Q from
    one forward) counted from the layers, for a global batch of `batch`."""
    g, trunk, d_head, q_head = (layer_forward_flops(m) for m in models)
    pullbacks = 1 + bool(g_learns_from_q)  # G's backward: its adversarial loss, and Q's class loss
    flops = g * (1 + 2 * pullbacks)
    flops += 2 * 3 * (trunk + d_head)  # D on real and on fake: weights and inputs
    flops += 3 * (trunk + q_head)  # Q on real: weights and inputs
    # The fresh D's trunk on the fake batch: one forward (G's loss and Q's share it), then the backward
    # of G's loss through the D head (inputs only) and of Q's (weights if Q learns from fakes, inputs if
    # G learns from Q).
    flops += trunk + 2 * d_head + q_head
    flops += (trunk + d_head) + (bool(q_learns_from_fakes) + bool(g_learns_from_q)) * (
        trunk + q_head
    )
    return flops * batch


def xla_flops(program):
    """FLOPs from a compiled (or lowered) JAX computation's cost analysis, or None where it gives none."""
    flops = (program.cost_analysis() or {}).get("flops")
    return float(flops) if flops and flops > 0 else None


def load_peaks():
    """The parsed device_peaks.json: {"about", "sources", "peaks": [...]}."""
    return json.loads(resources.files("acgan.measure").joinpath("device_peaks.json").read_text())


def peak_dtype(policy, kind, matmul_precision=None):
    """The peak table's dtype column for a run: fp16/bf16 for the mixed policies; for float32 on a GPU,
    tf32 unless JAX's matmul precision is "highest" (full float32); on a TPU, bf16 (its matrix unit)."""
    if policy in POLICY_PEAK_DTYPE:
        return POLICY_PEAK_DTYPE[policy]
    if kind == "TPU":
        return "bf16"
    if kind == "GPU" and str(matmul_precision or "default").lower() not in ("highest", "float32"):
        return "tf32"
    return "fp32"


def device_peak(name, kind, policy, matmul_precision=None):
    """{"tflops", "dtype", "accelerator", "source"} for the device a run used; tflops is None where the
    table does not name the device or has no figure for that dtype (CPUs are never in it)."""
    dtype = peak_dtype(policy, kind, matmul_precision)
    out = {"tflops": None, "dtype": dtype, "accelerator": None, "source": None}
    if kind not in ("GPU", "TPU"):
        return out
    table = load_peaks()
    accelerator = prices.match_accelerator(name, {"prices": table["peaks"]})
    entry = next((p for p in table["peaks"] if p["accelerator"] == accelerator), None)
    if entry is None:
        return out
    tflops = entry.get(dtype)
    if tflops is None and dtype == "tf32":  # a GPU without TF32 runs float32 on its CUDA cores
        dtype, tflops = "fp32", entry.get("fp32")
    source = table["sources"].get(entry["source"], entry["source"])
    return dict(out, tflops=tflops, dtype=dtype, accelerator=accelerator, source=source)


def utilisation(flops_per_batch, time_per_batch_ms, peak_tflops):
    """{"tflops": achieved TFLOP/s, "share_of_peak": fraction, or None where a figure is missing}."""
    achieved = None
    if flops_per_batch and time_per_batch_ms:
        achieved = flops_per_batch / (time_per_batch_ms / 1e3) / 1e12
    share = achieved / peak_tflops if achieved is not None and peak_tflops else None
    return {"tflops": achieved, "share_of_peak": share}


def count_step_flops(trainer, inputs, batch):
    """(FLOPs of one step at global batch `batch`, "xla" or "layers"; see the module docstring). On JAX
    with the step compiled this compiles it (jit's cache keeps the executable: the first step reuses it)."""
    layers = step_flops_from_layers(
        trainer.models, batch, trainer.preset.q_learns_from_fakes, trainer.g_learns_from_q
    )
    lowered = trainer.lowered_step(*inputs)
    if lowered is not None:
        counted = xla_flops(lowered.compile())
        if counted and counted >= XLA_SHARE_NEEDED * layers:
            return counted, "xla"
    return layers, "layers"


def arithmetic_summary(
    flops_per_batch,
    counted_by,
    time_per_batch_ms,
    machine,
    policy,
    replicas=1,
    device_name=None,
    matmul_precision=None,
):
    """What a timing did in arithmetic: FLOPs per batch, achieved TFLOP/s, and its share of the peak of
    every device it ran on (a TPU's price and peak are per chip: replicas_per_chip cores share one)."""
    peak = device_peak(
        device_name or machine.get("name"),
        machine.get("kind"),
        policy,
        matmul_precision or machine.get("jax_matmul_precision"),
    )
    units, _ = prices.accelerators(replicas, machine)
    total_peak = peak["tflops"] * units if peak["tflops"] else None
    achieved = utilisation(flops_per_batch, time_per_batch_ms, total_peak)
    return {
        "flops_per_batch": flops_per_batch,
        "flops_counted_by": counted_by,
        "tflops": achieved["tflops"],
        "peak_tflops": total_peak,
        "peak_dtype": peak["dtype"],
        "peak_accelerator": peak["accelerator"],
        "share_of_peak": achieved["share_of_peak"],
    }


def describe(summary):
    """One line: "0.91 TFLOP per batch (XLA's count), 136.2 TFLOP/s, 13.8% of the 989.4 TFLOP/s bf16 peak"."""
    if not summary or not summary.get("flops_per_batch"):
        return "n/a"
    how = {"xla": "XLA's count", "layers": "counted from the layers"}.get(
        summary["flops_counted_by"], "?"
    )
    text = f"{summary['flops_per_batch'] / 1e9:,.1f} GFLOP per batch ({how})"
    if summary.get("tflops") is not None:
        text += f", {summary['tflops']:,.2f} TFLOP/s"
    if summary.get("share_of_peak") is not None:
        text += f", {summary['share_of_peak']:.1%} of the {summary['peak_tflops']:,.1f} TFLOP/s {summary['peak_dtype']} peak"
    else:
        text += f" (peak unknown for this device in {summary.get('peak_dtype')})"
    return text
