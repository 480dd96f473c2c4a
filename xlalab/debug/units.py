"""Sizes and counts as a person writes them: ``5.1 KB``, ``4 B``, ``1 transfer``, ``3 times``.

For text meant to be read, not parsed. Reports that keep torch_xla's own layout (the metrics
report's ``4.00B``, PT_XLA_DEBUG's ``0.000269 GB``) format their numbers themselves, so that
tools written for torch_xla's output read xlalab's too.

Sizes step by 1024, as torch_xla's reports do, and keep three significant digits at most:
``1023 B``, ``1.0 KB``, ``5.1 KB``, ``19.5 KB``, ``196 KB``, ``1.0 MB``.
"""

from __future__ import annotations

__all__ = ["count", "format_size", "part_of", "plural", "times"]

_SIZE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def format_size(nbytes: float) -> str:
    """A size in bytes for people: ``4 B``, ``5.1 KB``, ``196 KB``, ``1.2 GB``."""
    sign = "-" if nbytes < 0 else ""
    value = abs(float(nbytes))
    if value < 1024:
        return f"{sign}{value:.0f} B"
    unit = 0
    while True:
        value /= 1024
        unit += 1
        text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"
        # 1023.7 KB rounds to "1024 KB": that is 1.0 MB.
        if float(text) < 1024 or unit == len(_SIZE_UNITS) - 1:
            return f"{sign}{text} {_SIZE_UNITS[unit]}"


def plural(noun: str) -> str:
    """The English plural of a regular noun: step -> steps, batch -> batches, entry -> entries."""
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if len(noun) > 1 and noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def count(n: int, noun: str, plural_form: str | None = None) -> str:
    """``1 transfer``, ``2 transfers``, ``0 transfers`` (give ``plural_form`` for irregular nouns)."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {plural_form or plural(noun)}"


def times(n: int) -> str:
    """How often: ``once``, ``twice``, ``3 times``."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def part_of(part: int, whole: int, noun: str, plural_form: str | None = None) -> str:
    """``1 of 3 steps``, ``both steps``, ``all 3 steps``, ``the only step``.

    When ``whole`` is smaller than ``part`` (events counted outside any completed step: none
    finished yet) the whole is not worth saying, and this is ``count(part, noun)``.
    """
    if whole < part or whole <= 0:
        return count(part, noun, plural_form)
    many = plural_form or plural(noun)
    if part == whole:
        return {1: f"the only {noun}", 2: f"both {many}"}.get(whole, f"all {whole} {many}")
    return f"{part} of {whole} {noun if whole == 1 else many}"
