"""Profiler traces of a few training steps, and where their device time went, as a table.

`trace(directory)` records a trace with the backend's own profiler (jax.profiler on JAX,
tf.profiler.experimental on TensorFlow) in TensorBoard's layout (plugins/profile/<run>/*.xplane.pb), so
TensorBoard's profile plugin or XProf can open it. `summarize(directory, steps, hlo_text)` reads that
trace back and writes profile.md and profile.json beside it: time per step by kind of operation, and the
top operations, so a reader needs no viewer.

What counts as device time: on a GPU or TPU, the kernels on the device's planes; on a CPU, XLA's
operations (events carrying an `hlo_op` stat: the thunks of the compiled step, summed over the threads
that ran them) or, without XLA, TensorFlow's ops. Each operation is put in one group by what it computes:
XLA's compiled HLO text (given as `hlo_text`) says an instruction's opcode, what a fusion contains and
which Keras layer or optimizer it came from (its op_name metadata); without it, the names alone decide.

Keras, JAX and TensorFlow are imported inside the functions that use them: a process loads only its own
backend's profiler, and reading GROUPS (the benchmark's page) loads none.
"""

import contextlib
import json
import re
from pathlib import Path

from acgan.util import markdown
from acgan.util.files import write_atomically

GROUPS = (
    "convolutions",
    "matrix products",
    "batch norm",
    "casts",
    "optimizer updates",
    "copies and transposes",
    "other elementwise and reductions",
)
TOP = 15


# -- recording ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def trace(directory):
    """Records a profiler trace of what runs inside the block into `directory` (made if missing)."""
    import keras

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if keras.backend.backend() == "jax":
        import jax

        start, stop = jax.profiler.start_trace, jax.profiler.stop_trace
    else:
        import tensorflow as tf

        start, stop = tf.profiler.experimental.start, tf.profiler.experimental.stop
    start(str(directory))
    try:
        yield directory
    finally:
        stop()


def parse_step_range(text):
    """ "A:B" -> (A, B): profile from step A to step B inclusive (1-based, A <= B); ValueError otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text or "")
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise ValueError(f"{text!r} is not a step range A:B with 1 <= A <= B (e.g. 10:14)")
    return int(match.group(1)), int(match.group(2))


# -- reading the trace ----------------------------------------------------------------------------------


def _events_from_jax(path):
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(path))
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                yield plane.name, line.name, event.name, event.duration_ns, dict(event.stats)


def _events_from_tensorflow(path):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    for plane in space.planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                stats = {}
                for stat in event.stats:
                    kind = stat.WhichOneof("value")
                    value = getattr(stat, kind) if kind else None
                    stats[stat_names.get(stat.metadata_id, "")] = (
                        stat_names.get(value) if kind == "ref_value" else value
                    )
                meta = plane.event_metadata.get(event.metadata_id)
                yield (
                    plane.name,
                    line.name,
                    meta.name if meta else "",
                    event.duration_ps / 1e3,
                    stats,
                )


def read_events(path):
    """[(plane, line, name, duration in ns, stats)] of every event in a trace, read with JAX's reader
    where JAX is installed, else TensorFlow's."""
    try:
        import jax.profiler  # noqa: F401

        reader = _events_from_jax
    except ImportError:
        reader = _events_from_tensorflow
    return list(reader(path))


def device_ops(events):
    """[(operation name, duration in ns, kernel or event name)] of the device's work: the GPU's or TPU's
    kernels where the trace has a device plane, else the CPU's XLA operations, else TensorFlow's ops."""
    device = [
        e for e in events if e[0].startswith("/device:") and e[3] > 0 and not e[2].startswith("$")
    ]
    # A device plane may hold summary lines beside its kernels (e.g. "XLA Modules", spanning whole programs):
    # take its "XLA Ops" line where it has one (TPUs), else the GPU's stream lines.
    lines = {e[1] for e in device}
    if "XLA Ops" in lines:
        device = [e for e in device if e[1] == "XLA Ops"]
    elif any(line.startswith("Stream") for line in lines):
        device = [e for e in device if e[1].startswith("Stream")]
    if device:
        return [
            (str(s.get("hlo_op") or s.get("tf_op") or name), ns, name)
            for _, _, name, ns, s in device
        ]
    xla = [
        (str(s["hlo_op"]), ns, name) for _, _, name, ns, s in events if s.get("hlo_op") and ns > 0
    ]
    if xla:
        return xla
    return [
        (str(s.get("tf_op") or name), ns, name)
        for _, line, name, ns, s in events
        # TensorFlow's executor names an op event "scope/name:Type" ("trunk/d_conv2/Conv2D:Conv2D").
        if ns > 0 and ("tf_op" in s or re.fullmatch(r"[\w./-]+:[A-Z]\w+", name))
    ]


