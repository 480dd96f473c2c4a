"""The seeds' DataParallel on 4 CPU devices.

The device count is fixed per process, so the 4-device checks run in one subprocess started
with XLA_NUM_DEVICES=4 (the seeds' train_loop_fn, a one-device reference on the 4x batch,
a tiny dataset, the per-device loaders); the test functions read its report. The rest runs
here, on this process's single device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import xlalab.core.xla_model as xm
from xlalab.distributed import data_parallel as dp
from xlalab.distributed import parallel_loader as pl
from xlalab.runtime import backend, config

SCRIPT = textwrap.dedent(
    """
    import json, warnings
    import torch
    from torch import nn, optim
    import xlalab

    # The seeds' imports, through xlalab's torch_xla names.
    xlalab.use_torch_xla_names()
    import torch_xla_py.xla_model as xm
    import torch_xla_py.data_parallel as dp
    import xlalab.debug.metrics as met
    import xlalab.distributed.parallel_loader as pl
    import xlalab.distributed.xla_multiprocessing as xmp
    from xlalab.runtime import config, replicated
    from xlalab.testing.workloads import MNIST as _MNIST, mnist_batch

    B, STEPS, lr, momentum = 8, 4, 0.01, 0.5
    out = {"devices": xm.get_xla_supported_devices()}
    try:
        config.set("XLA_NUM_DEVICES", 2)
    except Exception as e:
        out["late_setting"] = [type(e).__name__, str(e), config.get("XLA_NUM_DEVICES")]

    def MNIST():
        torch.manual_seed(0)
        return _MNIST(dropout=0.0)

    train_loader = [mnist_batch(i, B) for i in range(4 * STEPS)]
    seen = {}  # ordinal -> per step: (loss, every parameter and buffer)

    def record(model, loss):
        state = [t.detach().cpu() for t in model.state_dict().values()]
        seen.setdefault(xm.get_ordinal(), []).append((loss.item(), state))

    # ---- the seeds' "Running a model", as written (plus the record() line)
    devices = xm.get_xla_supported_devices()
    model_parallel = dp.DataParallel(MNIST, device_ids=devices)

    def train_loop_fn(model, loader, device, context):
      loss_fn = nn.NLLLoss()
      optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)

      model.train()
      for _, (data, target) in loader:
        optimizer.zero_grad()
        output = model(data)
        loss = loss_fn(output, target)
        loss.backward()
        xm.optimizer_step(optimizer)
        record(model, loss)

    compiles = [met.counter_value("UncachedCompile") or 0]
    for epoch in range(1, 2 + 1):
      model_parallel(train_loop_fn, train_loader)
      compiles.append(met.counter_value("UncachedCompile") or 0)
    out["compiles"] = compiles

    # ---- identical replicas after every step
    worst = 0.0
    for o in (1, 2, 3):
        for (_, a), (_, b) in zip(seen[0], seen[o]):
            worst = max(worst, max((x.double() - y.double()).abs().max().item() for x, y in zip(a, b)))
    out["replica_max_diff"] = worst
    out["steps"] = {str(o): len(v) for o, v in seen.items()}

    # ---- one device, 4x batch: same initial model, same data in device order
    dev = xm.xla_device()
    model = MNIST().to(dev)
    model.train()
    loss_fn = nn.NLLLoss()
    reference = []
    for epoch in range(2):
        optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        for k in range(STEPS):
            rnd = train_loader[4 * k : 4 * k + 4]
            data = torch.cat([d for d, _ in rnd]).to(dev)
            target = torch.cat([t for _, t in rnd]).to(dev)
            optimizer.zero_grad()
            loss = loss_fn(model(data), target)
            loss.backward()
            xm.optimizer_step(optimizer)
            reference.append(loss.item())
    out["reference"] = reference
    out["data_parallel"] = [sum(seen[o][k][0] for o in range(4)) / 4 for k in range(2 * STEPS)]
    final = [t.detach().cpu() for t in model.state_dict().values()]
    out["final_vs_reference"] = max(
        (x.double() - y.double()).abs().max().item() for x, y in zip(seen[0][-1][1], final)
    )

    # ---- the program: an XLA all-reduce inside, compiled once per graph
    out["hlo_all_reduces"] = [p.hlo().count("all-reduce(") for p in replicated.programs()]
    wanted = ("ExecuteComputation", "ExecuteRep")
    out["counters"] = {k: met.counter_value(k) for k in met.counter_names() if k.startswith(wanted)}
    out["metrics"] = met.metric_names()

    # ---- the seeds' caveat: a tiny dataset gives a no-op epoch, with a warning
    entered = []
    def count_loop(model, loader, device, context):
        for _, (data, target) in loader:
            entered.append(str(data.device))
        return xm.get_ordinal(), xm.xrt_world_size()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny = dp.DataParallel(nn.Linear(1, 1), device_ids=devices)
        out["tiny_results"] = tiny(count_loop, train_loader[:3])
    out["tiny_entered"] = list(entered)
    out["tiny_warnings"] = [(w.category.__name__, str(w.message), w.filename) for w in caught]
    entered.clear()
    out["six_results"] = tiny(count_loop, train_loader[:6])  # one round; the last 2 batches dropped
    out["six_entered"] = sorted(entered)

    # ---- device_ids=[]: PyTorch's own CPU; one id: a single core
    def where(model, loader, device, context):
        first = next(iter(loader))
        return str(device), first[0], str(first[1][0].device), xm.get_ordinal(), xm.xrt_world_size()
    out["native"] = dp.DataParallel(nn.Linear(1, 1), device_ids=[])(where, train_loader[:2])
    out["single"] = dp.DataParallel(nn.Linear(1, 1), device_ids=["xla:2"])(where, train_loader[:2])
    out["outside"] = [xm.get_ordinal(), xm.xrt_world_size()]

    # ---- collectives and per-device loaders under spawn (the modern API)
    host = [(torch.full((2,), float(i)), torch.tensor([i])) for i in range(8)]
    def _mp_fn(index):
        device = xm.xla_device()
        ordinal = xm.get_ordinal()
        got = []
        for data, target in pl.MpDeviceLoader(host[ordinal::4], device):
            got.append((str(data.device), data.cpu().tolist()))
        x = torch.full((2,), float(ordinal + 1), device=device)
        return {
            "device": str(device), "got": got,
            "sum": xm.all_reduce(xm.REDUCE_SUM, x, scale=0.5).cpu().tolist(),
            "min": xm.all_reduce(xm.REDUCE_MIN, x).cpu().tolist(),
            "mul": xm.all_reduce(xm.REDUCE_MUL, x).cpu().tolist(),
            "mesh": xm.mesh_reduce("m", ordinal * 10, sum),
        }
    out["spawn"] = xmp.spawn(_mp_fn)

    def diverge(index):
        if index == 1:
            xm.mesh_reduce("odd one out", 0, sum)
        xm.mark_step()
    try:
        xmp.spawn(diverge)
    except Exception as e:
        out["diverged"] = [type(e).__name__, str(e)]

    def rank_only(index):
        device = xm.xla_device()
        x = torch.full((2,), float(index + 1), device=device)
        extra = x * 3 if index == 0 else None  # work on one replica only, pending with the others'
        s = xm.all_reduce(xm.REDUCE_SUM, x)
        g = xm.all_gather(x.reshape(1, 2), dim=0)
        own = g.sum() * 10 if index == 0 else None  # one replica uses a collective's result
        xm.mark_step()
        return {
            "sum": s.cpu().tolist(),
            "extra": None if extra is None else extra.cpu().tolist(),
            "own": None if own is None else own.item(),
        }
    out["rank_only"] = xmp.spawn(rank_only)
    print("RESULT " + json.dumps(out), flush=True)
    """
)


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> dict:
    script = tmp_path_factory.mktemp("dp") / "four_devices.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, XLA_NUM_DEVICES="4")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- 4 CPU devices


def test_four_devices_from_the_setting(four: dict) -> None:
    assert four["devices"] == ["xla:0", "xla:1", "xla:2", "xla:3"]
    kind, message, value = four["late_setting"]
    assert kind == "DeviceError" and value == 4
    assert "after the first xla device was used" in message and "at start" in message


def test_replicas_identical_after_every_step(four: dict) -> None:
    assert four["steps"] == {"0": 8, "1": 8, "2": 8, "3": 8}
    assert four["replica_max_diff"] == 0.0


def test_loss_trajectory_matches_one_device_on_the_4x_batch(four: dict) -> None:
    dp_losses, reference = four["data_parallel"], four["reference"]
    assert len(dp_losses) == len(reference) == 8
    assert max(abs(a - b) for a, b in zip(dp_losses, reference)) < 1e-4
    # Parameters and batch-norm statistics end where the one-device run ends, too.
    assert four["final_vs_reference"] < 1e-4


def test_all_reduce_is_in_the_compiled_program(four: dict) -> None:
    # One program per distinct step graph; gradients (1) and batch-norm statistics forward and
    # backward (2 layers x 2 statistics x 2) are XLA all-reduces inside each.
    assert four["hlo_all_reduces"] and all(n >= 1 for n in four["hlo_all_reduces"])
    assert max(four["hlo_all_reduces"]) == 9


def test_fixed_number_of_compiles(four: dict) -> None:
    before, epoch1, epoch2 = four["compiles"]
    assert epoch1 - before == 2  # the first step (no momentum yet) and every later step
    assert epoch2 == epoch1  # the second epoch compiles nothing


def test_per_device_metrics(four: dict) -> None:
    counters = four["counters"]
    assert counters["ExecuteReplicated"] == 8
    for d in range(4):
        assert counters[f"ExecuteComputation[xla:{d}]"] >= 8
    assert "ExecuteReplicatedTime" in four["metrics"]


def test_drop_last_warning_on_a_tiny_dataset(four: dict) -> None:
    assert four["tiny_entered"] == []  # 3 batches for 4 devices: nothing to do
    assert four["tiny_results"] == [[0, 4], [1, 4], [2, 4], [3, 4]]
    [(kind, message, filename)] = four["tiny_warnings"]
    assert kind == "DroppedBatchesWarning"
    assert "this epoch did nothing" in message and "3 batch(es) for 4 device(s)" in message
    assert "smaller batch size" in message
    assert filename.endswith("four_devices.py")  # points at the caller's line
    assert four["six_entered"] == ["xla:0", "xla:1", "xla:2", "xla:3"]


def test_native_cpu_and_single_core(four: dict) -> None:
    # device_ids=[]: the loop gets enumerate(loader) on PyTorch's CPU.
    assert four["native"] == [["cpu", 0, "cpu", 0, 1]]
    # One id: a single core, replica 0 of 1 on that device.
    assert four["single"] == [["xla:2", 0, "xla:2", 0, 1]]
    assert four["outside"] == [0, 1]


def test_collectives_and_loaders_under_spawn(four: dict) -> None:
    replicas = four["spawn"]
    assert [r["device"] for r in replicas] == ["xla:0", "xla:1", "xla:2", "xla:3"]
    for o, r in enumerate(replicas):
        assert r["got"] == [[f"xla:{o}", [float(o), float(o)]], [f"xla:{o}", [float(o + 4)] * 2]]
        assert r["sum"] == [5.0, 5.0]  # (1 + 2 + 3 + 4) * 0.5
        assert r["min"] == [1.0, 1.0]
        assert r["mul"] == [24.0, 24.0]
        assert r["mesh"] == 60
    kind, message = four["diverged"]
    assert kind == "ReplicaError" and "diverged" in message and "odd one out" in message


def test_work_on_one_replica_beside_collectives(four: dict) -> None:
    # The replicas' graphs differ (replica 0 computes more, some of it from a collective's
    # result): the collectives run as one replicated program, the rest on each device.
    replicas = four["rank_only"]
    assert [r["sum"] for r in replicas] == [[10.0, 10.0]] * 4
    assert replicas[0]["extra"] == [3.0, 3.0] and replicas[0]["own"] == 200.0
    assert all(r["extra"] is None and r["own"] is None for r in replicas[1:])


# --------------------------------------------------------------------------- this process


def test_outside_replicas_one_replica() -> None:
    assert xm.get_ordinal() == 0 and xm.xrt_world_size() == 1 and xm.is_master_ordinal()
    dev = xm.xla_device()
    t = torch.arange(3.0, device=dev)
    assert xm.all_reduce(xm.REDUCE_SUM, t, scale=2.0).cpu().tolist() == [0.0, 2.0, 4.0]
    grads = [torch.ones(2, device=dev), torch.ones(3, device=dev)]
    assert xm.all_reduce(xm.REDUCE_SUM, grads, scale=0.5) is grads
    assert [g.cpu().tolist() for g in grads] == [[0.5, 0.5], [0.5, 0.5, 0.5]]
    assert xm.mesh_reduce("x", 3, sum) == 3
    assert xm.rendezvous("x", b"p") == [b"p"]


def test_device_count_is_fixed_once_devices_are_used() -> None:
    xm.xla_device()
    with pytest.raises(backend.DeviceError, match="before the first xla device is used"):
        config.set("XLA_NUM_DEVICES", backend.device_count() + 1)
    assert config.get("XLA_NUM_DEVICES") in (0, backend.device_count())


def test_mp_device_loader_overlaps_and_marks_steps() -> None:
    dev = xm.xla_device()
    host = [(torch.full((2,), float(i)), torch.tensor([i])) for i in range(3)]
    seen = [(str(d.device), d.cpu().tolist(), t.cpu().tolist()) for d, t in pl.MpDeviceLoader(host, dev)]
    assert seen == [("xla:0", [float(i)] * 2, [i]) for i in range(3)]
    para = pl.ParallelLoader(host, [dev])
    assert len(para.per_device_loader(dev)) == 3
    assert [t.cpu().tolist() for _, t in para.per_device_loader(dev)] == [[0], [1], [2]]
    para.close()


def test_empty_loader_warns() -> None:
    with pytest.warns(pl.DroppedBatchesWarning, match="this epoch did nothing"):
        assert list(pl.MpDeviceLoader([], xm.xla_device())) == []


def test_native_data_parallel_in_process() -> None:
    def loop(model: torch.nn.Module, loader: object, device: torch.device, context: dp.Context) -> object:
        return [(i, str(x.device)) for i, (x, _) in loader]  # type: ignore[attr-defined]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = dp.DataParallel(torch.nn.Linear(1, 1), device_ids=[])(loop, [(torch.ones(1), 0)] * 2)
    assert result == [[(0, "cpu"), (1, "cpu")]]
