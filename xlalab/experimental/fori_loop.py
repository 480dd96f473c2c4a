"""``torch_xla.experimental.fori_loop``: loops that stay one XLA ``while``.

torch's ``while_loop`` (``torch._higher_order_ops.while_loop``) works on xla tensors without
this import (the runtime's ``control_flow``): its condition and body are traced once and the
loop runs on the device. The module exists so that torch_xla's import line works, and for
torch_xla's ``fori_loop``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._higher_order_ops.while_loop import while_loop

__all__ = ["fori_loop", "while_loop"]


def fori_loop(
    lower: torch.Tensor, upper: torch.Tensor, body_fun: Callable[..., Any], *input_value: Any
) -> list[Any]:
    """``body_fun(*values)`` applied ``upper - lower`` times, on the device.

    ``lower`` and ``upper`` are integer tensors; ``body_fun`` returns the next values (one
    tensor or a tuple, as many as it takes). As torch_xla's, the result is a list: the number
    of rounds left (0), then the values.
    """
    if not input_value:
        raise ValueError("fori_loop needs at least one value to carry through the loop")

    @torch._dynamo.dont_skip_tracing  # dynamo traces xlalab's own code only where asked
    def keep_going(left: torch.Tensor, *values: Any) -> torch.Tensor:
        return left > 0

    @torch._dynamo.dont_skip_tracing  # dynamo traces xlalab's own code only where asked
    def one_round(left: torch.Tensor, *values: Any) -> tuple[Any, ...]:
        out = body_fun(*values)
        return (left - 1, *(out if isinstance(out, (tuple, list)) else (out,)))

    return list(while_loop(keep_going, one_round, (upper - lower, *input_value)))
