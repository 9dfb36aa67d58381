"""The shipped price table (acgan/measure/gpu_prices.json) and how a device name picks an entry from it.

Matching rule (`match_accelerator`), applied to an accelerator name such as TensorFlow reports it
("Tesla T4", "NVIDIA A100-SXM4-40GB", "TPU v4") or as given with --device_name ("T4", "A100-40GB"):

1. Upper-case the name and split it into tokens on spaces, hyphens, underscores, slashes,
   parentheses and commas. Vendor words (NVIDIA, TESLA, GEFORCE, QUADRO) carry no meaning.
2. TPUs: a name with a token "TPU" names the entry of its version (`tpu_version`: "v4", "v5e",
   "v5 lite", "v5litepod"): "TPU-v4" / "TPU-v5e" / "TPU-v5p" ("TPU v5") / "TPU-v6e" ("TPU v6 lite").
3. Otherwise an entry "MODEL" or "MODEL-MEMORY" (e.g. "T4", "A100-40GB") matches when MODEL is one
   of the tokens, whole: "L4" matches "NVIDIA L4" but not "NVIDIA L40S". When several entries share
   the model and differ in memory, a memory token in the name (e.g. "80GB") picks one; a name
   without one gets the first listed (so a bare "A100" is priced as the A100-40GB).
4. No match: no price. The report then says so and asks for --price_per_hour.

Of the matched accelerator's entries, a 'vm' entry (a typical one-accelerator machine, host
included: what a user actually pays) is preferred over a 'gpu_only' one; among equals the first
listed wins (GCP, where the original experiment ran, is listed first).
"""

import json
import math
import re
from importlib import resources

VENDOR_WORDS = {"NVIDIA", "TESLA", "GEFORCE", "QUADRO"}
KIND_PREFERENCE = ("vm", "gpu_only")
# TPU version spellings that name another version's entry; JAX names a v5p "TPU v5" and a v6e "TPU v6 lite".
_TPU_VERSION_NAMES = {"v5": "v5p", "v5lite": "v5e", "v5litepod": "v5e", "v6lite": "v6e"}


def load_table():
    """The parsed gpu_prices.json shipped with the package: {"about", "sources", "prices": [...]}."""
    return json.loads(resources.files("acgan.measure").joinpath("gpu_prices.json").read_text())


def tpu_version(text):
    """ "TPU v4" / "v4-8" / "v5litepod-8" / "TPU v5 lite" / "TPU v5" -> "v4" / "v4" / "v5e" / "v5e" / "v5p";
    None if no version."""
    match = re.search(r"v(\d)\s*(p|e|lite(?:pod)?)?", (text or "").lower().replace("tpu", " "))
    if not match:
        return None
    version = "v" + match.group(1) + (match.group(2) or "").replace(" ", "")
    return _TPU_VERSION_NAMES.get(version, version)


def _split_entry(accelerator):
    """ "A100-40GB" -> ("A100", "40GB"); "T4" -> ("T4", None)."""
    model, _, memory = accelerator.upper().partition("-")
    return model, (memory or None)


def match_accelerator(name, table=None):
    """The table's accelerator name for a device name (see the module docstring), or None."""
    if not name:
        return None
    table = table or load_table()
    accelerators = list(dict.fromkeys(p["accelerator"] for p in table["prices"]))
    tokens = [t for t in re.split(r"[\s\-_/(),]+", name.upper()) if t and t not in VENDOR_WORDS]
    if "TPU" in tokens:
        wanted = tpu_version(name)
        return f"TPU-{wanted}" if wanted and f"TPU-{wanted}" in accelerators else None
    # "80G" is the entries' "80GB"
    memories = {t if t.endswith("B") else t + "B" for t in tokens if re.fullmatch(r"\d+GB?", t)}
    candidates = [
        a for a in accelerators if not a.startswith("TPU") and _split_entry(a)[0] in tokens
    ]
    if not candidates:
        return None
    for accelerator in candidates:
        if _split_entry(accelerator)[1] in memories:
            return accelerator
    return candidates[0]


def choose_price(device_name, device_kind=None, price_per_hour=None):
    """The price a report uses, as a dict that says where it came from.

    usd_per_hour is None when neither --price_per_hour nor the table gives one; `message` is then the
    line to print. `description` is always a one-line account of the choice.
    """
    if price_per_hour is not None:
        return {
            "usd_per_hour": float(price_per_hour),
            "accelerator": None,
            "provider": None,
            "kind": None,
            "machine": None,
            "source": "--price_per_hour",
            "source_text": "given on the command line",
            "alternatives": [],
            "message": None,
            "description": f"${float(price_per_hour):g}/h, given with --price_per_hour",
        }
    table = load_table()
    accelerator = match_accelerator(device_name, table)
    entries = [p for p in table["prices"] if p["accelerator"] == accelerator]
    if not entries:
        what = f"{device_kind} {device_name!r}" if device_kind else f"device {device_name!r}"
        message = f"no price known for {what}; pass --price_per_hour"
        return {
            "usd_per_hour": None,
            "accelerator": None,
            "provider": None,
            "kind": None,
            "machine": None,
            "source": None,
            "source_text": None,
            "alternatives": [],
            "message": message,
            "description": message,
        }
    entries.sort(
        key=lambda p: KIND_PREFERENCE.index(p["kind"]) if p["kind"] in KIND_PREFERENCE else 99
    )
    chosen, others = entries[0], entries[1:]
    source_text = table["sources"].get(chosen["source"], chosen["source"])
    return {
        "usd_per_hour": chosen["usd_per_hour"],
        "accelerator": accelerator,
        "provider": chosen["provider"],
        "kind": chosen["kind"],
        "machine": chosen.get("machine"),
        "source": chosen["source"],
        "source_text": source_text,
        "confidence": chosen.get("confidence"),
        "alternatives": [f"{_offer(p)} ${p['usd_per_hour']:g}/h" for p in others],
        "message": None,
        "description": (
            f"${chosen['usd_per_hour']:g}/h: {device_name!r} matched price entry {accelerator}, "
            f"{_offer(chosen)}, on-demand list price; "
            f"source {chosen['source']}: {source_text}"
        ),
    }


def priced_units(price, replicas, workers=1, machine=None):
    """(how many times, "machine", "accelerator" or "chip"): what a choose_price() price is paid for.

    --price_per_hour is one machine's price, so a run pays it once per worker; a table price is one
    accelerator's (or TPU chip's: `accelerators`), paid once per accelerator the replicas run on.
    """
    if price["source"] == "--price_per_hour":
        return workers, "machine"
    return accelerators(replicas, machine)


def accelerators(replicas, machine=None):
    """(how many, "accelerator" or "chip"): what `replicas` run on, as table prices and peaks count them:
    one accelerator each, except on a TPU (machine: describe_device()'s dict), whose prices and peaks are
    per chip and whose replicas are TensorCores: ceil(replicas / replicas_per_chip) chips."""
    if machine and machine.get("kind") == "TPU":
        per_chip = machine.get("replicas_per_chip") or 1
        return max(1, math.ceil(replicas / per_chip - 1e-9)), "chip"
    return replicas, "accelerator"


def _offer(entry):
    """ "gcp vm (n1-standard-4 + 1xT4)": who sells a table entry, how, and as which machine."""
    machine = f" ({entry['machine']})" if entry.get("machine") else ""
    return f"{entry['provider']} {entry['kind']}{machine}"
