"""The benchmark sweep: policies x batch sizes x XLA settings, each configuration in a fresh worker process.

A worker (`python -m acgan.sweep JOB.json RESULT.json`, started by `run_sweep`) times the bare compiled
AC-GAN step on device-resident tensors: compile, `warmup` steps, then `repeats` timings of `steps`
steps each, every timing between two device syncs (converting the step's scalars to Python floats).
A fresh process per configuration isolates its peak memory, its global dtype policy and any crash.

Fault injection, for tests only: ACGAN_SWEEP_INJECT="oom:16,kill:32" makes the worker for batch 16
raise tf.errors.ResourceExhaustedError once its models are built, and the one for batch 32 kill
itself with SIGKILL (as the kernel's out-of-memory killer would).
"""
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

from acgan import prices, timing
from acgan.config import POLICIES, validate_policy
from acgan.errors import UserError
from acgan.files import write_json

FORMAT = "acgan-benchmark/1"
INJECT_VARIABLE = "ACGAN_SWEEP_INJECT"
SYNTHETIC_SHAPE = (28, 28, 1)   # the doodles / Quick-Draw shape, so synthetic timings compare
SYNTHETIC_CLASSES = 10
OVERHEAD_DIR = "overhead-trainer"
BUSY_LOAD = 1.5   # load average per core above which the report warns that others shared the CPU


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    policies: tuple = POLICIES
    batches: tuple = (64, 256, 1024, 2048)
    jits: tuple = (True,)
    dataset: str = "doodles"
    synthetic: bool = False         # random uint8 tensors instead of --dataset
    data_dir: str = "data"
    max_per_class: Optional[int] = None
    width: float = 1.0
    steps: int = 20                 # steps per timing
    warmup: int = 3                 # steps after the compiled first step, left out
    repeats: int = 3                # timings per configuration (median, min, max reported)
    seed: int = 0
    device_name: Optional[str] = None     # labels the device and picks the price entry
    price_per_hour: Optional[float] = None
    overhead: bool = True           # also time the full training loop at one configuration
    overhead_batch: int = 256

    def validate(self):
        """Raises UserError on the first bad setting; imports nothing heavy."""
        if not self.policies:
            raise UserError("--policies is empty: give one or more of " + ", ".join(POLICIES))
        for policy in self.policies:
            validate_policy(policy)
        if not self.batches:
            raise UserError("--batches is empty: give one or more positive integers")
        if not self.jits:
            raise UserError("--jit is empty: give on, off or on,off")
        for name in ("steps", "repeats", "overhead_batch") + (("max_per_class",) if self.max_per_class is not None else ()):
            _positive_int(name, getattr(self, name))
        for batch in self.batches:
            _positive_int("batches", batch)
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise UserError(f"--warmup must be a non-negative integer, got {self.warmup!r}")
        if not self.width > 0:
            raise UserError(f"--width must be a positive number, got {self.width!r}")
        if self.price_per_hour is not None and not self.price_per_hour > 0:
            raise UserError(f"--price_per_hour must be a positive number, got {self.price_per_hour!r}")
        return self

    def configurations(self):
        """(policy, batch, jit) in the order they run: per XLA setting, per batch, per policy."""
        return [(p, b, j) for j in self.jits for b in self.batches for p in self.policies]


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"--{name} must be a positive integer, got {value!r}")


def parse_batches(values):
    """["64", "256"] -> (64, 256); one clear error for anything else."""
    batches = []
    for v in values:
        try:
            batch = int(v)
        except ValueError:
            raise UserError(f"--batches must be positive integers, got {v!r}") from None
        if batch <= 0:
            raise UserError(f"--batches must be positive integers, got {v!r}")
        batches.append(batch)
    return tuple(dict.fromkeys(batches))


def parse_jit(values):
    """["on", "off"] -> (True, False)."""
    known = {"on": True, "off": False}
    for v in values:
        if v.lower() not in known:
            raise UserError(f"--jit takes on, off or on,off, got {v!r}")
    return tuple(dict.fromkeys(known[v.lower()] for v in values))


