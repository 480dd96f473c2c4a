"""The helpers of ``torch_xla._XLAC`` that the troubleshooting guide names, over xlalab.

``_XLAC`` is torch_xla's private C++ binding. Only the calls that users are told to make
are here: the metrics report and its parts, the default and real device names, and the
pending-graph dumps (``_get_xla_tensors_text/dot/hlo``). Any other ``_get_xla_tensors_*``
or graph helper that :mod:`xlalab.debug.graph_dump` defines is found by name, at call time.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch

from ..runtime import metrics as _metrics
from . import xla_model as _xm

_GRAPH_DUMP = "xlalab.debug.graph_dump"


def _graph_dump_function(name: str) -> Any:
    # Imported when called, not when this module loads: the dumps are an optional layer,
    # and the metrics and device helpers must work without it.
    try:
        module = importlib.import_module(_GRAPH_DUMP)
    except ImportError as e:
        raise NotImplementedError(
            f"torch_xla._XLAC.{name} needs {_GRAPH_DUMP}, which this xlalab does not have ({e})."
        ) from e
    fn = getattr(module, name, None)
    if fn is None:
        raise AttributeError(f"torch_xla._XLAC.{name}: {_GRAPH_DUMP} has no {name}")
    return fn


def _get_xla_tensors_text(tensors: Sequence[torch.Tensor]) -> str:
    """The pending IR of ``tensors`` as text, without executing anything."""
    return str(_graph_dump_function("_get_xla_tensors_text")(tensors))


def _get_xla_tensors_dot(tensors: Sequence[torch.Tensor]) -> str:
    """The pending IR of ``tensors`` as a Graphviz graph, without executing anything."""
    return str(_graph_dump_function("_get_xla_tensors_dot")(tensors))


def _get_xla_tensors_hlo(tensors: Sequence[torch.Tensor]) -> str:
    """The pending graph of ``tensors`` as HLO text, without executing anything."""
    return str(_graph_dump_function("_get_xla_tensors_hlo")(tensors))


def _xla_metrics_report() -> str:
    return _metrics.metrics_report()


def _short_xla_metrics_report(
    counter_names: list[str] | None = None, metric_names: list[str] | None = None
) -> str:
    return _metrics.short_metrics_report(counter_names, metric_names)


def _xla_counter_names() -> list[str]:
    return _metrics.counter_names()


def _xla_counter_value(name: str) -> int | None:
    return _metrics.counter_value(name)


def _xla_metric_names() -> list[str]:
    return _metrics.metric_names()


def _xla_metric_data(name: str) -> Any:
    return _metrics.metric_data(name)


def _clear_xla_counters() -> None:
    _metrics.clear_counters()


def _clear_xla_metrics() -> None:
    _metrics.clear_metrics()


def _xla_get_default_device() -> str:
    return str(_xm.xla_device())


def _xla_real_devices(devices: Sequence[Any]) -> list[str]:
    return _xm.xla_real_devices(list(devices))


# ---- the calls libraries make on their paths (HF transformers' save_pretrained, accelerate)


def _xla_get_tensor_id(tensor: torch.Tensor) -> int:
    """An id shared by xla tensors over the same storage (aliases, tied weights), distinct
    otherwise: what transformers' ``id_tensor_storage`` uses to find shared tensors."""
    from ..runtime.tensor import XlaTensor

    if not isinstance(tensor, XlaTensor):
        raise TypeError(f"_xla_get_tensor_id takes an xla tensor, got one on {tensor.device}")
    return int(tensor._st.serial)


def _xla_get_devices() -> list[str]:
    return _xm.xla_real_devices(_xm.get_xla_supported_devices())


def _xla_get_all_devices() -> list[str]:
    return _xla_get_devices()


def _xla_num_runtime_devices() -> int:
    return len(_xm.get_xla_supported_devices())


def _xla_device_kind(device: str = "") -> str:
    return _xm.xla_device_kind(device or None)


def _xla_memory_info(device: str) -> _xm.MemoryInfo:
    return _xm.get_memory_info(device)


def _xla_get_rng_seed(device: str = "") -> int:
    return _xm.get_rng_state(device or None)


def _xla_set_rng_seed(seed: int, device: str = "") -> None:
    _xm.set_rng_state(seed, device or None)


def _xla_sync_multi(
    tensors: Sequence[torch.Tensor],
    devices: Sequence[str] = (),
    wait: bool = True,
    sync_xla_data: bool = True,
) -> None:
    """Compute ``tensors`` (their pending graph only)."""
    _xm.unlazy(list(tensors))


def _xla_step_marker(
    device: str = "", devices: Sequence[str] = (), wait: bool = True, reset_scope: bool = True
) -> None:
    from ..runtime import mark_step

    mark_step(wait)


def _xla_wait_device_ops(devices: Sequence[str] = ()) -> None:
    _xm.wait_device_ops()


def _xla_optimization_barrier_(tensors: Sequence[torch.Tensor]) -> None:
    _xm.optimization_barrier_(list(tensors))


def _get_stablehlo(
    tensors: Sequence[torch.Tensor], device: str, devices: Sequence[str], bytecode: bool
) -> bytes:
    if bytecode:
        return _xm.get_stablehlo_bytecode(list(tensors))
    return _xm.get_stablehlo(list(tensors)).encode()


def _get_xla_sharding_spec(tensor: torch.Tensor) -> str:
    """The tensor's sharding in torch_xla's spec string (``{devices=[4,1]0,1,2,3}``), ``""`` if none."""
    from ..distributed.spmd.xla_sharding import get_sharding_spec

    return get_sharding_spec(tensor)


def __getattr__(name: str) -> Any:
    # Graph helpers added to graph_dump later (stablehlo, graph hashes) resolve by name.
    if name.startswith("_get_"):
        try:
            return _graph_dump_function(name)
        except (AttributeError, NotImplementedError):
            pass
    raise AttributeError(
        f"torch_xla._XLAC.{name} has no xlalab counterpart. _XLAC is torch_xla's private binding; "
        "xlalab provides the calls the troubleshooting guide names (metrics report, counters, "
        "devices, _get_xla_tensors_text/dot/hlo) and those HF transformers and accelerate make "
        "(_xla_get_tensor_id, _xla_sync_multi, ...); docs/torch_xla_names.md lists them. "
        "Use xlalab.debug.metrics or xlalab.core.xla_model."
    )
