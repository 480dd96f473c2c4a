"""Ops without a lowering run on the CPU, give the right answer and are counted."""

from __future__ import annotations

import torch

import xlalab
import xlalab.debug.metrics as met
from xlalab.runtime import events

from .conftest import counter


def test_nonzero_falls_back_and_is_counted(dev: torch.device, fresh_metrics: None) -> None:
    base = torch.arange(12.0).reshape(3, 4)
    out = torch.nonzero(base.to(dev) > 5)
    assert out.device == dev
    torch.testing.assert_close(out.cpu(), torch.nonzero(base > 5))
    assert counter("aten::nonzero") == 1
    assert "aten::nonzero" in met.executed_fallback_ops()


def test_bool_mask_indexing(dev: torch.device, fresh_metrics: None) -> None:
    base = torch.arange(12.0)
    x = base.to(dev)
    got = x[x > 5]
    assert got.device == dev
    assert got.tolist() == base[base > 5].tolist()
    assert any(
        n.startswith("aten::") and n != "aten::_local_scalar_dense" for n in met.executed_fallback_ops()
    )


def test_masked_select_and_unique(dev: torch.device, fresh_metrics: None) -> None:
    base = torch.tensor([3.0, 1.0, 3.0, 2.0, 1.0])
    x = base.to(dev)
    torch.testing.assert_close(torch.masked_select(x, x > 1).cpu(), torch.masked_select(base, base > 1))
    torch.testing.assert_close(torch.unique(x).cpu(), torch.unique(base))
    assert counter("aten::masked_select") == 1


def test_unlowered_op_result_feeds_lazy_ops(dev: torch.device, fresh_metrics: None) -> None:
    a = torch.randn(3, 3)
    # linalg eigenvalues have no lowering: the fallback result flows on into lowered ops.
    lazy = torch.linalg.eigvalsh(a @ a.T + torch.eye(3)).to(torch.float32)
    lazy_x = torch.linalg.eigvalsh((a @ a.T + torch.eye(3)).to(dev))
    torch.testing.assert_close((lazy_x * 2).cpu(), lazy * 2, rtol=1e-4, atol=1e-5)
    assert counter("aten::_linalg_eigh") + counter("aten::linalg_eigh") >= 1


def test_inplace_fallback_writes_back_through_a_view(dev: torch.device, fresh_metrics: None) -> None:
    # An in-place op that falls back must update the xla tensor (and its base) it was called on.
    # polygamma_ of order 2 (a Hurwitz zeta) has neither a lowering nor a decomposition: it
    # runs on the CPU.
    cpu = torch.tensor([0.5, 0.25, 0.75, 1.5])
    x = cpu.clone().to(dev)
    x[1:].polygamma_(2)
    cpu[1:].polygamma_(2)
    xlalab.mark_step()
    torch.testing.assert_close(x.cpu(), cpu)
    assert counter("aten::polygamma_") + counter("aten::polygamma") == 1


def test_fallback_event_names_the_user_line(dev: torch.device) -> None:
    seen: list[events.Event] = []
    unsubscribe = events.subscribe(seen.append)
    try:
        torch.nonzero(torch.ones(3, device=dev))  # THIS LINE
    finally:
        unsubscribe()
    fb = [e for e in seen if isinstance(e, events.FallbackEvent)]
    assert fb and fb[0].op == "aten::nonzero"
    assert fb[0].frames[0].file == __file__
    assert "THIS LINE" in open(__file__).read().splitlines()[fb[0].frames[0].line - 1]


def test_a_fallback_composite_that_takes_conjugate_views(dev: torch.device, fresh_metrics: None) -> None:
    # linalg_pinv runs on the CPU and builds its result from ``.mH`` of an SVD factor. Inside
    # __torch_dispatch__ torch leaves out the keys that resolve conjugate views: the fallback
    # puts them back, or the host kernels read the conjugate as the original.
    a = torch.randn(4, 3, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    got = torch.linalg.pinv(a.to(dev))
    assert "aten::linalg_pinv" in met.executed_fallback_ops()
    torch.testing.assert_close(got.cpu(), torch.linalg.pinv(a))
    neg = torch.randn(3, 3, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(torch.linalg.pinv(neg.to(dev), hermitian=False).cpu(), torch.linalg.pinv(neg))


def test_incomplete_gamma_runs_on_the_cpu_with_eagers_values(dev: torch.device, fresh_metrics: None) -> None:
    # torch.special.gammainc/gammaincc (the Gamma, Chi2 and Poisson cdfs): JAX's drifts from a
    # shape of about 300 up, goes negative for tiny shapes, and never returns in float64 at
    # a = x = 1e16. Large and tiny shapes, the edges torch defines (0, infinities, NaN) and
    # ordinary values all give eager's numbers.
    a = torch.tensor([1e6, 1e10, 3.4e38, 1e-20, 1e-7, 0.5, 2.0, 0.0, float("inf"), float("nan")])
    x = torch.tensor([1e6, 1e10, 3.4e38, 0.5, 0.5, 0.5, 3.0, 1.0, 1.0, 1.0])
    for fn in (torch.special.gammainc, torch.special.gammaincc):
        torch.testing.assert_close(fn(a.to(dev), x.to(dev)).cpu(), fn(a, x), rtol=0, atol=0, equal_nan=True)
    big = torch.tensor([1e16], dtype=torch.float64)
    got = torch.special.gammainc(big.to(dev), big.to(dev)).cpu()
    torch.testing.assert_close(got, torch.special.gammainc(big, big))
    assert counter("aten::igamma") == 2 and counter("aten::igammac") == 1
