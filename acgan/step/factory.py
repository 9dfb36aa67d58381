"""The one place that builds the train step, for every caller: training, sampling from a checkpoint,
the benchmark. A step built for a preset's weights anywhere is the step training built for them."""


def build_step(
    preset,
    backend,
    models,
    num_classes,
    *,
    jit=True,
    strategy=None,
    sync_bn=True,
    mesh=None,
    device=None,
):
    """The train step (base.py's contract) of `backend` for `models`, built from `preset`.

    preset: the acgan.presets.Preset it trains, its loss and G-EMA decay as the run has them
    (presets.resolve); backend: "tensorflow" (tf_step.TensorFlowStep) or "jax" (jax_step.JaxStep), the backend Keras runs on;
    models: built under the run's dtype policy (the step takes it from them); jit: compile the step with XLA.
    TensorFlow only: strategy, the tf.distribute strategy (None: the current one), and sync_bn, batch-norm
    statistics over the global batch with several replicas. JAX only: mesh, a jax.sharding.Mesh with a
    "data" axis (None: one device, `device`, default the first); the step always sees the global batch.
    """
    if backend == "tensorflow":
        if mesh is not None:
            raise ValueError("a mesh is JAX's; TensorFlow's step takes a tf.distribute strategy")
        # Imported here, once the backend is chosen: importing tf_step loads TensorFlow.
        from acgan.step.tf_step import TensorFlowStep

        return TensorFlowStep(
            models, num_classes, preset, jit=jit, strategy=strategy, sync_bn=sync_bn
        )
    if backend == "jax":
        if strategy is not None:
            raise ValueError("a tf.distribute strategy is TensorFlow's; JAX's step takes a mesh")
        # Imported here, once the backend is chosen: importing jax_step loads JAX.
        from acgan.step.jax_step import JaxStep

        return JaxStep(models, num_classes, preset, jit=jit, mesh=mesh, device=device)
    raise ValueError(f"unknown backend {backend!r}: tensorflow or jax")
