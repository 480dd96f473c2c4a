"""Every ``nn`` module in PyTorch's ModuleInfo database, on ``xla:0`` against eager CPU.

``xlalab.testing.module_sweep`` runs each module's own samples (torch's, not written for
xlalab) from the same weights both ways: outputs, buffers after the forward (BatchNorm's
running statistics), the gradients of every parameter and input, and the forwards eager
refuses, which must raise eager's error. Each module here must match and compile whole through
XLA. The last tests check that the sweep itself reports what it should: a module that is wrong
only on xla, in each of the places it looks.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import torch
from torch import nn

from xlalab.testing import module_sweep, opinfo_sweep


@cache
def _infos() -> dict[str, Any]:
    return {info.name: info for info in module_sweep.load_module_db()}


NAMES = sorted(_infos())


@pytest.mark.parametrize("name", NAMES)
def test_module_matches_eager(name: str) -> None:
    res = module_sweep.sweep_module(_infos()[name], max_samples=2)
    assert res.cls != "skipped" and res.samples > 0, f"{name}: {res.reason}"
    assert res.cls == "lowered", f"{name}: {res.cls}: {res.problems or res.fallback_ops}"


def test_error_inputs_are_checked() -> None:
    """Eager's refusals reach xla: a dtype mismatch at the op, an index out of range at the sync."""
    for name in ("nn.Embedding", "nn.NLLLoss", "nn.LSTM", "nn.RNNCell"):
        res = module_sweep.sweep_module(_infos()[name], max_samples=1)
        assert res.error_inputs > 0 and not res.problems, (name, res.problems)


# --------------------------------------------------------------------------- the sweep itself


class _Shifted(nn.Module):
    """A linear layer that is wrong only on xla, where ``where`` says."""

    where = "outputs"

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        on_xla = x.device.type == "xla"
        y = self.linear(x)
        if on_xla and self.where == "gradients":
            y = _ScaleGrad.apply(y)
        with torch.no_grad():
            self.seen += y.detach().sum(0) + (1.0 if on_xla and self.where == "buffers" else 0.0)
        return y + 1e-2 if on_xla and self.where == "outputs" else y


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: torch.Tensor) -> torch.Tensor:
        return y.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 1.5


def _info(module_cls: type[nn.Module], error_inputs: Any = None) -> Any:
    from torch.testing._internal.common_modules import FunctionInput, ModuleInfo, ModuleInput

    def inputs(
        info: Any, device: Any, dtype: Any, requires_grad: bool, training: bool, **kw: Any
    ) -> list[Any]:
        x = torch.randn(5, 4, dtype=dtype, requires_grad=requires_grad)
        return [ModuleInput(constructor_input=FunctionInput(), forward_input=FunctionInput(x))]

    return ModuleInfo(module_cls, module_inputs_func=inputs, module_error_inputs_func=error_inputs)


@pytest.mark.parametrize("where", ["outputs", "buffers", "gradients"])
def test_sweep_reports_a_module_wrong_on_xla(where: str) -> None:
    cls = type(f"Shifted_{where}", (_Shifted,), {"where": where})
    res = module_sweep.sweep_module(_info(cls), max_samples=1)
    assert res.cls == "wrong", res
    assert res.problems[0].startswith(f"train sample 0 (default): {where}:"), res.problems


def test_sweep_reports_an_error_xla_does_not_raise() -> None:
    from torch.testing._internal.common_modules import (
        ErrorModuleInput,
        FunctionInput,
        ModuleErrorEnum,
        ModuleInput,
    )

    class RefusesOnCpu(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.device.type == "cpu":
                raise ValueError("x must be 2-d")
            return x

    def errors(
        info: Any, device: Any, dtype: Any, requires_grad: bool, training: bool, **kw: Any
    ) -> list[Any]:
        sample = ModuleInput(constructor_input=FunctionInput(), forward_input=FunctionInput(torch.ones(2)))
        return [ErrorModuleInput(sample, error_on=ModuleErrorEnum.FORWARD_ERROR, error_type=ValueError,
                                 error_regex="must be 2-d")]  # fmt: skip

    info = _info(RefusesOnCpu, errors)
    with pytest.raises(opinfo_sweep.Mismatch, match="xla ran a forward eager refuses"):
        module_sweep.check_error_input(
            info, errors(info, "cpu", torch.float32, False, True)[0], torch.device("xla:0")
        )


@pytest.mark.parametrize("name", NAMES)
def test_module_compiled_matches_eager(name: str) -> None:
    # The same samples through torch.compile(backend="xlalab"): dynamo's graph and AOTAutograd's
    # forward and backward, lowered by the same table.
    res = module_sweep.sweep_module(_infos()[name], max_samples=1, compiled=True)
    assert res.cls != "skipped" and res.samples > 0, f"{name}: {res.reason}"
    assert res.cls == "lowered", f"{name}: {res.cls}: {res.problems or res.fallback_ops}"
