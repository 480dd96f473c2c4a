"""Debugging helpers for xlalab (metrics and counters, mirroring ``torch_xla.debug``)."""
