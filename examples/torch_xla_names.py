"""The seeds' torch_xla snippets, unchanged, on xlalab after one opt-in call.

    python examples/torch_xla_names.py
    XLALAB_TORCH_XLA=1 python examples/torch_xla_names.py   # the same, opted in by the environment

Everything below the opt-in is written as the PyTorch/XLA docs write it: ``import torch_xla``,
``torch_xla_py.xla_model`` (the API guide's old name), ``torch_xla.debug.metrics``,
``torch_xla._XLAC._xla_metrics_report()``, ``torch_xla.runtime``, and the guide's
``clip_grad_norm_`` without ``.item()``. If the real torch_xla is installed, the opt-in refuses
(xlalab never shadows it).
"""

# ruff: noqa: E402 - the opt-in must run before the torch_xla imports it makes possible

import xlalab

xlalab.use_torch_xla_names()  # the one opt-in call (a no-op if XLALAB_TORCH_XLA=1 did it already)

# ---- API_GUIDE.md, "XLA tensors"
import torch
import torch_xla
import torch_xla_py.xla_model as xm

x = torch.randn(4, 2, device=xm.xla_device())
print(x.device)
print(x)

# ---- the modern names for the same things
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

dev = torch_xla.device()
print(dev, xm.get_xla_supported_devices(), xr.device_type(), xr.world_size(), xr.global_ordinal())

# ---- a few training steps, clipped the guide's way (no .item(): the step stays one graph)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(dev)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # made after the move
max_norm, norm_type = 1.0, 2.0
for _step in range(3):
    optimizer.zero_grad()
    loss = model(torch.randn(32, 8).to(dev)).pow(2).mean()
    loss.backward()
    parameters = [p for p in model.parameters() if p.grad is not None]
    # From the guide (its "..." is torch's inf-norm branch, not taken here):
    device = parameters[0].device
    total_norm = torch.zeros([], device=device if parameters else None)
    for p in parameters:
        param_norm = p.grad.data.norm(norm_type) ** norm_type
        total_norm.add_(param_norm)
    total_norm = total_norm ** (1.0 / norm_type)
    clip_coef = torch.tensor(max_norm, device=device) / (total_norm + 1e-6)
    for p in parameters:
        p.grad.data.mul_(torch.where(clip_coef < 1, clip_coef, torch.tensor(1.0, device=device)))
    # torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) does the same without .item() too.
    xm.optimizer_step(optimizer)

# ---- troubleshooting guide, "Metrics Report": both spellings print the same report
import torch_xla.debug.metrics as met

print(met.metrics_report())
report = torch_xla._XLAC._xla_metrics_report()  # the API guide's spelling of the same report
print("_XLAC report:", len(report.splitlines()), "lines, starting", report.splitlines()[0])
print("item() calls during training:", met.counter_value("aten::_local_scalar_dense") or 0)

# ---- the guide's save advice, done for you: xm.save moves xla tensors to the CPU first
import os
import tempfile

path = os.path.join(tempfile.mkdtemp(), "model.pt")
xm.save(model.state_dict(), path)
print({k: str(v.device) for k, v in torch.load(path).items()})
