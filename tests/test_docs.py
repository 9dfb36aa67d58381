"""The docs stay true to the code: in README.md and docs/*.md every relative link and anchor resolves,
every `--flag` shown with a command is a flag of that command, every default stated for a flag is its
default, every acgan.X(...) shown takes the arguments it is shown with (a heading's signature: its names
and defaults), and docs/api.md names every parameter of each call.

A flag belongs to a command when it follows the command in a code line or code span (`python -m acgan.X
... --flag`, `acgan X --flag`, `acgan.X --flag`), or when it opens a code span in a table row, a heading
or a "Flags:" paragraph of a section whose heading (or a parent heading) names the command."""

import ast
import inspect
import re

import pytest

import acgan
from api_runs import ROOT, command_flags

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMANDS = ("train", "generate", "evaluate", "compare", "benchmark_merge", "benchmark", "export")
CALLS = ("train", "generate", "evaluate", "compare", "benchmark", "export")
COMMAND = re.compile(r"(?:python -m acgan\.|\bacgan[ .])(" + "|".join(COMMANDS) + r")\b(?![(\w])")
CALL = re.compile(r"\bacgan\.(" + "|".join(CALLS) + r")\(")
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9_-]*)")
HEADING = re.compile(r"^(#+) (.*)")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PAGE_COMMAND = {"benchmark.md": "benchmark"}  # a command's page whose title does not name it


def lines_of(path):
    """(number, line, is_code) for each line outside a fence marker; code: fenced or indented 4 spaces."""
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        yield number, line, fenced or line.startswith("    ")


def attached(text):
    """(command, flag) for each --flag after a command in a code line or span, up to a shell separator."""
    found = []
    for part in re.split(r"\s(?:\||&&|;|&|#)\s|\s&$", text):
        command = COMMAND.search(part)
        if command:
            found += [(command.group(1), flag) for flag in FLAG.findall(part[command.end() :])]
    return found


def flag_uses(path):
    """(line number, command, flag) for each --flag the page shows with a command."""
    uses, context, carried, listing = [], [PAGE_COMMAND.get(path.name)], None, False
    for number, line, code in lines_of(path):
        if code:
            text = f"{carried} {line}" if carried else line
            uses += [
                (number, c, f)
                for c, f in attached(text)[len(attached(carried)) if carried else 0 :]
            ]
            carried = text if line.endswith("\\") and COMMAND.search(text) else None
            continue
        heading = HEADING.match(line)
        if heading:  # the command a section is about: named in its heading or a parent's
            level, named = len(heading.group(1)), COMMAND.search(heading.group(2))
            context = context[:level] + [context[-1]] * (level - len(context))
            context.append(named.group(1) if named else context[-1])
        listing = bool(line.strip()) and (listing or "Flags:" in line)
        spans = SPAN.findall(line)
        uses += [(number, c, f) for span in spans for c, f in attached(span)]
        if context[-1] and (heading or listing or line.startswith("|")):
            uses += [
                (number, context[-1], f)
                for span in spans
                if span.startswith("--")
                for f in FLAG.findall(span)
            ]
    return uses


def is_flag(name, names):
    """--name, --no-name or --noname for a boolean; a dash for an underscore (absl takes both)."""
    name = name.replace("-", "_")
    return name in names or (name.startswith("no") and name[2:].lstrip("_") in names)


def test_every_flag_shown_with_a_command_is_one_of_its_flags():
    known = command_flags(*COMMANDS)
    absl = set(known.pop("absl"))  # --helpfull, --flagfile, ...: every command takes them
    uses = [(path, *use) for path in DOCS for use in flag_uses(path)]
    # the parsing still finds them
    assert len(uses) > 300 and {c for _, _, c, _ in uses} == set(COMMANDS)
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: --{flag} is not a flag of acgan.{command}"
        for path, number, command, flag in uses
        if not is_flag(flag, set(known[command]) | absl)
    ]
    assert not wrong, "\n".join(wrong)


