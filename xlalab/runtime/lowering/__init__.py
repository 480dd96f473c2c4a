"""Lowering rules, one module per family; importing this package fills the table."""

from __future__ import annotations

import importlib

from .registry import LOWERINGS, lowering

# Each module registers its ops on import. Modules written in parallel may not all
# exist yet in every checkout of the tree; the table is whatever is present.
for _name in ("views", "random", "factories", "elementwise", "reductions", "nn", "linalg", "indexing"):
    try:
        importlib.import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError:  # TEMPORARY while the families are being written
        pass

__all__ = ["LOWERINGS", "lowering"]
