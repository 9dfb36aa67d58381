"""What the training loop needs, on JAX: one device, the step (jax_step.JaxACGAN), the input stream
(data.batches' numpy batches, put on the device by a host thread ahead of the step) and the
checkpoints (jax_checkpoints). The same interface as tf_runtime.py; no TensorFlow is imported."""
import contextlib

import jax

from acgan.data.batches import BatchPlan, prefetched
from acgan.step.common import step_options
from acgan.step.jax_step import JaxACGAN
from acgan.training.jax_checkpoints import JaxCheckpoints


class JaxRuntime:
    name = "jax"
    replicas = 1
    chief = True

    def __init__(self, config):
        # config.validate() refused every strategy but auto/default: the JAX step runs on one device.
        self.device = jax.devices()[0]
        others = len(jax.devices()) - 1
        self.notes = [f"the JAX backend trains on one device ({self.device}); {others} more are idle "
                      "(multi-device training needs --backend tensorflow)"] if others else []

    def scope(self):
        return contextlib.nullcontext()

    def make_step(self, models, num_classes, config):
        return JaxACGAN(models, num_classes, config.policy, jit=config.jit, **step_options(config.arch, config.loss))

    def layout(self, gan):
        return {
            "strategy": "default",
            "replicas": 1,
            "workers": 1,
            "replica_devices": [str(self.device)],
            "synchronized_batch_norm": False,
            "xla": gan.compile_mode,
            "xla_reason": gan.compile_reason,
        }

    def checkpoints(self, gan, directory, keep):
        return JaxCheckpoints(gan, directory, keep)

    def batches(self, data, config, noise_dim, start_step):
        plan = BatchPlan(len(data), config.batch, config.seed, noise_dim, data.num_classes)
        return prefetched(data, plan, start_step, lambda batch: jax.device_put(batch, self.device))

    def agree_on_stop(self, stop_signal, out_of_time):
        return stop_signal, out_of_time

    def wait_for_all_workers(self):
        pass
