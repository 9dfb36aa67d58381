"""The layout stays readable: no import cycles between acgan modules, nor between its subsystems (the
folders under acgan/), function-level imports counted; commands on top; short modules and functions;
and no source file pointing outside the repository."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "acgan"
COMMANDS = {
    "train",
    "generate",
    "evaluate",
    "compare",
    "benchmark",
    "benchmark_merge",
    "export",
    "__main__",
}
SHARED = {"backend", "__init__", "api", "cli", "config", "errors", "presets"}
MODULE_LINES, FUNCTION_LINES = 450, 80  # a module read in one sitting, a function on one screen


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path, known):
    """Every acgan module `path` imports, at any depth; `from acgan.x import y` counts acgan.x.y when
    that is a module, else acgan.x."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("acgan"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("acgan"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return found


def import_graph():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, paths) & set(paths) - {name} for name, path in paths.items()}


def cycles_of(graph):
    """Every loop a depth-first walk of `graph` ({node: nodes it points to}) meets, as [a, b, ..., a]."""
    cycles, done = [], set()

    def visit(node, trail):
        for nxt in sorted(graph.get(node, ())):
            if nxt in trail:
                cycles.append(trail[trail.index(nxt) :] + [nxt])
            elif nxt not in done:
                visit(nxt, trail + [nxt])
        done.add(node)

    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    return cycles


def test_no_module_imports_one_that_imports_it_back():
    cycles = [" -> ".join(loop) for loop in cycles_of(import_graph())]
    assert not cycles, f"import cycles: {cycles}"


def subsystem_of(module):
    """The folder under acgan/ that holds `module` (acgan.measure.device -> measure), or None for a
    top-level module (a command or a shared one)."""
    parts = module.split(".")
    if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir():
        return parts[1]
    return None


def subsystem_graph():
    """{(subsystem, subsystem it imports): ["acgan/x/a.py imports acgan.y.b", ...]}."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges = {}
    for name, imported in import_graph().items():
        for other in sorted(imported):
            a, b = subsystem_of(name), subsystem_of(other)
            if a and b and a != b:
                where = paths[name].relative_to(PACKAGE.parent)
                edges.setdefault((a, b), []).append(f"{where} imports {other}")
    return edges


def test_no_subsystem_imports_one_that_imports_it_back():
    edges = subsystem_graph()
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    cycles = [
        "; ".join(f"{a} -> {b} ({', '.join(edges[a, b])})" for a, b in zip(loop, loop[1:]))
        for loop in cycles_of(graph)
    ]
    assert not cycles, "subsystems importing each other:\n" + "\n".join(cycles)


def test_no_subsystem_imports_a_command():
    top = COMMANDS | {"api", "cli"}
    offenders = [
        f"{name} imports {other}"
        for name, imported in import_graph().items()
        if subsystem_of(name)
        for other in imported
        if other.split(".")[-1] in top and subsystem_of(other) is None
    ]
    assert not offenders, offenders


def test_the_top_level_holds_the_commands_and_a_few_shared_modules():
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == COMMANDS | SHARED


def test_no_source_file_points_outside_the_repository():
    offenders = [
        str(p)
        for p in PACKAGE.rglob("*.py")
        if "../shared" in p.read_text() or "DESIGN.md" in p.read_text()
    ]
    assert not offenders


def test_modules_and_functions_stay_short():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES:
            offenders.append(f"{path.relative_to(PACKAGE)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > FUNCTION_LINES:
                    offenders.append(f"{path.relative_to(PACKAGE)}: {node.name}, {length} lines")
    assert not offenders, offenders
