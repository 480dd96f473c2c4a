"""Debugging helpers for xlalab (metrics and counters, mirroring ``torch_xla.debug``)."""

from . import pt_xla_debug as _pt_xla_debug
from . import save_tensors as _save_tensors

_pt_xla_debug.install()  # PT_XLA_DEBUG* follow xlalab.runtime.config from here on
_save_tensors.install()  # XLA_SAVE_TENSORS_FILE/FMT likewise
