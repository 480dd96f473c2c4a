"""Lowerings of reflection and replication padding (``F.pad`` modes "reflect" and "replicate")
in 1, 2 and 3 spatial dims, and their backward ops.

Being lowerings, these ops get torch's meta kernels as their shape rules: a call eager refuses
(a reflect pad as large as the input, a padded size below one, a wrong number of pads) finds no
shape and runs eagerly, which raises eager's own error at the user's line. (torch's Python
decompositions of these ops check nothing, so running them instead returned values.)

Each padded axis is one gather with a trace-time index: the source position of every output
position, computed with the formulas of torch's kernels (a negative pad crops). A backward is
``jax.vjp`` of its forward: the scatter-add of the gather.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .registry import lowering

aten = torch.ops.aten

Array = jax.Array


def _source_index(size: int, before: int, after: int, reflect: bool) -> np.ndarray:
    """For each output position along one axis, the input position it copies."""
    j = np.arange(size + before + after)
    if reflect:
        last = size + before - 1  # the output position of the input's last element
        src = np.where(j < before, 2 * before - j, np.where(j <= last, j, 2 * last - j))
    else:
        src = np.clip(j, before, size + before - 1)
    # Output position 0 is input position -before when the pad crops (before < 0).
    return src - max(before, 0) + max(-before, 0)


def _pad(x: Array, padding: Sequence[int], reflect: bool) -> Array:
    # padding lists (before, after) pairs from the last dim backwards, as constant_pad_nd's.
    for i in range(len(padding) // 2):
        axis = x.ndim - 1 - i
        index = _source_index(x.shape[axis], padding[2 * i], padding[2 * i + 1], reflect)
        x = jnp.take(x, index, axis=axis)
    return x


def _register(nd: int, reflect: bool) -> None:
    name = f"{'reflection' if reflect else 'replication'}_pad{nd}d"

    def forward(x: Array, padding: Sequence[int]) -> Array:
        return _pad(x, padding, reflect)

    def backward(grad_output: Array, x: Array, padding: Sequence[int]) -> Array:
        _, pullback = jax.vjp(lambda x_: _pad(x_, padding, reflect), x)
        return pullback(grad_output)[0]  # type: ignore[no-any-return]

    lowering(getattr(aten, name).default)(forward)
    lowering(getattr(aten, f"{name}_backward").default)(backward)


for _nd in (1, 2, 3):
    for _reflect in (True, False):
        _register(_nd, _reflect)
