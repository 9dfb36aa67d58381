"""JaxStep: the train step's contract (base.py) on Keras's JAX backend, on one device or a mesh.

Run with KERAS_BACKEND=jax, and build the models under the policy first (networks.build_models). This
module never imports TensorFlow.

The step is a pure function of (state, batch) -> (new state, metric vector), compiled whole with
jax.jit and the state donated (its buffers are reused for the new state). The state holds every model
variable (trainable and not), the three optimizers' variables (loss-scale state included), the step
counter and the skip streak. The Keras variables of the models and optimizers keep the values they had
when the step was made: they serve only as the structure that stateless_call / stateless_apply map
values onto. `sync_variables()` writes the state back into them.

Each step runs algorithm.iteration over the state's arrays (jax_iteration.JaxIteration: jax.vjp for
G's one forward, jax.grad, stateless calls and stateless_apply), then moves G's average and counts. Under
mixed_float16 each loss is scaled by its own LossScaleOptimizer's scale as it is in the state handed to
the step (JaxIteration.scaled: read in a StatelessScope mapping the optimizer's variables to that state;
outside one, scale_loss inside jax.jit would read the Keras variable, a constant frozen at trace time,
while stateless_apply unscales by the live scale; keras-team/keras#19244).

Several devices (`mesh`, a jax.sharding.Mesh with one "data" axis): the same step, jitted with its state
replicated on every device of the mesh and each batch input split along the batch axis (in_shardings /
out_shardings); XLA partitions the one program and inserts the all-reduces. The step still sees one
global batch, so everything it reduces over the batch is reduced over the global batch: the losses, the
gradients, and the batch-norm statistics (what --sync_bn means on TensorFlow). A non-finite gradient on
any device's shard is therefore in the one gradient every LossScaleOptimizer checks: all skip together.
With processes on several hosts the state is a global array; reads take this process's own copy.
"""

import jax
import jax.numpy as jnp
import keras
import numpy as np

from acgan import presets
from acgan.model import precision
from acgan.step import algorithm
from acgan.step.base import StepBase
from acgan.step.common import MODEL_NAMES, OPTIMIZER_NAMES, StepMetrics
from acgan.step.jax_iteration import JaxIteration


def _copy(value):
    """A fresh device buffer: the step donates the state, so it must not share buffers with the Keras
    variables (or with arrays the caller still holds)."""
    return jnp.array(value, copy=True)


class _Counter:
    """The step counter as the TF step's tf.Variable is read: int(trainer.step), trainer.step.numpy().

    It reads the live state each time, so it never refers to a donated (deleted) buffer."""

    def __init__(self, trainer):
        self._trainer = trainer

    def numpy(self):
        return np.asarray(self._trainer._local(self._trainer._state["step"]))

    def __int__(self):
        return int(self.numpy())


