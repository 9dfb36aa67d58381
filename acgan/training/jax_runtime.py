"""What the training loop needs, on JAX: the devices (one, or a jax.sharding.Mesh over several, across
processes under multi_worker), the step (jax_step.JaxStep), the input stream (data.batches' numpy
batches, put on the devices by a host thread ahead of the step) and the checkpoints (jax_checkpoints).
The same interface as tf_runtime.py; no TensorFlow is imported.

--strategy on JAX: default is one device; mirrored every local device (or --devices); auto mirrored when
there are several local devices, else default; multi_worker starts jax.distributed (every process's
devices in one mesh). The mesh has one axis, "data": the state is replicated, each batch split.
"""

import contextlib
import os

import jax
import numpy as np
from jax.experimental import multihost_utils

from acgan.data.batches import BatchPlan, prefetched
from acgan.errors import UserError, one_line
from acgan.step.distribute import check_global_batch, short_device_name
from acgan.step.factory import build_step
from acgan.training import jax_checkpoints
from acgan.training.lost_worker import HEARTBEAT_SECONDS
from acgan.training.stop_signals import agree

# acgan's own fallbacks for multi_worker's process count and id (JAX reads JAX_COORDINATOR_ADDRESS itself).
PROCESS_ENV = {"num_processes": "JAX_NUM_PROCESSES", "process_id": "JAX_PROCESS_ID"}


def start_processes(config):
    """jax.distributed.initialize from the flags, else the environment; one line on failure."""
    values = {}
    for name, variable in PROCESS_ENV.items():
        value = getattr(config, name)
        if value is None and os.environ.get(variable):
            try:
                value = int(os.environ[variable])
            except ValueError:
                raise UserError(
                    f"{variable} must be an integer, got {os.environ[variable]!r}"
                ) from None
        values[name] = value
    try:
        jax.distributed.initialize(
            coordinator_address=config.coordinator_address,
            heartbeat_timeout_seconds=HEARTBEAT_SECONDS,
            **values,
        )
    except (ValueError, TypeError, RuntimeError) as e:
        detail = one_line(e, 200)
        raise UserError(
            f"--strategy multi_worker on JAX: jax.distributed.initialize failed ({detail}); give "
            "--coordinator_address, --num_processes and --process_id (see docs/scaling.md), or resume a "
            "multi_worker run on this one process with --strategy default"
        ) from None


def _cpu_devices_named(devices):
    """How many host CPU devices --devices names (cpu:0,cpu:3 -> 4), for jax_num_cpu_devices."""
    ids = [
        int(name.split(":")[1])
        for name in devices
        if name.startswith("cpu:") and name.split(":")[1].isdigit()
    ]
    return max(ids) + 1 if ids else 0


def pick_devices(strategy, devices=None):
    """(resolved strategy name, the mesh's devices) for --strategy and --devices on JAX."""
    if devices:
        names = [short_device_name(d).replace("cuda:", "gpu:") for d in devices]
        cpus = _cpu_devices_named(names)
        if cpus > 1 and "xla_force_host_platform_device_count" not in os.environ.get(
            "XLA_FLAGS", ""
        ):
            # Splits the host CPU, as TensorFlow's does. A RuntimeError: JAX's devices are already set
            # up, and the check below names what there is.
            with contextlib.suppress(RuntimeError):
                jax.config.update("jax_num_cpu_devices", cpus)
        known = {
            f"{platform}:{i}": device
            for platform in dict.fromkeys(("cpu", jax.default_backend()))
            for i, device in enumerate(jax.local_devices(backend=platform))
        }
        missing = [d for d in names if d not in known]
        if missing:
            raise UserError(
                f"--devices: no device {missing[0]!r} here (JAX sees {', '.join(known)})"
            )
        if len({known[d].platform for d in names}) > 1:
            raise UserError(
                "--devices: name devices of one kind (a mesh of CPUs and accelerators is not supported)"
            )
        if len(set(names)) != len(names):
            raise UserError(f"--devices names a device twice: {', '.join(devices)}")
        return "mirrored", [known[d] for d in names]
    local = jax.local_devices()
    if strategy == "multi_worker":
        return "multi_worker", jax.devices()
    if strategy == "mirrored" or (strategy == "auto" and len(local) > 1):
        return "mirrored", local
    return "default", local[:1]


