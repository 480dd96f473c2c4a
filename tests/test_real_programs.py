"""Programs users write without xlalab in mind, on the xla device against eager CPU.

Each test is a pattern from ordinary PyTorch code (a checkpoint loaded straight onto the
device, ...) that went wrong on xla; the result must be eager's, dtype, shape and strides too.
"""

from __future__ import annotations

import io

import pytest
import torch

import xlalab

DEV = torch.device("xla", 0)


def _saved(obj: object) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("map_location", [DEV, "xla", "xla:0", {"cpu": "xla:0"}], ids=str)
def test_load_cpu_checkpoint_onto_xla(map_location: object) -> None:
    """``torch.load(path, map_location=xla)`` of a CPU checkpoint (the process crashed: torch
    made the storage with xla's allocator, which there is none of). Views of one storage stay
    views of one storage, with eager's strides."""
    xlalab.device()
    base = torch.randn(4, 6)
    saved = {
        "t": base.t(),
        "v": base[1:3, 2:],
        "h": torch.randn(5).half(),
        "n": torch.tensor(3),
        "rg": torch.randn(2).requires_grad_(),
    }
    loaded = torch.load(_saved(saved), map_location=map_location)
    for k, e in saved.items():
        x = loaded[k]
        assert x.device == DEV, k
        assert (x.dtype, x.shape, x.stride()) == (e.dtype, e.shape, e.stride()), k
        assert x.requires_grad == e.requires_grad, k
        assert torch.equal(x.cpu(), e.detach()), k
    loaded["t"].mul_(2)  # written through one view, seen through the other, as in eager
    assert torch.equal(loaded["v"].cpu(), base[1:3, 2:] * 2)


def test_load_model_onto_xla_device() -> None:
    """A whole pickled module and a state dict loaded onto the device, then used."""
    xlalab.device()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).eval()
    x = torch.randn(2, 3)
    whole = torch.load(_saved(m), map_location=DEV, weights_only=False)
    assert all(isinstance(p, torch.nn.Parameter) and p.device == DEV for p in whole.parameters())
    assert whole[1].num_batches_tracked.device == DEV
    torch.testing.assert_close(whole(x.to(DEV)).cpu(), m(x))
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).to(DEV).eval()
    fresh.load_state_dict(torch.load(_saved(m.state_dict()), map_location=DEV))
    torch.testing.assert_close(fresh(x.to(DEV)).cpu(), m(x))


def test_load_onto_missing_xla_device_raises() -> None:
    xlalab.device()
    with pytest.raises(RuntimeError, match="xla device 7"):
        torch.load(_saved({"w": torch.ones(2)}), map_location="xla:7")


@pytest.mark.parametrize("memory_format", [None, torch.preserve_format, torch.contiguous_format], ids=str)
def test_copy_to_cpu_keeps_eager_layout(memory_format: torch.memory_format | None) -> None:
    """``nn.MultiheadAttention(batch_first=True)`` returns a transposed view; its ``.cpu()`` was
    row-major where eager's copy keeps the strides (so ``.view(-1)`` on it did not raise)."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.randn(2, 3, 8)
    kw = {} if memory_format is None else {"memory_format": memory_format}
    eager = mha(q, q, q)[0]
    lazy = mha.to(DEV)(q.to(DEV), q.to(DEV), q.to(DEV))[0].to("cpu", **kw)
    expected = eager.clone(**kw)
    assert lazy.stride() == expected.stride()
    torch.testing.assert_close(lazy, expected)
    for view in (lambda t: t.permute(2, 0, 1), lambda t: t[:, ::2]):
        base = torch.randn(4, 6, 5)
        assert view(base.to(DEV)).to("cpu", **kw).stride() == view(base).clone(**kw).stride()


def test_a_storage_moves_to_xla_and_back() -> None:
    """``storage.to(device="xla")`` crashed the process (torch's storage constructor asks a
    device registered from Python for an allocator it has none of)."""
    dev = xlalab.device()
    storage = torch.arange(4.0).untyped_storage()
    moved = storage.to(device=dev)
    assert moved.device == dev and moved.nbytes() == storage.nbytes()
    on_xla = torch.empty(0, device=dev).set_(moved)
    assert on_xla.device == dev and on_xla.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch.empty(0).set_(moved.cpu()).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch.UntypedStorage(5, device="cpu").nbytes() == 5  # other devices as before
    with pytest.raises(RuntimeError, match="a size in bytes only"):
        torch.UntypedStorage([1, 2], device=dev)
