"""The device RNG: a (seed, offset) pair per xla device, kept on the host.

A random op takes the seed and the current offset as scalar graph inputs and advances the
offset, so a training step with dropout compiles once and draws new numbers every step.
"""

from __future__ import annotations

import torch

from . import backend, ir

STATE: dict[int, list[int]] = {}  # device -> [seed, offset]


MASK32 = 0xFFFFFFFF  # seeds and offsets are 32-bit: offsets wrap around


def seed_of(device: int) -> list[int]:
    state = STATE.get(device)
    if state is None:
        state = STATE[device] = [torch.initial_seed() & MASK32, 0]
    return state


def manual_seed_all(seed: int) -> None:
    for d in range(backend.device_count()):
        STATE[d] = [int(seed) & MASK32, 0]


def rng_operands(device: int) -> tuple[ir.Node, ir.Node]:
    """Seed and offset leaves for one random op; the offset advances per op.

    Both are graph inputs, so a training step with dropout compiles once.
    """
    state = seed_of(device)
    offset = state[1]
    state[1] = (offset + 1) & MASK32
    leaf = ir.scalar(offset, device, torch.int64)
    for drawn in BODY_DRAWS:
        drawn.add(leaf)
    return ir.scalar(state[0], device, torch.int64), leaf


# The offset leaves handed out while control-flow bodies are traced, one set per body being
# traced (``control_flow``): the random ops that use them were made in the body, and draw there.
BODY_DRAWS: list[set[ir.Node]] = []
