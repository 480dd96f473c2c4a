"""Where compiled programs are kept: in memory (bounded, least recently used first out) and on
disk (JAX's persistent compilation cache), so a second run of a program compiles nothing new.

The disk cache is on by default under ``~/.cache/xlalab/xla`` (XLA_PERSISTENT_CACHE_PATH; empty
turns it off). Like JAX's own default, only programs that took a while to compile are written:
a small graph recompiles faster than it reads back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax

from . import config, metrics

# Entries larger than this total are dropped from the disk cache, oldest first.
DISK_LIMIT_BYTES = 2 * 2**30

_state: dict[str, Any] = {"path": None, "read_only": False, "explicit": False}


def configure(path: str, read_only: bool = False, min_compile_seconds: float | None = None) -> str | None:
    """Point JAX's persistent compilation cache at ``path`` (made if missing); "" turns it off.

    Returns the folder in use, or None when off or when the folder cannot be made (a warning says
    why: a cache must never stop the program).
    """
    _state["explicit"] = True
    _reset_jax_cache()
    if not path:
        jax.config.update("jax_compilation_cache_dir", None)
        _state.update(path=None, read_only=False)
        return None
    folder = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        from . import debug_files

        debug_files.warn_once("XLA_PERSISTENT_CACHE_PATH", folder, e)
        return None
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_compilation_cache_max_size", DISK_LIMIT_BYTES)
    if min_compile_seconds is not None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_seconds)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1 if min_compile_seconds == 0 else 0)
    if read_only:
        # JAX writes what it compiles; with the threshold out of reach it writes nothing, reads all.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", float("inf"))
    _state.update(path=folder, read_only=read_only)
    return folder


_JAX_EVENTS = {
    "/jax/compilation_cache/cache_hits": "PersistentCacheHit",
    "/jax/compilation_cache/cache_misses": "PersistentCacheMiss",
}


_JAX_HITS = [0]  # executables JAX's own cache gave this process


def jax_cache_hits() -> int:
    return _JAX_HITS[0]


def _on_jax_event(event: str, **_: str | int) -> None:
    counter = _JAX_EVENTS.get(event)
    if counter is not None:
        metrics.count(counter)
        if counter == "PersistentCacheHit":
            _JAX_HITS[0] += 1


jax.monitoring.register_event_listener(_on_jax_event)


def configure_from_settings() -> None:
    """Apply XLA_PERSISTENT_CACHE_PATH / _READ_ONLY (done when the backends start), unless the
    program already chose a cache (``xr.initialize_cache``)."""
    if not _state.get("explicit"):
        configure(config.get("XLA_PERSISTENT_CACHE_PATH"), config.get("XLA_PERSISTENT_CACHE_READ_ONLY"))


def _reset_jax_cache() -> None:
    """JAX opens its cache once, at the first compile: let a new folder take effect."""
    try:
        from jax._src import compilation_cache

        compilation_cache.reset_cache()
    except (ImportError, AttributeError):
        pass


def disk_cache() -> dict[str, Any]:
    """The disk cache in force: its folder (None when off) and whether it is read-only."""
    return dict(_state)


class ProgramCache:
    """Compiled programs by exact graph key, least recently used dropped past XLA_COMPILATION_CACHE_SIZE."""

    def __init__(self) -> None:
        self._programs: dict[Any, Any] = {}  # insertion order is recency order

    def get(self, key: Any) -> Any:
        prog = self._programs.pop(key, None)
        if prog is not None:
            self._programs[key] = prog  # now the most recent
        return prog

    def put(self, key: Any, prog: Any, on_evict: Callable[[Any], None] | None = None) -> None:
        self._programs[key] = prog
        limit = max(int(config.get("XLA_COMPILATION_CACHE_SIZE")), 1)
        while len(self._programs) > limit:
            oldest = next(iter(self._programs))
            evicted = self._programs.pop(oldest)
            metrics.count("CompileCacheEviction")
            if on_evict is not None:
                on_evict(evicted)

    def values(self) -> list[Any]:
        return list(self._programs.values())

    def clear(self) -> None:
        self._programs.clear()

    def __len__(self) -> int:
        return len(self._programs)

    def __bool__(self) -> bool:
        return bool(self._programs)

    def __contains__(self, key: Any) -> bool:
        return key in self._programs
