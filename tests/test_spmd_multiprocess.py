"""SPMD across processes: two processes with 4 CPU devices each, one (2, 4) mesh over all 8.

Each process joins JAX's distributed runtime (coordinator on 127.0.0.1, a free port), shards an
MLP's weights and batch over the mesh and trains it (tests/spmd_multiprocess_script.py); the
partitioner's collectives cross the processes (XLA's CPU collectives: gloo in this JAX).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .processes import run_two

SCRIPT = Path(__file__).with_name("spmd_multiprocess_script.py")


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_two(SCRIPT)


def test_mesh_spans_both_processes(results: list[dict[str, Any]]) -> None:
    for out in results:
        assert out["local_devices"] == 4
        assert out["global_devices"] == 8
        # (32, 16) split 4 ways on rows over 'model', each block on 2 devices (one per process).
        assert out["w_spec"] == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
        assert out["w_devices"] == 8
        assert out["w_local_blocks"] == [[8, 16]]  # each process holds its devices' blocks only


def test_sharded_mlp_trains_as_on_one_device_in_both_processes(results: list[dict[str, Any]]) -> None:
    for out in results:
        np.testing.assert_allclose(out["spmd_losses"], out["cpu_losses"], rtol=1e-5)
    assert results[0]["spmd_losses"] == results[1]["spmd_losses"]  # one program, one result


def test_torch_compile_trains_across_both_processes(results: list[dict[str, Any]]) -> None:
    for out in results:
        np.testing.assert_allclose(out["compiled_losses"], out["cpu_losses"], rtol=1e-5)


def test_a_value_split_across_processes_is_gathered_whole(results: list[dict[str, Any]]) -> None:
    assert all(out["gathered_equal"] for out in results)
