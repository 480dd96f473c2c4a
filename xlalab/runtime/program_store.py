"""Compiled programs on disk, by the exact structure of their graph: a new process skips tracing.

JAX's persistent cache (``compile_cache.py``) is keyed by the lowered HLO, so a hit there still
pays for tracing the graph function into HLO first: 0.3 to 0.5 s for a training step, in every new
process. This store sits in front of it, in the same folder (``XLA_PERSISTENT_CACHE_PATH``): a
program is saved as JAX's serialized executable under the text of its graph's structure, and a
later process with the same graph loads it without tracing, lowering or compiling. Processes with
one device use it (``usable``); others have JAX's cache alone.

The text names every node exactly as the in-memory key does (op, typed static arguments, shape,
dtype, operand positions), plus what else decides the program: the trace settings, the device,
the versions of torch, JAX and jaxlib, XLA_FLAGS, and a fingerprint of xlalab's own runtime sources (a
changed lowering never loads an old program). A file is used only when its stored text equals
the graph's text, whole; a graph whose arguments have no stable text (an object printed with its
address) is not stored. Only programs whose tracing and compile took at least ``MIN_SECONDS``
(or JAX's ``jax_persistent_cache_min_compile_time_secs``, if lower) are written, and only ones XLA
compiled in this process. A store that cannot be read or
written warns once and the program goes on.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import torch

from . import backend, compile_cache, debug_files, ir

if TYPE_CHECKING:
    from .graph import Graph

_FORMAT = 2
STORE_LIMIT_BYTES = compile_cache.DISK_LIMIT_BYTES // 2  # beside JAX's own cache, in its folder
# Programs that took this long to trace and compile are kept (JAX keeps those over 1 s of XLA
# compile; a training step of a small model takes 0.5 to 1 s here, all of which a new process
# would pay again).
MIN_SECONDS = 0.3


class _Unstable(Exception):
    """A static argument whose text would differ from one process to the next."""


def _fingerprint() -> str:
    """The versions, XLA flags and runtime sources a stored program was compiled with."""
    digest = hashlib.sha256(f"{_FORMAT}|{torch.__version__}|{jax.__version__}".encode())
    digest.update(os.environ.get("XLA_FLAGS", "").encode())  # as XLA read them, backends started
    digest.update(getattr(jax.lib, "__version__", jax.__version__).encode())
    root = Path(__file__).resolve().parent
    for path in sorted([*root.glob("*.py"), *root.glob("lowering/*.py")]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


_FINGERPRINT: list[str] = []


def _text(a: Any) -> str:
    tp = type(a)
    if a is None or tp is bool or tp is int or tp is str:
        return repr(a)
    if tp is float:
        return "f" + a.hex()
    if tp is tuple or tp is list:
        return "(" + ",".join(_text(x) for x in a) + ")"
    if tp is ir.Slot:
        return repr(a)
    if tp is ir.Const:
        value = a.value.hex() if type(a.value) is float else repr(a.value)
        return f"C({type(a.value).__name__}:{value}:{a.dtype})"
    if isinstance(a, (torch.dtype, torch.memory_format, torch.layout)):
        return str(a)
    if isinstance(a, torch._ops.OpOverload):
        return str(a)
    if isinstance(a, Enum):
        return f"{type(a).__name__}.{a.name}"
    text = repr(a)
    if " at 0x" in text or "object at" in text:
        raise _Unstable(text)
    return f"{type(a).__qualname__}:{text}"


def usable() -> bool:
    """Whether this process can use the store. A loaded executable is bound to every device of
    its client (JAX's deserializer), so only a process with one device loads it correctly."""
    return backend.device_count() == 1


def structure_text(
    graph: Graph, settings: Any, donated: tuple[int, ...], uses: tuple[int, ...], order: tuple[int, ...]
) -> str | None:
    """The exact text of ``graph``'s program compiled with the data leaves at ``donated``
    donated (a program donating fewer would run, but update less in place) and its roots
    returned in ``order``, or None when some argument has no stable text."""
    if not _FINGERPRINT:
        _FINGERPRINT.append(_fingerprint())
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    device = backend.jax_device(graph.key[-1])
    lines = [
        _FINGERPRINT[0],
        _text(settings),
        f"{device.platform}:{device.id}",
        repr(graph.roots),
        f"donated {donated} {uses} order {order}",
    ]
    try:
        for n in graph.nodes:
            operands = ",".join(str(position[id(s)]) for s in n.src)
            lines.append(f"{n.op}|{_text(n.arg)}|{_text(n.shape)}|{n.dtype}|{_text(n.outs)}|{operands}")
    except _Unstable:
        return None
    return "\n".join(lines)


def _files(text: str) -> tuple[Path, Path] | None:
    folder = compile_cache.disk_cache().get("path")
    if not folder:
        return None
    name = hashlib.sha256(text.encode()).hexdigest()
    base = Path(folder) / "xlalab-programs"
    return base / f"{name}.program", base / f"{name}.graph"


def load(text: str, device: int) -> tuple[Any, tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """(executable, donated leaves, their uses, its roots' order) stored for ``text``, for xla
    ``device`` (the one it was compiled for: the text names it), or None."""
    files = _files(text)
    if files is None or not files[0].exists():
        return None
    try:
        if files[1].read_text() != text:
            return None  # a different graph with the same digest: never load it
        payload, in_tree, out_tree, donated, uses, order = pickle.loads(files[0].read_bytes())
        from jax._src.lax import linalg as jax_linalg
        from jax.experimental.serialize_executable import deserialize_and_load

        # JAX's CPU LAPACK kernels find their routines when a program using them is lowered; a
        # program loaded ready-made is never lowered in this process, and its kernels would
        # call a null routine (a segfault). Once per process, and only for stored programs.
        jax_linalg.initialize_lapack()

        loaded = deserialize_and_load(payload, in_tree, out_tree, backend.jax_device(device).client)
        os.utime(files[0])  # recently used: the last to be dropped when the store is full
        return loaded, donated, uses, order
    except Exception as e:  # a damaged or foreign file: compile instead
        debug_files.warn_once("XLA_PERSISTENT_CACHE_PATH", str(files[0]), e)
        return None


def save(
    text: str,
    executable: Any,
    donated: tuple[int, ...],
    uses: tuple[int, ...],
    order: tuple[int, ...],
    seconds: float,
) -> None:
    """Keep a compiled program for later processes (when its compile was worth keeping)."""
    state = compile_cache.disk_cache()
    threshold = min(MIN_SECONDS, jax.config.values["jax_persistent_cache_min_compile_time_secs"])
    if state.get("read_only") or seconds < threshold:
        return
    files = _files(text)
    if files is None:
        return
    try:
        from jax.experimental.serialize_executable import serialize

        payload, in_tree, out_tree = serialize(executable)
        blob = pickle.dumps((payload, in_tree, out_tree, donated, uses, order))
        files[0].parent.mkdir(parents=True, exist_ok=True)
        for path, data in ((files[1], text.encode()), (files[0], blob)):
            partial = path.with_suffix(f".{os.getpid()}.partial")
            partial.write_bytes(data)
            os.replace(partial, path)  # readers see a whole file or none
        _trim(files[0].parent)
    except Exception as e:  # the program runs all the same
        debug_files.warn_once("XLA_PERSISTENT_CACHE_PATH", str(files[0]), e)


def _trim(folder: Path) -> None:
    """Drop the least recently used programs past the store's size (programs of an earlier
    xlalab or JAX never load again, and go first)."""
    # Other processes (a job's ranks, parallel tests) share the store and trim it too: a file
    # they removed between listing and reading it is simply gone.
    programs = []
    for path in folder.glob("*.program"):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        programs.append((st.st_mtime, st.st_size, path))
    programs.sort(key=lambda entry: entry[0])
    total = sum(size for _, size, _ in programs)
    for _, size, path in programs:
        if total <= STORE_LIMIT_BYTES:
            break
        total -= size
        path.unlink(missing_ok=True)
        path.with_suffix(".graph").unlink(missing_ok=True)
