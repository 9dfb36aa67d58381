"""TPUs are TPUs: detection from a faked device list, the chip type, the per-chip price and the advice."""

import pytest
import tensorflow as tf

from acgan.bench import results, tables
from acgan.measure import advice, device, prices
from acgan.training import report


def fake_tpus(monkeypatch, cores, details=None, accelerator_type=None):
    physical = [tf.config.PhysicalDevice(f"/physical_device:TPU:{i}", "TPU") for i in range(cores)]
    logical = [
        tf.config.LogicalDevice(f"/job:localhost/replica:0/task:0/device:TPU:{i}", "TPU")
        for i in range(cores)
    ]
    monkeypatch.setattr(
        tf.config, "list_physical_devices", lambda kind=None: physical if kind == "TPU" else []
    )
    monkeypatch.setattr(
        tf.config, "list_logical_devices", lambda kind=None: logical if kind == "TPU" else []
    )
    monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda d: dict(details or {}))
    for name in ("TPU_ACCELERATOR_TYPE", "ACCELERATOR_TYPE"):
        monkeypatch.delenv(name, raising=False)
    if accelerator_type:
        monkeypatch.setenv("TPU_ACCELERATOR_TYPE", accelerator_type)
    return device.describe_device()


@pytest.mark.parametrize(
    "cores, details, accelerator_type, name, chips",
    [
        (8, {"device_kind": "TPU v3"}, None, "TPU v3", 4),  # v3-8: 8 TensorCores on 4 chips
        (8, {}, "v2-8", "TPU v2", 4),
        (4, {}, "v4-8", "TPU v4", 4),  # megacore: one device per chip
        (8, {}, "v5litepod-8", "TPU v5e", 8),  # one TensorCore per chip
        (8, {"device_kind": "TPU v3"}, "v3-8", "TPU v3", 4),
    ],
)
def test_a_tpu_is_detected_and_named(monkeypatch, cores, details, accelerator_type, name, chips):
    info = fake_tpus(monkeypatch, cores, details, accelerator_type)
    assert (info["kind"], info["name"], info["count"], info["tpu_cores"]) == (
        "TPU",
        name,
        chips,
        cores,
    )
    assert info["replicas_per_chip"] * chips == cores
    assert info["cpu_model"]  # the host is still described


def test_a_tpu_is_priced_per_chip_not_per_replica(monkeypatch):
    machine = fake_tpus(monkeypatch, 8, {"device_kind": "TPU v3"})
    layout = {"replicas": 8, "workers": 1}
    cost = report.run_cost(1000.0, None, machine, layout)
    assert cost["price_per_hour_each"] == 2.00  # the shipped TPU-v3 per-chip price
    assert (cost["priced_units"], cost["priced_unit"]) == (4, "chip")
    assert cost["price_per_hour"] == pytest.approx(8.0)  # 4 chips, not 8 replicas
    assert "no price known" not in cost["price_basis"]
    price = prices.choose_price(machine["name"], machine["kind"])
    run = {
        "device": machine["name"],
        "machine": machine,
        "command": "x",
        "replicas": 8,
        "price": price,
    }
    row = results.make_row(
        run,
        "mixed_bfloat16",
        1024,
        True,
        {"status": "ok", "time_per_batch_ms": 100.0, "replicas": 8},
    )
    assert row["price_per_hour"] == pytest.approx(8.0)
    assert "TPU v3: 4 chip(s), 8 TensorFlow TPU device(s)" in tables.describe_machine(
        machine["name"], machine
    )
    # one machine's price: once
    given = prices.choose_price(machine["name"], "TPU", price_per_hour=9.0)
    assert prices.priced_units(given, 8, 1, machine) == (1, "machine")


def test_no_tpu_is_still_a_cpu(monkeypatch):
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [])
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    info = device.describe_device()
    assert info["kind"] == "CPU" and info["count"] == 1


def test_advice_on_a_tpu_never_calls_bfloat16_slow(monkeypatch):
    machine = fake_tpus(monkeypatch, 4, {}, "v4-8")
    assert advice.hardware_advice("mixed_bfloat16", machine, {"conv": 64}, 1024) == []
    (line,) = advice.hardware_advice("mixed_float16", machine, {"conv": 64}, 1024)
    assert "use mixed_bfloat16" in line and "slower" not in line


def test_gpu_peak_memory_counts_every_gpu_and_resets_all(monkeypatch):
    gpus = [tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(2)]
    monkeypatch.setattr(
        tf.config, "list_physical_devices", lambda kind=None: gpus if kind == "GPU" else []
    )
    peaks, reset = {"GPU:0": 3 << 20, "GPU:1": 5 << 20}, []
    monkeypatch.setattr(
        tf.config.experimental, "get_memory_info", lambda name: {"current": 0, "peak": peaks[name]}
    )
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", reset.append)
    assert device.peak_memory_bytes() == 8 << 20
    device.reset_peak_memory()
    assert reset == ["GPU:0", "GPU:1"]
