"""The pending set: which tensors' values are still IR, and so the roots of the next sync.

A ``Storage`` is the current value of a base tensor, shared by all its aliases and views
(see ``tensor.py``). Storages whose value is pending IR are kept here by creation order,
through weak references, so a storage that dies leaves the set at once.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

from . import ir, metrics
from .ir import Node


class Storage:
    """The current value of a base tensor, shared by all its aliases and views."""

    __slots__ = ("__weakref__", "device", "node", "ref", "replaced", "serial")

    def __init__(self, node: Node, device: int) -> None:
        self.node = node
        # id() of the device data this storage held before its value went pending: the leaf a
        # barrier's result replaces, whose buffer it may reuse (donation.py). An id, so that it
        # holds no reference; only a hint for pairing buffers, never for what a program computes.
        self.replaced = 0
        self.device = device
        self.serial = next(_serials)
        # One weak reference per storage: it keys the pending set and counts deaths.
        self.ref = _StorageRef(self, _on_storage_death)
        self.ref.serial = self.serial
        counters = metrics.COUNTERS
        counters["CreateXlaTensor"] = counters.get("CreateXlaTensor", 0) + 1
        if node.op is not ir.DATA and node.op is not ir.ERROR:
            _pending[self.serial] = self.ref


class _StorageRef(weakref.ref):  # type: ignore[type-arg]
    """A storage's weak reference, carrying its serial so that its death leaves the pending set."""

    __slots__ = ("serial",)
    serial: int


_serials = itertools.count()
# Storages whose node is pending IR, by creation serial: the roots of the next sync.
_pending: dict[int, weakref.ref[Storage]] = {}


def _on_storage_death(
    ref: _StorageRef, _counters: dict[str, int] = metrics.COUNTERS, _pending: dict[int, Any] = _pending
) -> None:
    # Both dicts are bound at definition (and cleared in place): finalizers still run at
    # interpreter exit, after module globals are gone. A pending value nobody holds is dropped
    # at once, so a long chain of temporaries leaves nothing for the next sync to sift through.
    _counters["DestroyXlaTensor"] = _counters.get("DestroyXlaTensor", 0) + 1
    _pending.pop(ref.serial, None)


def set_node(st: Storage, node: Node) -> None:
    """Give a storage a new value (pending IR or device data)."""
    if st.node.op is ir.DATA:
        st.replaced = id(st.node)
    st.node = node
    if node.op is not ir.DATA and node.op is not ir.ERROR:
        _pending[st.serial] = st.ref


def pending_storages(device: int | None = None) -> list[Storage]:
    """Every live storage with pending IR, in creation order (the sync's roots)."""
    out = []
    for serial in sorted(_pending):
        st = _pending[serial]()
        if (
            st is not None
            and st.node.op is not ir.DATA
            and st.node.op is not ir.ERROR
            and (device is None or st.device == device)
        ):
            out.append(st)
    return out


def forget_pending(storages: list[Storage]) -> None:
    for st in storages:
        _pending.pop(st.serial, None)


def sweep_dead() -> None:
    """Drop the entries of storages that died (safe while other threads record: the dict is
    copied in C before the loop, and pops are atomic under the GIL)."""
    for serial, ref in list(_pending.items()):
        if ref() is None:
            _pending.pop(serial, None)
