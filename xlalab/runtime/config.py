"""One registry of settings.

Each setting is declared once: name, type, default, meaning. Values come from the
environment at start and can be changed at run time from Python (a notebook cannot set
variables before import): ``config.set("XLA_SYNC_WAIT", True)``. A bad value is an error
that names the setting and what it accepts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    doc: str
    choices: tuple[str, ...] | None = None
    on_change: Callable[[Any], None] | None = None


SETTINGS: dict[str, Setting] = {}
_values: dict[str, Any] = {}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def declare(
    name: str, type_: type, default: Any, doc: str, choices: tuple[str, ...] | None = None
) -> Setting:
    s = Setting(name, type_, default, doc, choices)
    SETTINGS[name] = s
    raw = os.environ.get(name)
    _values[name] = default if raw is None else parse(s, raw)
    return s


def parse(s: Setting, raw: Any) -> Any:
    """Turn an environment string (or a Python value) into the setting's type."""
    if s.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"{s.name}={raw!r} is not a boolean; use 1/0 (or true/false). {s.doc}")
    if s.type is int:
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{s.name}={raw!r} is not an integer. {s.doc}") from None
    value = str(raw)
    if s.choices is not None:
        norm = value.strip().upper() if s.choices[0].isupper() else value.strip().lower()
        if norm not in s.choices:
            raise ValueError(f"{s.name}={raw!r} is not one of {', '.join(s.choices)}. {s.doc}")
        return norm
    return value


def get(name: str) -> Any:
    try:
        return _values[name]
    except KeyError:
        raise KeyError(f"unknown xlalab setting {name!r}; known: {', '.join(sorted(SETTINGS))}") from None


def set(name: str, value: Any) -> None:
    if name not in SETTINGS:
        raise KeyError(f"unknown xlalab setting {name!r}; known: {', '.join(sorted(SETTINGS))}")
    _values[name] = parse(SETTINGS[name], value)


declare(
    "PJRT_DEVICE",
    str,
    "",
    "Platform for xla devices: CPU, CUDA (or GPU) or TPU. Empty picks the best JAX has.",
)
declare("XLA_SYNC_WAIT", bool, False, "Block at every sync until the device has finished executing.")
