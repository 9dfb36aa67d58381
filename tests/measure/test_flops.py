"""FLOPs per step (acgan.measure.flops): the layers' count by hand, against XLA's own count, and the peaks."""

import keras
import pytest

from acgan.measure import flops, prices
from acgan.model.transposed_conv import TransposedConv2D


def test_layer_count_is_two_flops_per_multiply_add_on_the_input():
    x = keras.Input((5, 5, 2))
    h = keras.layers.Conv2D(4, 3, padding="valid")(x)  # 5x5x2 -> 3x3x4
    h = TransposedConv2D(2, 4, strides=2, padding="same")(h)  # 3x3x4 -> 6x6x2
    h = keras.layers.Conv2D(4, 4, strides=2, padding="same")(h)  # 6x6x2 -> 3x3x4
    y = keras.layers.Dense(5)(keras.layers.Flatten()(h))  # 36 -> 5
    model = keras.Model(x, y)
    valid = 3 * 3 * 3 * 3  # 3x3 outputs, every 3x3 tap on the input
    # 6 -> 3, kernel 4, stride 2, "same": one tap of the first and the last output falls on padding, per axis
    same_taps = (3 + 4 + 3) ** 2
    expected = (
        2 * valid * 2 * 4  # Conv2D valid: taps x in x out
        + 2 * same_taps * 4 * 2  # the transposed convolution: the strided convolution's taps
        + 2 * same_taps * 2 * 4  # Conv2D same, stride 2
        + 2 * 36 * 5
    )  # Dense
    assert flops.layer_forward_flops(model) == expected


def test_peaks_follow_the_policy_and_the_device():
    h200 = {"name": "NVIDIA H200", "kind": "GPU"}
    assert flops.device_peak("NVIDIA H200", "GPU", "float32")["tflops"] == 494.7  # TF32 allowed
    assert flops.device_peak("NVIDIA H200", "GPU", "float32", "highest")["dtype"] == "fp32"
    assert flops.device_peak("NVIDIA H200", "GPU", "mixed_float16")["tflops"] == 989.4
    t4 = flops.device_peak("Tesla T4", "GPU", "float32")
    assert (t4["dtype"], t4["tflops"]) == ("fp32", 8.1)  # no TF32 on Turing
    assert flops.device_peak("Tesla T4", "GPU", "mixed_bfloat16")["tflops"] is None  # nor bfloat16
    assert flops.device_peak("AMD EPYC", "CPU", "float32")["tflops"] is None
    assert flops.device_peak("NVIDIA H201", "GPU", "float32")["tflops"] is None
    # A v3-8 is 8 replicas on 4 chips: the peak of 4 chips.
    tpu = {"name": "TPU v3", "kind": "TPU", "replicas_per_chip": 2}
    summary = flops.arithmetic_summary(1e12, "layers", 10.0, tpu, "float32", replicas=8)
    assert summary["peak_tflops"] == 4 * 123 and summary["peak_dtype"] == "bf16"
    summary = flops.arithmetic_summary(1e12, "layers", 10.0, h200, "mixed_float16")
    assert summary["tflops"] == pytest.approx(100.0) and summary["share_of_peak"] == pytest.approx(
        100 / 989.4
    )
    assert flops.describe(summary) == (
        "1,000.0 GFLOP per batch (counted from the layers), 100.00 TFLOP/s, "
        "10.1% of the 989.4 TFLOP/s fp16 peak"
    )
    assert flops.arithmetic_summary(None, None, 10.0, h200, "float32")["tflops"] is None


def test_describe_says_how_it_counted():
    summary = flops.arithmetic_summary(
        2e9, "xla", 4.0, {"name": "NVIDIA H200", "kind": "GPU"}, "mixed_bfloat16"
    )
    assert flops.describe(summary) == (
        "2.0 GFLOP per batch (XLA's count), 0.50 TFLOP/s, 0.1% of the 989.4 TFLOP/s bf16 peak"
    )
    cpu = flops.arithmetic_summary(
        2e9, "layers", 4.0, {"name": "AMD EPYC", "kind": "CPU"}, "float32"
    )
    assert flops.describe(cpu).endswith("(peak unknown for this device in fp32)")


def test_every_peak_names_its_source_and_its_device_has_a_price():
    table = flops.load_peaks()
    priced = {p["accelerator"] for p in prices.load_table()["prices"]}
    for entry in table["peaks"]:
        assert entry["source"] in table["sources"], entry
        assert entry["accelerator"] in priced, entry["accelerator"]
        values = [entry[d] for d in ("fp32", "tf32", "fp16", "bf16")]
        assert any(values) and all(v is None or v > 0 for v in values), entry
