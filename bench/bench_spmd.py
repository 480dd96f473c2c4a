"""A sharded training step on 8 devices: xlalab SPMD against ``jax.jit`` with the same shardings.

A 2-layer MLP (256 -> 1024 -> 256, batch 256), data x model sharded on a (2, 4) mesh, SGD; on
CPU the 8 devices are XLA host devices (``XLA_NUM_DEVICES=8``, set here before anything starts).
Both run in this one process, so the ratio is what to read. See bench/README.md.

    python bench/bench_spmd.py [--steps 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("XLA_NUM_DEVICES", "8")

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax.sharding import NamedSharding, PartitionSpec

import xlalab.core.xla_model as xm
from xlalab.distributed import spmd as xs

D, H, B = 256, 1024, 256


def xlalab_step_ms(mesh: xs.Mesh, steps: int) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(), torch.nn.Linear(H, D)).to("xla")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(B, D).to("xla"), torch.randn(B, D).to("xla")
    xs.mark_sharding(model[0].weight, mesh, ("model", None))
    xs.mark_sharding(model[0].bias, mesh, ("model",))
    xs.mark_sharding(model[2].weight, mesh, (None, "model"))
    xs.mark_sharding(x, mesh, ("data", None))
    xs.mark_sharding(y, mesh, ("data", None))

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        xm.mark_step()

    for _ in range(3):
        step()
    xm.wait_device_ops()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        xm.wait_device_ops()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def jax_step_ms(mesh: xs.Mesh, steps: int) -> float:
    jm = mesh.get_jax_mesh()
    shard = {"w1": PartitionSpec("model", None), "b1": PartitionSpec("model"),
             "w2": PartitionSpec(None, "model"), "b2": PartitionSpec()}  # fmt: skip
    shapes = {"w1": (H, D), "b1": (H,), "w2": (D, H), "b2": (D,)}
    rng = np.random.default_rng(0)
    params = {k: jax.device_put(rng.standard_normal(s).astype(np.float32) * 0.01, NamedSharding(jm, shard[k]))
              for k, s in shapes.items()}  # fmt: skip
    data = NamedSharding(jm, PartitionSpec("data", None))
    x = jax.device_put(rng.standard_normal((B, D)).astype(np.float32), data)
    y = jax.device_put(rng.standard_normal((B, D)).astype(np.float32), data)

    def loss_fn(p: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
        h = jax.nn.relu(x @ p["w1"].T + p["b1"])
        return jnp.mean((h @ p["w2"].T + p["b2"] - y) ** 2)

    @jax.jit
    def step(p: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> dict[str, jax.Array]:
        grads = jax.grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda a, g: a - 0.01 * g, p, grads)

    for _ in range(3):
        params = step(params, x, y)
    jax.block_until_ready(params)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        params = step(params, x, y)
        jax.block_until_ready(params)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    xs.use_spmd()
    mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
    ours, theirs = xlalab_step_ms(mesh, args.steps), jax_step_ms(mesh, args.steps)
    print(f"8-device MLP step, data x model (2, 4) mesh, batch {B}: median of {args.steps}")
    print(f"  xlalab SPMD {ours:8.2f} ms")
    print(f"  jax.jit     {theirs:8.2f} ms   (same shardings)")
    print(f"  ratio       {ours / theirs:8.2f}x")


if __name__ == "__main__":
    main()