class JaxStep(StepBase):
    """Holds the models, the three optimizers and the step's state, and runs the step on one device or,
    data parallel, over the devices of `mesh`. `preset`: the acgan.presets.Preset whose settings it trains
    with (its loss resolved; factory.build_step gives it)."""

    def __init__(
        self, models, num_classes, preset=presets.REFERENCE, jit=True, mesh=None, device=None
    ):
        if keras.backend.backend() != "jax":
            raise RuntimeError(
                f"JaxStep needs KERAS_BACKEND=jax; Keras runs on {keras.backend.backend()}"
            )
        self._set_up(models, num_classes, preset)
        self._make_optimizers()
        self._build_optimizers()  # the same variable lists, in the same order, as tf_step.TensorFlowStep's
        self._optimizers = {name: self.optimizer(name) for name in OPTIMIZER_NAMES}
        # Where, in each optimizer's variable list, its (inner optimizer's) iteration count and its loss
        # scale are.
        self._iterations_index = {
            n: _index(o.variables, o.iterations) for n, o in self._optimizers.items()
        }
        self._scale_index = {
            n: _index(o.variables, o.dynamic_scale) if precision.is_loss_scaled(o) else None
            for n, o in self._optimizers.items()
        }
        self._learning_rate_index = {
            n: _index(o.variables, precision.learning_rate_variable(o))
            for n, o in self._optimizers.items()
        }
        # Several devices: the state replicated on each, every batch input split along its first axis.
        # One: the state committed to `device` (default: the first local one), as the step's outputs are;
        # an uncommitted first state is another signature to jax.jit, which compiled the step twice.
        self.mesh = mesh
        self._device = device or jax.local_devices()[0]
        if mesh is not None:
            self._replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            self._split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        self._state = self._place(self._state_from_variables())
        self._keys = self._state_keys()
        self.compile_mode = "step" if jit else "off"
        self.compile_reason = (
            "jax.jit: the whole step is one XLA computation, its state donated"
            if jit
            else "--nojit: the step runs op by op, uncompiled"
        )
        self.retrace()

    # -- state ---------------------------------------------------------------------------------------

    def _state_from_variables(self):
        """The state as the Keras variables hold it now, in fresh buffers; the skip streak at zero."""
        return {
            "models": {
                name: {
                    "trainable": [_copy(v.value) for v in model.trainable_variables],
                    "non_trainable": [_copy(v.value) for v in model.non_trainable_variables],
                }
                for name, model in zip(MODEL_NAMES, self.models)
            },
            "optimizers": {
                name: [_copy(v.value) for v in o.variables] for name, o in self._optimizers.items()
            },
            "step": jnp.zeros((), jnp.int32),
            # Consecutive skipped steps per optimizer; not in state(), as the TF step does not checkpoint it.
            "skip_streak": jnp.zeros(len(OPTIMIZER_NAMES), jnp.int32),
            # G's average (G-EMA) in float32, starting at G's weights, then its batch-norm statistics (one
            # list, g_variables + g_statistics); empty without one.
            "g_ema": [
                jnp.array(v.value, jnp.float32, copy=True)
                for v in self.g_variables + self.g_statistics
            ]
            if self.ema_decay
            else [],
        }

    def _state_keys(self):
        """[(key for state(), (path into self._state))] for everything state() saves."""
        keys = []
        for name, model in zip(MODEL_NAMES, self.models):
            for kind in ("trainable", "non_trainable"):
                for i, v in enumerate(getattr(model, f"{kind}_variables")):
                    keys.append((f"models/{name}/{v.path}", ("models", name, kind, i)))
        for name, optimizer in self._optimizers.items():
            for i, v in enumerate(optimizer.variables):
                keys.append((f"optimizers/{v.path}", ("optimizers", name, i)))
        keys.append(("step", ("step",)))
        keys += [
            (f"ema/generator/{v.path}", ("g_ema", i))
            for i, v in enumerate(self.g_variables + self.g_statistics)
            if self.ema_decay
        ]
        if len({key for key, _ in keys}) != len(keys):
            raise ValueError("two variables share a path; state() needs unique keys")
        return keys

    def _place(self, tree):
        """`tree` with every array replicated over the mesh (those already so are kept as they are), or on
        the step's one device. Works across processes: each process places its own copies of the same values."""
        if self.mesh is None:
            return jax.device_put(tree, self._device)

        def place(x):
            if isinstance(x, jax.Array) and x.sharding == self._replicated:
                return x
            value = np.asarray(x)
            return jax.make_array_from_callback(
                value.shape, self._replicated, lambda index: value[index]
            )

        return jax.tree_util.tree_map(place, tree)

    def _local(self, tree):
        """`tree` as arrays on this process's first device (its copy of the replicated state: no transfer),
        for reads that must not be a program over every process's devices."""
        if self.mesh is None:
            return tree
        return jax.tree_util.tree_map(lambda x: x.addressable_data(0), tree)

    def shard_batch(self, arrays, global_batch=None):
        """The batch inputs as global arrays split over the mesh's data axis: from the whole batch (one
        process) or from this process's contiguous share of its rows (several; `global_batch` rows in all)."""
        if self.mesh is None:
            return arrays
        if global_batch is None or global_batch == len(arrays[0]):
            return tuple(jax.device_put(x, self._split) for x in arrays)
        return tuple(
            jax.make_array_from_process_local_data(
                self._split, np.asarray(x), (global_batch,) + x.shape[1:]
            )
            for x in arrays
        )

    def _at(self, path):
        node = self._state
        for part in path:
            node = node[part]
        return node

    def state(self):
        """{key: numpy array} of every model and optimizer variable, the step counter and G's average (not
        the skip streak: a resumed run counts skips afresh, as on TensorFlow). Keys: models/<model>/<variable
        path>, optimizers/<variable path>, step, ema/generator/<variable path>."""
        return {key: np.array(self._local(self._at(path))) for key, path in self._keys}

    def load_state(self, values):
        """Replaces the whole state with `values` (as state() returns it: every key, same shapes)."""
        expected = {key for key, _ in self._keys}
        if set(values) != expected:
            missing, unknown = sorted(expected - set(values)), sorted(set(values) - expected)
            raise ValueError(f"state keys differ: missing {missing[:5]}, unknown {unknown[:5]}")
        new = jax.tree_util.tree_map(lambda x: x, self._state)  # a new tree holding the same leaves
        for key, path in self._keys:
            old = self._at(path)
            value = np.asarray(values[key])
            if value.shape != old.shape:
                raise ValueError(f"{key}: shape {value.shape}, expected {old.shape}")
            node = new
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = jnp.array(value, dtype=old.dtype)
        new["skip_streak"] = jnp.zeros(len(OPTIMIZER_NAMES), jnp.int32)
        self._state = self._place(new)

    def _set_learning_rates(self, rates):
        """New values in the state (the compiled step takes them as inputs)."""
        optimizers = {name: list(values) for name, values in self._state["optimizers"].items()}
        for (name, i), rate in zip(self._learning_rate_index.items(), rates):
            optimizers[name][i] = jnp.asarray(rate, optimizers[name][i].dtype)
        self._state = self._place(dict(self._state, optimizers=optimizers))

    def sync_variables(self):
        """Writes the state into the Keras variables (models and optimizers), e.g. to save with Keras or
        to call the models directly. The step itself never reads them."""
        state = self._local(self._state)
        for name, model in zip(MODEL_NAMES, self.models):
            values = state["models"][name]
            for kind in ("trainable", "non_trainable"):
                for variable, value in zip(getattr(model, f"{kind}_variables"), values[kind]):
                    variable.assign(value)
        for name, optimizer in self._optimizers.items():
            for variable, value in zip(optimizer.variables, state["optimizers"][name]):
                variable.assign(value)

    # -- the step ------------------------------------------------------------------------------------

    def retrace(self):
        """(Re)builds the step functions; call it after patching anything the step calls."""
        if self.compile_mode == "step" and self.mesh is not None:
            # The same function, partitioned: state in and out replicated, the four batch inputs split.
            self._step_function = jax.jit(
                self._step,
                donate_argnums=0,
                in_shardings=(self._replicated,) + (self._split,) * 4,
                out_shardings=(self._replicated, self._replicated),
            )
            self._generate_function = jax.jit(self._generate)
        elif self.compile_mode == "step":
            self._step_function = jax.jit(self._step, donate_argnums=0)
            self._generate_function = jax.jit(self._generate)
        else:
            self._step_function = self._step
            self._generate_function = self._generate

    def lowered_step(self, images, labels, z, fake_labels):
        """The jitted step lowered for these inputs (jax.stages.Lowered: its .compile() gives the executable
        and XLA's cost analysis, and fills jit's cache for the first train_step); None when uncompiled."""
        if self.compile_mode != "step":
            return None
        return self._step_function.lower(self._state, images, labels, z, fake_labels)

    def train_step(self, images, labels, z, fake_labels):
        """One step: uint8 images [B, H, W, C], int labels [B], z [B, noise_dim], int fake_labels [B].
        Returns its StepMetrics without waiting for the device."""
        self._state, vector = self._step_function(self._state, images, labels, z, fake_labels)
        self._signature = [
            jax.ShapeDtypeStruct(np.shape(x), x.dtype) for x in (images, labels, z, fake_labels)
        ]
        return StepMetrics(vector)

    def compiled_hlo(self):
        """XLA's optimized HLO text of the step as it last ran (jit's cache already holds it), for
        measure.profile's groups; None before the first step or uncompiled."""
        if self.compile_mode != "step" or getattr(self, "_signature", None) is None:
            return None
        return self.lowered_step(*self._signature).compile().as_text()

    def _step(self, state, images, labels, z, fake_labels):
        """The step as a pure function: (state, batch) -> (new state, metric vector); the iteration itself
        is algorithm.iteration over the state's arrays (jax_iteration.JaxIteration)."""
        real = jnp.asarray(images).astype(jnp.float32) / 255.0
        labels = jnp.asarray(labels).astype(jnp.int32)
        fake_labels = jnp.asarray(fake_labels).astype(jnp.int32)
        iterations_before = self._iterations(state["optimizers"])
        run = JaxIteration(self, state)
        loss_values = algorithm.iteration(run, real, labels, z, fake_labels, state["step"])

        g = run.weights["generator"]
        after = algorithm.after_iteration(
            jnp.stack([jnp.asarray(x, jnp.float32) for x in loss_values]),
            self._scales(run.optimizers),
            state["step"],
            iterations_before,
            self._iterations(run.optimizers),
            state["skip_streak"],
            self.ema_decay,
            state["g_ema"],
            g["trainable"] + g["non_trainable"],
        )
        new_state = {
            "models": {
                name: {kind: list(values) for kind, values in run.weights[name].items()}
                for name in MODEL_NAMES
            },
            "optimizers": {name: list(values) for name, values in run.optimizers.items()},
            "step": after.step,
            "skip_streak": after.skip_streak,
            "g_ema": after.g_ema,  # moved toward G after both of its updates
        }
        return new_state, after.metrics

    def _iterations(self, optimizer_values):
        return jnp.stack(
            [
                jnp.asarray(optimizer_values[n][self._iterations_index[n]], jnp.int32)
                for n in OPTIMIZER_NAMES
            ]
        )

    def _scales(self, optimizer_values):
        return jnp.stack(
            [
                jnp.asarray(optimizer_values[n][i] if i is not None else 1.0, jnp.float32)
                for n, i in self._scale_index.items()
            ]
        )

    # -- reading -------------------------------------------------------------------------------------

    @property
    def step(self):
        return _Counter(self)

    def _host_step_and_iterations(self):
        state = self._local(self._state)
        return int(state["step"]), np.asarray(self._iterations(state["optimizers"]))

    def _host_loss_scales(self):
        return np.asarray(self._scales(self._local(self._state["optimizers"])))

    def _host_model_values(self, name, variables):
        values = self._local(self._state["models"][name])
        model = dict(zip(MODEL_NAMES, self.models))[name]
        by_id = {id(v): x for v, x in zip(model.trainable_variables, values["trainable"])}
        by_id.update(
            {id(v): x for v, x in zip(model.non_trainable_variables, values["non_trainable"])}
        )
        return [by_id[id(variable)] for variable in variables]

    def _host_ema_values(self):
        return self._local(self._state["g_ema"][: len(self.g_variables)])

    def _host_ema_statistics(self):
        return self._local(self._state["g_ema"][len(self.g_variables) :])

    def _generator_assigned(self):
        """G's state taken from its Keras variables, which swap_in_ema assigned."""
        models = dict(self._state["models"])
        models["generator"] = {
            "trainable": [_copy(v.value) for v in self.g_variables],
            "non_trainable": [_copy(v.value) for v in self.g_statistics],
        }
        self._state = self._place(dict(self._state, models=models))

    def generate(self, z, labels):
        """Images [B, H, W, C] float32 in [0, 1], inference mode (BN moving statistics); from G's average
        when samples_from_ema, with the batch-norm statistics its `ema_statistics` names."""
        if self.samples_from_ema:
            trainable, statistics = self._host_ema_values(), self.sampling_statistics()
        else:
            g = self._local(self._state["models"]["generator"])
            trainable, statistics = g["trainable"], g["non_trainable"]
        return self._generate_function(trainable, statistics, z, labels)

    def _generate(self, trainable, non_trainable, z, labels):
        images, _ = self.models.generator.stateless_call(
            trainable, non_trainable, [z, jnp.asarray(labels).astype(jnp.int32)], training=False
        )
        return images


def _index(variables, variable):
    """Position of `variable` (by identity) in `variables`."""
    for i, v in enumerate(variables):
        if v is variable:
            return i
    raise ValueError(f"{variable.path} is not among the optimizer's variables")