def slug(heading):
    """GitHub's anchor for a heading: its text lower-cased, punctuation dropped, spaces as dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    for _, line, code in lines_of(path):
        heading = None if code else HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            found.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return found


def test_every_relative_link_and_anchor_resolves():
    checked, broken = 0, []
    for path in DOCS:
        for number, line, code in lines_of(path):
            for target in [] if code else LINK.findall(SPAN.sub("", line)):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                checked += 1
                file, _, anchor = target.partition("#")
                linked = (path.parent / file).resolve() if file else path
                if not linked.exists():
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {target}: no {file}")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    broken.append(
                        f"{path.relative_to(ROOT)}:{number}: {target}: no heading #{anchor}"
                    )
    assert checked > 50 and not broken, "\n".join(broken)


def shown_calls(path):
    """(line number, name, source, in a heading) for each acgan.X(...) the page shows: in a heading its
    signature (`acgan.X(a, b=1, ...) -> T`) as a def, elsewhere a call."""
    text = path.read_text()
    for match in CALL.finditer(text):
        number = text.count("\n", 0, match.start()) + 1
        heading = text.splitlines()[number - 1].startswith("#")
        for end in (
            m.end() for m in re.finditer(r"\)", text[match.start() :])
        ):  # the shortest that parses
            source = text[match.start() : match.start() + end]
            try:
                parsed = ast.parse(
                    as_def(source) if heading else source, mode="exec" if heading else "eval"
                )
            except SyntaxError:
                continue
            yield number, match.group(1), parsed.body[0].args if heading else parsed.body, heading
            break


def as_def(source):
    return "def f" + source[source.index("(") :].replace(", ...)", ")") + ": pass"


def shown_default(node):
    """The default a heading shows, or Ellipsis where it shows `...` or what is not a literal."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return Ellipsis
    return (
        Ellipsis if value is Ellipsis or (isinstance(value, tuple) and Ellipsis in value) else value
    )


def mismatches(signature, shown, heading):
    """What a shown signature (heading) or call gets wrong about `signature`."""
    if heading:  # every parameter named is the call's, with the default shown
        defaults = dict(zip([a.arg for a in shown.args][::-1], shown.defaults[::-1]))
        return [
            f"no parameter {a.arg!r}" for a in shown.args if a.arg not in signature.parameters
        ] + [
            f"{name}'s default is {signature.parameters[name].default!r}"
            for name, node in defaults.items()
            if name in signature.parameters
            and shown_default(node) not in (Ellipsis, signature.parameters[name].default)
        ]
    if any(isinstance(a, ast.Starred) for a in shown.args) or any(
        k.arg is None for k in shown.keywords
    ):
        return []
    try:
        signature.bind_partial(*shown.args, **{k.arg: k.value for k in shown.keywords})
    except TypeError as e:
        return [str(e)]
    return []


@pytest.mark.parametrize("page", ["README.md", "docs/api.md"])
def test_every_call_shown_takes_the_arguments_it_is_shown_with(page):
    shown = list(shown_calls(ROOT / page))
    wrong = [
        f"{page}:{number}: acgan.{name}: {problem}"
        for number, name, node, heading in shown
        for problem in mismatches(inspect.signature(getattr(acgan, name)), node, heading)
    ]
    assert len(shown) >= 4 and not wrong, "\n".join(wrong)


def test_every_parameter_of_a_call_is_named_in_its_section_of_the_api_page():
    """docs/api.md's section on each call (its heading, a signature, and the text below it) names every
    parameter the call takes: in the heading, or as a code span of its own (`name` or `name=value`)."""
    missing = {}
    for section in re.split(r"\n(?=#{2,3} )", (ROOT / "docs" / "api.md").read_text()):
        heading = re.match(r"### `acgan\.(\w+)\(([^\n]*)\n", section)
        if heading:
            named = set(re.findall(r"[(,]\s*\**(\w+)", "(" + heading.group(2))) | set(
                re.findall(r"`(\w+)(?:=[^`]*)?`", section)
            )
            parameters = inspect.signature(getattr(acgan, heading.group(1))).parameters
            missing[heading.group(1)] = sorted(set(parameters) - named)
    assert set(missing) == set(CALLS) and not any(missing.values()), missing


