"""Stands in for ``torch_xla_py.data_parallel`` / ``torch_xla.distributed.data_parallel``
until xlalab has multi-device DataParallel (``xlalab.distributed.data_parallel``, issue 6).

The module imports, so scripts that only import it keep working; using it raises
:class:`NotImplementedError` with what to do on one device instead.
"""

from __future__ import annotations

from typing import Any, NoReturn

MESSAGE = (
    "multi-device DataParallel (torch_xla_py.data_parallel / torch_xla.distributed.data_parallel) "
    "is not built in xlalab yet: it is issue 6 (several devices). On one device no wrapper is "
    "needed: model = MNIST().to(xm.xla_device()); build the optimizer; run your loop over the "
    "batches moved with .to(device), and end each step with xm.optimizer_step(optimizer)."
)


def _refuse(what: str) -> NoReturn:
    raise NotImplementedError(f"{what}: {MESSAGE}")


class DataParallel:
    """Refuses on construction; see :data:`MESSAGE`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse("DataParallel")


def __getattr__(name: str) -> Any:
    # AttributeError, not NotImplementedError: hasattr() and introspection must keep working.
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"data_parallel.{name}: {MESSAGE}")
