"""The JupyterLab extension's comm, against a real ipykernel (docs/lab-protocol.md).

A jupyter_client plays the frontend: it sees the comm the kernel opens at ``%load_ext``,
opens one of its own, sends requests and reads the throttled updates.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

from .test_lab import setup

# The training step of the shell tests, with a model width of its own (its graphs compile here).
SETUP = setup(3)


class Frontend:
    def __init__(self, kc: Any) -> None:
        self.kc = kc
        self.messages: list[dict[str, Any]] = []  # every iopub message seen

    def execute(self, code: str, timeout: float = 120) -> list[dict[str, Any]]:
        """Run a cell; return the iopub messages up to its idle status."""
        msg_id = self.kc.execute(code)
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            self.messages.append(msg)
            out.append(msg)
            if (
                msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"
                and msg["parent_header"].get("msg_id") == msg_id
            ):
                # Updates flushed by the throttle's timer may trail the idle status a little.
                out += self.drain(0.6)
                return out
        raise AssertionError(f"cell did not finish: {code!r}")

    def drain(self, seconds: float) -> list[dict[str, Any]]:
        out = []
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except Exception:
                return out
            self.messages.append(msg)
            out.append(msg)

    def send(self, msg_type: str, content: dict[str, Any]) -> None:
        self.kc.shell_channel.send(self.kc.session.msg(msg_type, content))

    def wait_for(self, pred: Any, timeout: float = 30) -> dict[str, Any]:
        for msg in self.messages:
            if pred(msg):
                return msg
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            self.messages.append(msg)
            if pred(msg):
                return msg
        raise AssertionError("message not seen")


def comm_data(msgs: list[dict[str, Any]], comm_id: str, type_: str) -> list[dict[str, Any]]:
    return [
        m["content"]["data"]
        for m in msgs
        if m["msg_type"] == "comm_msg"
        and m["content"]["comm_id"] == comm_id
        and m["content"]["data"]["type"] == type_
    ]


@pytest.fixture(scope="module")
def frontend() -> Iterator[Frontend]:
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield Frontend(kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_without_xlalab_the_kernel_closes_the_comm(frontend: Frontend) -> None:
    cid = uuid.uuid4().hex
    frontend.send("comm_open", {"comm_id": cid, "target_name": "xlalab", "data": {"v": 1, "type": "hello"}})
    frontend.wait_for(lambda m: m["msg_type"] == "comm_close" and m["content"]["comm_id"] == cid)


def test_load_opens_a_comm_with_hello_and_updates_follow_the_cells(frontend: Frontend) -> None:
    out = frontend.execute("%load_ext xlalab")
    opened = [m for m in out if m["msg_type"] == "comm_open" and m["content"]["target_name"] == "xlalab"]
    assert len(opened) == 1
    hello = opened[0]["content"]["data"]
    assert hello["v"] == 1 and hello["type"] == "hello"
    assert hello["snapshot"]["compiles"]["uncached"] == 0
    # Loading xlalab starts no device: the notebook may still set XLA_NUM_DEVICES or PJRT_DEVICE.
    import jax
    import torch

    runtime = hello["runtime"]
    assert runtime["started"] is False and runtime["device_count"] == 0
    assert runtime["jax"] == jax.__version__ and runtime["torch"] == torch.__version__
    assert runtime["compile_cache_dir"] is None or isinstance(runtime["compile_cache_dir"], str)
    cid = opened[0]["content"]["comm_id"]

    frontend.execute(SETUP)
    out = frontend.execute("for _ in range(3):\n    step(16)")
    updates = comm_data(out, cid, "update")
    assert updates, "no update during a cell that compiled"
    seqs = [u["seq"] for u in updates]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    last = updates[-1]["snapshot"]
    assert last["compiles"]["uncached"] == 2 and last["compiles"]["cached"] == 1
    assert last["executions"]["count"] == 3
    # The user's code started the device: updates now say where the kernel runs.
    assert updates[-1]["runtime"] == {**runtime, **updates[-1]["runtime"]}
    assert updates[-1]["runtime"]["started"] is True
    assert updates[-1]["runtime"]["platform"] == "cpu" and updates[-1]["runtime"]["hw"] == "CPU"
    assert updates[-1]["runtime"]["device_count"] == 1 and updates[-1]["runtime"]["device_kind"] == "cpu"
    events = [e for u in updates for e in u["events"]]
    kinds = [e["kind"] for e in events]
    assert kinds.count("compile_start") == 2
    # compile_start is sent at once: the update carrying it ends with it.
    for u in updates:
        starts = [i for i, e in enumerate(u["events"]) if e["kind"] == "compile_start"]
        assert all(i == len(u["events"]) - 1 for i in starts)
    assert len(updates) <= 12  # throttled: not one message per event

    out = frontend.execute("loss = step(15)")
    warnings = [
        e["warning"] for u in comm_data(out, cid, "update") for e in u["events"] if e["kind"] == "warning"
    ]
    assert len(warnings) == 1
    w = warnings[0]
    assert w["category"] == "recompile" and "f32[16,8] → f32[15,8]" in w["message"]
    # It points at its cause, the line that made the input whose shape changed (in the step's
    # cell, [2]); the cell that ran the step ([4]) is among its frames.
    assert w["where"]["line"] == 8 and w["where"]["cell"]["execution_count"] == 2
    assert w["where"]["label"] == "cell [2], line 8"
    assert any(f["label"] == "cell [4], line 1" for f in w["frames"]), w["frames"]


def test_frontend_opened_comm_gets_hello_and_answers_requests(frontend: Frontend) -> None:
    cid = uuid.uuid4().hex
    frontend.send("comm_open", {"comm_id": cid, "target_name": "xlalab", "data": {"v": 1, "type": "hello"}})
    hello = frontend.wait_for(
        lambda m: (
            m["msg_type"] == "comm_msg"
            and m["content"]["comm_id"] == cid
            and m["content"]["data"]["type"] == "hello"
        )
    )["content"]["data"]
    assert hello["warnings"] and hello["warnings"][0]["category"] == "recompile"
    assert hello["platform"] == "cpu" and hello["devices"][0] == "xla:0"

    def ask(rid: int, **req: Any) -> dict[str, Any]:
        frontend.send("comm_msg", {"comm_id": cid, "data": {"v": 1, "type": "request", "id": rid, **req}})
        return frontend.wait_for(
            lambda m: (
                m["msg_type"] == "comm_msg"
                and m["content"]["comm_id"] == cid
                and m["content"]["data"].get("type") == "reply"
                and m["content"]["data"].get("id") == rid
            )
        )["content"]["data"]

    # The persistent compile cache, as JAX's config has it at the time of asking.
    frontend.execute("import jax\nbefore = jax.config.jax_compilation_cache_dir")
    for rid, value in ((20, None), (21, "/tmp/xlalab-test-jax-cache")):
        frontend.execute(f"jax.config.update('jax_compilation_cache_dir', {value!r})")
        runtime = ask(rid, what="runtime")["result"]
        assert runtime["compile_cache_dir"] == value and runtime["started"] is True
    frontend.execute("jax.config.update('jax_compilation_cache_dir', before)")

    snap = ask(1, what="snapshot")
    assert snap["ok"] and snap["result"]["compiles"]["uncached"] == 3
    report = ask(2, what="metrics_report")
    assert "Metric: CompileTime" in report["result"]["text"]
    graph_hash = hello["warnings"][0]["graph_hash"]
    graph = ask(3, what="graph", hash=graph_hash)
    assert graph["ok"] and graph["result"]["dot"].startswith("digraph G {")
    assert graph["result"]["num_nodes"] > 10
    # The graph the recompile replaced answers too: the panel draws the two side by side.
    previous = hello["warnings"][0]["previous_graph_hash"]
    assert previous and previous != graph_hash
    before = ask(9, what="graph", hash=previous)["result"]
    shapes = {n["shape"].split("{")[0] for n in before["nodes"]}
    after = {n["shape"].split("{")[0] for n in graph["result"]["nodes"]}
    assert "f32[16,8]" in shapes - after and "f32[15,8]" in after - shapes
    missing = ask(4, what="graph", hash="123")
    assert not missing["ok"] and "no graph with hash" in missing["error"]
    bad = ask(5, what="frobnicate")
    assert not bad["ok"] and "unknown request" in bad["error"]
    cleared = ask(6, what="clear")
    assert cleared["ok"]
    # Every frontend hears of the clear (another tab may have asked for it).
    frontend.wait_for(
        lambda m: m["msg_type"] == "comm_msg"
        and m["content"]["data"].get("type") == "update"
        and m["content"]["data"].get("cleared") is True
    )
    after = ask(7, what="snapshot")
    assert after["result"]["compiles"]["uncached"] == 0
    assert ask(8, what="warnings")["result"]["warnings"] == []


def test_profiler_regions_reach_the_frontend_as_region_events(frontend: Frontend) -> None:
    # What the panel's timeline draws: each region's start and end, named, nested, at its line.
    cell = (
        "import xlalab.debug.profiler as xp\n"
        "with xp.StepTrace('train_step', step_num=4):\n"
        "    with xp.Trace('forward'):\n"
        "        loss = step(16)"
    )
    out = frontend.execute(cell)
    # Each comm gets each event once: look at one comm's.
    comm = next(m["content"]["comm_id"] for m in out if m["msg_type"] == "comm_msg")
    regions = [e for u in comm_data(out, comm, "update") for e in u["events"] if e["kind"] == "region"]
    assert [(e["name"], e["phase"], e["depth"], e["step"]) for e in regions] == [
        ("train_step", "start", 0, 4),
        ("forward", "start", 1, None),
        ("forward", "end", 1, None),
        ("train_step", "end", 0, 4),
    ]
    start, end = regions[0], regions[-1]
    assert start["region"] == end["region"] != regions[1]["region"]
    assert end["seconds"] > 0 and end["time"] >= start["time"]
    assert start["where"]["line"] == 2 and start["where"]["label"].endswith("line 2")
    assert regions[1]["where"]["line"] == 3
    assert "frames" not in start


def test_unload_closes_the_comms(frontend: Frontend) -> None:
    out = frontend.execute("%unload_ext xlalab")
    closed = {m["content"]["comm_id"] for m in out if m["msg_type"] == "comm_close"}
    assert len(closed) >= 2
