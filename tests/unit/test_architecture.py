"""docs/architecture.md and the package agree: every path it names exists, every package is in
it, each package's docstring opens with its one job, and the import-linter layers name the same
packages as the doc's picture."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text()
PACKAGES = sorted(p.parent.name for p in (REPO / "posx").glob("*/__init__.py"))


def test_every_path_the_doc_names_exists():
    named = set(re.findall(r"\b((?:posx|tests|configs|docs)/[\w/.<>-]*\w)", DOC))
    missing = [p for p in named if "<" not in p and not (REPO / p).exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {sorted(missing)}"


def test_every_package_is_in_the_doc():
    absent = [p for p in PACKAGES if f"posx/{p}/" not in DOC]
    assert not absent, f"packages missing from docs/architecture.md: {absent}"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_docstring_opens_with_its_job(package: str):
    doc = ast.get_docstring(ast.parse((REPO / "posx" / package / "__init__.py").read_text()))
    assert doc, f"posx/{package}/__init__.py has no docstring"
    first = doc.splitlines()[0]
    assert first.endswith("."), f"posx/{package}'s first docstring line is no sentence: {first!r}"


def test_root_keeps_few_modules():
    modules = sorted(p.name for p in (REPO / "posx").glob("*.py"))
    assert len(modules) <= 8, modules


def test_layers_contract_names_every_package_and_the_doc_draws_them():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (layers,) = [
        c["layers"]
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and c["containers"] == ["posx"]
    ]
    in_contract = {m.strip() for layer in layers for m in re.split(r"[|:]", layer)}
    on_disk = set(PACKAGES) | {p.stem for p in (REPO / "posx").glob("*.py") if p.stem != "__init__"}
    assert in_contract == on_disk
    for name in in_contract:
        assert f"posx/{name}" in DOC, f"{name} is a layer but docs/architecture.md does not draw it"
