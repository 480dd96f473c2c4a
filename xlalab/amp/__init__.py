"""``torch_xla.amp``: mixed precision on the ``xla`` device.

- :class:`autocast` (and ``torch.autocast("xla")``): bfloat16 matmuls and convolutions,
  float32 for softmax, norms and losses;
- :class:`GradScaler`: PyTorch's loss scaler for float16 training, on ``xla``;
- :mod:`.syncfree`: ``SGD``, ``Adam``, ``AdamW`` whose ``step(found_inf=...)`` skips the update
  on overflow inside the graph, without reading ``found_inf`` on the host.
"""

from __future__ import annotations

from typing import Any

import torch

from . import syncfree
from .autocast_mode import autocast, install

install()  # torch.autocast("xla") works once xlalab's amp is imported (xlalab imports it)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler`` on the ``xla`` device (float16 loss scaling)."""

    def __init__(self, device: str = "xla", *args: Any, **kwargs: Any) -> None:
        super().__init__(device, *args, **kwargs)


__all__ = ["GradScaler", "autocast", "syncfree"]