def default_output_dir(now=None):
    return Path("outputs") / f"benchmark-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}"


def prepare_output_dir(path):
    """The output folder, created; refuses a file or a folder that already holds a benchmark."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"--output_dir {path} is a file, not a folder")
    if (path / "benchmark.json").exists():
        raise UserError(f"{path} already holds a benchmark; choose another --output_dir")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create output folder {path}: {e.strerror}") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"cannot write to output folder {path}")
    return path


# ---------------------------------------------------------------------------------------------------
# The sweep (parent process)


def load_inputs(settings, count):
    """(images uint8 [count, H, W, C], labels int32 [count], class names): the tensors every worker times."""
    import numpy as np

    rng = np.random.default_rng(settings.seed)
    if settings.synthetic:
        images = rng.integers(0, 256, (count,) + SYNTHETIC_SHAPE, dtype=np.uint8)
        labels = rng.integers(0, SYNTHETIC_CLASSES, count).astype(np.int32)
        return images, labels, tuple(f"class{i}" for i in range(SYNTHETIC_CLASSES))
    from acgan import data as data_lib
    from acgan.models import check_image_shape

    data = data_lib.load_dataset(
        settings.dataset, split="train", data_dir=settings.data_dir,
        max_per_class=settings.max_per_class, seed=settings.seed,
    )
    check_image_shape(data.image_shape)
    # Fewer images than the batch: draw with replacement (the bare step's speed does not care).
    idx = rng.choice(len(data.images), size=count, replace=len(data.images) < count)
    return data.images[idx], data.labels[idx], tuple(data.class_names)


def _hide_accelerators_here():
    """Keeps this (parent) process off the GPU, so the workers get all of its memory."""
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except (RuntimeError, ValueError):  # runtime already started (e.g. inside a test process)
        pass


def widths_and_advice(settings, machine, image_shape, num_classes):
    """Per policy: the low-precision layer widths of the models it builds, and the hardware advice."""
    import keras

    from acgan import advice, precision
    from acgan.models import build_models

    previous = keras.mixed_precision.global_policy().name
    widths, lines = {}, {}
    try:
        for policy in settings.policies:
            widths[policy] = {}
            if policy != "float32":
                precision.set_policy(policy)
                widths[policy] = advice.layer_widths(list(build_models(image_shape, num_classes, settings.width)))
                keras.backend.clear_session()
            batches = [b for b in settings.batches if b % 8] or [None]
            lines[policy] = []
            for batch in batches:
                for line in advice.hardware_advice(policy, machine, widths[policy], batch):
                    if line not in lines[policy]:
                        lines[policy].append(line)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    return widths, lines


def run_sweep(settings, output_dir=None, command=None, echo=print):
    """Runs the whole benchmark into `output_dir` and returns (output folder, the benchmark document)."""
    settings.validate()
    count = max(settings.batches + ((settings.overhead_batch,) if settings.overhead else ()))
    # Synthetic inputs double as the trainer's npz dataset, whose train split is 90% of it.
    images, labels, class_names = load_inputs(settings, 2 * count if settings.synthetic else count)
    output_dir = prepare_output_dir(output_dir or default_output_dir())

    import keras
    import numpy as np

    from acgan import device

    machine = device.describe_device()
    _hide_accelerators_here()
    label = settings.device_name or machine["name"]
    price = prices.choose_price(label, None if settings.device_name else machine["kind"], settings.price_per_hour)
    image_shape, num_classes = tuple(images.shape[1:]), len(class_names)
    widths, advice_lines = widths_and_advice(settings, machine, image_shape, num_classes)
    run = {
        "device": label,
        "machine": machine,
        "command": command,
        "created": datetime.now().isoformat(timespec="seconds"),
        "settings": dataclasses.asdict(settings),
        "inputs": {"image_shape": list(image_shape), "num_classes": num_classes,
                   "source": "synthetic" if settings.synthetic else settings.dataset},
        "price": price,
        "advice": advice_lines,
        "layer_widths": widths,
        "overhead": None,
    }
    echo(f"device: {_describe_machine(label, machine)}")
    echo(f"price: {price['description']}")
    for policy, lines in advice_lines.items():
        for line in lines:
            echo(f"advice ({policy}): {line}")

    configurations = settings.configurations()
    echo(f"{len(configurations)} configurations, each in a fresh process; logs in {output_dir / 'logs'}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="acgan-sweep-") as work:
        inputs = Path(work) / "inputs.npz"
        np.savez(inputs, images=images, labels=labels, class_names=np.array(class_names))
        progress = keras.utils.Progbar(len(configurations), unit_name="configuration",
                                       stateful_metrics=["ms_per_batch"])
        for i, (policy, batch, jit) in enumerate(configurations):
            job = _job(settings, policy, batch, jit, inputs, num_classes)
            result = run_worker(job, Path(work), output_dir / "logs" / f"{_config_name(policy, batch, jit)}.log")
            rows.append(make_row(run, policy, batch, jit, result))
            shown = [("ms_per_batch", result["time_per_batch_ms"])] if result["status"] == "ok" else []
            progress.update(i + 1, shown)
        if settings.overhead:
            run["overhead"] = measure_overhead(settings, run, rows, inputs, num_classes, Path(work), output_dir, echo)
    add_speedups(rows)
    doc = {"format": FORMAT, "command": command, "created": run["created"], "runs": [run], "results": rows}
    return output_dir, doc


def _job(settings, policy, batch, jit, inputs, num_classes, mode="bare"):
    return {
        "mode": mode, "policy": policy, "batch": batch, "jit": jit, "width": settings.width,
        "steps": settings.steps, "warmup": settings.warmup, "repeats": settings.repeats,
        "seed": settings.seed, "inputs": str(inputs), "num_classes": num_classes,
    }


def _config_name(policy, batch, jit):
    return f"{policy}-b{batch}-xla_{'on' if jit else 'off'}"


def run_worker(job, work_dir, log_path):
    """Runs one job in a fresh Python process; a dead worker becomes status 'failed' with its reason."""
    name = f"{job['mode']}-{_config_name(job['policy'], job['batch'], job['jit'])}"
    job_path, result_path = work_dir / f"{name}.job.json", work_dir / f"{name}.result.json"
    job_path.write_text(json.dumps(job))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    package_root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    started = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.run(
            [sys.executable, "-m", "acgan.sweep", str(job_path), str(result_path)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
    if result_path.exists():
        result = json.loads(result_path.read_text())
    else:
        if proc.returncode < 0:
            how = f"worker killed by {signal.Signals(-proc.returncode).name}"
            if proc.returncode == -signal.SIGKILL:
                how += " (the out-of-memory killer sends this)"
        else:
            how = f"worker exited with status {proc.returncode}"
        last = _last_line(log_path)
        result = {"status": "failed", "reason": f"{how}{': ' + last if last else ''}"}
    result["worker_seconds"] = time.perf_counter() - started
    result["log"] = str(log_path)
    return result


def _last_line(path):
    try:
        lines = [l.strip() for l in Path(path).read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return _one_line(lines[-1]) if lines else ""


def _one_line(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def make_row(run, policy, batch, jit, result):
    """One results row: the configuration, the machine, the measurement and what follows from it."""
    machine, price = run["machine"], run["price"]
    row = {
        "device": run["device"],
        "machine": machine,
        "command": run["command"],
        "policy": policy,
        "batch": batch,
        "jit": jit,
        "status": result["status"],
        "reason": result.get("reason"),
        "compile_seconds": result.get("compile_seconds"),
        "time_per_batch_ms": result.get("time_per_batch_ms"),      # median over repeats
        "time_per_batch_min_ms": result.get("time_per_batch_min_ms"),
        "time_per_batch_max_ms": result.get("time_per_batch_max_ms"),
        "repeat_ms": result.get("repeat_ms"),
        "time_per_1000_samples_ms": None,
        "samples_per_second": None,
        "peak_memory_bytes": result.get("peak_memory_bytes"),
        "baseline_memory_bytes": result.get("baseline_memory_bytes"),
        "memory_counter": result.get("memory_counter"),
        "skipped_steps": result.get("skipped_steps"),
        "loss_scale": result.get("loss_scale"),
        "steps_run": result.get("steps_run"),
        "load_average": result.get("load_average"),
        "speedup_vs_float32": None,
        "price_per_hour": price["usd_per_hour"],
        "price_entry": price["accelerator"] or price["source"],
        "cost_per_million_batches": None,
        "worker_seconds": result.get("worker_seconds"),
        "log": result.get("log"),
    }
    ms = row["time_per_batch_ms"]
    if row["status"] == "ok" and ms:
        row["time_per_1000_samples_ms"] = ms * 1000.0 / batch
        row["samples_per_second"] = batch / (ms / 1e3)
        if price["usd_per_hour"] is not None:
            row["cost_per_million_batches"] = timing.cost_per_million_batches(ms / 1e3, price["usd_per_hour"])
    return row


def add_speedups(rows):
    """speedup_vs_float32 = float32's time per batch / this policy's, same device, XLA setting and batch."""
    float32 = {
        (r["device"], r["jit"], r["batch"]): r["time_per_batch_ms"]
        for r in rows if r["policy"] == "float32" and r["status"] == "ok"
    }
    for r in rows:
        base = float32.get((r["device"], r["jit"], r["batch"]))
        ok = r["status"] == "ok" and r["policy"] != "float32" and base and r["time_per_batch_ms"]
        r["speedup_vs_float32"] = base / r["time_per_batch_ms"] if ok else None
    return rows


def measure_overhead(settings, run, rows, inputs, num_classes, work_dir, output_dir, echo=print):
    """The full training loop (trainer.run, real input pipeline) against the bare step, one configuration."""
    policy, batch = settings.policies[0], settings.overhead_batch
    jit = True if True in settings.jits else settings.jits[0]
    echo(f"trainer overhead: {policy}, batch {batch}, XLA {'on' if jit else 'off'}")
    bare = next((r for r in rows if (r["policy"], r["batch"], r["jit"]) == (policy, batch, jit)), None)
    if bare is None:
        job = _job(settings, policy, batch, jit, inputs, num_classes)
        bare = make_row(run, policy, batch, jit,
                        run_worker(job, work_dir, output_dir / "logs" / f"overhead-bare-{_config_name(policy, batch, jit)}.log"))
    job = _job(settings, policy, batch, jit, inputs, num_classes, mode="trainer")
    job.update(
        dataset=f"npz:{inputs}" if settings.synthetic else settings.dataset,
        data_dir=settings.data_dir, max_per_class=settings.max_per_class,
        output_dir=str(output_dir / OVERHEAD_DIR), price_per_hour=run["price"]["usd_per_hour"],
        command=run["command"],
    )
    loop = run_worker(job, work_dir, output_dir / "logs" / f"overhead-trainer-{_config_name(policy, batch, jit)}.log")
    out = {
        "policy": policy, "batch": batch, "jit": jit,
        "status": "ok" if loop["status"] == "ok" and bare["status"] == "ok" else "failed",
        "reason": None,
        "trainer_time_per_batch_ms": loop.get("time_per_batch_ms"),
        "trainer_time_per_batch_median_ms": loop.get("time_per_batch_median_ms"),
        "trainer_measured_steps": loop.get("measured_steps"),
        "trainer_loop_seconds": loop.get("loop_seconds"),
        "trainer_steps": loop.get("steps"),
        "trainer_run_dir": loop.get("run_dir"),
        "bare_time_per_batch_ms": bare["time_per_batch_ms"],
        "ratio": None,
    }
    if out["status"] == "ok":
        out["ratio"] = out["trainer_time_per_batch_ms"] / out["bare_time_per_batch_ms"]
    else:
        out["reason"] = loop.get("reason") if loop["status"] != "ok" else f"bare step: {bare['reason']}"
    return out


def _describe_machine(label, machine):
    if machine.get("kind") == "GPU":
        what = f"GPU {machine.get('name')} (compute capability {machine.get('compute_capability')})"
    else:
        flags = ", ".join(machine.get("cpu_flags") or []) or "none of interest"
        what = f"CPU {machine.get('cpu_model')} ({machine.get('cpu_cores')} cores; flags: {flags})"
    named = f"{label}: " if label != machine.get("name") else ""
    return f"{named}{what}; TensorFlow {machine.get('tensorflow')}, Keras {machine.get('keras')}"


# ---------------------------------------------------------------------------------------------------
# Merging benchmark.json files from several machines


def load_benchmark(path):
    """A benchmark.json as a dict; UserError for a missing, unreadable or foreign file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"benchmark file {path} does not exist")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not a valid benchmark.json ({type(e).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("results"), list):
        raise UserError(f"{path} is not a benchmark.json written by python -m acgan.benchmark (format {FORMAT})")
    return doc


def merge(docs, sources=None, command=None):
    """One document holding the runs and rows of several; a device label seen in two files gets ' (2)'."""
    runs, rows, seen = [], [], {}
    for i, doc in enumerate(docs):
        renamed = {}
        for run in doc["runs"]:
            label = run["device"]
            if label in seen and seen[label] != i:
                n = 2
                while f"{label} ({n})" in seen:
                    n += 1
                renamed[label] = f"{label} ({n})"
            seen.setdefault(renamed.get(label, label), i)
            runs.append(dict(run, device=renamed.get(label, label),
                             source=str(sources[i]) if sources else run.get("source")))
        rows += [dict(r, device=renamed.get(r["device"], r["device"])) for r in doc["results"]]
    add_speedups(rows)
    return {"format": FORMAT, "command": command, "created": datetime.now().isoformat(timespec="seconds"),
            "runs": runs, "results": rows}


# ---------------------------------------------------------------------------------------------------
# Tables


CSV_COLUMNS = (
    "device", "kind", "accelerator", "compute_capability", "cpu_model", "cpu_flags", "cpu_cores",
    "tensorflow", "keras", "policy", "jit", "batch", "status", "reason", "compile_seconds",
    "time_per_batch_ms", "time_per_batch_min_ms", "time_per_batch_max_ms", "time_per_1000_samples_ms",
    "samples_per_second", "speedup_vs_float32", "peak_memory_bytes", "memory_counter", "load_average",
    "d_skipped", "g_skipped", "q_skipped", "price_per_hour", "price_entry", "cost_per_million_batches",
    "command",
)


def csv_rows(doc):
    """The results flattened to CSV_COLUMNS (machine fields and skipped steps spread out)."""
    out = []
    for r in doc["results"]:
        m, skipped = r.get("machine") or {}, r.get("skipped_steps") or {}
        flat = dict(r)
        flat.update(
            kind=m.get("kind"), accelerator=m.get("name"), compute_capability=m.get("compute_capability"),
            cpu_model=m.get("cpu_model"), cpu_flags=" ".join(m.get("cpu_flags") or []),
            cpu_cores=m.get("cpu_cores"), tensorflow=m.get("tensorflow"), keras=m.get("keras"),
            d_skipped=skipped.get("d"), g_skipped=skipped.get("g"), q_skipped=skipped.get("q"),
        )
        out.append({c: flat.get(c) for c in CSV_COLUMNS})
    return out


def render_csv(doc):
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in csv_rows(doc):
        # repr keeps every float exact, so the CSV holds the JSON's numbers.
        writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return buffer.getvalue()


def _f(value, digits=1, suffix=""):
    return "n/a" if value is None else f"{value:,.{digits}f}{suffix}"


def groups(rows):
    """{(device, jit): rows}, in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((r["device"], r["jit"]), []).append(r)
    return out


def _group_title(device, jit):
    return f"{device}, XLA {'on' if jit else 'off'}"


def render_markdown(doc):
    runs, rows = doc["runs"], doc["results"]
    lines = ["# Mixed-precision benchmark", ""]
    if doc.get("command"):
        lines += [f"Command: `{doc['command']}`", ""]
    lines += ["## Devices", ""]
    for run in runs:
        s = run["settings"]
        source = "synthetic uint8 tensors" if s.get("synthetic") else f"dataset {s.get('dataset')}"
        lines += [
            f"### {run['device']}",
            "",
            f"- machine: {_describe_machine(run['device'], run['machine'])}",
            f"- command: `{run.get('command')}`" + (f" (from {run['source']})" if run.get("source") else ""),
            f"- timing: bare compiled step on device-resident {source} "
            f"({'x'.join(map(str, run['inputs']['image_shape']))}, {run['inputs']['num_classes']} classes), "
            f"width {s['width']}; {s['repeats']} timings of {s['steps']} steps each after the compile step "
            f"and {s['warmup']} warm-up step{'' if s['warmup'] == 1 else 's'}, each timing ending on a device sync; median [min-max] shown",
            f"- price: {run['price']['description']}",
        ]
        loads = [r["load_average"] for r in rows if r["device"] == run["device"] and r.get("load_average") is not None]
        cores = run["machine"].get("cpu_cores") or 1
        if loads:
            busy = max(loads) > BUSY_LOAD * cores
            lines.append(
                f"- load: the 1-minute load average after the timings reached {max(loads):.1f} on {cores} cores"
                + (" — **other processes competed for the CPU: these timings are inflated and noisy**" if busy else "")
            )
        if run["price"].get("alternatives"):
            lines.append(f"- other entries for {run['price']['accelerator']}: {'; '.join(run['price']['alternatives'])}")
        for policy, advice in (run.get("advice") or {}).items():
            lines += [f"- advice ({policy}): {a}" for a in advice]
        lines.append("")

    mixed = [p for p in POLICIES[1:] if any(r["policy"] == p for r in rows)]
    if mixed and any(r["policy"] == "float32" for r in rows):
        lines += ["## Speed-up over float32", "",
                  "Time per batch under float32 divided by time per batch under the mixed policy "
                  "(above 1: mixed precision is faster).", ""]
        for (device, jit), group in groups(rows).items():
            batches = sorted({r["batch"] for r in group})
            lines += [f"### {_group_title(device, jit)}", "", "| batch | " + " | ".join(mixed) + " |",
                      "|---:|" + "---:|" * len(mixed)]
            for b in batches:
                cells = []
                for p in mixed:
                    r = next((r for r in group if r["batch"] == b and r["policy"] == p), None)
                    cells.append("—" if r is None else f"{r['speedup_vs_float32']:.2f}×"
                                 if r["speedup_vs_float32"] else r["status"] if r["status"] != "ok" else "n/a")
                lines.append(f"| {b} | " + " | ".join(cells) + " |")
            lines.append("")

    lines += ["## Results", ""]
    for (device, jit), group in groups(rows).items():
        lines += [
            f"### {_group_title(device, jit)}", "",
            "| batch | policy | ms per batch | ms per 1000 samples | samples/s | speed-up | compile s "
            "| peak memory MiB | skipped d/g/q | $ per 10^6 batches |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(group, key=lambda r: (r["batch"], POLICIES.index(r["policy"]) if r["policy"] in POLICIES else 9)):
            if r["status"] != "ok":
                lines.append(f"| {r['batch']} | {r['policy']} | **{r['status']}**: {r['reason']} |"
                             + " |" * 7)
                continue
            skipped = r.get("skipped_steps") or {}
            memory = r.get("peak_memory_bytes")
            lines.append(
                f"| {r['batch']} | {r['policy']} "
                f"| {_f(r['time_per_batch_ms'], 1)} [{_f(r['time_per_batch_min_ms'], 1)}-{_f(r['time_per_batch_max_ms'], 1)}] "
                f"| {_f(r['time_per_1000_samples_ms'], 1)} | {_f(r['samples_per_second'], 0)} "
                f"| {_f(r['speedup_vs_float32'], 2, '×') if r['speedup_vs_float32'] else '—'} "
                f"| {_f(r['compile_seconds'], 1)} | {_f(memory / 2**20 if memory else None, 0)} "
                f"| {'/'.join(str(skipped.get(k, '?')) for k in 'dgq')} "
                f"| {_f(r['cost_per_million_batches'], 2) if r['cost_per_million_batches'] is not None else 'no price'} |"
            )
        counters = {r.get("memory_counter") for r in group if r.get("memory_counter")}
        if counters:
            lines += ["", f"Peak memory: {'; '.join(sorted(counters))}."]
        lines.append("")

    overheads = [(run["device"], run["overhead"]) for run in runs if run.get("overhead")]
    if overheads:
        lines += ["## Trainer overhead", "",
                  "The full training loop (trainer.run: tf.data input pipeline, a device sync, metrics and "
                  "TensorBoard scalars every step) against the bare compiled step at the same configuration.", "",
                  "| device | policy | batch | XLA | full loop ms per batch | bare step ms per batch | ratio |",
                  "|---|---|---:|---|---:|---:|---:|"]
        for device, o in overheads:
            ratio = f"{o['ratio']:.2f}" if o["ratio"] else f"{o['status']}: {o['reason']}"
            lines.append(f"| {device} | {o['policy']} | {o['batch']} | {'on' if o['jit'] else 'off'} "
                         f"| {_f(o['trainer_time_per_batch_ms'])} | {_f(o['bare_time_per_batch_ms'])} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def write_outputs(doc, output_dir):
    """benchmark.json, benchmark.csv, benchmark.md and the three figures, each written atomically."""
    from acgan import plots
    from acgan.files import write_atomically

    output_dir = Path(output_dir)
    figures = plots.write_figures(doc, output_dir)
    write_atomically(output_dir / "benchmark.csv", render_csv(doc))
    write_atomically(output_dir / "benchmark.md", render_markdown(doc))
    # Last: a benchmark.json in a folder means the rest is there too.
    write_json(output_dir / "benchmark.json", dict(doc, figures=sorted(p.name for p in figures.values())))
    return output_dir


# ---------------------------------------------------------------------------------------------------
# The worker (child process)


def _injected(batch):
    wanted = [w.strip() for w in os.environ.get(INJECT_VARIABLE, "").split(",") if w.strip()]
    return next((kind for kind, _, b in (w.partition(":") for w in wanted) if b == str(batch)), None)


def _sync(metrics):
    """Device sync: every scalar to a Python float (waits for the whole step)."""
    return {k: float(v) for k, v in metrics.items()}


def run_bare(job):
    """Times the bare compiled step on device-resident tensors; returns the measurement."""
    import numpy as np
    import keras
    import tensorflow as tf

    from acgan import device, precision
    from acgan.gan import ACGAN
    from acgan.models import build_models

    precision.set_policy(job["policy"])
    batch = job["batch"]
    with np.load(job["inputs"]) as f:
        images, labels = f["images"][:batch], f["labels"][:batch]
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    if on_gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    baseline = device.peak_memory_bytes()
    keras.utils.set_random_seed(job["seed"])
    models = build_models(images.shape[1:], job["num_classes"], width=job["width"])
    gan = ACGAN(models, job["num_classes"], job["policy"], seed=job["seed"], jit=job["jit"])
    images, labels = tf.identity(tf.constant(images)), tf.identity(tf.constant(labels))  # onto the device
    injected = _injected(batch)
    if injected == "oom":
        raise tf.errors.ResourceExhaustedError(None, None, f"injected out-of-memory for batch {batch} ({INJECT_VARIABLE})")
    if injected == "kill":
        os.kill(os.getpid(), signal.SIGKILL)

    tick = time.perf_counter()
    _sync(gan.train_step(images, labels))
    compile_seconds = time.perf_counter() - tick
    for _ in range(job["warmup"]):
        metrics = gan.train_step(images, labels)
    if job["warmup"]:
        _sync(metrics)
    per_batch, loads = [], []
    for _ in range(job["repeats"]):
        tick = time.perf_counter()
        for _ in range(job["steps"]):
            metrics = gan.train_step(images, labels)
        values = _sync(metrics)
        per_batch.append((time.perf_counter() - tick) / job["steps"])
        loads.append(_load_average())
    return {
        "status": "ok",
        "compile_seconds": compile_seconds,
        "repeat_ms": [s * 1e3 for s in per_batch],
        "time_per_batch_ms": statistics.median(per_batch) * 1e3,
        "time_per_batch_min_ms": min(per_batch) * 1e3,
        "time_per_batch_max_ms": max(per_batch) * 1e3,
        "peak_memory_bytes": device.peak_memory_bytes(),
        "baseline_memory_bytes": None if on_gpu else baseline,
        "memory_counter": "GPU:0 allocator peak (TensorFlow)" if on_gpu
        else "process peak resident memory (ru_maxrss), TensorFlow runtime included",
        "skipped_steps": {k: int(values[f"{k}_skipped"]) for k in "dgq"},
        "loss_scale": {k: values[f"{k}_loss_scale"] for k in "dgq"},
        "steps_run": 1 + job["warmup"] + job["repeats"] * job["steps"],
        "load_average": max(loads) if None not in loads else None,
    }


def _load_average():
    """The 1-minute load average (this worker's own threads included), or None where unknown."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def run_trainer(job):
    """The full training loop through trainer.run; returns its timing."""
    from acgan import precision, trainer
    from acgan.config import Config

    steps = 1 + job["warmup"] + job["steps"]   # the compile step, the warm-up, the measured steps
    config = Config(
        dataset=job["dataset"], data_dir=job["data_dir"], max_per_class=job["max_per_class"],
        policy=job["policy"], batch=job["batch"], width=job["width"], steps=steps, jit=job["jit"],
        seed=job["seed"], sample_every=None, checkpoint_every=steps, keep_checkpoints=1,
        warmup_steps=job["warmup"], output_dir=job["output_dir"], price_per_hour=job["price_per_hour"],
    )
    try:  # no periodic grids: None in the current Config, 0 in its first version
        config.validate()
    except UserError:
        config = dataclasses.replace(config, sample_every=0)
    precision.set_policy(job["policy"])
    outcome = trainer.run(config, command=job.get("command"))
    # trainer.run returns a RunResult (run_dir, status, message, ...); its first version returned the folder.
    run_dir = Path(getattr(outcome, "run_dir", outcome))
    if getattr(outcome, "status", "completed") != "completed":
        return {"status": "failed", "run_dir": str(run_dir),
                "reason": _one_line(f"training loop {outcome.status}: {outcome.message}")}
    report = json.loads((run_dir / "report.json").read_text())
    return {
        "status": "ok",
        "run_dir": str(run_dir),
        "time_per_batch_ms": report["timing"].get("time_per_batch_ms"),
        "time_per_batch_median_ms": report["timing"].get("time_per_batch_median_ms"),
        "measured_steps": report["timing"].get("measured_steps"),
        "loop_seconds": report.get("loop_seconds"),
        "steps": report.get("steps"),
    }


def worker_main(argv):
    job_path, result_path = argv[1:3]
    job = json.loads(Path(job_path).read_text())
    try:
        result = run_trainer(job) if job["mode"] == "trainer" else run_bare(job)
    except Exception as e:  # noqa: BLE001  every failure becomes a row, never a stopped sweep
        result = {"status": _status_of(e), "reason": _one_line(f"{type(e).__name__}: {e}")}
        print(f"configuration failed: {result['reason']}", file=sys.stderr)
    write_json(result_path, result)


def _status_of(error):
    import tensorflow as tf

    if isinstance(error, tf.errors.ResourceExhaustedError):
        return "oom"
    text = str(error)
    # XLA reports device OOM as an internal error carrying the status code in its text.
    return "oom" if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() else "failed"


if __name__ == "__main__":
    worker_main(sys.argv)