# A default a page states for a command's flag: in a table whose columns are "flag | default | ...", the
# default cell of a row whose first cell names the flags (one value per flag, ", "-separated); in prose,
# `--flag` (VALUE) or `--flag`, default VALUE. Only literal values are compared (a number, on, off, or one code span); words ("the
# preset's", "every GPU") and flags whose default is None (described in words) are left alone.
TABLE_ROW = re.compile(r"^\|([^|]*)\|([^|]*)\|")
VALUE = r"(\d[\d,]*(?:\.\d+)?|`[^`]+`)"
PROSE_DEFAULT = re.compile(rf"`--([a-z][a-z0-9_]*)`(?: \({VALUE}\)|, default {VALUE})")


def literal(text):
    """A stated default as the value it names, or Ellipsis where it is words."""
    text = text.strip()
    if re.fullmatch(r"`[^`]+`", text) and not text.startswith("`--"):
        return text.strip("`")
    if re.fullmatch(r"\d[\d,]*(\.\d+)?", text):
        return float(text.replace(",", ""))
    return {"on": True, "off": False}.get(text, Ellipsis)


def states(value, default):
    """Whether a stated default (literal()) is the flag's default."""
    if isinstance(value, bool):
        return bool(default) == value or (
            isinstance(default, list) and default == ["on" if value else "off"]
        )
    if isinstance(value, float):
        return (
            not isinstance(default, bool)
            and isinstance(default, (int, float))
            and float(default) == value
        )
    return (",".join(map(str, default)) if isinstance(default, list) else str(default)) == value


def stated_defaults(path):
    """(line number, command, flag, stated value) for each default the page states for a command's flag."""
    found, context, columns = [], [PAGE_COMMAND.get(path.name)], None
    for number, line, code in lines_of(path):
        heading = None if code else HEADING.match(line)
        if heading:
            level, named = len(heading.group(1)), COMMAND.search(heading.group(2))
            context = context[:level] + [context[-1]] * (level - len(context))
            context.append(named.group(1) if named else context[-1])
        row = None if code else TABLE_ROW.match(line)
        if row and row.group(1).strip() == "flag":
            columns = row.group(2).strip()
        elif not row:
            columns = None
        if code or not context[-1]:
            continue
        if row and columns == "default":
            flags = []
            for flag in FLAG.findall(SPAN.sub(lambda m: m.group(0).split("(")[0], row.group(1))):
                # --no-jit, --nosync_bn: the boolean named before
                positive = re.sub(r"^no-?", "", flag)
                if not (flag != positive and positive in flags):
                    flags.append(flag)
            values = [
                literal(v) for v in (row.group(2).split(", ") if len(flags) > 1 else [row.group(2)])
            ]
            if len(values) == len(flags) and Ellipsis not in values:
                found += [(number, context[-1], flag, value) for flag, value in zip(flags, values)]
        elif not row:
            found += [
                (number, context[-1], flag, literal(in_brackets or after_default))
                for flag, in_brackets, after_default in PROSE_DEFAULT.findall(line)
            ]
    return found


def test_every_default_a_page_states_is_the_flags_default():
    known = command_flags(*COMMANDS)
    stated = [(path, *use) for path in DOCS for use in stated_defaults(path)]
    checked = [
        (path, number, command, flag, value)
        for path, number, command, flag, value in stated
        if flag.replace("-", "_") in known[command]
        and known[command][flag.replace("-", "_")] is not None
    ]
    assert len(checked) > 40  # the parsing still finds them
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: --{flag} of acgan.{command}: the page says {value!r}, the default "
        f"is {known[command][flag.replace('-', '_')]!r}"
        for path, number, command, flag, value in checked
        if not states(value, known[command][flag.replace("-", "_")])
    ]
    assert not wrong, "\n".join(wrong)
