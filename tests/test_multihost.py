"""Several hosts: two processes on localhost, 2 CPU devices each, one replica group of 4.

Each process joins JAX's distributed runtime (coordinator on 127.0.0.1, a free port), spawns
a replica per local device, and the replicas all-reduce across all 4 devices: XLA's CPU
collectives cross the processes (gloo in this JAX). Then a tiny DataParallel training step
shows the seeds' API runs unchanged across hosts, with replicas identical in both processes.
"""

from __future__ import annotations

import textwrap

import pytest

from .processes import run_two

WORKER = textwrap.dedent(
    """
    import json, sys
    import torch
    import xlalab
    import xlalab.distributed as xd

    port, pid = sys.argv[1], int(sys.argv[2])
    xlalab.runtime.config.set("XLA_NUM_DEVICES", 2)
    xd.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)

    import xlalab.core.xla_model as xm
    import xlalab.distributed.data_parallel as dp
    import xlalab.distributed.xla_multiprocessing as xmp

    def _mp_fn(index):
        device = xm.xla_device()
        t = torch.full((3,), float(xm.get_ordinal() + 1), device=device)
        total = xm.all_reduce(xm.REDUCE_SUM, t)
        biggest = xm.all_reduce(xm.REDUCE_MAX, t)
        return {
            "index": index,
            "device": str(device),
            "ordinal": xm.get_ordinal(),
            "world": xm.xrt_world_size(),
            "sum": total.cpu().tolist(),
            "max": biggest.cpu().tolist(),
            "ordinals": xm.mesh_reduce("ordinals", xm.get_ordinal(), sorted),
        }

    out = {"spawn": xmp.spawn(_mp_fn)}

    def build():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 2)

    # Each process reads its own shard of the data, as a DistributedSampler would give it.
    gen = torch.Generator().manual_seed(100 + pid)
    loader = [(torch.randn(3, 4, generator=gen), torch.randn(3, 2, generator=gen)) for _ in range(4)]

    def train_loop_fn(model, loader, device, context):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _, (data, target) in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(data), target)
            loss.backward()
            xm.optimizer_step(optimizer)
        weights = [p.detach().cpu().flatten().tolist() for p in model.parameters()]
        return xm.mesh_reduce("weights", weights, lambda all_weights: all_weights)

    out["dp"] = dp.DataParallel(build, device_ids=xm.get_xla_supported_devices())(train_loop_fn, loader)
    print("RESULT " + json.dumps(out), flush=True)
    """
)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    script = tmp_path_factory.mktemp("multihost") / "worker.py"
    script.write_text(WORKER)
    return run_two(script)


def test_all_reduce_spans_both_processes(results: list[dict]) -> None:
    replicas = [r for out in results for r in out["spawn"]]
    assert sorted(r["ordinal"] for r in replicas) == [0, 1, 2, 3]
    for r in replicas:
        assert r["world"] == 4
        assert r["sum"] == [10.0, 10.0, 10.0]  # 1 + 2 + 3 + 4: every device of both processes
        assert r["max"] == [4.0, 4.0, 4.0]
        assert r["ordinals"] == [0, 1, 2, 3]  # mesh_reduce crosses the processes too
    # Each process drives its own two devices, as xla:0 and xla:1.
    assert [r["device"] for r in results[0]["spawn"]] == ["xla:0", "xla:1"]
    assert [r["ordinal"] for r in results[1]["spawn"]] == [2, 3]


def test_data_parallel_replicas_identical_across_processes(results: list[dict]) -> None:
    gathered = [w for out in results for replica in out["dp"] for w in replica]
    assert len(gathered) == 16  # 4 replicas' views of the 4 replicas' weights
    assert all(w == gathered[0] for w in gathered)
