"""Run by tests/test_spmd_multiprocess.py: one of two processes with 4 CPU devices each, joined
through JAX's distributed runtime, training an MLP sharded over the 8 devices of both (a
(data=2, model=4) mesh: each weight split across the processes' devices). Prints one JSON
line, ``RESULT {...}``."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import torch

import xlalab
import xlalab.distributed as xd

port, pid = sys.argv[1], int(sys.argv[2])
xlalab.runtime.config.set("XLA_NUM_DEVICES", 4)
xd.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
xlalab.use_torch_xla_names()

import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

from xlalab.runtime import backend, sharding  # noqa: E402


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


# Every process holds the same data (as in JAX's multi-process SPMD: one program, run by all).
torch.manual_seed(1)
X, Y = torch.randn(16, 16), torch.randn(16, 8)


def train(device: str, mesh: Any = None, steps: int = 3, compiled: bool = False) -> list[float]:
    model = mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = X.to(device), Y.to(device)
    if mesh is not None:
        xs.mark_sharding(model[0].weight, mesh, ("model", None))
        xs.mark_sharding(model[2].weight, mesh, (None, "model"))
        xs.mark_sharding(x, mesh, ("data", None))
        xs.mark_sharding(y, mesh, ("data", None))

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = torch.compile(step, backend="openxla")
    losses = []
    for _ in range(steps):
        loss = step(x, y)
        if device != "cpu":
            torch_xla.sync()
        losses.append(loss.item())
    return losses


out: dict[str, Any] = {"process": pid, "local_devices": backend.device_count()}
out["global_devices"] = backend.global_device_count()
out["cpu_losses"] = train("cpu")
xr.use_spmd()
mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
out["spmd_losses"] = train("xla", mesh)
out["compiled_losses"] = train("xla", mesh, compiled=True)  # torch.compile's graphs, same mesh
w = torch.zeros(32, 16).to("xla")
xs.mark_sharding(w, mesh, ("model", None))
array = w._st.node.value
out["w_spec"] = xs.get_sharding_spec(w)
out["w_devices"] = len(array.sharding.device_set)
out["w_local_blocks"] = sorted({tuple(s.data.shape) for s in array.addressable_shards})
# A value split across the processes, read whole on the host: gathered from both.
whole = torch.arange(512.0).reshape(32, 16).to("xla")
xs.mark_sharding(whole, mesh, ("model", "data"))
gathered = sharding.host_value(whole._st.node.value)
out["gathered_equal"] = bool(np.array_equal(gathered, np.arange(512.0).reshape(32, 16)))
print("RESULT " + json.dumps(out), flush=True)
