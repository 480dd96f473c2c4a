"""``torch_xla.experimental.spmd_fully_sharded_data_parallel``: where torch_xla keeps FSDPv2.

The wrapper itself lives with the rest of SPMD, in ``xlalab.distributed.spmd.fsdp``.
"""

from __future__ import annotations

from ..distributed.spmd.fsdp import SpmdFullyShardedDataParallel

__all__ = ["SpmdFullyShardedDataParallel"]
