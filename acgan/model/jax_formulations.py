"""Which formulation the JAX backend's layers trace: a run's Config.jax_conv_transpose and
jax_batch_norm, set process-wide before its step is traced (`use`, as the dtype policy is set before the
models are built), read by model/transposed_conv.py and model/batch_norm.py each time they are traced."""

# The choices, the first the default (Config.jax_conv_transpose, jax_batch_norm).
JAX_CONV_TRANSPOSE = ("adjoint", "linear_transpose", "autodiff")
JAX_BATCH_NORM = ("keras", "fused")
_chosen = {"conv_transpose": JAX_CONV_TRANSPOSE[0], "batch_norm": JAX_BATCH_NORM[0]}


def use(config):
    """The formulations `config` names, from now on in this process."""
    _chosen.update(conv_transpose=config.jax_conv_transpose, batch_norm=config.jax_batch_norm)


def conv_transpose():
    return _chosen["conv_transpose"]


def batch_norm():
    return _chosen["batch_norm"]
