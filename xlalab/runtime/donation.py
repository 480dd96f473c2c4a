"""Buffer donation: a barrier that overwrites a tensor lets XLA write the new value over the old.

A training step replaces every parameter and optimizer state tensor with a new value computed
from the old one. Without donation both copies live on the device until the step ends (twice
the memory of the model and its optimizer); with it, XLA aliases the old buffer to the output
(``input_output_alias`` in the HLO) and updates it in place, as a hand-written ``jax.jit`` step
with ``donate_argnums`` does. torch_xla calls this parameter aliasing (``XLA_ENABLE_PARAM_ALIASING``).

A data leaf may be donated only when nothing can read the old value after the barrier. That is
read from reference counts, so it needs no bookkeeping on the recording path and misses no
holder: the leaf node must be held by the graph alone (no tensor's storage, no view cache, no
other pending graph, no debugger) and its array by the leaf alone. Only a full barrier donates
(``mark_step``): it replaces every pending tensor of the device with its result, so no pending
node of the graph stays reachable. A read of one tensor (``.item()``) syncs part of the
pending IR and donates nothing.

A donated buffer goes to the output that replaces it. JAX gives each donated input to the first
output of its shape and dtype not yet given one, so a donating program returns those outputs
first, in the donated leaves' order (``output_order``), and its caller puts them back in the
roots' order. Paired otherwise (an optimizer's ``exp_avg`` buffer given the new parameter), XLA
must copy every such input before the program and every result after it: the copies cost time
and as much memory as donation saves. Which root replaces a leaf comes from the storage the root
computes: the device data it held before it went pending (``Storage.replaced``).

Which leaves are donated is fixed when the graph compiles (the executable is built for it). On a
later run of the same program a donated leaf that has gained a holder is copied first, so a
user's reference never sees a buffer XLA overwrote, and the program does not recompile
(counted as ``xlalab::DonationCopy``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from . import config, ir, metrics

# References to a free leaf node besides the graph's operand tuples: ``graph.nodes``, the
# ``leaves`` list and getrefcount's own argument. To a free leaf's array: the node's ``value``,
# the ``datas`` list and getrefcount's argument. (Counted inline, never through a function
# argument: after a failed torch.compile, torch 2.13 leaves every Python call holding one more
# reference to its arguments, which would make every leaf look held.)
_NODE_REFS = 3
_ARRAY_REFS = 3


def leaf_uses(nodes: Sequence[ir.Node], leaves: Sequence[ir.Node]) -> list[int]:
    """How many operand slots of ``nodes`` hold each leaf (a property of the graph's key)."""
    position = {id(n): i for i, n in enumerate(leaves)}
    uses = [0] * len(leaves)
    for n in nodes:
        for s in n.src:
            i = position.get(id(s))
            if i is not None:
                uses[i] += 1
    return uses


def free_leaves(leaves: Sequence[ir.Node], datas: Sequence[Any], uses: Sequence[int]) -> tuple[int, ...]:
    """Positions of the leaves nothing outside the graph holds (their buffers may be donated)."""
    getrefcount = sys.getrefcount
    return tuple(
        i
        for i in range(len(leaves))
        if getrefcount(leaves[i]) == _NODE_REFS + uses[i] and getrefcount(datas[i]) == _ARRAY_REFS
    )


def guard(
    leaves: Sequence[ir.Node],
    datas: list[Any],
    donated: Sequence[int],
    uses: Sequence[int],
    everything: bool = False,
) -> None:
    """Copy, in ``datas``, each donated leaf's array that something outside the graph now holds
    (``uses[k]``: the operand slots that hold leaf ``donated[k]``), or all of them."""
    getrefcount = sys.getrefcount
    for i, n_uses in zip(donated, uses):
        held = getrefcount(leaves[i]) != _NODE_REFS + n_uses or getrefcount(datas[i]) != _ARRAY_REFS
        if everything or held:
            datas[i] = jnp.copy(datas[i])
            metrics.count("xlalab::DonationCopy")


def output_order(n_outputs: int, replacing: Sequence[int]) -> tuple[int, ...]:
    """The order a donating program returns its ``n_outputs`` roots in: for each donated leaf in
    order, the root that replaces it (``replacing``, -1 where none is known), then the others.
    Empty when that is the roots' own order."""
    first = list(dict.fromkeys(r for r in replacing if 0 <= r < n_outputs))
    chosen = set(first)
    order = (*first, *[i for i in range(n_outputs) if i not in chosen])
    return () if order == tuple(range(n_outputs)) else order


def in_program_order(roots: Sequence[Any], order: Sequence[int]) -> list[Any]:
    """The roots (or anything given per root) in the order a donating program returns them."""
    return [roots[i] for i in order] if order else list(roots)


def in_root_order(outs: Sequence[Any], order: Sequence[int]) -> list[Any]:
    """A donating program's outputs (returned in ``order``) back in the roots' order."""
    back: list[Any] = [None] * len(order)
    for j, i in enumerate(order):
        back[i] = outs[j]
    return back


def enabled() -> bool:
    return bool(config.get("XLA_ENABLE_PARAM_ALIASING"))
