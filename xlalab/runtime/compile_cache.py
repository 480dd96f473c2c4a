"""Where compiled programs are kept: in memory (bounded, least recently used first out) and on
disk (JAX's persistent compilation cache), so a second run of a program compiles nothing new.

The disk cache is on by default under ``~/.cache/xlalab/xla`` (XLA_PERSISTENT_CACHE_PATH; empty
turns it off). Like JAX's own default, only programs that took a while to compile are written:
a small graph recompiles faster than it reads back.
"""

from __future__ import annotations

import itertools
import os
import warnings
import weakref
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


# Each kernel XLA:CPU compiles is mapped into memory as its own code, constant and data pages:
# about 3 memory maps a kernel, 700 for a small transformer's training step. Linux refuses a
# process more than vm.max_map_count maps (65530 by default), and XLA's LLVM then fails to
# allocate and the process crashes. So the caches hold programs within a share of that limit.
MAPS_HIGH = 0.6  # past this share of the limit, the least recently used programs are dropped...
MAPS_LOW = 0.45  # ...until the process is back under this share
_LIMIT_FILE = "/proc/sys/vm/max_map_count"
_MAPS_FILE = "/proc/self/maps"


def map_limit() -> int | None:
    """The kernel's limit of memory maps per process; None where there is none to read."""
    try:
        with open(_LIMIT_FILE, "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def maps_in_use() -> int | None:
    """How many memory maps this process holds (a read of /proc/self/maps, about 0.4 ms per
    thousand maps); None off Linux."""
    try:
        with open(_MAPS_FILE, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return None


_CACHES: weakref.WeakSet[ProgramCache] = weakref.WeakSet()
_use_clock = itertools.count()  # one clock for every cache: the least recently used of them all
_warned = [False]


class ProgramCache:
    """Compiled programs by exact key, least recently used dropped past ``limit`` programs
    (XLA_COMPILATION_CACHE_SIZE by default) or when the process nears its memory-map limit."""

    def __init__(self, limit: int | None = None, counter: str | None = "CompileCacheEviction") -> None:
        # key -> (the shared clock's reading at its last use, program); insertion order is recency
        self._programs: dict[Any, tuple[int, Any]] = {}
        self._limit = limit
        self._counter = counter  # what counts a drop (None: a cache the user's metrics never see)
        _CACHES.add(self)

    def get(self, key: Any) -> Any:
        entry = self._programs.pop(key, None)
        if entry is None:
            return None
        self._programs[key] = (next(_use_clock), entry[1])  # now the most recent
        return entry[1]

    def put(self, key: Any, prog: Any) -> None:
        """Keep ``prog``, a program compiled just now: then make room, by count and by maps."""
        self._programs.pop(key, None)
        self._programs[key] = (next(_use_clock), prog)
        limit = self._limit if self._limit is not None else int(config.get("XLA_COMPILATION_CACHE_SIZE"))
        while len(self._programs) > max(limit, 1):
            self._drop_oldest()
        make_room_for_maps()

    def _drop_oldest(self) -> None:
        del self._programs[next(iter(self._programs))]
        if self._counter is not None:
            metrics.count(self._counter)

    def _oldest_use(self) -> int:
        return next(iter(self._programs.values()))[0]

    def values(self) -> list[Any]:
        return [prog for _, prog in self._programs.values()]

    def clear(self) -> None:
        self._programs.clear()

    def __len__(self) -> int:
        return len(self._programs)

    def __bool__(self) -> bool:
        return bool(self._programs)

    def __contains__(self, key: Any) -> bool:
        return key in self._programs


def make_room_for_maps() -> None:
    """Past ``MAPS_HIGH`` of the map limit, drop the least recently used programs of all caches
    (an eighth of them at a time, counting again after each) until under ``MAPS_LOW``. A dropped
    program compiles again if its graph comes back; the first drop warns, since it usually means
    a program that recompiles on every step."""
    limit = map_limit()
    used = maps_in_use()
    if limit is None or used is None or used <= MAPS_HIGH * limit:
        return
    before, dropped = used, 0
    while used > MAPS_LOW * limit:
        held = [c for c in list(_CACHES) if c]
        total = sum(len(c) for c in held)
        if not total:
            break
        for _ in range(max(total // 8, 1)):
            oldest = min((c for c in held if c), key=lambda c: c._oldest_use(), default=None)
            if oldest is None:
                break
            oldest._drop_oldest()
            dropped += 1
        used = maps_in_use() or 0
    if dropped and not _warned[0]:
        _warned[0] = True
        warnings.warn(
            f"xlalab: this process held {before} memory maps, near the kernel's limit of {limit} "
            f"(vm.max_map_count), past which XLA cannot load compiled code and the process crashes. "
            f"XLA:CPU takes about 3 maps per compiled kernel, so {dropped} of the least recently used "
            "compiled programs were dropped; each compiles again if its graph comes back "
            "(CompileCacheEviction counts them). Many programs usually mean a graph that changes "
            "every step: the metrics report's UncachedCompile and PT_XLA_DEBUG=1 say why it recompiles.",
            stacklevel=3,
        )
