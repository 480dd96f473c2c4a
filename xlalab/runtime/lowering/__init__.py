"""Lowering rules, one module per family; importing this package fills the table."""

from __future__ import annotations

import importlib

from .registry import LOWERINGS, lowering

# Each module registers its ops on import.
_MODULES = (
    "views", "random", "factories", "elementwise", "reductions", "nn", "linalg", "indexing", "rnn", "prims",
    "upsample", "sampling", "distance", "embedding_bag", "quantize", "ctc", "padding", "pooling", "fft",
    "optim", "special",  # last: it reads the finished table
)  # fmt: skip
for _name in _MODULES:
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["LOWERINGS", "lowering"]
