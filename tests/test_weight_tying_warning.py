"""What the notebook names for things that happened inside library code, in a real IPython shell.

- xlalab's weight-tying warning for a Hugging Face model moved with ``.to(dev)`` points at the
  cell's line (not at ``transformers``' ``PreTrainedModel.to``), and says to call the model's own
  ``tie_weights()`` after the move; a plain module gets an assignment of its own paths.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests import test_lab
from tests.test_lab import Shell
from xlalab.core import weight_tying
from xlalab.core.weight_tying import XlaWeightTyingWarning

shell = test_lab.shell  # the fixture: a real IPython shell with the lab loaded

GPT2 = """\
import warnings
import xlalab
from transformers import GPT2Config, GPT2LMHeadModel
dev = xlalab.device()
config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = GPT2LMHeadModel(config).to(dev)
"""
TO_LINE = 8  # in the GPT2 cell


def test_the_weight_tying_warning_of_a_library_model_points_at_the_cell(shell: Shell) -> None:
    pytest.importorskip("transformers")
    weight_tying._reported.clear()  # warned once per model class and tie in a process
    shell.ok(GPT2)
    cell = shell.sh.execution_count - 1
    (tied,) = [w for w in shell.sh.user_ns["caught"] if issubclass(w.category, XlaWeightTyingWarning)]
    assert shell.sh.compile._filename_map.get(tied.filename) == cell, tied.filename
    assert tied.lineno == TO_LINE
    message = str(tied.message)
    assert "transformer.wte.weight and lm_head.weight" in message
    assert "model = model.to(dev); model.tie_weights()" in message, message
    assert "model.decoder.weight" not in message


def test_the_weight_tying_warning_of_a_plain_module_names_its_own_paths() -> None:
    weight_tying._reported.clear()
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    model[1].weight = model[0].weight
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.to("xla")
    (tied,) = [w for w in caught if issubclass(w.category, XlaWeightTyingWarning)]
    assert tied.filename == __file__
    assert "model = model.to(dev); model[1].weight = model[0].weight" in str(tied.message)
    assert model[0].weight is model[1].weight
