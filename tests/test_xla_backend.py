"""torch_xla's ``xla`` torch.distributed backend, against gloo running the same program.

One program (collectives, then a few DDP training steps from rank-dependent initial weights)
runs twice, each in a subprocess: on CPU tensors in 2 gloo processes, and in 2 ``xmp.spawn``
replicas on xla devices through ``torch_xla.distributed.xla_backend`` (``XLA_NUM_DEVICES=2``).
The tests compare the two runs' reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

WORLD = 2

PROGRAM = textwrap.dedent(
    """
    import json, socket, sys, warnings
    import torch
    import torch.distributed as dist
    from torch import nn

    warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's rename
    STEPS = 3


    def program(rank, world, device, step_end):
        out = {}
        t = (torch.arange(4, dtype=torch.float32) + rank).to(device)
        s = t.clone(); dist.all_reduce(s); out["all_reduce_sum"] = s
        m = t.clone(); dist.all_reduce(m, op=dist.ReduceOp.MAX); out["all_reduce_max"] = m
        gathered = [torch.zeros(4, device=device) for _ in range(world)]
        dist.all_gather(gathered, t); out["all_gather"] = torch.stack(gathered)
        flat = torch.zeros(world * 4, device=device)
        dist.all_gather_into_tensor(flat, t); out["all_gather_into_tensor"] = flat
        big = (torch.arange(world * 2, dtype=torch.float32) * (rank + 1)).to(device)
        mine = torch.zeros(2, device=device)
        dist.reduce_scatter_tensor(mine, big); out["reduce_scatter_tensor"] = mine
        b = t.clone(); dist.broadcast(b, src=world - 1); out["broadcast"] = b
        a2a = torch.zeros(world * 2, device=device)
        dist.all_to_all_single(a2a, big); out["all_to_all_single"] = a2a
        dist.barrier()
        r = t.clone(); dist.reduce(r, dst=world - 1); out["reduce"] = r
        pieces = [torch.zeros(4, device=device) for _ in range(world)] if rank == 0 else None
        dist.gather(t, pieces, dst=0)
        # Stacked on the device by the root alone: its graph differs from the other ranks'.
        out["gather"] = torch.stack(pieces) if rank == 0 else torch.zeros(world, 4, device=device)
        mine = torch.zeros(3, device=device)
        given = [torch.full((3,), 10.0 * i).to(device) for i in range(world)] if rank == 1 else None
        dist.scatter(mine, given, src=1); out["scatter"] = mine
        every = dist.new_group()
        e = t.clone(); dist.all_reduce(e, group=every); out["all_reduce_new_group"] = e

        for as_view in (True, False):  # torch_xla's recommended setting, and torch's default
            out.update(train(rank, world, device, step_end, as_view))
        report = {k: v.cpu().tolist() for k, v in out.items()}
        report["rank"], report["world"], report["backend"] = rank, world, dist.get_backend()
        return report


    def train(rank, world, device, step_end, as_view):
        # Different weights on each rank: DDP starts all from rank 0's. (From a generator of the
        # rank's own: xmp.spawn's replicas are threads sharing torch's global CPU generator.)
        model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
        init = torch.Generator().manual_seed(rank)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=init) * 0.4)
        model.to(device)
        ddp = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=as_view)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.2, momentum=0.9)
        data = torch.randn(STEPS, world, 4, 6, generator=torch.Generator().manual_seed(7))
        labels = torch.randint(0, 3, (STEPS, world, 4), generator=torch.Generator().manual_seed(8))
        losses = []
        for step in range(STEPS):
            opt.zero_grad()
            logits = ddp(data[step, rank].to(device))
            loss = nn.functional.cross_entropy(logits, labels[step, rank].to(device))
            loss.backward()
            opt.step()
            step_end()
            losses.append(loss.detach())
        tag = "bucket_view" if as_view else "copied_grads"
        return {
            f"losses {tag}": torch.stack(losses),
            f"first_weight {tag}": model[0].weight.detach(),
            f"last_bias {tag}": model[2].bias.detach(),
        }


    def free_port():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]


    def gloo_worker(rank, world, port, path):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        report = program(rank, world, torch.device("cpu"), lambda: None)
        dist.destroy_process_group()
        with open(f"{path}.{rank}", "w") as f:
            json.dump(report, f)


    def refused(call):
        try:
            call()
        except NotImplementedError as e:
            return str(e)
        return None


    def xla_worker(index):
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.xla_backend  # noqa: F401  (registers "xla")

        dist.init_process_group("xla", init_method="xla://")
        report = program(dist.get_rank(), dist.get_world_size(), xm.xla_device(), xm.mark_step)
        t = torch.ones(2, device=xm.xla_device())
        report["send"] = refused(lambda: dist.send(t, dst=(dist.get_rank() + 1) % dist.get_world_size()))
        report["recv"] = refused(lambda: dist.recv(t, src=(dist.get_rank() + 1) % dist.get_world_size()))
        report["sub_group"] = refused(lambda: torch_xla.distributed.xla_backend.new_xla_process_group([0]))
        dist.destroy_process_group()
        return report


    if __name__ == "__main__":
        mode, world, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        if mode == "gloo":
            import torch.multiprocessing as mp

            mp.spawn(gloo_worker, args=(world, free_port(), path), nprocs=world)
            result = {"replicas": [json.load(open(f"{path}.{r}")) for r in range(world)]}
        else:
            import torch_xla.distributed.xla_multiprocessing as xmp
            from xlalab.runtime import replicated

            result = {"replicas": xmp.spawn(xla_worker)}
            hlo = "".join(p.hlo() for p in replicated.programs())
            ops = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
            result["hlo"] = {op: hlo.count(op + "(") for op in ops}
            # The main thread is no replica: its torch.distributed is the process's own, untouched.
            result["main_initialized_after_spawn"] = dist.is_initialized()
            url = f"tcp://127.0.0.1:{free_port()}"
            dist.init_process_group("gloo", init_method=url, rank=0, world_size=1)
            x = torch.ones(3)
            dist.all_reduce(x)
            result["main_gloo"] = [dist.get_backend(), dist.get_rank(), x.tolist()]
            dist.destroy_process_group()
        with open(path, "w") as f:
            json.dump(result, f)
    """
)


def _run(mode: str, tmp: Path) -> dict:
    script = tmp / "program.py"
    script.write_text(PROGRAM)
    out = tmp / f"{mode}.json"
    env = dict(os.environ, XLALAB_TORCH_XLA="1", XLA_NUM_DEVICES=str(WORLD))
    proc = subprocess.run(
        [sys.executable, str(script), mode, str(WORLD), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("xla_backend")
    return {"gloo": _run("gloo", tmp), "xla": _run("xla", tmp)}


TAGS = ("bucket_view", "copied_grads")  # DDP(gradient_as_bucket_view=True), and False
COLLECTIVES = (
    "all_reduce_sum",
    "all_reduce_max",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "broadcast",
    "all_to_all_single",
    "gather",
    "scatter",
    "all_reduce_new_group",
)


def test_ranks_and_backend(runs: dict) -> None:
    reports = runs["xla"]["replicas"]
    ranks = [(r["rank"], r["world"], r["backend"]) for r in reports]
    assert ranks == [(i, WORLD, "xla") for i in range(WORLD)]


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collective_equals_gloo(runs: dict, name: str) -> None:
    for rank in range(WORLD):
        expected = runs["gloo"]["replicas"][rank][name]
        assert runs["xla"]["replicas"][rank][name] == expected, (rank, name)


def test_reduce_gives_the_root_gloo_result_and_leaves_the_others(runs: dict) -> None:
    root = WORLD - 1
    assert runs["xla"]["replicas"][root]["reduce"] == runs["gloo"]["replicas"][root]["reduce"]
    # torch leaves the other ranks' tensors unspecified (gloo writes partial sums there);
    # torch_xla's backend, and this one, leave them as they were.
    for rank in range(root):
        assert runs["xla"]["replicas"][rank]["reduce"] == [float(rank + i) for i in range(4)]


def test_ddp_training_equals_gloo(runs: dict) -> None:
    for rank in range(WORLD):
        gloo, xla = runs["gloo"]["replicas"][rank], runs["xla"]["replicas"][rank]
        for name in [f"{what} {tag}" for tag in TAGS for what in ("losses", "first_weight", "last_bias")]:
            actual, expected = torch.tensor(xla[name]), torch.tensor(gloo[name])
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    # DDP synchronized the rank-dependent initial weights and averaged the gradients: the
    # replicas end identical (and the per-rank losses differ: each rank saw its own batch).
    first, second = runs["xla"]["replicas"][:2]
    for tag in TAGS:
        assert first[f"first_weight {tag}"] == second[f"first_weight {tag}"]
        assert first[f"losses {tag}"] != second[f"losses {tag}"]


def test_collectives_are_xla_collectives_in_the_compiled_programs(runs: dict) -> None:
    hlo = runs["xla"]["hlo"]
    assert hlo["all-reduce"] >= 2 and hlo["all-gather"] >= 1
    assert hlo["reduce-scatter"] >= 1 and hlo["all-to-all"] >= 1


def test_no_counterpart_names_what_to_use(runs: dict) -> None:
    for report in runs["xla"]["replicas"]:
        assert "xm.collective_permute" in report["send"]
        assert "torch.distributed.send" in report["send"]
        assert "xm.collective_permute" in report["recv"]
        assert "new_xla_process_group(ranks=[0])" in report["sub_group"]


def test_threads_that_are_not_replicas_keep_their_own_torch_distributed(runs: dict) -> None:
    assert runs["xla"]["main_initialized_after_spawn"] is False
    assert runs["xla"]["main_gloo"] == ["gloo", 0, [1.0, 1.0, 1.0]]


@pytest.mark.parametrize("name", ["send", "recv"])
def test_xm_send_recv_name_collective_permute(name: str) -> None:
    import xlalab.core.xla_model as xm

    with pytest.raises(NotImplementedError, match=rf"xm\.{name}\(.*channel_id=3\).*xm\.collective_permute"):
        getattr(xm, name)(torch.ones(2), 3)


def test_one_process_without_spawn_is_rank_0_of_1() -> None:
    import torch.distributed as dist

    import xlalab.distributed.xla_backend  # noqa: F401

    dist.init_process_group("xla", init_method="xla://")
    try:
        t = torch.arange(3.0, device="xla:0")
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "xla")
        assert t.cpu().tolist() == [0.0, 1.0, 2.0]
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()
