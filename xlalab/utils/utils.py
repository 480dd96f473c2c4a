"""``torch_xla.utils.utils``: small helpers that torch_xla's examples and tests use."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
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


__all__ = [
    "FnDataGenerator",
    "LazyProperty",
    "SampleGenerator",
    "TmpFolder",
    "as_list",
    "check_env_flag",
    "flatten_nested_tuple",
    "for_each_instance",
    "getenv_as",
    "shape",
]
