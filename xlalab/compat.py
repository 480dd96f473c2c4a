"""torch_xla's module names, resolved to xlalab, after one opt-in call.

::

    import xlalab
    xlalab.use_torch_xla_names()          # or: XLALAB_TORCH_XLA=1 at `import xlalab`

    import torch_xla                      # device(), devices(), sync(), _XLAC, runtime, ...
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla_py.xla_model as xm   # the seeds' old name

The names are served by a finder on ``sys.meta_path``, so nothing is imported until a script
asks for it, and a module reached under both names is one object
(``torch_xla.core.xla_model is xlalab.core.xla_model``):

=====================================  ====================================================
torch_xla name                         xlalab module
=====================================  ====================================================
``torch_xla``                          a package with :mod:`xlalab.core.torch_xla_api`'s
                                       ``device``, ``devices``, ``sync``, ``compile``, ...
``torch_xla._XLAC``                    :mod:`xlalab.core.xlac`
``torch_xla.runtime``                  :mod:`xlalab.core.xr`
``torch_xla.{core,debug,utils,amp,     ``xlalab.{core,debug,utils,amp,experimental}``
experimental}[.X]``                    [``.X``], wherever xlalab has that module
``torch_xla.distributed.X``            ``xlalab.distributed.X`` where it exists
``torch_xla_py.xla_model``,            :mod:`xlalab.core.xla_model`,
``torch_xla_py.data_parallel``         :mod:`xlalab.distributed.data_parallel`
=====================================  ====================================================

With ``XLALAB_TORCH_XLA=1`` in the environment an installed xlalab serves these names to any
Python process, without ``import xlalab`` first: the ``xlalab_torch_xla.pth`` line the wheel
puts in site-packages (see ``xlalab/_hook``). While the names are installed,
``importlib.metadata.version("torch_xla")`` answers with ``torch_xla.__version__``.

The aliases never shadow the real torch_xla: if it is importable, the call raises
:class:`TorchXlaInstalledError` and installs nothing. Note that libraries which probe for
torch_xla (``importlib.util.find_spec("torch_xla")``) find the aliases once installed;
:func:`remove_torch_xla_names` takes them away again.

Importing this module (``import xlalab`` does) also installs the weight-tying check of
:mod:`xlalab.core.weight_tying`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

from .core import weight_tying

ENV = "XLALAB_TORCH_XLA"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

_TOPS = ("torch_xla", "torch_xla_py")
# Names that are one xlalab module each.
_ALIASES = {
    "torch_xla._XLAC": "xlalab.core.xlac",
    "torch_xla.runtime": "xlalab.core.xr",
    "torch_xla_py.xla_model": "xlalab.core.xla_model",
    "torch_xla_py.data_parallel": "xlalab.distributed.data_parallel",
    "torch_xla.core.dynamo_bridge": "xlalab.dynamo.bridge",
}
# Packages with no single xlalab counterpart: fresh modules, filled in by _fill.
_PACKAGES = ("torch_xla", "torch_xla_py", "torch_xla.distributed")
# torch_xla.<pkg>[.<rest>] is xlalab.<pkg>[.<rest>] when xlalab has it.
_MIRRORED = ("core", "debug", "distributed", "utils", "amp", "experimental")


class TorchXlaInstalledError(ImportError, RuntimeError):
    """The real torch_xla is importable here, so xlalab will not install its names."""


def _exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False  # a missing parent package, or a module without a spec


def _target(fullname: str) -> str | None:
    """The xlalab module a torch_xla name stands for, or None."""
    if fullname in _ALIASES:
        return _ALIASES[fullname]
    parts = fullname.split(".")
    if len(parts) >= 2 and parts[0] == "torch_xla" and parts[1] in _MIRRORED:
        candidate = "xlalab." + ".".join(parts[1:])
        if _exists(candidate):
            return candidate
    return None


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves torch_xla's names. Loading puts the xlalab module itself in ``sys.modules``."""

    def __init__(self) -> None:
        self.loaded: set[str] = set()

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in _TOPS:
            return None
        if fullname in _PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if _target(fullname) is None:
            return None  # "No module named ...", and find_spec() keeps telling the truth
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module; exec_module fills it or swaps it out

    def find_distributions(self, context: Any = None) -> list[importlib.metadata.Distribution]:
        """``importlib.metadata``'s view: a ``torch_xla`` distribution, when asked for by name."""
        if getattr(context, "name", None) not in ("torch_xla", "torch-xla"):
            return []  # never in a listing of everything installed (pip list stays truthful)
        return [_TorchXlaDistribution()]

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        self.loaded.add(name)
        if name in _PACKAGES:
            _fill(module)
            return
        target = _target(name)
        assert target is not None, name
        # The import system returns whatever sys.modules holds once exec_module is done,
        # so the alias *is* the xlalab module (same object, same state, its own __spec__).
        sys.modules[name] = importlib.import_module(target)


