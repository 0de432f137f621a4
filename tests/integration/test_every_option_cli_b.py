"""Every encoding of the other half through ``posx train -m``, ``posx eval --root`` and
``posx report``, and each RoPE scaling type evaluated by ``posx eval`` on the rope run.

Issue 30: a fresh clone passed every test while ``posx train encoding=deberta`` and
``encoding=xpos`` crashed, because no test went through the CLI for every option. The options
are split over this module and its sibling (tests/integration/every_option.py says why).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.every_option import (
    HALVES,
    build_root,
    check_option,
    check_scaling,
    report_of,
)

ENCODINGS, STRATEGIES, SCALINGS = HALVES["b"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return build_root(tmp_path_factory.mktemp("every_option_b"), ENCODINGS, STRATEGIES, SCALINGS)


@pytest.fixture(scope="module")
def report(root: Path) -> str:
    return report_of(root)


@pytest.mark.parametrize("label", [*ENCODINGS, *(f"rope+{p}" for p in STRATEGIES)])
def test_every_option_trains_evaluates_and_reports(root: Path, report: str, label: str):
    check_option(root, report, label)


@pytest.mark.parametrize("scaling", SCALINGS)
def test_every_rope_scaling_evaluates_and_reports(root: Path, report: str, scaling: str):
    check_scaling(root, report, scaling)
