"""The device RNG: a (seed, offset) pair per xla device, kept on the host.

A random op takes the seed and the current offset as scalar graph inputs and advances the
offset, so a training step with dropout compiles once and draws new numbers every step.
"""

from __future__ import annotations

import threading

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
    for drawn in BODIES.draws:
        drawn.add(leaf)
    return ir.scalar(state[0], device, torch.int64), leaf


class _Bodies(threading.local):
    """The control-flow bodies this thread is tracing (``control_flow``), innermost last: per
    body, the offset leaves handed out meanwhile. The random ops that use them were made in the
    body, and draw there. Per thread: replica threads record their own programs."""

    def __init__(self) -> None:
        self.draws: list[set[ir.Node]] = []


BODIES = _Bodies()
