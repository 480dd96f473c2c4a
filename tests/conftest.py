from __future__ import annotations

import os

# An analysis that fails in a debugging layer fails the test that caused it (users get a log line).
os.environ.setdefault("XLALAB_ANALYSIS_ERRORS", "raise")

import pytest
import torch

import xlalab
import xlalab.debug.metrics as met


@pytest.fixture(scope="session")
def dev() -> torch.device:
    return xlalab.device()


@pytest.fixture
def fresh_metrics() -> None:
    xlalab.mark_step()
    met.clear_all()


def counter(name: str) -> int:
    return met.counter_value(name) or 0
