"""The price table, how device names pick an entry, the no-price message and the cost arithmetic."""

import pytest

from acgan.measure import prices, timing


def test_cost_per_million_batches_is_exact():
    # 0.7 s per batch at $0.35/h: 0.7 * 10^6 / 3600 * 0.35 = $68.06.
    cost = timing.cost_per_million_batches(0.7, 0.35)
    assert cost == pytest.approx(0.7e6 / 3600 * 0.35, rel=1e-12)
    assert f"{cost:.2f}" == "68.06"


@pytest.mark.parametrize(
    "name, entry",
    [
        ("Tesla T4", "T4"),
        ("T4", "T4"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("A100", "A100-40GB"),  # no memory in the name: the first listed
        ("a100-80gb", "A100-80GB"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla P100-PCIE-16GB", "P100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),  # whole tokens only: L4 is not L40S
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("TPU v4", "TPU-v4"),
        ("TPU-v2", "TPU-v2"),
        ("TPU v5 lite", "TPU-v5e"),
        ("TPU v6e", "TPU-v6e"),
        ("TPU v6 lite", "TPU-v6e"),  # as JAX names them
        ("TPU v5", "TPU-v5p"),
        ("TPU v7", None),  # no price entry
        ("AMD EPYC", None),
        ("", None),
    ],
)
def test_match_accelerator(name, entry):
    assert prices.match_accelerator(name) == entry


@pytest.mark.parametrize(
    "text, version",
    [
        ("TPU v4", "v4"),
        ("v4-8", "v4"),
        ("v5litepod-16", "v5e"),
        ("TPU v5 lite", "v5e"),
        ("TPU v5e", "v5e"),
        ("v5p-8", "v5p"),
        ("TPU v5", "v5p"),  # as JAX names a v5p
        ("TPU v6e", "v6e"),
        ("TPU", None),
        (None, None),
    ],
)
def test_tpu_version(text, version):
    assert prices.tpu_version(text) == version


def test_vm_entry_is_preferred_and_named():
    price = prices.choose_price("Tesla T4", "GPU")
    assert (price["accelerator"], price["provider"], price["kind"], price["usd_per_hour"]) == (
        "T4",
        "gcp",
        "vm",
        0.54,
    )
    assert price["source"] == "gcp-vm-sum" and "n1-standard-4" in price["source_text"]
    assert (
        "T4" in price["description"]
        and "gcp vm" in price["description"]
        and "gcp-vm-sum" in price["description"]
    )
    assert any("0.35" in a for a in price["alternatives"])  # the GPU-only entry is mentioned
    # Only gpu_only entries: that one is used, and said to be.
    price = prices.choose_price("TPU v4")
    assert (price["kind"], price["usd_per_hour"]) == ("gpu_only", 3.22)


def test_price_override_and_no_price():
    given = prices.choose_price("AMD EPYC", "CPU", price_per_hour=1.5)
    assert given["usd_per_hour"] == 1.5 and given["source"] == "--price_per_hour"
    missing = prices.choose_price("AMD EPYC", "CPU")
    assert missing["usd_per_hour"] is None
    assert missing["message"] == "no price known for CPU 'AMD EPYC'; pass --price_per_hour"
    assert (
        prices.choose_price("my box")["message"]
        == "no price known for device 'my box'; pass --price_per_hour"
    )


def test_shipped_table_names_its_sources():
    table = prices.load_table()
    assert table["prices"] and "about" in table
    for entry in table["prices"]:
        assert entry["source"] in table["sources"], entry
        assert entry["kind"] in prices.KIND_PREFERENCE and entry["usd_per_hour"] > 0
