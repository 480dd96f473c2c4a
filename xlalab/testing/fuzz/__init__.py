"""A differential fuzzer: random programs over the lowered ops, run on ``xla:0`` and eager CPU.

``programs()`` is the hypothesis strategy, ``check(program)`` the comparison, and
``python -m xlalab.testing.fuzz`` the command line (see docs/fuzzing.md).
"""

from .differential import Finding, check
from .program import Program
from .strategies import programs, source

__all__ = ["Finding", "Program", "check", "programs", "source"]
