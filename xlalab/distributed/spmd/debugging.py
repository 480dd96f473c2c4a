"""Which device holds which block of a sharded tensor (``torch_xla.distributed.spmd.debugging``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...runtime import backend, sharding
from .xla_sharding import sharding_of

_COLORS = ("red", "green", "blue", "magenta", "cyan", "yellow", "bright_red", "bright_green",
           "bright_blue", "bright_magenta", "bright_cyan", "bright_yellow")  # fmt: skip


def block_devices(spec: sharding.ShardingSpec | None, ndim: int) -> np.ndarray:
    """A grid of device-id lists: entry ``[i, j]`` holds the devices with block ``(i, j)`` of a
    (at most 2-D) tensor. An unsharded tensor is one block on every device."""
    if ndim > 2:
        raise ValueError(
            f"visualize_tensor_sharding draws 1-D and 2-D tensors; this one has {ndim} dimensions"
        )
    if spec is None or spec.is_replicated():
        ids = list(spec.device_ids) if spec is not None else list(sharding.default_device_ids())
        grid = np.empty((1, 1), dtype=object)
        grid[0, 0] = ids
        return grid
    tiles, replicas = spec.tile_assignment()
    tiles = tiles.reshape(*spec.tile_shape(), replicas)
    shape = (1, *spec.tile_shape()) if ndim == 1 else spec.tile_shape()
    if ndim == 0:
        shape = (1, 1)
    grid = np.empty(shape, dtype=object)
    flat = tiles.reshape(-1, replicas)
    for k, idx in enumerate(np.ndindex(*shape)):
        grid[idx] = [int(d) for d in flat[k]]
    return grid


def visualize_sharding(spec: sharding.ShardingSpec | None, ndim: int, use_color: bool = True) -> Any:
    """Print the block layout as a table (rich's, as torch_xla draws it) and return the table."""
    import rich.box
    import rich.console
    import rich.table

    grid = block_devices(spec, ndim)
    kind = backend.hw_name()
    table = rich.table.Table(show_header=False, show_lines=True, padding=(1, 2), box=rich.box.SQUARE)
    for _ in range(grid.shape[1]):
        table.add_column(justify="center")
    for row in grid:
        cells = []
        for devices in row:
            label = f"{kind} {','.join(map(str, devices))}"
            color = _COLORS[devices[0] % len(_COLORS)] if use_color else ""
            cells.append(f"[{color}]{label}[/{color}]" if color else label)
        table.add_row(*cells)
    console = rich.console.Console(no_color=not use_color, highlight=False)
    console.print(table)
    return table


def visualize_tensor_sharding(t: torch.Tensor, use_color: bool = True) -> Any:
    """Print which device holds which block of ``t`` (1-D or 2-D), and return the table."""
    return visualize_sharding(sharding_of(t), t.dim(), use_color=use_color)


def tensor_sharding_html(t: torch.Tensor) -> str:
    """The block table of ``t`` as HTML (for a notebook): one cell per block, coloured by its first
    device, with the devices that hold it."""
    from html import escape

    spec = sharding_of(t)
    grid = block_devices(spec, t.dim())
    kind = backend.hw_name()
    title = spec.hlo_string() if spec is not None else "unsharded"
    rows = []
    for row in grid:
        cells = []
        for devices in row:
            hue = (devices[0] * 47) % 360
            label = escape(f"{kind} {','.join(map(str, devices))}")
            cells.append(
                f'<td style="background:hsl({hue},60%,85%);border:1px solid #555;padding:8px 14px;'
                f'text-align:center">{label}</td>'
            )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<table class="xlalab-sharding" title="{escape(title)}" style="border-collapse:collapse">'
        + "".join(rows)
        + f"</table><div><code>{escape(title)}</code></div>"
    )


def device_memory() -> dict[str, int]:
    """Bytes of live device arrays on each xla device (``xla:i``), counting each device's own
    blocks of sharded arrays: where SPMD put the data. Read from the arrays' shardings, so no
    data is touched."""
    import math

    import jax

    index = {d: i for i, d in enumerate(backend.global_jax_devices())}
    # Bytes per device set: most arrays share a few shardings, so devices are visited per set.
    by_set: dict[int, tuple[Any, int]] = {}
    for array in jax.live_arrays():
        try:
            layout = array.sharding
            block = math.prod(layout.shard_shape(array.shape)) * array.dtype.itemsize
            devices = layout.device_set
        except Exception:  # an array being deleted meanwhile, or a sharding with no blocks
            continue
        held = by_set.get(id(devices))
        by_set[id(devices)] = (devices, block + (held[1] if held else 0))
    totals = {f"xla:{i}": 0 for i in range(len(index))}
    for devices, nbytes in by_set.values():
        for device in devices:
            i = index.get(device)
            if i is not None:
                totals[f"xla:{i}"] += nbytes
    return totals
