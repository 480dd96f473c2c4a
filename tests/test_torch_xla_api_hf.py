"""Saving, loading and Hugging Face on the xla device, as a torch_xla user does it.

- ``torch.save`` of xla tensors, Parameters and state dicts loads with ``torch.load``'s default
  ``weights_only=True``: back on the xla device, or on the CPU with ``map_location``, also in a
  process that never imports xlalab;
- transformers' ``save_pretrained``/``from_pretrained`` round trip of a small GPT-2 on ``xla:0``;
- transformers' ``Trainer`` with ``XLALAB_TORCH_XLA=1`` (through the installed .pth hook) trains
  on ``xla:0`` with the losses of the same run on PyTorch's CPU (``examples/hf_trainer.py --cpu``),
  checkpoints, and resumes from a checkpoint with the uninterrupted run's losses.

Every interpreter starts at module start and runs alongside the others.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import xlalab.core.xla_model as xm

ROOT = Path(__file__).resolve().parents[1]

LOAD_WITHOUT_XLALAB = textwrap.dedent(
    """
    import sys, torch
    data = torch.load(sys.argv[1], map_location="cpu")
    print({k: (type(v).__name__, str(v.device), v.requires_grad) for k, v in data.items() if k != "sd"})
    print(sorted(data["sd"]), "xlalab" in sys.modules)
    """
)

HF_ROUND_TRIP = textwrap.dedent(
    """
    import json, sys, tempfile, os, torch
    import xlalab
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import is_torch_xla_available
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).to("xla:0").eval()
    out = tempfile.mkdtemp()
    model.save_pretrained(out)
    loaded = GPT2LMHeadModel.from_pretrained(out).to("xla:0")
    ids = torch.randint(0, 64, (1, 8))
    same = torch.equal(loaded(ids.to("xla:0")).logits.cpu(), model(ids.to("xla:0")).logits.cpu())
    print(json.dumps({"torch_xla": is_torch_xla_available(), "files": sorted(os.listdir(out)), "same": same,
                      "tied": loaded.lm_head.weight is loaded.transformer.wte.weight}))
    """
)

# The Trainer's checkpoints on xla (xm.save, _maybe_convert_to_cpu, RNG state) and resuming from
# one (set_rng_state, send_cpu_data_to_device of the optimizer state): the resumed steps must be
# the uninterrupted run's.
CHECKPOINT_RESUME = textwrap.dedent(
    """
    import json, os, runpy, sys, torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    example = runpy.run_path(sys.argv[1])
    out = sys.argv[2]

    def trainer():
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16, bos_token_id=0,
                         eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=4,
                                 learning_rate=1e-2, logging_steps=1, save_strategy="steps", save_steps=2,
                                 report_to=[], seed=0, dataloader_pin_memory=False)
        data = example["RandomTokens"](32, 16, 64)
        return Trainer(model=GPT2LMHeadModel(cfg), args=args, train_dataset=data)

    whole = trainer()
    whole.train()
    resumed = trainer()
    resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
    losses = lambda t: [h["loss"] for h in t.state.log_history if "loss" in h]
    from transformers.utils import is_torch_xla_available
    import torch_xla.debug.metrics as met
    print(json.dumps({"files": sorted(os.listdir(os.path.join(out, "checkpoint-2"))),
                      "torch_xla": is_torch_xla_available(), "device": str(whole.args.device),
                      "whole": losses(whole), "resumed": losses(resumed),
                      "fallbacks": met.executed_fallback_ops(),
                      "fused_steps": met.counter_value("xla::_fused_adamw_")}))
    """
)

PIN_MEMORY = textwrap.dedent(
    """
    import torch, xlalab
    loader = torch.utils.data.DataLoader(torch.arange(8.0), batch_size=4, pin_memory=True)
    print([b.tolist() for b in loader])
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XLALAB_TORCH_XLA"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _hook_env(userbase: Path) -> dict[str, str]:
    """XLALAB_TORCH_XLA=1 with the wheel's .pth hook in a user site-packages, as pip installs it."""
    env = _env(PYTHONUSERBASE=str(userbase))
    out = subprocess.run(
        [sys.executable, "-c", "import site; print(site.getusersitepackages())"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    target = Path(out.stdout.strip())
    target.mkdir(parents=True)
    for name in ("xlalab_torch_xla.pth", "_xlalab_torch_xla.py"):
        (target / name).write_text((ROOT / "xlalab" / "_hook" / name).read_text())
    env["XLALAB_TORCH_XLA"] = "1"
    return env


def _spawn(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _saved_file(path: Path) -> None:
    dev = torch.device("xla", 0)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).to(dev)
    t = torch.arange(4.0, device=dev).requires_grad_()
    torch.save({"sd": model.state_dict(), "t": t, "p": model.weight, "half": t.detach().half()}, path)


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    tmp = tmp_path_factory.mktemp("hf")
    saved = tmp / "saved.pt"
    _saved_file(saved)
    hook = _hook_env(tmp / "userbase")
    example = str(ROOT / "examples" / "hf_trainer.py")
    started = {
        "load_cpu": _spawn(["-c", LOAD_WITHOUT_XLALAB, str(saved)], _env(), tmp),
        "trainer_cpu": _spawn(
            [example, "--cpu", "--steps", "4", "--output-dir", str(tmp / "cpu")], _env(), tmp
        ),
        "checkpoint": _spawn(["-c", CHECKPOINT_RESUME, example, str(tmp / "ckpt")], hook, tmp),
        "hf_names_on": _spawn(["-c", HF_ROUND_TRIP], hook, tmp),
        "hf_names_off": _spawn(["-c", HF_ROUND_TRIP], _env(), tmp),
        "pin_memory": _spawn(["-c", PIN_MEMORY], _env(), tmp),
    }
    yield started
    for p in started.values():
        if p.poll() is None:
            p.kill()
            p.wait()


_done: dict[int, tuple[int, str, str]] = {}


def _result(p: subprocess.Popen[str]) -> tuple[int, str, str]:
    if id(p) not in _done:
        out, err = p.communicate(timeout=600)
        _done[id(p)] = (p.returncode, out, err)
    return _done[id(p)]


def _json(p: subprocess.Popen[str]) -> dict[str, object]:
    code, out, err = _result(p)
    assert code == 0, f"exit {code}\n{out}\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- torch.save / torch.load


def test_torch_load_weights_only_brings_xla_tensors_back(dev: torch.device) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).to(dev)
    t = torch.arange(4.0, device=dev).requires_grad_()
    buf = io.BytesIO()
    torch.save({"sd": model.state_dict(), "t": t, "p": model.weight}, buf)
    buf.seek(0)
    data = torch.load(buf)  # weights_only=True, torch's default
    assert isinstance(data["sd"], OrderedDict) and data["sd"]["weight"].device == dev
    assert data["t"].device == dev and data["t"].requires_grad
    assert isinstance(data["p"], torch.nn.Parameter) and data["p"].device == dev
    torch.testing.assert_close(data["sd"]["weight"].cpu(), model.weight.cpu(), rtol=0, atol=0)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert on_cpu["sd"]["bias"].device.type == "cpu" and type(on_cpu["p"]) is torch.nn.Parameter
    fresh = torch.nn.Linear(3, 2).to(dev)
    fresh.load_state_dict(torch.load(io.BytesIO(buf.getvalue()))["sd"])
    torch.testing.assert_close(fresh.bias.cpu(), model.bias.cpu(), rtol=0, atol=0)


def test_xm_save_loads_weights_only(dev: torch.device, tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2).to(dev)
    xm.save({"model": model.state_dict(), "epoch": 3}, tmp_path / "ckpt.pt")
    data = torch.load(tmp_path / "ckpt.pt")
    assert data["epoch"] == 3 and data["model"]["weight"].device.type == "cpu"


def test_torch_save_of_xla_tensors_loads_on_cpu_without_xlalab(
    procs: dict[str, subprocess.Popen[str]],
) -> None:
    code, out, err = _result(procs["load_cpu"])
    assert code == 0, err
    first, second = out.strip().splitlines()
    assert eval(first) == {
        "t": ("Tensor", "cpu", True),
        "p": ("Parameter", "cpu", True),
        "half": ("Tensor", "cpu", False),
    }
    assert second == "['bias', 'weight'] False"


# --------------------------------------------------------------------------- Hugging Face


def test_trainer_on_xla_matches_cpu(procs: dict[str, subprocess.Popen[str]]) -> None:
    # The xla run is the checkpointing one below (the example's model, data and arguments, with
    # checkpoints every 2 steps, which do not change the losses), under XLALAB_TORCH_XLA=1.
    xla = _json(procs["checkpoint"])
    cpu = _json(procs["trainer_cpu"])
    assert xla["torch_xla"] is True and xla["device"] == "xla:0"
    assert cpu["torch_xla"] is False and cpu["device"] == "cpu"
    assert len(xla["whole"]) == 4  # type: ignore[arg-type]
    torch.testing.assert_close(torch.tensor(xla["whole"]), torch.tensor(cpu["losses"]), rtol=1e-4, atol=1e-4)
    # Nothing ran on the CPU, the default fused AdamW step included; what reads the device is the
    # Trainer's logging (.item() of the loss, which torch_xla counts as aten::_local_scalar_dense).
    assert set(xla["fallbacks"]) <= {"aten::_local_scalar_dense"}, xla["fallbacks"]  # type: ignore[arg-type]
    assert xla["fused_steps"], "the Trainer's default optimizer is AdamW(fused=True)"


def test_trainer_checkpoint_and_resume_on_xla(procs: dict[str, subprocess.Popen[str]]) -> None:
    report = _json(procs["checkpoint"])
    assert report["device"] == "xla:0"
    assert {"model.safetensors", "optimizer.pt", "rng_state.pth", "scheduler.pt"} <= set(report["files"])  # type: ignore[arg-type]
    whole, resumed = report["whole"], report["resumed"]
    assert len(whole) == 4 and len(resumed) == 4  # type: ignore[arg-type]
    # The resumed run's own steps (3 and 4) are the uninterrupted run's.
    torch.testing.assert_close(torch.tensor(resumed[2:]), torch.tensor(whole[2:]), rtol=1e-5, atol=1e-5)  # type: ignore[index]


# transformers and safetensors tell tied weights apart by `storage().data_ptr()`: an xla
# tensor's storage() gives its storage's identity (shared by views and aliases) and no memory.
def test_save_pretrained_round_trip_with_names(procs: dict[str, subprocess.Popen[str]]) -> None:
    report = _json(procs["hf_names_on"])
    files = ["config.json", "generation_config.json", "model.safetensors"]
    assert report == {"torch_xla": True, "files": files, "same": True, "tied": True}


def test_save_pretrained_round_trip_without_names(procs: dict[str, subprocess.Popen[str]]) -> None:
    report = _json(procs["hf_names_off"])
    assert report["torch_xla"] is False and report["same"] is True and report["tied"] is True


def test_dataloader_pin_memory_with_the_xla_device_present(procs: dict[str, subprocess.Popen[str]]) -> None:
    code, out, err = _result(procs["pin_memory"])
    assert code == 0, err[-2000:]
    assert out.strip() == "[[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]"
