"""xlalab: see what a lazy-tensor XLA program does.

``import xlalab`` registers the ``xla`` device with torch. The runtime lives in
``xlalab.runtime``; torch_xla-shaped modules in ``xlalab.core`` and ``xlalab.debug``.
"""

from __future__ import annotations

# The debug layer subscribes to the runtime's events when its settings ask for it (PT_XLA_DEBUG=1,
# XLA_SAVE_TENSORS_FILE, ...), so a script needs nothing but `import xlalab`.
from . import amp as amp  # torch.autocast("xla") works after a plain `import xlalab`
from . import debug as debug
from . import dynamo as dynamo  # backend="xlalab" / "openxla" for torch.compile (dynamo loads lazily)
from .compat import use_torch_xla_names as use_torch_xla_names  # also installs the weight-tying check
from .runtime import device, devices, mark_step, sync, wait_device_ops

__version__ = "0.1.0"


def load_ipython_extension(shell: object) -> None:
    """``%load_ext xlalab``: the notebook layer (imported only here: the runtime never needs IPython)."""
    from .lab import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: object) -> None:
    from .lab import unload_ipython_extension as unload

    unload(shell)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where Jupyter's extension tools find the prebuilt JupyterLab extension (the wheel and
    ``make install`` put it in ``share/jupyter/labextensions`` themselves)."""
    return [{"src": "labextension", "dest": "xlalab-jupyterlab"}]

__all__ = ["device", "devices", "mark_step", "sync", "wait_device_ops"]
