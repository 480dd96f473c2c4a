"""Hugging Face architectures from tiny configs, trained lazily on xla against eager CPU.

Each brings code paths the rest of the suite has none of: Mixtral's mixture of experts (an
integer ``histc`` counting tokens per expert, ``torch._grouped_mm``), Mamba's selective scan,
Mistral's sliding-window mask, Falcon's ALiBi biases, SegFormer's overlapping patch
embeddings and efficient attention, Deformable DETR's multi-scale deformable attention
(``F.grid_sample`` at learned offsets, forward and backward). Two SGD steps (SGD keeps a
rounding difference of the gradients the size it is; Adam would scale it up to the learning
rate where gradients are tiny); losses and parameters must agree and no op may run on the CPU.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

import xlalab
import xlalab.debug.metrics as met

transformers = pytest.importorskip("transformers")

SMALL = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 48}


def _tokens(step: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(step))
    return {"input_ids": ids, "labels": ids}


def _images(step: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(step)
    pixels = torch.randn(2, 3, 32, 32, generator=gen)
    return {"pixel_values": pixels, "labels": torch.randint(0, 3, (2,), generator=gen)}


def _mixtral() -> Any:
    cfg = transformers.MixtralConfig(
        vocab_size=64, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=64, output_router_logits=True, router_aux_loss_coef=0.01, **SMALL,
    )  # fmt: skip
    return transformers.MixtralForCausalLM(cfg)


def _mamba() -> Any:
    cfg = transformers.MambaConfig(vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2)
    return transformers.MambaForCausalLM(cfg)


def _mistral() -> Any:
    cfg = transformers.MistralConfig(
        vocab_size=64, num_key_value_heads=2, max_position_embeddings=64, sliding_window=4, **SMALL
    )
    return transformers.MistralForCausalLM(cfg)


def _falcon() -> Any:
    cfg = transformers.FalconConfig(
        vocab_size=64, hidden_size=32, num_attention_heads=4, num_hidden_layers=2, alibi=True,
        new_decoder_architecture=False, hidden_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    return transformers.FalconForCausalLM(cfg)


def _segformer() -> Any:
    cfg = transformers.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
        num_attention_heads=[1, 2], mlp_ratios=[2, 2], patch_sizes=[7, 3], strides=[4, 2],
        decoder_hidden_size=16, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        classifier_dropout_prob=0.0, drop_path_rate=0.0,
    )  # fmt: skip
    return transformers.SegformerForImageClassification(cfg)


class _DeformableDetr(torch.nn.Module):
    """Deformable DETR with a loss of its own: the model's detection loss needs the vision
    extras (and matches boxes on the CPU with SciPy); this one reads every output all the same."""

    def __init__(self) -> None:
        super().__init__()
        backbone = transformers.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1],
            out_features=["stage2", "stage3", "stage4"],
        )  # fmt: skip
        cfg = transformers.DeformableDetrConfig(
            use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone, d_model=32,
            encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=8, num_feature_levels=3, encoder_n_points=2,
            decoder_n_points=2, num_labels=3, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        )  # fmt: skip
        self.detr = transformers.DeformableDetrForObjectDetection(cfg)

    def forward(self, pixel_values: torch.Tensor, boxes: torch.Tensor) -> Any:
        out = self.detr(pixel_values=pixel_values)
        out.loss = out.logits.square().mean() + torch.cdist(out.pred_boxes, boxes, p=1).mean()
        return out


def _boxes(step: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(step)
    pixels = torch.randn(2, 3, 64, 64, generator=gen)
    return {"pixel_values": pixels, "boxes": torch.rand(2, 3, 4, generator=gen) * 0.5 + 0.25}


MODELS: dict[str, tuple[Callable[[], Any], Callable[[int], dict[str, torch.Tensor]]]] = {
    "mixtral": (_mixtral, _tokens),
    "mamba": (_mamba, _tokens),
    "mistral": (_mistral, _tokens),
    "falcon": (_falcon, _tokens),
    "segformer": (_segformer, _images),
    "deformable_detr": (_DeformableDetr, _boxes),
}
# Reads the model itself makes every step: Deformable DETR's encoder checks its activations
# are finite (``if not torch.isfinite(h).all()``) while training.
MODEL_READS = {"deformable_detr": ["aten::_local_scalar_dense"]}


@pytest.mark.parametrize("name", list(MODELS))
def test_architecture_trains_lazily_as_eager(name: str, dev: torch.device) -> None:
    make, batch = MODELS[name]
    torch.manual_seed(0)
    eager = make().train()
    lazy = copy.deepcopy(eager).to(dev)
    runs = [
        (eager, torch.optim.SGD(eager.parameters(), lr=0.1), "cpu"),
        (lazy, torch.optim.SGD(lazy.parameters(), lr=0.1), dev),
    ]
    met.clear_all()
    for step in range(2):
        losses = []
        for model, opt, device in runs:
            opt.zero_grad()
            loss = model(**{k: v.to(device) for k, v in batch(step).items()}).loss
            loss.backward()
            opt.step()
            if device != "cpu":
                xlalab.mark_step()
            losses.append(loss.detach().cpu())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
    for (pname, p), q in zip(eager.named_parameters(), lazy.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5, msg=pname)
    assert met.executed_fallback_ops() == MODEL_READS.get(name, [])
