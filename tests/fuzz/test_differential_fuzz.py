"""The differential fuzzer's fixed-seed budget: random programs on xla:0 must match eager CPU.

About 300 programs per run (half of them with a backward pass) drawn by hypothesis with a
fixed derivation (``derandomize``), so a run is reproducible; a mismatch fails the test with
the shrunk program printed as runnable Python. ``make fuzz`` runs longer campaigns.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from xlalab.testing.fuzz import Program, check, programs
from xlalab.testing.fuzz.campaign import describe

REGRESSIONS = sorted((Path(__file__).parent / "regressions").glob("*.json"))

BUDGET = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
    # (no explain phase: on a failure it would rerun many variants, each compiling graphs)
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
)


def _assert_matches_eager(program: Program) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's own warnings (std of one element...)
        finding = check(program)
    assert finding is None, describe(finding, program)


@BUDGET
@given(programs(grad=False))
def test_forward_programs_match_eager(program: Program) -> None:
    _assert_matches_eager(program)


@BUDGET
@given(programs(grad=True))
def test_backward_programs_match_eager(program: Program) -> None:
    _assert_matches_eager(program)


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_saved_regression_matches_eager(path: Path) -> None:
    _assert_matches_eager(Program.from_json(path.read_text()))