class JaxRuntime:
    name = "jax"

    def __init__(self, config):
        if config.strategy == "multi_worker":
            start_processes(config)  # before anything touches a device
        self.strategy, self.devices = pick_devices(config.strategy, config.devices)
        self.replicas, self.processes = len(self.devices), jax.process_count()
        check_global_batch(config.batch, self.replicas)
        if self.replicas > 1 and not config.sync_bn:
            raise UserError(
                "--nosync_bn: on JAX the step sees the global batch as one array, so batch-norm "
                "statistics are always over the global batch; drop the flag"
            )
        self.chief = jax.process_index() == 0  # the one writer
        # One device: no mesh, the step exactly as it always ran. Several: one "data" axis over them.
        self.mesh = (
            jax.sharding.Mesh(np.array(self.devices), ("data",)) if self.replicas > 1 else None
        )
        self.trainer = None
        idle = len(jax.local_devices()) - len(
            [d for d in self.devices if d.process_index == jax.process_index()]
        )
        self.notes = (
            [
                f"the JAX backend trains on {self.replicas} device(s) ({self.devices[0]}...); {idle} more are "
                "idle (--strategy mirrored uses every local device)"
            ]
            if idle
            else []
        )

    def scope(self):
        return contextlib.nullcontext()

    def make_step(self, preset, models, num_classes, config):
        self.trainer = build_step(
            preset,
            self.name,
            models,
            num_classes,
            jit=config.jit,
            mesh=self.mesh,
            device=self.devices[0],
        )
        return self.trainer

    def layout(self, trainer):
        return {
            "strategy": self.strategy,
            "replicas": self.replicas,
            "workers": self.processes,
            "replica_devices": [f"{d.platform}:{d.id}" for d in self.devices]
            if self.mesh
            else [str(self.devices[0])],
            "synchronized_batch_norm": self.replicas
            > 1,  # one global batch: the statistics are its own
            "xla": trainer.compile_mode,
            "xla_reason": trainer.compile_reason
            + (
                f", partitioned over a {self.replicas}-device mesh (the batch "
                "split, the state replicated)"
                if self.mesh
                else ""
            ),
        }

    checkpoints = jax_checkpoints.JaxCheckpoints  # (trainer, directory, keep)

    def _place(self, batch, global_batch=None):
        """A batch where the step reads it: on the device, or split over the mesh (from this process's
        rows of a `global_batch`, jax_step.shard_batch)."""
        if self.mesh is None:
            return jax.device_put(batch, self.devices[0])
        return self.trainer.shard_batch(batch, global_batch)

    def resident(self, batch):
        """One global batch placed for the step, once (the benchmark times the step on it)."""
        return jax.block_until_ready(list(self._place(tuple(batch))))

    @property
    def accelerated(self):
        return self.devices[0].platform != "cpu"

    def batches(self, data, config, noise_dim, start_step):
        """Each step's global batch (data.batches), split over the mesh. With several processes each one
        reads only the rows of its own devices, the same rows of the same global batch as one process."""
        plan = BatchPlan(len(data), config.batch, config.seed, noise_dim, data.num_classes)
        share = config.batch // self.processes
        rows = slice(jax.process_index() * share, (jax.process_index() + 1) * share)
        return prefetched(
            data, plan, start_step, lambda batch: self._place(batch, config.batch), rows=rows
        )

    def agree_on_stop(self, stop_signal, out_of_time):
        """Across processes: any process's reason to stop is every process's (a signal reaches one, each
        clock runs its own), so they all stop after the same step."""
        return agree(
            stop_signal,
            out_of_time,
            self.processes,
            lambda wishes: (
                np.asarray(multihost_utils.process_allgather(np.array(wishes, np.int32)))
                .reshape(-1, 3)
                .any(axis=0)
            ),
        )

    def wait_for_all_workers(self):
        if self.processes > 1:
            multihost_utils.sync_global_devices("acgan: run finished")

    newest_checkpoint = staticmethod(jax_checkpoints.newest_intact)

    def peers(self):
        """The other processes, by name ("process 1")."""
        return [f"process {i}" for i in range(self.processes) if i != jax.process_index()]
