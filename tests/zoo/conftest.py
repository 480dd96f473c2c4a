"""The zoo runs with analysis errors raised: a debugging layer that fails on a model fails its test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from xlalab.debug import analysis_errors

# Child processes (PT_XLA_DEBUG runs, xlalab debug-run) inherit it too.
os.environ["XLALAB_ANALYSIS_ERRORS"] = "raise"  # children (debug-run) inherit it


@pytest.fixture(autouse=True)
def no_analysis_errors() -> Iterator[None]:
    before = len(analysis_errors.FAILURES)
    yield
    assert analysis_errors.FAILURES[before:] == []
