"""What machine this is: accelerator name and compute capability, or the CPU model and its flags,
as the backend Keras runs on sees it (TensorFlow or JAX; each is imported only when it is that one)."""

import contextlib
import os
import platform
import re
import resource

import keras

from acgan.measure.prices import tpu_version

CPU_FLAGS_OF_INTEREST = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "amx_bf16",
    "amx_tile",
    "amx_fp16",
)


def cpu_model_and_flags():
    model, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in (
                "",
                platform.machine(),
                platform.processor(),
            ):
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    return model, sorted(f for f in CPU_FLAGS_OF_INTEREST if f in flags)


# TensorCores per chip. A TPU VM's TensorFlow shows one device per TensorCore (v2, v3) or per chip
# (v4 and v5p in "megacore" mode, v5e and v6e with one core), so the price, which is per chip, is paid
# once per chip, not once per replica: a v3-8 is 8 replicas on 4 chips.
TPU_CORES_PER_CHIP = {"v2": 2, "v3": 2, "v4": 2, "v5e": 1, "v5p": 2, "v6e": 1}


def _tpu_kind():
    """The chip type as the runtime names it ("TPU v4"), from the device details or the TPU VM's
    environment (TPU_ACCELERATOR_TYPE, e.g. "v4-8"); "TPU" when neither says."""
    import tensorflow as tf

    for physical in tf.config.list_physical_devices("TPU")[:1]:
        try:
            details = tf.config.experimental.get_device_details(physical) or {}
        except (ValueError, RuntimeError, tf.errors.OpError):
            details = {}
        kind = details.get("device_kind") or details.get("device_name")
        if kind and tpu_version(kind):
            return kind if kind.upper().startswith("TPU") else f"TPU {kind}"
    accelerator_type = os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE")
    version = tpu_version(accelerator_type)
    return f"TPU {version}" if version else "TPU"


def _tpu_chips(version, cores):
    """How many chips `cores` TPU devices are: from TPU_ACCELERATOR_TYPE's size when it names this
    machine ("v4-8": 8 TensorCores = 4 chips; v5e/v6e sizes count chips), else the cores-per-chip table
    (None when the version is unknown)."""
    accelerator_type = os.environ.get("TPU_ACCELERATOR_TYPE") or ""
    match = re.fullmatch(r"(v\w+?)-(\d+)", accelerator_type.strip().lower())
    per_chip = TPU_CORES_PER_CHIP.get(version)
    if match and tpu_version(match.group(1)) == version and per_chip:
        chips = int(match.group(2)) // per_chip  # v5e and v6e sizes count chips: one core each
        if chips:
            return chips
    if per_chip is None:
        return None
    # Megacore versions show one device per chip; v2/v3 one per core.
    return cores if version in ("v4", "v5p", "v5e", "v6e") else max(1, -(-cores // per_chip))


def describe_device():
    """A dict naming the device the train step runs on: a TPU, else the first GPU, else the CPU, and
    the backend that runs it.

    kind "TPU": name is the chip type ("TPU v4"), count the chips, tpu_cores the TPU devices TensorFlow
    shows (the replicas of --strategy tpu) and replicas_per_chip how many of them share a chip's price.
    On JAX count is this process's GPUs (1 on a TPU), and jax_matmul_precision says whether float32
    matrix products may use TF32 on a GPU ("default" lets them).
    """
    cpu_model, cpu_flags = cpu_model_and_flags()
    info = {
        "cpu_model": cpu_model,
        "cpu_flags": cpu_flags,
        "cpu_cores": os.cpu_count(),
        "backend": keras.backend.backend(),
        "keras": keras.__version__,
        # the CPU's, unless an accelerator below takes them over
        "kind": "CPU",
        "name": cpu_model,
        "compute_capability": None,
        "count": 1,
    }
    if info["backend"] == "jax":
        return _describe_jax(info)
    import tensorflow as tf

    info["tensorflow"] = tf.__version__
    # Logical TPU devices once the TPU system is initialised, else physical ones.
    tpus = tf.config.list_logical_devices("TPU") or tf.config.list_physical_devices("TPU")
    gpus = [] if tpus else tf.config.list_physical_devices("GPU")
    if tpus:
        kind = _tpu_kind()
        version = tpu_version(kind)
        chips = _tpu_chips(version, len(tpus))
        info.update(
            kind="TPU",
            name=kind,
            count=chips or len(tpus),
            tpu_cores=len(tpus),
            replicas_per_chip=(len(tpus) / chips) if chips else 1,
        )
    elif gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        capability = details.get("compute_capability")
        info.update(
            kind="GPU",
            name=details.get("device_name", gpus[0].name),
            compute_capability=".".join(map(str, capability)) if capability else None,
            count=len(gpus),
        )
    return info


def _describe_jax(info):
    import jax

    first = jax.devices()[0]
    info.update(
        jax=jax.__version__,
        jax_matmul_precision=str(jax.config.jax_default_matmul_precision or "default"),
    )
    if first.platform == "gpu":
        capability = getattr(first, "compute_capability", None)
        info.update(
            kind="GPU",
            name=first.device_kind,
            compute_capability=str(capability) if capability else None,
            count=len(jax.local_devices()),
        )
    elif first.platform == "tpu":
        info.update(
            kind="TPU",
            name=first.device_kind if tpu_version(first.device_kind) else "TPU",
            tpu_cores=1,
            replicas_per_chip=1,
        )
    return info


def _gpu_names():
    import tensorflow as tf

    return [f"GPU:{i}" for i in range(len(tf.config.list_physical_devices("GPU")))]


def reset_peak_memory():
    """Restarts every GPU's peak counter from its current use (no-op on the CPU, whose peak cannot be
    reset, and on JAX, which has no such call: there the peak includes what ran before)."""
    if keras.backend.backend() == "jax":
        return
    import tensorflow as tf

    for name in _gpu_names():
        tf.config.experimental.reset_memory_stats(name)


def peak_memory_bytes():
    """GPU: the peak allocator counters (TensorFlow: every GPU's, summed, as each replica's device
    counts; JAX: this process's devices'); CPU: this process's peak resident memory."""
    if keras.backend.backend() == "jax":
        import jax

        # Each device's allocator statistics; none on the CPU.
        peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.local_devices()]
        if peaks and None not in peaks:
            return int(sum(peaks))
    elif _gpu_names():
        import tensorflow as tf

        return int(
            sum(tf.config.experimental.get_memory_info(name)["peak"] for name in _gpu_names())
        )
    # ru_maxrss is in kilobytes on Linux (bytes on macOS).
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if platform.system() == "Darwin" else rss * 1024)
