"""``torch_xla.utils.utils``: small helpers that torch_xla's examples and tests use."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LazyProperty(Generic[T]):
    """``value`` computed by ``gen_fn`` on first use, then kept."""

    def __init__(self, gen_fn: Callable[[], T]) -> None:
        self._gen_fn: Callable[[], T] | None = gen_fn
        self._value: T | None = None

    @property
    def value(self) -> T:
        if self._gen_fn is not None:
            self._value = self._gen_fn()
            self._gen_fn = None
        return self._value  # type: ignore[return-value]


class TmpFolder:
    """A fresh temporary directory (``.name``), removed with everything in it when this object
    is garbage collected."""

    def __init__(self) -> None:
        self.name = tempfile.mkdtemp()
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.name, True)


class SampleGenerator:
    """An iterator that yields ``data`` ``sample_count`` times: a stand-in for a DataLoader
    with synthetic data. ``len()`` is ``sample_count``; each ``iter()`` starts over."""

    def __init__(self, data: Any, sample_count: int) -> None:
        self._data = data
        self._sample_count = sample_count
        self._count = 0

    def __iter__(self) -> SampleGenerator:
        return SampleGenerator(self._data, self._sample_count)

    def __len__(self) -> int:
        return self._sample_count

    def __next__(self) -> Any:
        return self.next()

    def next(self) -> Any:
        if self._count >= self._sample_count:
            raise StopIteration
        self._count += 1
        return self._data


class FnDataGenerator:
    """``count`` batches ``(data, func(data))`` with ``data = gen_tensor(batch_size, *dims)``."""

    def __init__(
        self,
        func: Callable[[Any], Any],
        batch_size: int,
        gen_tensor: Callable[..., Any],
        dims: list[int] | tuple[int, ...] | None = None,
        count: int = 1,
    ) -> None:
        self._func = func
        self._batch_size = batch_size
        self._gen_tensor = gen_tensor
        self._dims = list(dims) if dims else [1]
        self._count = count
        self._emitted = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> FnDataGenerator:
        return FnDataGenerator(self._func, self._batch_size, self._gen_tensor, self._dims, self._count)

    def __next__(self) -> tuple[Any, Any]:
        return self.next()

    def next(self) -> tuple[Any, Any]:
        if self._emitted >= self._count:
            raise StopIteration
        data = self._gen_tensor(self._batch_size, *self._dims)
        self._emitted += 1
        return data, self._func(data)


def as_list(t: Any) -> Any:
    """``t`` itself if it is a list or tuple, else ``[t]``."""
    return t if isinstance(t, (tuple, list)) else [t]


def getenv_as(name: str, type: Callable[[Any], T], defval: T | None = None) -> T | None:
    """The environment variable ``name`` converted by ``type``, or ``defval`` when it is unset.

    For ``bool`` the value is read as an integer (``"0"``/``"1"``), as torch_xla does; anything
    else is an error naming the variable."""
    env = os.environ.get(name)
    if env is None:
        return defval
    try:
        if type is bool:
            return type(int(env))
        return type(env)
    except ValueError as e:
        want = "an integer (0 or 1)" if type is bool else getattr(type, "__name__", str(type))
        raise ValueError(f"{name}={env!r}: expected {want}") from e


def check_env_flag(name: str, default: str = "") -> bool:
    """Whether ``name`` is set to 1/on/yes/true (any case)."""
    return os.getenv(name, default).upper() in ("ON", "1", "YES", "TRUE", "Y")


def shape(inputs: Any) -> Any:
    """The shapes of (nested lists/tuples of) tensors, in the same nesting."""
    if isinstance(inputs, (list, tuple)):
        return [shape(x) for x in inputs]
    return inputs.shape


def for_each_instance(value: Any, select_fn: Callable[[Any], bool], fn: Callable[[Any], Any]) -> None:
    """Call ``fn`` on every object in ``value`` (through lists, tuples, sets, dicts and object
    attributes) for which ``select_fn`` is true, once each."""
    seen: set[int] = set()

    def visit(v: Any) -> None:
        if id(v) in seen:
            return
        seen.add(id(v))
        if select_fn(v):
            fn(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                visit(k)
                visit(x)
        elif isinstance(v, (list, tuple, set)):
            for x in v:
                visit(x)
        elif hasattr(v, "__dict__"):
            for x in vars(v).values():
                visit(x)

    visit(value)


def _iter_nested(inputs: Any) -> Iterator[Any]:
    if isinstance(inputs, (list, tuple)):
        for x in inputs:
            yield from _iter_nested(x)
    else:
        yield inputs


def flatten_nested_tuple(inputs: Any) -> tuple[Any, ...]:
    return tuple(_iter_nested(inputs))


class Cleaner:
    """Calls ``func`` when this object is garbage collected."""

    def __init__(self, func: Callable[[], Any]) -> None:
        self.func = func

    def __del__(self) -> None:
        self.func()


class DataWrapper:
    """Base for objects that carry CPU tensors to send to a device: ``get_tensors()`` lists
    them, ``from_tensors(tensors)`` builds the object back from their device copies."""

    def get_tensors(self) -> list[Any]:
        raise NotImplementedError(f"{type(self).__name__}.get_tensors() is missing")

    def from_tensors(self, tensors: list[Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.from_tensors() is missing")


def for_each_instance_rewrite(value: Any, select_fn: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """``value`` rebuilt with every selected object replaced by ``fn(obj)`` (each object once)."""
    done: dict[int, Any] = {}

    def rewrite(v: Any) -> Any:
        if id(v) in done:
            return done[id(v)]
        if select_fn(v):
            out = fn(v)
        elif isinstance(v, dict):
            out = type(v)((rewrite(k), rewrite(x)) for k, x in v.items())
        elif isinstance(v, tuple) and hasattr(v, "_fields"):
            out = type(v)(*[rewrite(x) for x in v])
        elif isinstance(v, (list, tuple, set)):
            out = type(v)(rewrite(x) for x in v)
        else:
            out = v
        done[id(v)] = out
        return out

    return rewrite(value)


def list_copy_append(ilist: list[Any], item: Any) -> list[Any]:
    return [*ilist, item]


def null_print(*args: Any, **kwargs: Any) -> None:
    return None


def eprint(*args: Any, **kwargs: Any) -> None:
    print(*args, file=sys.stderr, **kwargs)


def get_print_fn(debug: bool | None = None) -> Callable[..., None]:
    """``eprint`` when ``debug`` (default: the DEBUG environment variable), else ``null_print``."""
    if debug is None:
        debug = int(os.environ.get("DEBUG", "0")) > 0
    return eprint if debug else null_print


def timed(fn: Callable[[], T], msg: str = "", printfn: Callable[..., None] = eprint) -> T:
    """``fn()``, printing how long it took after ``msg``."""
    start = time.time()
    result = fn()
    printfn(f"{msg}{time.time() - start:.2f}s")
    return result


def get_free_tcp_ports(n: int = 1) -> list[int]:
    """``n`` TCP ports free on this machine now (the OS picks them)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def parallel_work(num_workers: int, fn: Callable[..., T], *args: Any) -> list[T]:
    """``fn`` over the zipped ``args`` on ``num_workers`` threads; the results in order."""
    with futures.ThreadPoolExecutor(max_workers=num_workers) as executor:
        return list(executor.map(fn, *args))


class TimedScope:
    """``with TimedScope("step: "):`` prints the time the block took."""

    def __init__(self, msg: str = "", printfn: Callable[..., None] = eprint) -> None:
        self._msg = msg
        self._printfn = printfn
        self._start = 0.0

    def __enter__(self) -> TimedScope:
        self._start = time.time()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._printfn(f"{self._msg}{time.time() - self._start:.2f}s")


__all__ = [
    "Cleaner",
    "DataWrapper",
    "FnDataGenerator",
    "LazyProperty",
    "SampleGenerator",
    "TimedScope",
    "TmpFolder",
    "as_list",
    "check_env_flag",
    "eprint",
    "flatten_nested_tuple",
    "for_each_instance",
    "for_each_instance_rewrite",
    "get_free_tcp_ports",
    "get_print_fn",
    "getenv_as",
    "list_copy_append",
    "null_print",
    "parallel_work",
    "shape",
    "timed",
]
