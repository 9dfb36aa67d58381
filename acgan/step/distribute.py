"""What the step needs of tf.distribute: the strategy's name and its replicas' devices, the XLA plan, the
batch-norm synchronisation and the loss-scale guard (training/tf_strategy.py makes the strategy).

Everything here follows TensorFlow's own engine; nothing is home-made except `agree_on_finite`,
which closes a gap in Keras 3's LossScaleOptimizer (see its docstring).

TensorFlow and Keras are imported inside the functions that use them: this module's framework-free
helpers (check_global_batch, short_device_name) also serve the JAX runtime, which must not load
TensorFlow, and the benchmark's parent process, which loads no framework at all.
"""

from acgan.errors import UserError


def short_device_name(name):
    """ "/job:localhost/replica:0/task:0/device:CPU:1", "/cpu:1" and "CPU:1" all become "cpu:1"."""
    return name.strip().lower().split("device:")[-1].lstrip("/")


def strategy_name(strategy):
    import tensorflow as tf

    for cls, name in (
        (tf.distribute.TPUStrategy, "tpu"),
        (tf.distribute.MultiWorkerMirroredStrategy, "multi_worker"),
        (tf.distribute.MirroredStrategy, "mirrored"),
    ):
        if isinstance(strategy, cls):
            return name
    return "default"


def replica_devices(strategy):
    """The devices the replicas run on (this worker's, under multi_worker)."""
    try:
        return [short_device_name(d) for d in strategy.extended.worker_devices]
    except RuntimeError:  # the default strategy: TensorFlow's own placement
        return ["default device"]


def check_global_batch(batch, replicas, what="--batch"):
    if batch % replicas:
        raise UserError(
            f"{what} {batch} does not divide by the {replicas} replicas; "
            f"use a multiple of {replicas} (it is the global batch)"
        )


def compile_plan(strategy, jit, sync_bn):
    """How XLA is used: (mode, why). Modes: "step", "forward_backward", "tpu" or "off".

    One replica: the whole step in one XLA cluster. Several: XLA around `strategy.run` cannot reach
    the other devices' variables, so only each replica's forward/backward pass is compiled and the
    updates run outside it. Synchronized batch norm all-reduces inside the forward pass; XLA compiles
    that only for NCCL (GPU) collectives, so on CPU replicas it leaves the pass uncompiled.
    """
    name = strategy_name(strategy)
    if name == "tpu":
        return "tpu", "TPUs always compile the replica step with XLA"
    if not jit:
        return "off", "--nojit"
    if strategy.num_replicas_in_sync == 1 and name != "multi_worker":
        return "step", "one replica: the whole step is one XLA cluster"
    all_gpu = all(d.startswith("gpu:") for d in replica_devices(strategy))
    if sync_bn and not all_gpu:
        return "off", (
            "synchronized batch norm all-reduces inside the forward pass, and XLA compiles that "
            "only between GPUs; use --nosync_bn to compile each replica's pass"
        )
    return "forward_backward", "several replicas: each replica's forward/backward pass is compiled"


def agree_on_finite(grads):
    """Makes every replica see a non-finite gradient when any replica has one.

    Keras 3.15's LossScaleOptimizer decides "finite?" from the first replica's *local* gradients (the
    sum across replicas happens later, inside the inner optimizer), and under strategies without
    merge calls each replica decides alone. So an overflow on replica 2 would be summed into the
    update as inf. Here the replicas first all-reduce a count of replicas that overflowed; if any did,
    every replica's gradients become NaN, and every LossScaleOptimizer skips and halves together.
    """
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return grads
    present = [g for g in grads if g is not None]
    local = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in present])
    # ReduceOp has only SUM and MEAN: count the replicas that overflowed.
    overflowed = context.all_reduce(
        tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(local), tf.float32)
    )
    poison = tf.where(overflowed > 0.0, float("nan"), 0.0)
    return [None if g is None else g + tf.cast(poison, g.dtype) for g in grads]


def synchronize_batch_norm(models):
    """Batch statistics over the global batch, as one device would compute them, instead of per replica.

    Keras reads `synchronized` when the layer is called (backend moments(..., synchronized=)), so
    setting it on built layers is enough; it changes no variables, so checkpoints stay compatible.
    """
    import keras

    for model in models:
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.synchronized = True
