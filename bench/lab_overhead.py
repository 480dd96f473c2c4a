"""What the notebook layer costs a training step: steady step time with and without its watcher.

The watcher subscribes to the runtime's events; with nobody subscribed the runtime builds no
events at all. Both runs use the same compiled graphs (warm cache), alternating to share noise.

    python bench/lab_overhead.py [--steps 30] [--workload mlp]
"""

from __future__ import annotations

import argparse
import statistics
import time

import xlalab.core.xla_model as xm
from xlalab.lab.cells import CellMap
from xlalab.lab.comm import CommServer
from xlalab.lab.watcher import Watcher
from xlalab.testing.workloads import WORKLOADS, train_step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workload", default="mlp", choices=sorted(WORKLOADS))
    args = ap.parse_args()
    w = WORKLOADS[args.workload]
    dev = xm.xla_device()
    model = w.make_model(0).to(dev)
    opt = w.make_optimizer(model.parameters())
    batches = [w.make_batch(i, w.default_batch, dev) for i in range(4)]

    def run(n: int) -> float:
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            train_step(w, model, opt, *batches[i % 4], barrier=xm.mark_step)
            times.append(time.perf_counter() - t0)
        xm.wait_device_ops()
        return statistics.median(times)

    run(5)  # compile and settle
    watcher = Watcher(CellMap())
    server = CommServer(watcher)  # no comms attached: its queue and throttle still run
    watcher.listeners.append(server._on_event)
    # Time spent inside the watcher itself: robust to a busy machine, unlike step times.
    inside = [0.0, 0]
    handle = watcher._on_event

    def timed(ev: object) -> None:
        t0 = time.perf_counter()
        handle(ev)  # type: ignore[arg-type]
        inside[0] += time.perf_counter() - t0
        inside[1] += 1

    watcher._on_event = timed  # type: ignore[method-assign]
    plain, watched = [], []
    for _ in range(3):
        plain.append(run(args.steps))
        watcher.start()
        watched.append(run(args.steps))
        watcher.stop()
    p, q = min(plain), min(watched)
    steps = 3 * args.steps
    print(f"{args.workload}: steady step {p * 1e3:.2f} ms plain, {q * 1e3:.2f} ms watched ({q / p:.3f}x)")
    print(
        f"  inside the watcher: {inside[0] / steps * 1e6:.0f} us per step "
        f"({inside[1] / steps:.1f} events per step, {inside[0] / max(inside[1], 1) * 1e6:.1f} us each)"
    )


if __name__ == "__main__":
    main()