def _fill(module: ModuleType) -> None:
    module.__xlalab__ = True  # type: ignore[attr-defined]
    if module.__name__ != "torch_xla":
        return
    from .core import torch_xla_api

    for attr in torch_xla_api.__all__:
        setattr(module, attr, getattr(torch_xla_api, attr))
    module.__doc__ = "torch_xla's names over xlalab (installed by xlalab.use_torch_xla_names())."
    module.__version__ = _version()  # type: ignore[attr-defined]
    # ``import torch_xla`` alone gives torch_xla.core.xla_model, .debug.metrics, .runtime and
    # ._XLAC as attributes, as the real package does: scripts rely on that.
    for sub in ("_XLAC", "core.xla_model", "debug.metrics", "runtime"):
        importlib.import_module(f"torch_xla.{sub}")
    # The real package registers its autocast kernels at import: torch.autocast("xla") works.
    importlib.import_module("xlalab.amp")


class _TorchXlaDistribution(importlib.metadata.Distribution):
    """Metadata for the aliased ``torch_xla``: its name and xlalab's version (``+xlalab``)."""

    def read_text(self, filename: str) -> str | None:
        if filename == "METADATA":
            return f"Metadata-Version: 2.1\nName: torch_xla\nVersion: {_version()}\n"
        return None

    def locate_file(self, path: Any) -> Any:
        import pathlib

        return pathlib.Path(__file__).parent / str(path)


def _version() -> str:
    from . import __version__

    return f"{__version__}+xlalab"


_FINDER = _Finder()
_HOOK_MODULE = "_xlalab_torch_xla"  # the .pth hook's finder (xlalab/_hook), installed at the top level


def _where(spec: importlib.machinery.ModuleSpec) -> str:
    if spec.origin and spec.origin != "namespace":
        return spec.origin
    return ", ".join(spec.submodule_search_locations or []) or "on sys.path"


def _real_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """``find_spec(name)`` by every finder but xlalab's own (this module's and the .pth hook's)."""
    saved = list(sys.meta_path)
    sys.meta_path[:] = [f for f in saved if f is not _FINDER and type(f).__module__ != _HOOK_MODULE]
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    finally:
        sys.meta_path[:] = saved


def _refuse_if_real(reason: str) -> None:
    for top in _TOPS:
        loaded = sys.modules.get(top)
        if loaded is not None and not getattr(loaded, "__xlalab__", False):
            where = getattr(loaded, "__file__", None) or "already imported"
        else:
            spec = _real_spec(top)
            if spec is None:
                continue
            where = _where(spec)
        fix = f"unset {ENV}" if reason == ENV else "don't call use_torch_xla_names()"
        raise TorchXlaInstalledError(
            f"xlalab will not stand in for {top}: the real {top} is installed here ({where}). "
            f"Either use it ({fix}), or run xlalab in an environment without it "
            f"(pip uninstall {top.replace('_', '-')}) to get xlalab under torch_xla's names. "
            "xlalab's own names work either way: import xlalab.core.xla_model as xm, "
            "xlalab.debug.metrics as met.",
            name=top,
        )


def use_torch_xla_names() -> None:
    """Make ``import torch_xla``, ``torch_xla.core.xla_model``, ``torch_xla.debug.metrics``,
    ``torch_xla.runtime``, ``torch_xla._XLAC`` and ``torch_xla_py.xla_model`` resolve to xlalab.

    Idempotent. Raises :class:`TorchXlaInstalledError` (an ImportError) and installs nothing if
    the real torch_xla is importable. :func:`remove_torch_xla_names` undoes it.
    """
    _install("use_torch_xla_names()")


def _install(reason: str) -> None:
    if _FINDER in sys.meta_path:
        return
    _refuse_if_real(reason)
    # First on the path, so that our answer wins over any later finder; the check above
    # guarantees there is no real torch_xla for it to hide.
    sys.meta_path.insert(0, _FINDER)
    # The .pth hook's job is done: from now on this finder answers (and remove_ takes it away).
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != _HOOK_MODULE]


def torch_xla_names_installed() -> bool:
    return _FINDER in sys.meta_path


def remove_torch_xla_names() -> None:
    """Take the names away: the finder and every ``sys.modules`` entry it made."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in _FINDER.loaded:
        sys.modules.pop(name, None)
    _FINDER.loaded.clear()


def _from_environment() -> None:
    raw = os.environ.get(ENV)
    if raw is None:
        return
    value = raw.strip().lower()
    if value in _FALSE:
        return
    if value not in _TRUE:
        raise ValueError(
            f"{ENV}={raw!r} is not a boolean; use 1 to resolve torch_xla's module names to xlalab "
            "at `import xlalab`, or 0 (or leave it unset) for xlalab's names only."
        )
    _install(ENV)


weight_tying.install()
_from_environment()

__all__ = [
    "ENV",
    "TorchXlaInstalledError",
    "remove_torch_xla_names",
    "torch_xla_names_installed",
    "use_torch_xla_names",
]
