"""Run by tests/test_spmd.py in a subprocess with XLA_NUM_DEVICES=8: SPMD programs on 8 CPU
devices, each beside its one-device run. Prints one JSON object."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import torch

import xlalab

xlalab.use_torch_xla_names()

import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.distributed.spmd.debugging as debugging  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.distributed.spmd.debugging import visualize_tensor_sharding  # noqa: E402

from xlalab.distributed.spmd.collectives import program_collectives, reshards  # noqa: E402
from xlalab.runtime import config, graph, metrics, sharding, tensor  # noqa: E402

out: dict[str, Any] = {}
errors: dict[str, str] = {}


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


torch.manual_seed(1)
X, Y = torch.randn(16, 16), torch.randn(16, 8)


def train(
    device: str, shard: Any = None, wrap: Any = None, steps: int = 3, make: Any = mlp, data: Any = None
) -> tuple[list[float], torch.nn.Module]:
    model = make().to(device)
    if wrap is not None:
        model = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = ((X, Y) if data is None else data)
    x, y = x.to(device), y.to(device)
    if shard is not None:
        shard(model, x, y)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if device != "cpu":
            torch_xla.sync()
        losses.append(loss.item())
    return losses, model


out["before_use_spmd"] = xr.is_spmd()
xr.use_spmd()
out["is_spmd"] = xr.is_spmd()
# The mesh first: it starts JAX's backends with XLA_NUM_DEVICES, as the first xla device would.
mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
out["device_count"] = xr.global_runtime_device_count()


def shard_2d(model: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    xs.mark_sharding(model[0].weight, mesh, ("model", None))
    xs.mark_sharding(model[2].weight, mesh, (None, "model"))
    xs.mark_sharding(x, mesh, ("data", None))
    xs.mark_sharding(y, mesh, ("data", None))


out["cpu_losses"], _ = train("cpu")
metrics.clear_counters()
out["spmd_losses"], model = train("xla", shard_2d)
out["compiles"] = metrics.counter_value("UncachedCompile")
out["mlp_collectives"] = [
    [c.kind, c.op_name, c.nbytes] for p in graph.CACHE.values() for c in program_collectives(p)
]
w = model[0].weight
out["w_spec_after_training"] = torch_xla._XLAC._get_xla_sharding_spec(w) if hasattr(
    torch_xla._XLAC, "_get_xla_sharding_spec") else xs.get_sharding_spec(w)  # fmt: skip
out["w_shard_shapes"] = sorted({tuple(s.data.shape) for s in w._st.node.value.addressable_shards})
out["w_num_devices"] = len(w._st.node.value.sharding.device_set)

# Spec strings and sharding types on a 1-D mesh of half the devices.
mesh4 = xs.Mesh(np.arange(4), (4,), ("x",))
t = torch.arange(16.0).reshape(8, 2).to("xla")
sharded = xs.mark_sharding(t, mesh4, ("x", None))
out["spec_4x1"] = sharded.sharding_spec
out["type_4x1"] = sharded.sharding_type.name
out["local_shards"] = [[list(s.data.shape), s.device] for s in sharded.local_shards]
out["sum_on_4"] = (t * 2).sum().item()
xs.clear_sharding(t)
out["spec_cleared"] = xs.get_sharding_spec(t)

# An intermediate: the constraint reaches the compiled program, values are unchanged.
a = torch.randn(8, 8)
xa = a.to("xla")


def constrained_sum() -> torch.Tensor:
    h = (xa @ xa.T).reshape(64)
    xs.mark_sharding(h, mesh, (("data", "model"),))
    out["spec_intermediate"] = xs.get_sharding_spec(h)
    out["ir_text"] = torch_xla._XLAC._get_xla_tensors_text([h])
    return (h * 3).sum()


graph.CACHE.clear()
out["intermediate_close"] = bool(torch.allclose(constrained_sum().cpu(), (a @ a.T).sum() * 3, rtol=1e-5))
# The partitioner honoured the constraint: each device scales its own 8 of the 64 values.
texts = [p.executable.as_text() for p in graph.CACHE.values()]
out["constraint_in_hlo"] = any("num_partitions=8" in s and "f32[8]{0} multiply" in s for s in texts)

# A reshard the partitioner had to insert, named with the op and line that needed it.
config.set("XLA_HLO_DEBUG", 1)
config.set("XLA_IR_DEBUG", 1)
row_mesh = xs.Mesh(np.arange(8), (8,), ("x",))
left, right = torch.randn(64, 64).to("xla"), torch.randn(64, 64).to("xla")
xs.mark_sharding(left, row_mesh, (None, "x"))
xs.mark_sharding(right, row_mesh, (None, "x"))
product = left @ right  # the line the finding names
xs.mark_sharding(product, row_mesh, ("x", None))
graph.CACHE.clear()
out["product_close"] = bool(torch.allclose(product.cpu(), left.cpu() @ right.cpu(), atol=1e-4))
found = [r for p in graph.CACHE.values() for r in reshards(program_collectives(p), min_bytes=8 * 1024)]
out["reshards"] = [r.describe() for r in found]
source = Path(__file__).read_text().splitlines()
out["reshard_line"] = (
    f"{Path(__file__).name}:{source.index('product = left @ right  # the line the finding names') + 1}"
)
config.set("XLA_HLO_DEBUG", 0)
config.set("XLA_IR_DEBUG", 0)

# The block table.
z = torch.zeros(8, 8, device="xla")
xs.mark_sharding(z, xs.Mesh(np.arange(8), (4, 2), ("a", "b")), ("a", "b"))
buf = io.StringIO()
with redirect_stdout(buf):
    visualize_tensor_sharding(z, use_color=False)
out["table"] = buf.getvalue()
out["html_cells"] = debugging.tensor_sharding_html(z).count("<td")
big = torch.zeros(1024, 256).to("xla")  # 1 MiB
before = debugging.device_memory()
xs.mark_sharding(big, mesh, ("model", None))  # 4 row blocks of 256 KiB, each on 2 devices
after = debugging.device_memory()
out["memory_growth"] = [after[k] - before[k] for k in sorted(after)]

# FSDPv2: parameters sharded over an 8-way 'fsdp' axis.
fsdp_mesh = xs.Mesh(np.arange(8), (8, 1), ("fsdp", "model"))
out["fsdp_losses"], fsdp_model = train("xla", wrap=lambda m: xs.SpmdFullyShardedDataParallel(m, fsdp_mesh))
hybrid_mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "fsdp"))
out["hsdp_losses"], _ = train(
    "xla", wrap=lambda m: xs.SpmdFullyShardedDataParallel(m, hybrid_mesh, extra_data_axis="data")
)
out["fsdp_specs"] = [xs.get_sharding_spec(p) for p in fsdp_model.parameters()]


# mark_sharding_with_gradients on an activation, inside a training step.
class Constrained(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inner[1](self.inner[0](x))
        if h.device.type == "xla":
            h = xs.mark_sharding_with_gradients(h, mesh, ("data", "model"))
        return self.inner[2](h)


out["grad_constrained_losses"], _ = train("xla", wrap=lambda m: Constrained().to("xla"))

# The DTensor-style entry points and the other meshes.
from torch.distributed.tensor import Replicate, Shard  # noqa: E402

dist = xs.xla_distribute_tensor(torch.arange(32.0).reshape(8, 4), mesh, [Shard(0), Replicate()])
out["distribute_tensor_spec"] = dist.sharding_spec
out["distribute_tensor_sum"] = dist.global_tensor.sum().item()


def partition(name: str, module: torch.nn.Module, m: xs.Mesh) -> None:
    if isinstance(module, torch.nn.Linear):
        xs.mark_sharding(module.weight, m, ("model", None) if module.out_features % 4 == 0 else (None, None))


out["distribute_module_losses"], dm = train(
    "xla", wrap=lambda m: xs.xla_distribute_module(m, mesh, partition)
)
out["distribute_module_spec"] = xs.get_sharding_spec(dm[0].weight)
out["spec_apply"] = xs.ShardingSpec(mesh, (None, "model")).apply(torch.ones(4, 8).to("xla")).sharding_spec
out["hybrid_ids"] = xs.HybridMesh(ici_mesh_shape=(2, 2), dcn_mesh_shape=(2, 1)).get_logical_mesh().tolist()
xs.set_global_mesh(xs.get_1d_mesh("fsdp"))
out["global_mesh"] = repr(xs.get_global_mesh())

# FSDPv2 on a small GPT-2 from transformers, against the same model in eager on the CPU.
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402


def gpt_losses(device: str, compiled: bool = False) -> list[float]:
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16, bos_token_id=0,
                     eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model: torch.nn.Module = GPT2LMHeadModel(cfg)
    if device == "xla":
        model = xs.SpmdFullyShardedDataParallel(model)  # over the global mesh's 'fsdp' axis
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, 64, (8, 8), generator=torch.Generator().manual_seed(2)).to(device)

    def step(ids: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = torch.compile(step, backend="openxla")
    losses = []
    for _ in range(2):
        loss = step(ids)
        if device == "xla":
            torch_xla.sync()
        losses.append(loss.item())
    return losses


out["gpt_cpu_losses"] = gpt_losses("cpu")
out["gpt_fsdp_losses"] = gpt_losses("xla")
out["gpt_fsdp_compiled_losses"] = gpt_losses("xla", compiled=True)  # FSDPv2 under torch.compile

# Uneven blocks: dimensions the mesh axes do not divide (30 features and 10 rows over 4 blocks).
def uneven_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 30), torch.nn.ReLU(), torch.nn.Linear(30, 6))


def shard_uneven(model: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    xs.mark_sharding(model[0].weight, mesh, ("model", None))
    xs.mark_sharding(model[0].bias, mesh, ("model",))
    xs.mark_sharding(model[2].weight, mesh, (None, "model"))
    xs.mark_sharding(x, mesh, ("model", None))


uneven_data = (torch.randn(10, 16), torch.randn(10, 6))
out["uneven_cpu_losses"], uneven_cpu = train("cpu", make=uneven_mlp, data=uneven_data)
out["uneven_spmd_losses"], uneven_model = train("xla", shard_uneven, make=uneven_mlp, data=uneven_data)
out["uneven_weights_close"] = all(
    torch.allclose(p.cpu(), q, atol=1e-5) for p, q in zip(uneven_model.parameters(), uneven_cpu.parameters())
)
out["uneven_spec"] = xs.get_sharding_spec(uneven_model[0].weight)
rows = torch.arange(20.0).reshape(10, 2)
uneven_rows = xs.mark_sharding(rows.to("xla"), mesh4, ("x", None))
out["uneven_shards"] = [
    [s.device, list(s.data.shape), [s.indices[0].start, s.indices[0].stop], s.unpadded_data.sum().item()]
    for s in uneven_rows.local_shards
]
out["uneven_sum"] = (uneven_rows.global_tensor * 2).sum().item()
buf = io.StringIO()
with redirect_stdout(buf):
    visualize_tensor_sharding(uneven_rows.global_tensor, use_color=False)
out["uneven_table_rows"] = sum("CPU" in line for line in buf.getvalue().splitlines())
# A pending value constrained unevenly: the partitioner pads it inside the program.
graph.CACHE.clear()
pending = torch.arange(24.0, device="xla").reshape(6, 4) * 2
xs.mark_sharding(pending, mesh, ("model", None))
out["uneven_pending_spec"] = xs.get_sharding_spec(pending)
out["uneven_pending_close"] = bool(torch.equal((pending + 1).cpu(), torch.arange(24.0).reshape(6, 4) * 2 + 1))
texts = [p.executable.as_text() for p in graph.CACHE.values()]
padded = (" pad(", "f32[2,4]", "num_partitions=8")  # each device's 2 of the 6 rows, padded
out["uneven_pending_padded"] = any(all(s in t for s in padded) for t in texts)

# ParallelLoader(input_sharding=...): each batch comes sharded, here over the 'data' axis.
import torch_xla.distributed.parallel_loader as pl  # noqa: E402

data_spec = xs.ShardingSpec(mesh, ("data", None))
dataset = torch.utils.data.TensorDataset(torch.randn(32, 16), torch.randn(32, 8))
host_loader = torch.utils.data.DataLoader(dataset, batch_size=8)
dict_loader = torch.utils.data.DataLoader([{"x": x, "y": y} for x, y in dataset], batch_size=8)


def loader_losses(batches: Any, device: str) -> list[float]:
    model = mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for batch in batches:
        x, y = (batch["x"], batch["y"]) if isinstance(batch, dict) else batch
        if "loader_spec" not in out and device != "cpu":
            out["loader_spec"] = [xs.get_sharding_spec(x), xs.get_sharding_spec(y)]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # MpDeviceLoader marks the step before each batch
    return losses


out["loader_cpu_losses"] = loader_losses(host_loader, "cpu")
out["loader_losses"] = loader_losses(pl.MpDeviceLoader(host_loader, "xla", input_sharding=data_spec), "xla")
by_key = {"x": data_spec, "y": xs.ShardingSpec(mesh, ("data", "model"))}
dict_batches = list(pl.MpDeviceLoader(dict_loader, "xla", input_sharding=by_key))
out["loader_dict_specs"] = [[xs.get_sharding_spec(b[k]) for k in ("x", "y")] for b in dict_batches[:1]]
out["loader_dict_close"] = all(
    torch.equal(b["x"].cpu(), x) and torch.equal(b["y"].cpu(), y)
    for b, (x, y) in zip(dict_batches, ((d["x"], d["y"]) for d in dict_loader))
)
try:
    pl.MpDeviceLoader(dict_loader, "xla", input_sharding={"z": data_spec}).__iter__().next()
except ValueError as e:
    errors["loader_key"] = str(e)
try:
    pl.ParallelLoader(host_loader, ["xla"], input_sharding=("data", None))
except TypeError as e:
    errors["loader_type"] = str(e)

# torch.compile: the dynamo graphs compile with the inputs' shardings.
def compiled_train(steps: int) -> tuple[list[float], torch.nn.Module, int]:
    model = mlp().to("xla")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = X.to("xla"), Y.to("xla")
    shard_2d(model, x, y)

    @torch.compile(backend="openxla")
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses, compiles = [], 0
    for i in range(steps):
        before = metrics.counter_value("UncachedCompile")
        losses.append(step(x, y).item())
        if i >= 2:
            compiles += metrics.counter_value("UncachedCompile") - before
    return losses, model, compiles


graph.CACHE.clear()
out["compiled_losses"], compiled_model, out["compiled_late_compiles"] = compiled_train(4)
out["compiled_w_spec"] = xs.get_sharding_spec(compiled_model[0].weight)
# The programs take the marked layouts as inputs: some program's input is the (32, 16) weight
# split 4 ways on rows, and the partitioner inserted collectives for the addmm.
out["compiled_input_specs"] = sorted({
    str(s.spec) for p in graph.CACHE.values() for s in p.executable.input_shardings[0][0]
    if hasattr(s, "spec")
})  # fmt: skip
out["compiled_collectives"] = sorted({c.kind for p in graph.CACHE.values() for c in program_collectives(p)})
cw, cx = torch.randn(32, 16), torch.randn(16, 16)
xcw, xcx = cw.to("xla"), cx.to("xla")
xs.mark_sharding(xcw, mesh, ("model", None))


def mark_inside(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x @ w.T
    xs.mark_sharding(h, mesh, ("data", "model"))
    return torch.relu(h).sum(0) * 2


# mark_sharding is traced as the op xla::dynamo_mark_sharding: one graph, even with fullgraph.
import xlalab.dynamo as xdynamo  # noqa: E402

xdynamo.reset()
expected = torch.relu(cx @ cw.T).sum(0) * 2
marked = torch.compile(mark_inside, backend="openxla", fullgraph=True)(xcx, xcw)
out["mark_inside_close"] = bool(torch.allclose(marked.cpu(), expected, atol=1e-4))
out["mark_inside_graphs"] = sum(f.num_graphs for f in xdynamo.compiled_functions())
# The partitioned product's shape on each device: the constraint's (data, model) blocks.
out["mark_inside_dots"] = sorted({
    line.split("=")[1].split()[0]
    for f in xdynamo.compiled_functions() for g in f.graphs for p in g.programs
    for line in p.executable.as_text().splitlines() if " dot(" in line
})  # fmt: skip
# torch_xla's own spelling: the op, called directly.
ids, rows = list(range(8)), "('data', None)"
marked_op = torch.compile(
    lambda x: torch.ops.xla.dynamo_mark_sharding(x * 2, ids, [2, 4], "('data', 'model')", rows).sum(),
    backend="openxla",
)(xcx)
out["mark_op_close"] = bool(torch.allclose(marked_op.cpu(), (cx * 2).sum(), atol=1e-4))

# Op by op (the OPBYOP modes' runner): each node's program compiled for its operands' shardings.
opm = mlp().to("xla")
ox, oy = X.to("xla"), Y.to("xla")
shard_2d(opm, ox, oy)
ob = torch.randn(32).to("xla")  # unsharded: replicated over the mesh as for the fused program
oh = opm[0](ox) + ob
xs.mark_sharding(oh, mesh, ("data", "model"))
oloss = torch.nn.functional.mse_loss(opm[2](torch.relu(oh) * 2.5), oy)
oloss.backward()
watched = [oloss, oh, *[p.grad for p in opm.parameters()]]
op_graph = graph.linearize([tensor.value(t) for t in watched])
stepped = sharding.run_op_by_op(op_graph, 0)
out["op_by_op_h_spec"] = str(stepped[1].sharding.spec)
out["op_by_op_close"] = all(
    np.allclose(np.asarray(a), t.detach().cpu().numpy(), atol=1e-5) for a, t in zip(stepped, watched)
)
before_ops = len(sharding._OP_CACHE)
sharding.run_op_by_op(op_graph, 0)
out["op_by_op_new_compiles"] = len(sharding._OP_CACHE) - before_ops

# xm.send_cpu_data_to_device(input_sharding=...): moved and laid out across the mesh.
import torch_xla.core.xla_model as xm  # noqa: E402

sent_x, sent_y = torch.randn(8, 16), torch.randn(8, 8)
sent = xm.send_cpu_data_to_device({"x": sent_x, "y": sent_y}, "xla", input_sharding=by_key)
out["sent_specs"] = [xs.get_sharding_spec(sent[k]) for k in ("x", "y")]
out["sent_equal"] = torch.equal(sent["x"].cpu(), sent_x) and torch.equal(sent["y"].cpu(), sent_y)
(sent_one,) = xm.send_cpu_data_to_device(sent_x, "xla", input_sharding=data_spec)
out["sent_one_spec"] = xs.get_sharding_spec(sent_one)
try:
    xm.send_cpu_data_to_device(sent_x, "xla", input_sharding=("data", None))
except TypeError as e:
    errors["sent_type"] = str(e)

# Mistakes name the fix.
try:
    xs.mark_sharding(torch.zeros(4, 4, device="xla"), mesh, ("data",))
except ValueError as e:
    errors["spec_length"] = str(e)
try:
    xs.mark_sharding(torch.zeros(4, 4, device="xla"), mesh, ("nope", None))
except ValueError as e:
    errors["axis"] = str(e)
out["errors"] = errors
graph.wait_device_ops()
json.dump(out, sys.stdout)
