"""What machine this is: accelerator name and compute capability, or the CPU model and its flags."""
import os
import platform
import resource

import keras
import tensorflow as tf

CPU_FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_fp16")


def cpu_model_and_flags():
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    return model, sorted(f for f in CPU_FLAGS_OF_INTEREST if f in flags)


def describe_device():
    """A dict naming the device the train step runs on (the first GPU if any, else the CPU)."""
    cpu_model, cpu_flags = cpu_model_and_flags()
    info = {
        "cpu_model": cpu_model,
        "cpu_flags": cpu_flags,
        "cpu_cores": os.cpu_count(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
    }
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        capability = details.get("compute_capability")
        info.update(
            kind="GPU",
            name=details.get("device_name", gpus[0].name),
            compute_capability=".".join(map(str, capability)) if capability else None,
            count=len(gpus),
        )
    else:
        info.update(kind="CPU", name=cpu_model, compute_capability=None, count=1)
    return info


def peak_memory_bytes():
    """GPU: TensorFlow's peak allocator counter for GPU:0; CPU: this process's peak resident memory."""
    if tf.config.list_physical_devices("GPU"):
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    # ru_maxrss is in kilobytes on Linux (bytes on macOS).
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if platform.system() == "Darwin" else rss * 1024)
