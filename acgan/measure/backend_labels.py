"""How benchmark rows and runs name their Keras backend (and, on JAX, the float32 matmul precision);
shared by the tables and the figures."""

BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX"}


def backend_of(item):
    """A row's or run's Keras backend; files written before backends were swept ran on TensorFlow."""
    return item.get("backend") or (item.get("machine") or {}).get("backend") or "tensorflow"


def precision_of(item):
    """JAX's default matmul precision for a JAX row or run ("default": a GPU may run float32 matrix
    products in TF32; "highest": full float32); None on TensorFlow."""
    if backend_of(item) != "jax":
        return None
    return (
        item.get("matmul_precision")
        or (item.get("machine") or {}).get("jax_matmul_precision")
        or "default"
    )


def backend_label(item):
    """ "TensorFlow", or "JAX, matmul precision default" (the float32 precision always named on JAX)."""
    name = BACKEND_NAMES.get(backend_of(item), backend_of(item))
    precision = precision_of(item)
    return f"{name}, matmul precision {precision}" if precision else name


def describe_backend(run):
    """The backend and its versions, as a run's machine records them."""
    m = run.get("machine") or {}
    versions = (
        f"JAX {m.get('jax')}" if backend_of(run) == "jax" else f"TensorFlow {m.get('tensorflow')}"
    )
    return f"{backend_label(run)}; {versions}, Keras {m.get('keras')}"
