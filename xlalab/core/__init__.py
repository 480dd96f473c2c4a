"""torch_xla-shaped modules: ``xlalab.core.xla_model``."""
