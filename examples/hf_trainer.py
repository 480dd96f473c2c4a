"""Train a small GPT-2 with Hugging Face's Trainer on the xla device, unchanged.

    XLALAB_TORCH_XLA=1 python examples/hf_trainer.py          # on xla:0, through xlalab
    python examples/hf_trainer.py --cpu                        # the same run on PyTorch's CPU

With XLALAB_TORCH_XLA=1 the installed xlalab answers ``import torch_xla``, so transformers'
``is_torch_xla_available()`` is true and its Trainer takes its torch_xla path: the model on
``xla:0``, ``xm.mark_step()`` after each optimizer step, ``xm.save`` for checkpoints. The model
is built from a config (nothing is downloaded); the data are random token ids. Both runs print
the same losses.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import is_torch_xla_available


class RandomTokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``count`` sequences of ``length`` token ids, the labels being the inputs (causal LM)."""

    def __init__(self, count: int, length: int, vocab: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (count, length), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu", action="store_true", help="train on PyTorch's CPU instead")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16,
        bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.output_dir or tempfile.mkdtemp(prefix="hf_trainer_"),
        per_device_train_batch_size=8,
        max_steps=args.steps,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=args.cpu,
        seed=0,
        # The batches go from host memory to the device either way; pinning buys nothing here.
        dataloader_pin_memory=False,
    )
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(32, 16, config.vocab_size))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(
        json.dumps(
            {
                "torch_xla": is_torch_xla_available(),
                "device": str(training.device),
                "param_device": str(next(model.parameters()).device),
                "losses": losses,
            }
        )
    )


if __name__ == "__main__":
    main()
