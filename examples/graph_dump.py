"""Look at a pending graph before it runs, and save the graph of every step to a file.

    python examples/graph_dump.py
    XLA_IR_DEBUG=1 XLA_HLO_DEBUG=1 python examples/graph_dump.py   # with source lines
    XLA_SAVE_TENSORS_FILE=/tmp/graphs.txt XLA_SAVE_TENSORS_FMT=dot python examples/graph_dump.py

``get_tensors_text/dot/hlo/stablehlo`` (torch_xla's ``_get_xla_tensors_*``) print the graph
that computes the given tensors without compiling or running it. With XLA_IR_DEBUG each node
says where user code made it (``location=fn@file:line``, then every user frame in ``frames=``);
backward nodes point at the forward line they differentiate. XLA_SAVE_TENSORS_FILE appends
one block per sync (its Python frames, the graph, the graph hash) to ``<file>.<ordinal>`` once
``xlalab.debug`` (any of its modules) is imported.
In a notebook, ``config.set`` the settings after import, as below.
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

import xlalab
from xlalab.debug.graph_dump import get_tensors_dot, get_tensors_hlo, get_tensors_text
from xlalab.runtime import config

config.set("XLA_IR_DEBUG", True)  # or XLA_IR_DEBUG=1 in the environment


def main() -> None:
    torch.manual_seed(0)
    dev = xlalab.device()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(dev)
    x, y = torch.randn(4, 8).to(dev), torch.tensor([0, 1, 1, 0]).to(dev)
    xlalab.mark_step()

    loss = F.cross_entropy(model(x), y)  # pending: nothing has run yet
    print(get_tensors_text([loss]))
    print(get_tensors_dot([loss]))  # paste into graphviz (dot -Tsvg) to draw it
    print(get_tensors_hlo([loss]))  # with XLA_HLO_DEBUG=1, metadata carries source_file/source_line

    loss.backward()
    grad = model[0].weight.grad
    assert grad is not None
    print(get_tensors_text([grad], max_nodes=12))  # a big graph, summarised

    # Save the graph of every sync. The device ordinal is appended: <file>.0
    target = os.environ.get("XLA_SAVE_TENSORS_FILE") or os.path.join(tempfile.mkdtemp(), "graphs.txt")
    config.set("XLA_SAVE_TENSORS_FILE", target)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        xlalab.mark_step()
    config.set("XLA_SAVE_TENSORS_FILE", "")
    saved = f"{target}.0"
    with open(saved) as f:
        text = f.read()
    print(f"{saved}: {text.count('## BEGIN_GRAPH')} graphs; the first block starts:")
    print("\n".join(text.splitlines()[:12]))


if __name__ == "__main__":
    main()
