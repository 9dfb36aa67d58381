"""tf.distribute, as a run's TensorFlow runtime sets it up: the strategy --strategy and --devices name
(TF_CONFIG's cluster for multi_worker, TPU_NAME's TPU), the host CPU split into logical devices, the chief,
and the collective every worker of one run joins (to stop together, to finish). What the step itself
needs of a strategy (its name, its replicas' devices, the XLA plan, the loss-scale guard) is
step/distribute.py's.

TensorFlow is imported inside the functions that use it.
"""

import functools
import json
import os

from acgan.errors import UserError, one_line
from acgan.step.distribute import short_device_name, strategy_name


def split_host_cpu(count):
    """Splits the host CPU into `count` logical devices, so one machine can run several CPU replicas.

    Must run before TensorFlow initializes its devices (before any op or strategy is made).
    """
    import tensorflow as tf

    if count <= 1:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    existing = tf.config.get_logical_device_configuration(cpu)
    if existing and len(existing) >= count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError:
        raise UserError(
            f"--devices names {count} CPU devices, but TensorFlow's devices were already set up "
            f"with {len(tf.config.list_logical_devices('CPU'))}"
        ) from None


def tf_config():
    """The parsed TF_CONFIG of a multi-worker run; a clear error when it is missing or malformed."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise UserError(
            "--strategy multi_worker needs TF_CONFIG (the cluster and this task) in the environment "
            "(see docs/scaling.md#several-workers), or resume a multi_worker run on this one process "
            "with --strategy default"
        )
    try:
        spec = json.loads(text)
        cluster, task = spec["cluster"], spec["task"]
        in_cluster = 0 <= int(task["index"]) < len(cluster[task["type"]])
    except (ValueError, KeyError, TypeError):
        in_cluster = False
    if not in_cluster:
        raise UserError(
            'TF_CONFIG must be JSON like {"cluster": {"worker": ["host:port", ...]}, '
            '"task": {"type": "worker", "index": 0}} with the task in the cluster'
        )
    return spec


def make_strategy(name, devices=None):
    """The tf.distribute strategy for `--strategy`, validated with the Config (auto: mirrored over GPUs
    when there are several).

    One per process and setting: a second MirroredStrategy over the same devices would reuse the
    first one's collective keys and fail ("Shape mismatch in the collective instance"), and
    MultiWorkerMirroredStrategy can only be made once.
    """
    import tensorflow as tf

    if name == "auto":
        # Physical, not logical: listing logical devices would initialize them before split_host_cpu.
        name = (
            "mirrored" if len(tf.config.list_physical_devices("GPU")) > 1 or devices else "default"
        )
    # Cached under the resolved name and normalized devices: "auto" and "mirrored", "/CPU:0" and
    # "cpu:0" must give the same strategy object.
    return _strategy(name, tuple(short_device_name(d) for d in devices) if devices else None)


@functools.lru_cache(maxsize=None)
def _strategy(name, devices):
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if devices:
            split_host_cpu(sum(1 for d in devices if short_device_name(d).startswith("cpu:")))
            known = {short_device_name(d.name) for d in tf.config.list_logical_devices()}
            for d in devices:
                if short_device_name(d) not in known:
                    raise UserError(
                        f"--devices: no device {d!r} on this machine (it has {', '.join(sorted(known))})"
                    )
        return tf.distribute.MirroredStrategy(devices=list(devices) if devices else None)
    if name == "multi_worker":
        tf_config()
        # Each worker process has its own devices; --devices does not apply across hosts.
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=os.environ.get("TPU_NAME", "local")
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        detail = one_line(e, 200)
        raise UserError(
            f"--strategy tpu: no TPU found (on a TPU VM it is found by itself; for a pod or remote TPU set TPU_NAME; {detail})"
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def worker_count(strategy):
    if strategy_name(strategy) != "multi_worker":
        return 1
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    return max(1, len(spec.get("worker", ())) + len(spec.get("chief", ())))


def is_chief(strategy):
    """Whether this process writes the run's files: always, except on non-chief multi-worker tasks."""
    if strategy_name(strategy) != "multi_worker":
        return True
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def sum_over_replicas(strategy, values):
    """numpy: `values` (floats) summed over every replica of every worker; a collective all must join."""
    import tensorflow as tf

    local = tf.constant(values, tf.float32)
    return strategy.reduce(
        tf.distribute.ReduceOp.SUM, strategy.run(lambda: local), axis=None
    ).numpy()
