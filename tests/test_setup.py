"""The pinned set-up: pyproject.toml keeps lower bounds, constraints.txt pins what the suite passed with,
and `make` (hence CI) installs with it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement):
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_every_dependency_is_pinned_and_within_its_lower_bound():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = project["dependencies"] + [r for extra in extras.values() for r in extra]
    for requirement in [
        r for r in wanted if _name(r) == "acgan"
    ]:  # an extra holding another, e.g. acgan[onnx]
        assert set(re.search(r"\[(.*)\]", requirement).group(1).split(",")) <= set(extras), (
            requirement
        )
    wanted = [r for r in wanted if _name(r) != "acgan"]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt pins exact versions only: {line!r}"
            pins[_name(name)] = version
    assert "acgan" not in pins
    for requirement in wanted:
        assert _name(requirement) in pins, f"{requirement} is not pinned in constraints.txt"
        lower = re.search(r">=\s*([\d.]+)", requirement)
        if lower:
            as_tuple = lambda v: tuple(int(p) for p in re.findall(r"\d+", v)[:3])  # noqa: E731
            assert as_tuple(pins[_name(requirement)]) >= as_tuple(lower.group(1)), requirement


def test_make_and_ci_install_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert (
        "-c constraints.txt" in makefile and "$(STAMP): pyproject.toml constraints.txt" in makefile
    )
    assert '-e ".[tensorflow,jax,test]"' in makefile  # both backends: the suite compares them
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_version_is_the_packages_one():
    """acgan.__version__ is the one place the version is written: pyproject.toml reads it (dynamic), so the
    installed package's metadata says the same."""
    import importlib.metadata
    import tomllib

    import acgan

    assert re.fullmatch(r"\d+\.\d+\.\d+", acgan.__version__)
    assert acgan.__version__ == importlib.metadata.version("acgan")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"] and "version" not in pyproject["project"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "acgan.__version__"}
