"""A fuzz program: tensor inputs plus a list of steps, kept as plain JSON data.

A program is data (so hypothesis can shrink it and a regression file can replay it exactly)
and renders to Python source, one line per step; running a program *is* executing that
source, line by line, so the reproducer printed for a finding is exactly what ran.

Each step reads earlier values by index (``v0``, ``v1`` ...) and appends its results. A
step's parameters are JSON values: ``True``/``1``/``1.0`` stay distinct, floats keep NaN,
infinities and -0.0. Two wrapped forms stand for objects JSON has no literal for:
``{"dtype": "float32"}`` is ``torch.float32`` and ``{"tensor": [...], "dtype": "int64"}``
is a tensor literal created on the program's device.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Input:
    """A program input: a tensor literal, optionally a leaf that requires grad."""

    dtype: str
    shape: tuple[int, ...]
    values: tuple[Any, ...]  # flat, row-major
    grad: bool = False


@dataclass(frozen=True)
class Step:
    """One op applied to earlier values; ``args`` index the value list."""

    op: str
    args: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Program:
    inputs: tuple[Input, ...]
    steps: tuple[Step, ...]
    backward: bool = False
    # (step index, parameter name, other value): the program is run a second time on xla
    # with that one argument changed, so a compiled graph reused for the wrong argument shows.
    variant: tuple[int, str, Any] | None = None

    def with_variant(self) -> Program | None:
        """The program with its variant argument swapped in (None if it has no variant)."""
        if self.variant is None:
            return None
        index, name, value = self.variant
        steps = list(self.steps)
        steps[index] = replace(steps[index], params={**steps[index].params, name: value})
        return replace(self, steps=tuple(steps), variant=None)

    def ops(self) -> set[str]:
        return {s.op for s in self.steps}

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> str:
        data = {
            "version": FORMAT_VERSION,
            "inputs": [
                {"dtype": i.dtype, "shape": list(i.shape), "values": list(i.values), "grad": i.grad}
                for i in self.inputs
            ],
            "steps": [{"op": s.op, "args": list(s.args), "params": s.params} for s in self.steps],
            "backward": self.backward,
            "variant": list(self.variant) if self.variant is not None else None,
        }
        return json.dumps(data, indent=1)

    @staticmethod
    def from_json(text: str) -> Program:
        data = json.loads(text)
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"fuzz program format version {data.get('version')!r}, expected {FORMAT_VERSION}"
            )
        variant = data.get("variant")
        return Program(
            inputs=tuple(
                Input(i["dtype"], tuple(i["shape"]), tuple(i["values"]), bool(i["grad"]))
                for i in data["inputs"]
            ),
            steps=tuple(Step(s["op"], tuple(s["args"]), dict(s["params"])) for s in data["steps"]),
            backward=bool(data["backward"]),
            variant=(int(variant[0]), str(variant[1]), variant[2]) if variant is not None else None,
        )


# ---------------------------------------------------------------------- rendering


def fmt(value: Any) -> str:
    """Python source for a parameter value."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "-float('inf')"
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        if "tensor" in value:
            return f"torch.tensor({fmt(value['tensor'])}, dtype=torch.{value['dtype']}, device=dev)"
        return f"torch.{value['dtype']}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    raise TypeError(f"a fuzz parameter cannot be {value!r}")


def nested(values: tuple[Any, ...], shape: tuple[int, ...]) -> Any:
    """Row-major flat values as nested lists of ``shape`` (a scalar for shape ``()``)."""
    if not shape:
        return values[0]
    if len(shape) == 1:
        return list(values)
    inner = math.prod(shape[1:])
    return [nested(values[k * inner : (k + 1) * inner], shape[1:]) for k in range(shape[0])]


def input_line(k: int, inp: Input) -> str:
    if 0 in inp.shape:
        src = f"torch.empty({list(inp.shape)}, dtype=torch.{inp.dtype})"
    else:
        src = f"torch.tensor({fmt(nested(inp.values, inp.shape))}, dtype=torch.{inp.dtype})"
    src += ".to(dev)"
    if inp.grad:
        src += ".requires_grad_()"
    return f"v{k} = {src}"


def make_input(inp: Input) -> torch.Tensor:
    """The input's eager CPU tensor (what ``input_line`` builds before ``.to(dev)``)."""
    dtype = getattr(torch, inp.dtype)
    if 0 in inp.shape:
        return torch.empty(inp.shape, dtype=dtype)
    return torch.tensor(nested(inp.values, inp.shape), dtype=dtype)


def loss_line(names: list[str]) -> str:
    return "loss = " + " + ".join(f"{n}.double().sum()" for n in names)
