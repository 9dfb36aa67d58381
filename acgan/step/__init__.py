"""The AC-GAN train step, behind one small interface that the training loop, sampling and the
benchmark use, with one implementation per Keras backend. factory.build_step builds it for every caller:

    step = build_step(preset, "tensorflow", models, num_classes, jit=..., strategy=...,
                      sync_bn=...)     # tf_step.TensorFlowStep, on a tf.distribute strategy
    step = build_step(preset, "jax", models, num_classes, jit=..., mesh=...)
                                       # jax_step.JaxStep, on one device or a mesh's "data" axis
    step.train_step(images, labels, z, fake_labels) -> StepMetrics

algorithm.py states the iteration itself, in algorithm order and backend-neutral (D's update, then
G's and Q's), and `algorithm.Backend`, what each backend supplies to it. base.py states the step's
contract and holds what both steps share (the preset's settings, the optimizers and the models each
trains, the host-side reads, the metric vector's bookkeeping). tf_step.py runs the iteration on
TensorFlow's variables; jax_step.py holds the JAX step's state and jax_iteration.py the iteration over
it. common.py holds the names and StepMetrics (no TensorFlow, JAX or Keras), losses.py the losses and
augment.py the augmentation of D's inputs (DiffAugment), in backend-neutral Keras ops. distribute.py
holds the tf.distribute side: strategies, the cross-replica loss-scale guard, the XLA plan. A preset's
settings are acgan.presets'. The training loop builds the step through its backend's runtime
(training/tf_runtime.py, training/jax_runtime.py).
"""