# -- grouping -------------------------------------------------------------------------------------------

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*\S.*?\s([a-z][\w-]*)\(")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CUSTOM_TARGET = re.compile(r'custom_call_target="([^"]*)"')
# unindented: a computation's header
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


def hlo_index(hlo_text):
    """{instruction name: group} for every instruction of XLA's compiled HLO text (None: none)."""
    computations, current = {}, None
    for line in (hlo_text or "").splitlines():
        header = _COMPUTATION.match(line)
        if header:
            current = computations.setdefault(header.group(1), [])
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            target = _CUSTOM_TARGET.search(line)
            calls = _CALLS.search(line)
            current.append(
                {
                    "name": instruction.group(1),
                    "opcode": instruction.group(2),
                    "target": target.group(1) if target else "",
                    "op_names": _OP_NAME.findall(line),
                    "calls": calls.group(1) if calls else None,
                }
            )
    return {
        instruction["name"]: _group_of_instruction(
            instruction, computations.get(instruction["calls"], [])
        )
        for body in computations.values()
        for instruction in body
    }


def _group_of_instruction(instruction, inner):
    opcodes = {i["opcode"] for i in inner} | {instruction["opcode"]}
    targets = " ".join([instruction["target"]] + [i["target"] for i in inner]).lower()
    if "convolution" in opcodes or "conv" in targets:
        return "convolutions"
    if (
        "dot" in opcodes
        or re.search(r"gemm|matmul|cublas", targets)
        or "triton_gemm" in instruction["name"]
    ):
        return "matrix products"
    op_names = " ".join(instruction["op_names"] + [n for i in inner for n in i["op_names"]]).lower()
    if "optimizer" in op_names or "adam" in op_names:
        return "optimizer updates"
    if re.search(r"(?:^|[/(_])bn\d*(?:[)/_]|$)|batch_norm", op_names):
        return "batch norm"
    body = opcodes - {"parameter", "bitcast", "tuple", "get-tuple-element", "constant", "fusion"}
    if body and body <= {"convert"}:
        return "casts"
    if body and body <= {
        "copy",
        "transpose",
        "convert",
        "reshape",
        "broadcast",
        "slice",
        "concatenate",
        "dynamic-slice",
        "dynamic-update-slice",
        "copy-start",
        "copy-done",
        "pad",
        "reverse",
    }:
        return "copies and transposes"
    return group_of_name(instruction["name"] + " " + op_names)


# The first pattern an operation's lower-cased name matches decides its group (order matters: a cuDNN
# convolution's kernel is named "..._implicit_gemm", and TensorFlow's "g_bn1/Cast:Cast" counts as batch norm).
NAME_PATTERNS = (
    ("convolutions", r"conv|cudnn|xmma_(fprop|dgrad|wgrad)|implicit_gemm|winograd|fft"),
    ("matrix products", r"gemm|matmul|dot|cublas|cutlass|sm\d+_xmma"),
    ("optimizer updates", r"optimizer|adam|apply_?gradient|resourceapply"),
    ("batch norm", r"batch_?norm|fusedbatchnorm|(?:^|[/(_])bn\d*(?:[)/_:]|$)"),
    ("casts", r"convert|cast"),
    ("copies and transposes", r"copy|transpose|memcpy|memset|broadcast|concat|slice|pad|reshape"),
)


def group_of_name(name):
    """The group an operation falls in by its name alone (a kernel, an HLO instruction or a TF op)."""
    lowered = name.lower()
    return next(
        (group for group, pattern in NAME_PATTERNS if re.search(pattern, lowered)),
        "other elementwise and reductions",
    )


# -- the summary ----------------------------------------------------------------------------------------


def summarize(directory, steps, hlo_text=None, title=None):
    """Writes profile.json and profile.md beside the trace in `directory`; returns the summary dict.

    `steps`: how many steps the trace holds (times are per step); `hlo_text`: the compiled step's HLO
    text, for exact groups (JAX: compiled.as_text(); None where there is none)."""
    directory = Path(directory)
    traces = sorted(
        directory.glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime
    )
    if not traces:
        raise FileNotFoundError(f"no profiler trace (*.xplane.pb) under {directory}")
    path = traces[-1]  # the newest
    index = hlo_index(hlo_text)
    # XLA's GPU kernels are named after their instruction ("loop_add_fusion.3" -> "loop_add_fusion_3"):
    # inside a command buffer (one hlo_op for many kernels) the kernel's name says which instruction it is.
    by_kernel = {re.sub(r"[.\-]", "_", name): name for name in index}
    ops = {}
    events = read_events(path)
    for op, ns, kernel in device_ops(events):
        if op not in index and kernel in by_kernel:
            op = by_kernel[kernel]
        entry = ops.setdefault(op, {"name": op, "ns": 0.0, "count": 0, "kernel": kernel})
        entry["ns"] += ns
        entry["count"] += 1
    total = sum(o["ns"] for o in ops.values())
    groups = {g: 0.0 for g in GROUPS}
    for o in ops.values():
        o["group"] = index.get(o["name"]) or group_of_name(o["name"] + " " + o["kernel"])
        groups[o["group"]] += o["ns"]
    per_step = max(1, int(steps))
    summary = {
        "trace": str(path.relative_to(directory)),
        "title": title,
        "steps": per_step,
        "grouped_by": "XLA's compiled HLO (opcodes, fusions, op_name metadata)"
        if index
        else "operation names",
        "device_ms_per_step": total / 1e6 / per_step,
        "groups": [
            {"group": g, "ms_per_step": ns / 1e6 / per_step, "share": ns / total if total else None}
            for g, ns in sorted(groups.items(), key=lambda kv: -kv[1])
        ],
        "top": [
            {
                "name": o["name"],
                "group": o["group"],
                "ms_per_step": o["ns"] / 1e6 / per_step,
                "calls_per_step": o["count"] / per_step,
                "share": o["ns"] / total if total else None,
                "kernel": o["kernel"],
            }
            for o in sorted(ops.values(), key=lambda o: -o["ns"])[:TOP]
        ],
        "operations": len(ops),
        # What the trace held, for a reader checking what was counted: per plane and line, events and stats.
        "planes": _plane_lines(events),
    }
    if hlo_text:  # what the groups were read from, for a reader who wants the layouts and fusions
        write_atomically(directory / "hlo.txt", hlo_text)
    write_atomically(directory / "profile.json", json.dumps(summary, indent=2) + "\n")
    write_atomically(directory / "profile.md", render_markdown(summary))
    return summary


def _plane_lines(events):
    out = {}
    for plane, line, _, _, stats in events:
        entry = out.setdefault(f"{plane} / {line}", {"events": 0, "stats": set()})
        entry["events"] += 1
        entry["stats"].update(stats)
    return {k: {"events": v["events"], "stats": sorted(v["stats"])[:20]} for k, v in out.items()}


def render_markdown(summary):
    lines = [
        f"# Where the device time goes{': ' + summary['title'] if summary.get('title') else ''}",
        "",
        f"Trace: `{summary['trace']}` ({summary['steps']} steps; open it with TensorBoard's profile plugin). "
        f"Device time per step: {summary['device_ms_per_step']:,.2f} ms over {summary['operations']} operations, "
        f"grouped by {summary['grouped_by']}. On a CPU the time is summed over the threads that ran it.",
        "",
    ]
    lines += markdown.table(
        ("group", "ms per step", "share"),
        [
            (g["group"], f"{g['ms_per_step']:,.3f}", _share(g["share"]))
            for g in summary["groups"]
            if g["ms_per_step"] > 0
        ],
        align="lrr",
    )
    lines += ["", f"Top {len(summary['top'])} operations:", ""]
    lines += markdown.table(
        ("operation", "group", "ms per step", "calls per step", "share"),
        [
            (
                f"`{o['name']}`",
                o["group"],
                f"{o['ms_per_step']:,.3f}",
                f"{o['calls_per_step']:g}",
                _share(o["share"]),
            )
            for o in summary["top"]
        ],
        align="llrrr",
    )
    return "\n".join(lines) + "\n"


def _share(value):
    return "n/a" if value is None else f"{value:.1%}"


class StepWindow:
    """The training loop's --profile_steps A:B: a trace from before step A to after step B (or to the end
    of a shorter session), then its summary, all in `directory`. Steps run in windows (the bare-step
    window) may carry it a few steps past B; the summary counts the steps it really holds."""

    def __init__(self, step_range, directory, title, hlo_text):
        self.first, self.last = parse_step_range(step_range)
        self.directory = Path(directory)
        self.title = title
        # the step's compiled_hlo: a callable giving its HLO text (None where it has none)
        self.hlo_text = hlo_text
        self._trace = None
        self._started_at = None
        self.summary = None

    def before(self, step):
        """Called before the loop runs the step after `step`; starts the trace when that one is due."""
        if self._trace is None and self.summary is None and self.first <= step + 1 <= self.last:
            self._trace = trace(self.directory)
            self._trace.__enter__()
            self._started_at = step

    def after(self, step, sync, final=False):
        """Called after `step` ran; `sync()` waits for the device. Stops and summarizes once the trace
        holds step B (or the session is ending)."""
        if self._trace is None or (step < self.last and not final):
            return None
        sync()
        self._trace.__exit__(None, None, None)
        self._trace = None
        self.summary = summarize(
            self.directory,
            step - self._started_at,
            self.hlo_text(),
            title=self.title,
        )
        return self.summary
