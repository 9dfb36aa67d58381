"""Hardware advice: when a mixed policy is expected to be slower than float32, and which sizes miss 8."""

LOW_PRECISION = ("float16", "bfloat16")
# Per mixed policy: the compute capability of its Tensor Cores (Volta: float16, Ampere: bfloat16), their
# dtype, and what to use on an older GPU.
TENSOR_CORES = {
    "mixed_float16": (7.0, "float16", ""),
    "mixed_bfloat16": (8.0, "bfloat16", "use mixed_float16 there; "),
}
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
# G's last layer has as many filters as the image has channels (1 or 3): fixed by the data, not a choice.
FIXED_BY_DATA = ("g_deconv2", "g_deconv_out")
XLA_NOTE = "XLA (--jit, the default) narrows the gap"
# Without XLA, TensorFlow runs bfloat16 convolutions on such a CPU with Eigen's kernels, which add up
# in bfloat16: a filter gradient summed over batch x height x width positions is off by several percent
# (XLA and oneDNN add up in float32). docs/development.md, Framework facts, has the measurements.
BF16_SUMS_NOTE = (
    "without XLA, TensorFlow's bfloat16 convolutions on this CPU add up in bfloat16, so "
    "gradients lose accuracy (D's first-step gradient down to cosine 0.19 against float32's); "
    "keep XLA on or train in float32"
)


def layer_widths(models, low_precision_only=True):
    """{layer name: units or filters} of the Dense and Conv layers of `models` (a model or several).

    With low_precision_only, only layers that compute in float16/bfloat16 count: those are what Tensor
    Cores run; the float32 islands (logits, batch norm) are left out. Empty under float32.
    """
    widths = {}
    for model in models if isinstance(models, (list, tuple)) else [models]:
        for layer in _all_layers(model):
            width = getattr(layer, "units", None) or getattr(layer, "filters", None)
            if not isinstance(width, int) or layer.name in FIXED_BY_DATA:
                continue
            if low_precision_only and layer.compute_dtype not in LOW_PRECISION:
                continue
            widths[layer.name] = width
    return widths


def _all_layers(model):
    for layer in getattr(model, "layers", []):
        if hasattr(layer, "layers"):  # a nested model
            yield from _all_layers(layer)
        else:
            yield layer


def hardware_advice(policy, device_info, layer_widths=None, batch=None, xla=True):
    """Lines of advice for training under `policy` on the device `device_info` describes.

    device_info: a dict like acgan.device.describe_device() returns (kind, name, compute_capability,
    cpu_model, cpu_flags, backend). layer_widths: {layer: width} (see layer_widths()). Empty under float32.
    On the JAX backend every step is XLA's code, so the CPU advice speaks of XLA's kernels, not TensorFlow's.
    xla: whether the step runs under XLA (False: TensorFlow's own kernels, --no-jit or a plan without XLA).
    """
    if policy == "float32":
        return []
    lines = []
    kind, name = device_info.get("kind"), device_info.get("name")
    if kind == "GPU" and device_info.get("compute_capability"):
        capability = float(device_info["compute_capability"])
        needed, dtype, instead = TENSOR_CORES[policy]
        if capability < needed:
            lines.append(
                f"{policy} on {name} (compute capability {capability:g}) is expected to be slower than "
                f"float32: {dtype} Tensor Cores need compute capability {needed:g} or higher; "
                f"{instead}{XLA_NOTE}."
            )
    elif kind == "TPU":
        # bfloat16 is the TPU's native matrix-unit format: mixed_bfloat16 is the fast path, never slow.
        if policy == "mixed_float16":
            lines.append(
                f"mixed_float16 on {name}: TPUs compute in bfloat16, not float16; use mixed_bfloat16, the TPU's "
                "native mixed precision (no loss scaling needed)."
            )
    elif kind == "CPU":
        cpu = device_info.get("cpu_model") or name
        flags = [f for f in CPU_BF16_FLAGS if f in (device_info.get("cpu_flags") or [])]
        on_jax = device_info.get("backend") == "jax"
        note = "" if on_jax else f"; {XLA_NOTE}"
        if policy == "mixed_float16":
            lines.append(
                f"mixed_float16 on the CPU ({cpu}) is expected to be slower than float32: "
                f"{'XLA' if on_jax else 'TensorFlow'}'s CPU kernels have no fast float16 path, so the casts "
                f"cost more than they save{note}."
            )
        elif policy == "mixed_bfloat16" and not flags:
            lines.append(
                f"mixed_bfloat16 on the CPU ({cpu}) without bfloat16 hardware (no AMX or avx512_bf16 "
                f"flag) is expected to be slower than float32{note}."
            )
            if not (on_jax or xla):
                lines.append(f"mixed_bfloat16 on the CPU ({cpu}): {BF16_SUMS_NOTE}.")
        elif policy == "mixed_bfloat16" and on_jax:
            lines.append(
                f"this CPU ({cpu}) has bfloat16 instructions ({', '.join(flags)}), but the JAX backend runs "
                "XLA's CPU code, which may not use them: measure against float32."
            )
        elif policy == "mixed_bfloat16":
            lines.append(
                f"this CPU ({cpu}) has bfloat16 instructions ({', '.join(flags)}): TensorFlow's oneDNN "
                "kernels use them, so mixed_bfloat16 can beat float32 with XLA off (--no-jit); XLA's CPU "
                "code may not use them, so measure both settings (python -m acgan.benchmark --jit on,off)."
            )
    odd = {layer: w for layer, w in (layer_widths or {}).items() if w % 8}
    if odd:
        listed = ", ".join(f"{layer}={w}" for layer, w in odd.items())
        lines.append(
            f"under {policy}, these layer widths are not multiples of 8 (Tensor Cores want multiples "
            f"of 8): {listed}."
        )
    if batch is not None and batch % 8:
        lines.append(
            f"under {policy}, batch {batch} is not a multiple of 8 (Tensor Cores want multiples of 8)."
        )
    return lines
