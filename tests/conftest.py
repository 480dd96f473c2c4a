from __future__ import annotations

import os
import sys
from collections.abc import Iterator

# An analysis that fails in a debugging layer fails the test that caused it (users get a log line).
os.environ.setdefault("XLALAB_ANALYSIS_ERRORS", "raise")

import jax
import pytest
import torch

import xlalab
import xlalab.debug.metrics as met


@pytest.fixture(autouse=True, scope="module")
def _forget_compiled_functions() -> Iterator[None]:
    """After each test file, dynamo forgets its compiled functions and JAX its cached executables,
    so that one file's programs do not outlive it in the process that runs the whole suite."""
    yield
    if "torch._dynamo" in sys.modules:
        import xlalab.dynamo

        xlalab.dynamo.reset()
    jax.clear_caches()


@pytest.fixture(scope="session")
def dev() -> torch.device:
    return xlalab.device()


@pytest.fixture
def fresh_metrics() -> None:
    xlalab.mark_step()
    met.clear_all()


def counter(name: str) -> int:
    return met.counter_value(name) or 0
