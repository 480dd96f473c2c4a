"""The troubleshooting tools: ``xlalab debug-run`` and ``xlalab dump-stacks``.

Most tests call the tools' ``main`` in-process: a fresh ``python -m xlalab...`` pays seconds of
torch and jax import before doing anything, and the children these tests start are plain Python
scripts that do not import xlalab, except the debug-runs of two small training scripts.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import random
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from xlalab.tools import cli, debug_run, dump_stacks, redact

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "debug_run_demo.py"
# What torch_xla 2.9 wrote with XLA_SAVE_TENSORS_FILE (tests/reference/README.md).
REFERENCE = REPO / "tests" / "reference" / "torch_xla-2.9-cpu" / "04_save_tensors_text_FULL.txt"
DUMP_STACKS_PY = Path(dump_stacks.__file__).resolve()


# --------------------------------------------------------------------------- graph-file parsing


def _block(batch: int, graph_hash: str, lr: float, sync_line: int = 31) -> str:
    """One XLA_SAVE_TENSORS_FILE text block of a tiny step, in the reference layout."""
    return textwrap.dedent(
        f"""\
        [ScheduleSyncTensorsGraph]
        TensorsGraphInfo:
          mark_step (/opt/venv/lib/python3.11/site-packages/xlalab/core/xla_model.py:55)
          train_step (/home/u/train.py:{sync_line})
          <module> (/home/u/train.py:40)

        Root Hashes: (5f0c11, 81d2ab)

        ## BEGIN_GRAPH
        IR {{
          %0 = f32[4,16]{{1,0}} xla::device_data(), xla_shape=f32[4,16]{{1,0}}
          %1 = f32[{batch},4]{{1,0}} xla::device_data(), location=<module>@train.py:38, xla_shape=f32[{batch},4]{{1,0}}
          %2 = f32[{batch},16]{{1,0}} aten::mm(%1, %0), location=forward@model.py:12, xla_shape=f32[{batch},16]{{1,0}}
          %3 = f64[] xla::device_data(), scalar={lr}, xla_shape=f64[]
          %4 = f32[{batch},16]{{1,0}} aten::mul(%2, %3), location=train_step@train.py:30, frames=train_step@/home/u/train.py:30|<module>@/home/u/train.py:40, xla_shape=f32[{batch},16]{{1,0}}, ROOT=0
        }}

        Graph Hash: {graph_hash}

        ## END_GRAPH

        """  # noqa: E501 - node lines are long in the real format too
    )


SYNTHETIC = (
    _block(8, "aaaa1111", 0.1)
    + _block(8, "aaaa1111", 0.05)  # only a float input's value changed: same graph
    + _block(4, "bbbb2222", 0.05)  # the short last batch
    + _block(4, "cccc3333", 0.05, sync_line=35)  # another sync site, one graph only
)


def test_parse_synthetic_blocks() -> None:
    blocks = debug_run.parse_graph_blocks(SYNTHETIC)
    assert [b.graph_hash for b in blocks] == ["aaaa1111", "aaaa1111", "bbbb2222", "cccc3333"]
    first = blocks[0]
    assert [str(f) for f in first.frames][1] == "train_step (/home/u/train.py:31)"
    assert len(first.nodes) == 5 and [n.id for n in first.inputs] == [0, 1, 3]
    mul = first.nodes[4]
    assert (mul.op, mul.shape, mul.operands, mul.location) == (
        "aten::mul",
        "f32[8,16]{1,0}",
        "%2, %3",
        "train_step@train.py:30",
    )
    # The library frame (site-packages/xlalab) is skipped: the sync location is the user's line.
    assert debug_run.sync_location(first) == "train_step (/home/u/train.py:31)"
    # A float input's current value is not structure: same-hash blocks do not differ.
    assert debug_run.diff_graphs(blocks[0], blocks[1])[-1].startswith("no difference in the dumped nodes")


def test_summary_names_recompiling_location_and_changed_shape() -> None:
    text = "\n".join(debug_run.summarize_graphs(debug_run.parse_graph_blocks(SYNTHETIC)))
    assert "4 syncs, 3 distinct graphs, 2 sync locations: 1 recompiled, 0 warmed up (expected)" in text
    # The second graph follows a cache hit: the loop had settled, so it is a recompilation.
    place = "train_step (/home/u/train.py:31)"
    assert f"RECOMPILED at {place}: 3 syncs, 2 distinct graphs, 1 recompilation" in text
    assert "graph 1: hash aaaa1111, first at sync #1, 2 syncs, 5 nodes, 3 inputs\n" in text
    assert "graph 2: hash bbbb2222, first at sync #3, 1 sync, 5 nodes, 3 inputs (RECOMPILED)" in text
    assert "graph 1 -> graph 2 (sync #3):" in text
    assert "input shapes changed (1 of 3 inputs):" in text
    assert "input %1: f32[8,4] -> f32[4,4]  (at <module>@train.py:38)" in text
    assert "first differing node: %1: xla::device_data f32[8,4] -> xla::device_data f32[4,4]" in text
    assert "train_step (/home/u/train.py:35): 1 sync, hash cccc3333, 5 nodes" in text
    assert "RECOMPILED at train_step (/home/u/train.py:35)" not in text


def test_truncated_graph_file_still_parses() -> None:
    cut = SYNTHETIC[: SYNTHETIC.index("Graph Hash: bbbb2222")]  # the run crashed mid-write
    blocks = debug_run.parse_graph_blocks(cut)
    assert len(blocks) == 3 and blocks[2].graph_hash.startswith("~")  # a hash derived from the nodes
    assert "RECOMPILED at train_step (/home/u/train.py:31)" in "\n".join(debug_run.summarize_graphs(blocks))


def test_parse_torch_xla_reference_dump() -> None:
    blocks = debug_run.parse_graph_blocks(REFERENCE.read_text())
    assert [b.graph_hash[:8] for b in blocks] == ["83d0c656", "66ade4b8", "66ade4b8"]
    assert [len(b.nodes) for b in blocks] == [80, 122, 122]
    assert debug_run.sync_location(blocks[0]) == "<module> (<scripts>/s4_train.py:24)"
    text = "\n".join(debug_run.summarize_graphs(blocks))
    # Step 2 adds SGD's momentum buffers: expected warm-up, which the notebook does not flag either.
    assert "RECOMPILED" not in text
    assert "3 syncs, 2 distinct graphs, 1 sync location: 0 recompiled, 1 warmed up (expected)" in text
    place = "<module> (<scripts>/s4_train.py:24)"
    assert f"warm-up at {place}: 3 syncs, 2 distinct graphs, no recompilation" in text
    assert "graph 2: hash 66ade4b8" in text and "122 nodes, 37 inputs (warm-up: expected)" in text
    # What changed is still shown: one more input per parameter (and a scalar each).
    assert "number of inputs: 21 -> 37" in text
    assert "only after: f32[10,1,5,5], f32[10,50]" in text
    assert "number of nodes: 80 -> 122" in text


def _ops_block(graph_hash: str, batch: int, momentum: bool) -> str:
    """A sync of a linear step; with ``momentum`` the step also updates SGD's momentum buffer."""
    nodes = [
        f"%0 = f32[{batch},4]{{1,0}} xla::device_data(), location=<module>@train.py:38",
        "%1 = f32[4,2]{1,0} xla::device_data()",
        f"%2 = f32[{batch},2]{{1,0}} aten::mm(%0, %1), location=forward@model.py:12",
        "%3 = f32[4,2]{1,0} aten::sub(%1, %2), location=train_step@train.py:30, ROOT=0",
    ]
    if momentum:
        nodes[3:3] = ["%4 = f32[4,2]{1,0} xla::device_data()", "%5 = f32[4,2]{1,0} aten::mul(%4, %2)"]
    body = "\n".join("  " + n for n in nodes)
    return (
        "[ScheduleSyncTensorsGraph]\nTensorsGraphInfo:\n  train_step (/home/u/train.py:31)\n\n"
        f"## BEGIN_GRAPH\nIR {{\n{body}\n}}\n\nGraph Hash: {graph_hash}\n\n## END_GRAPH\n\n"
    )


@pytest.mark.parametrize(
    ("syncs", "verdicts", "recompiled"),
    [
        # Step 2 creates the momentum buffer (new ops), then the graph is served from the cache.
        ([("a1", 8, False), ("b2", 8, True), ("b2", 8, True)], ["", " (warm-up: expected)"], False),
        # The second compilation has the same ops: a changed shape, which warm-up does not explain.
        ([("a1", 8, False), ("c3", 4, False)], ["", " (RECOMPILED)"], True),
        # After warm-up (two compilations) any new graph is a recompilation.
        (
            [("a1", 8, False), ("b2", 8, True), ("d4", 4, True)],
            ["", " (warm-up: expected)", " (RECOMPILED)"],
            True,
        ),
    ],
)
def test_summary_separates_warm_up_from_recompiles(
    syncs: list[tuple[str, int, bool]], verdicts: list[str], recompiled: bool
) -> None:
    blocks = debug_run.parse_graph_blocks("".join(_ops_block(*sync) for sync in syncs))
    lines = debug_run.summarize_graphs(blocks)
    text = "\n".join(lines)
    graph_lines = [ln for ln in lines if ln.startswith("  graph ") and ": hash " in ln]
    assert [ln[ln.index(" inputs") + len(" inputs") :] for ln in graph_lines] == verdicts, text
    place = "train_step (/home/u/train.py:31)"
    assert (f"RECOMPILED at {place}:" in text) == recompiled, text
    assert (f"warm-up at {place}:" in text) == (not recompiled), text


def test_metrics_summary_counts_steps_from_one() -> None:
    metrics = (
        "[MetricsData; step=0]\nMetric: CompileTime\n  TotalSamples: 1\n"
        "Counter: UncachedCompile\n  Value: 1\n"
        "[MetricsData; step=1]\nMetric: CompileTime\n  TotalSamples: 2\n"
        "Counter: UncachedCompile\n  Value: 2\n"
        "Counter: aten::nonzero\n  Value: 3\n"
    )
    lines = debug_run.summarize_metrics(metrics)
    # torch_xla numbers its reports from step=0: the second report comes after two steps.
    head = "last report (after 2 steps; 2 reports, headed [MetricsData; step=1]): "
    assert lines[0].startswith(head), lines
    assert "CompileTime samples=2" in lines[0] and "UncachedCompile=2" in lines[0]
    assert lines[1].endswith("aten::nonzero=3")
    # The MarkStep counter, when the report has it, is the count of steps.
    one = "[MetricsData; step=0]\nCounter: MarkStep\n  Value: 1\n"
    assert debug_run.summarize_metrics(one)[0].startswith("last report (after 1 step; 1 report, headed")


def test_pt_xla_debug_summary_shows_sizes_for_people() -> None:
    debug = (
        "Compilation Analysis: Compilation Cause\nCompilation Analysis:   user mark_step\n"
        "Execution Analysis: Execution Cause\nExecution Analysis:   user mark_step\n"
    )
    assert debug_run.summarize_pt_xla_debug(debug)[:2] == [
        "compilations: 1 (user mark_step x1)",
        "executions: 1 (user mark_step x1)",
    ]
    # torch_xla's own PT_XLA_DEBUG output prints sizes as GB with six decimals.
    reference = (REFERENCE.parent / "04_pt_xla_debug_1.txt").read_text()
    sizes = [ln for ln in debug_run.summarize_pt_xla_debug(reference) if ln.startswith("largest compiled")]
    assert sizes == [
        # the largest of each over the run: 0.000347 GB of inputs, 0.012020 GB of intermediates...
        "largest compiled graph sizes: graph input ~364 KB, graph output ~321 KB, aliased input ~171 KB, "
        "intermediate tensor ~12.3 MB, compiled program under 1 KB"
    ], sizes


def test_graph_hashes_in_torch_xla_form() -> None:
    # xlalab's tensor=5 log may print a hash in decimal; the summary shows it as the graph file
    # and PT_XLA_DEBUG do (torch_xla's form: hex, no padding).
    log = (
        "I graph.py:541] Executing IR graph hash 3125759779957634871 on device xla:0 done!\n"
        "I graph.py:541] Executing IR graph hash 2b60edf57993f737 on device xla:0 done!\n"
        "I graph.py:541] Executing IR graph hash 3e7eaf38e22f938 on device xla:0 done!\n"
    )
    assert debug_run.summarize_log_hashes(log) == [
        "from the tensor=5 log in output.txt: 3 executions of 2 distinct graphs: 2b60edf57993f737 x2, "
        "3e7eaf38e22f938 x1 (where they were synced, and what changed, needs the graph file)"
    ]


# --------------------------------------------------------------------------- redaction


def test_redact_env_by_name_and_by_value() -> None:
    env = {
        "API_TOKEN": "fake-token-1234",
        "AWS_SECRET_ACCESS_KEY": "abc",
        "db_password": "hunter2",
        "GH_AUTH": "x",
        "EMPTY_TOKEN": "",
        "INNOCENT": "ghp_" + "a1B2" * 9,  # a GitHub token under a harmless name
        "OPAQUE": "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg==",
        "DATABASE_URL": "postgres://me:s3cret@db.example.com:5432/x",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/root",
        "PJRT_DEVICE": "CPU",
        "LONG_PATH": "/opt/very/long/path/with/digits/1234567890/abcdefghijk",
        "MODEL": "TinyLlama/TinyLlama-1.1B-Chat-v1.0",  # a model id, not a token
        "SHARD": "data/imagenet_train_shard_000123_of_01024",
    }
    red = debug_run.redact_env(env)
    for name in ("API_TOKEN", "AWS_SECRET_ACCESS_KEY", "db_password", "GH_AUTH", "INNOCENT", "OPAQUE"):
        assert red[name] == "<redacted>", name
    assert red["EMPTY_TOKEN"] == ""  # nothing to hide; that it is empty helps debugging
    assert red["DATABASE_URL"] == "postgres://me:<redacted>@db.example.com:5432/x"
    for name in ("PATH", "HOME", "PJRT_DEVICE", "LONG_PATH", "MODEL", "SHARD"):
        assert red[name] == env[name], name


def test_redact_argv() -> None:
    token = "hf_" + "x9" * 10
    argv = [
        "python", "train.py", "--api-key", "abc", "--token=xyz", "--lr", "0.1", token,
        "-t", "s3cret-pass", "-pOpenSesame", "--hub=" + token, "-c", f"print({token!r})",
        "--max-tokens", "128", "postgres://me:pw123456@db/x",
    ]  # fmt: skip
    assert debug_run.redact_argv(argv) == [
        "python",
        "train.py",
        "--api-key",
        "<redacted>",
        "--token=<redacted>",
        "--lr",
        "0.1",
        "<redacted>",
        "-t",  # a short option for a token: its argument is hidden
        "<redacted>",
        "-p<redacted>",
        "--hub=<redacted>",  # an innocent option name, a token-shaped value
        "-c",
        "print('<redacted>')",  # only the token, not the code around it
        "--max-tokens",  # a count of tokens is a setting, not a secret
        "128",
        "postgres://me:<redacted>@db/x",
    ]
    found = redact.secret_values({}, argv)
    assert found == {"abc", "xyz", token, "s3cret-pass", "OpenSesame", "pw123456"}, found


def test_scrubber_hides_values_and_shapes_but_keeps_hashes() -> None:
    env = {"MY_PASSWORD": "correct-horse", "HF_HUB_TOKEN": "1", "TOKENIZERS_PARALLELISM": "false"}
    scrubber = redact.Scrubber(redact.secret_values(env, []))
    text = (
        "login with correct-horse as hf_AbCdEfGhIjKlMnOpQrSt and AKIAABCDEFGHIJKLMNOP\n"
        "Graph Hash: 83d0c6563f8ed7ba439d4f64776b66e9\n"  # torch_xla's 128-bit graph hash stays
        "1 step, tokenizers false\n"  # values too short to search for are left in free text
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    assert scrubber.scrub(text) == (
        "login with <redacted> as <redacted> and <redacted>\n"
        "Graph Hash: 83d0c6563f8ed7ba439d4f64776b66e9\n"
        "1 step, tokenizers false\n"
        "<redacted>\n"
    )
    assert debug_run.redact_env(env) == {
        "MY_PASSWORD": "<redacted>",
        "HF_HUB_TOKEN": "<redacted>",
        "TOKENIZERS_PARALLELISM": "false",
    }


# --------------------------------------------------------------------------- debug-run end to end


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        out = {}
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None
            out[m.name] = f.read()
        return out


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Route debug-run's temporary folder into tmp_path, so a test can see whether it was kept."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_debug_run_demo_archive(tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_TOKEN", "fake-token-1234")
    monkeypatch.setenv("SOME_SETTING", "ghp_" + "Q7x" * 12)
    out = tmp_path / "demo.tar.gz"
    rc = debug_run.main(["--quiet", "--tidy", "--outfile", str(out), "--", sys.executable, "-u", str(DEMO)])
    assert rc == 0
    files = _members(out)
    names = {n.split("/", 1)[1] for n in files}
    assert {n.split("/", 1)[0] for n in files} == {"demo"}
    assert {"output.txt", "env.txt", "versions.txt", "summary.txt"} <= names
    assert list(private_tmp.iterdir()) == []  # --tidy removed the temporary folder

    log = files["demo/output.txt"].decode()
    order = ["step 0: batch 8", "step 0: done", "step 1: batch 8", "step 1: done", "step 2: batch 4"]
    positions = [log.index(s) for s in order]
    assert positions == sorted(positions), log

    env = files["demo/env.txt"].decode()
    assert "API_TOKEN=<redacted>\n" in env and "SOME_SETTING=<redacted>\n" in env
    assert "XLA_SAVE_TENSORS_FMT=text\n" in env
    assert not any(b"fake-token-1234" in data or b"Q7xQ7x" in data for data in files.values())

    versions = files["demo/versions.txt"].decode()
    for key in ("python:", "platform:", "torch: 2.", "jax: ", "jaxlib: ", "xlalab: "):
        assert key in versions, key

    summary = files["demo/summary.txt"].decode()
    assert "result:    the command exited with code 0 after" in summary
    if "graphs.txt.0" in names:
        assert f"RECOMPILED at main ({DEMO}:" in summary, summary
        assert "input shapes changed" in summary and "f32[8,4] -> f32[4,4]" in summary, summary
    else:  # the graph dump is not in this xlalab: the summary must say so, not stay silent
        assert "graphs (XLA_SAVE_TENSORS_FILE): MISSING" in summary


MOMENTUM_SCRIPT = """
import os, sys
import torch
import torch.nn.functional as F
import xlalab.core.xla_model as xm

token = sys.argv[sys.argv.index("-t") + 1]
print("training with", token, "and", os.environ["NOTES"], flush=True)
print("settings:", {k: v for k, v in os.environ.items() if k.startswith("SETTING_")}, file=sys.stderr)
torch.manual_seed(0)
dev = xm.xla_device()
model = torch.nn.Linear(4, 2).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # its buffer appears at step 2
for step in range(3):
    x, y = torch.randn(8, 4).to(dev), torch.randn(8, 2).to(dev)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    xm.optimizer_step(opt)
raise SystemExit(f"upload failed: bad credentials {os.environ['MY_PASSWORD']} / {token}")
"""


_ALNUM = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def _fake_secret(prefix: str, n: int, alphabet: str = _ALNUM) -> str:
    """A made-up credential of a real token's shape (generated: none is written in this file)."""
    rng = random.Random(prefix)
    return prefix + "".join(rng.choice(alphabet) for _ in range(n))


def test_debug_run_archive_holds_no_secret_and_no_false_recompile(
    tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    planted = {
        # Token shapes under names that say nothing.
        "NOTES": _fake_secret("ghp_", 36),
        "SETTING_A": _fake_secret("github_pat_", 40),
        "SETTING_B": _fake_secret("hf_", 34),
        "SETTING_C": _fake_secret("sk-proj-", 40),
        "SETTING_D": _fake_secret("AKIA", 16, upper),
        "SETTING_E": _fake_secret("xoxb-", 30),
        "SETTING_F": _fake_secret("glpat-", 20),
        # A secret-named variable whose value has no token shape.
        "MY_PASSWORD": "correct-horse-battery-staple",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    flag_secret = "Sup3r-secret-flag"  # no token shape either: only `-t` says it is one
    out = tmp_path / "secret.tar.gz"
    script = tmp_path / "train_momentum.py"
    script.write_text(MOMENTUM_SCRIPT)
    command = [sys.executable, "-u", str(script), "-t", flag_secret]
    # Exit code 1: the script ends with a SystemExit that names the credentials.
    assert debug_run.main(["--quiet", "--tidy", "--outfile", str(out), "--", *command]) == 1

    extracted = tmp_path / "extracted"
    with tarfile.open(out, "r:gz") as tar:
        # The "data" filter (no links, no absolute paths) exists from Python 3.12 and late 3.10/3.11.
        tar.extractall(extracted, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    files = {p.relative_to(extracted).as_posix(): p.read_bytes() for p in extracted.rglob("*") if p.is_file()}
    assert {"secret/output.txt", "secret/env.txt", "secret/summary.txt", "secret/graphs.txt.0"} <= set(files)
    for value in [*planted.values(), flag_secret]:
        for probe in (value, value[-12:]):
            leaks = [name for name, data in files.items() if probe.encode() in data]
            assert not leaks, f"{probe!r} leaked into {leaks}"
    log = files["secret/output.txt"].decode()
    assert "training with <redacted> and <redacted>" in log
    assert "upload failed: bad credentials <redacted> / <redacted>" in log
    summary = files["secret/summary.txt"].decode()
    assert f"{script} -t '<redacted>'" in summary
    assert "upload failed: bad credentials <redacted> / <redacted>" in summary  # the output's tail

    # The momentum buffer made on step 2 is warm-up, as the notebook says: no RECOMPILED.
    assert "RECOMPILED" not in summary, summary
    assert "3 syncs, 2 distinct graphs, 1 sync location: 0 recompiled, 1 warmed up (expected)" in summary
    assert f"warm-up at <module> ({script}:18): 3 syncs, 2 distinct graphs, no recompilation" in summary
    assert "last report (after 3 steps; 3 reports, headed [MetricsData; step=2])" in summary, summary
    # One hash form everywhere: the graph file, PT_XLA_DEBUG and the summary agree.
    dumped = re.findall(r"^Graph Hash: (\S+)$", files["secret/graphs.txt.0"].decode(), re.M)
    debugged = re.findall(r"Graph Hash: (\S+)$", files["secret/pt_xla_debug.txt"].decode(), re.M)
    assert len(set(dumped)) == 2 and set(debugged) == set(dumped)
    assert all(f"hash {h}," in summary for h in set(dumped))


INTERLEAVE = """
import os, signal, sys
for i in range(40):
    (sys.stdout if i % 2 == 0 else sys.stderr).write(f"line {i} {'out' if i % 2 == 0 else 'err'}\\n")
if len(sys.argv) > 1 and sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGTERM)
sys.exit(3)
"""


def test_debug_run_interleaves_and_propagates_exit_code(
    tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XLA_SAVE_TENSORS_FMT", "dot")  # debug-run needs text: it must say it replaced this
    out = tmp_path / "x.tar.gz"
    rc = debug_run.main(["--quiet", "--outfile", str(out), "--", sys.executable, "-u", "-c", INTERLEAVE])
    assert rc == 3
    files = _members(out)
    expected = "".join(f"line {i} {'out' if i % 2 == 0 else 'err'}\n" for i in range(40))
    assert files["x/output.txt"].decode() == expected
    assert "result:    the command exited with code 3 after" in files["x/summary.txt"].decode()
    assert "last 25 lines of output" in files["x/summary.txt"].decode()
    replaced = [ln for ln in files["x/summary.txt"].decode().splitlines() if "(these replaced your " in ln]
    assert len(replaced) == 1 and " XLA_SAVE_TENSORS_FMT=dot" in replaced[0]
    kept = list(private_tmp.iterdir())  # without --tidy the folder stays, with the same files
    assert len(kept) == 1 and (kept[0] / "output.txt").read_text() == expected

    # Without -u too: debug-run sets PYTHONUNBUFFERED for the child. Killed by a signal: 128+N.
    rc = debug_run.main(["--quiet", "--outfile", str(out), "--", sys.executable, "-c", INTERLEAVE, "kill"])
    assert rc == 128 + signal.SIGTERM
    files = _members(out)
    assert files["x/output.txt"].decode() == expected
    assert "the command was killed by SIGTERM (exit code 143)" in files["x/summary.txt"].decode()


CTRL_C_CHILD = """
import sys, time
try:
    print("started", flush=True)  # inside the try: the test interrupts as soon as it sees this
    time.sleep(60)
except KeyboardInterrupt:
    print("child cleans up after Ctrl-C", file=sys.stderr, flush=True)
    raise
"""


def test_debug_run_ctrl_c_keeps_the_childs_last_words(tmp_path: Path) -> None:
    """Ctrl-C goes to the terminal's whole process group: debug-run and the child together."""
    out = tmp_path / "int.tar.gz"
    argv = [
        sys.executable,
        "-m",
        "xlalab.tools.debug_run",
        "--tidy",
        "--outfile",
        str(out),
        "--",
        sys.executable,
        "-c",
        CTRL_C_CHILD,
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGINT, err
    log = _members(out)["int/output.txt"].decode()
    assert "child cleans up after Ctrl-C" in log and log.rstrip().endswith("KeyboardInterrupt"), log


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--outfile", "{tmp}/x.tar.gz"], "no command to run"),
        (["--outfile", "{tmp}/x.tar.gz", "--"], "no command to run"),
        (
            ["--outfile", "{tmp}/x.tar.gz", "--", "no-such-command-xyz"],
            "command not found: no-such-command-xyz",
        ),
        (["--outfile", "{tmp}/missing/x.tar.gz", "--", "true"], "does not exist"),
        (["--outfile", "{tmp}", "--", "true"], "is a directory"),
    ],
)
def test_debug_run_errors(
    args: list[str], message: str, tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = debug_run.main([a.replace("{tmp}", str(tmp_path)) for a in args])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("xlalab debug-run: error: ") and message in err, err
    assert list(private_tmp.iterdir()) == []  # nothing started, nothing left behind


def test_debug_run_unwritable_outfile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK) and os.geteuid() == 0:
            # root ignores the mode; /proc is a file system nobody can create files in.
            target = "/proc/xlalab-debug-run.tar.gz"
        else:
            target = str(ro / "x.tar.gz")
        rc = debug_run.main(["--outfile", target, "--", "true"])
    finally:
        ro.chmod(0o700)
    err = capsys.readouterr().err
    assert rc == 2 and "cannot write --outfile" in err, err


# --------------------------------------------------------------------------- dump-stacks

SLEEPER = f"""
import importlib.util, threading, time
# Loaded by path: importing xlalab would pull in torch and jax (seconds) for a stdlib module.
spec = importlib.util.spec_from_file_location("xlalab_dump_stacks", {str(DUMP_STACKS_PY)!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
if {{handler}}:
    mod.install_signal_handler()

def worker_sleeps():
    time.sleep(60)

def main_sleeps():
    print("ready", flush=True)
    time.sleep(60)

threading.Thread(target=worker_sleeps, name="worker", daemon=True).start()
main_sleeps()
"""


@contextlib.contextmanager
def _sleeper(handler: bool = True) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER.replace("{handler}", str(handler))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        dump_stacks.stacks_file_for(proc.pid).unlink(missing_ok=True)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[str]]:
    with _sleeper() as proc:
        yield proc


def test_dump_stacks_via_signal(sleeper: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(2):  # a second dump prints only the new text
        assert dump_stacks.main([str(sleeper.pid), "--signal"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"# Python stacks of PID {sleeper.pid} ")
        assert out.count("main_sleeps") == 1 and out.count("worker_sleeps") == 1, out
    assert sleeper.poll() is None  # still running


def test_signal_refused_without_handler(capsys: pytest.CaptureFixture[str]) -> None:
    with _sleeper(handler=False) as proc:
        assert dump_stacks.main([str(proc.pid), "--signal"]) == 1
        err = capsys.readouterr().err
        assert "has no handler for SIGUSR1; sending it would kill the process" in err
        assert "install_signal_handler()" in err
        assert proc.poll() is None  # and indeed it was not sent


def _ptrace_tool_missing(method: str) -> str | None:
    if method == "py-spy" and dump_stacks.find_py_spy() is None:
        return "py-spy is not installed (pip install py-spy); dump-stacks then uses gdb or --signal"
    if method == "gdb" and shutil.which("gdb") is None:
        return "gdb is not installed (apt-get install gdb); dump-stacks then uses py-spy or --signal"
    return None


@pytest.mark.parametrize("method", ["py-spy", "gdb", "auto"])
def test_dump_stacks_via_ptrace(
    method: str, sleeper: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = _ptrace_tool_missing(method if method != "auto" else "py-spy")
    assert missing is None, f"{missing} (make install installs py-spy and gdb)"
    rc = dump_stacks.main([str(sleeper.pid), "--method", method])
    out, err = capsys.readouterr()
    if rc != 0 and "ptrace is not allowed" in err:
        # Where the kernel forbids ptrace even to our own child (a locked-down container), what the
        # user gets is the explanation and the way out, which must be right.
        assert rc == 1 and "xlalab dump-stacks PID --signal" in err, err
        return
    assert rc == 0, err
    assert "main_sleeps" in out and "worker_sleeps" in out and "worker" in out, out
    assert sleeper.poll() is None


def _pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except OSError:
        return 4194304


@pytest.mark.parametrize("extra", [[], ["--signal"]])
def test_dump_stacks_missing_pid(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    pid = _pid_max() + 1  # above pid_max: no process can have it
    assert dump_stacks.main([str(pid), *extra]) == 1
    err = capsys.readouterr().err
    assert f"xlalab dump-stacks: no process with PID {pid}: it has exited, or the id is wrong" in err
    assert "ps aux | grep python" in err


def test_dump_stacks_not_python(capsys: pytest.CaptureFixture[str]) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None, "coreutils' sleep stands in for a non-Python process"
    proc = subprocess.Popen([sleep, "30"])
    try:
        assert dump_stacks.main([str(proc.pid)]) == 1
        assert "is not a Python process" in capsys.readouterr().err
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("1\n", "echo 0 > /proc/sys/kernel/yama/ptrace_scope"),
        ("2\n", "only root (CAP_SYS_PTRACE) may attach"),
        ("3\n", "disabled for everyone until the next reboot"),
        (None, "Yama is not active here"),
    ],
)
def test_ptrace_help(
    scope: str | None, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    yama = tmp_path / "ptrace_scope"
    if scope is not None:
        yama.write_text(scope)
    monkeypatch.setattr(dump_stacks, "YAMA", yama)
    text = dump_stacks.ptrace_help(123, "gdb: ptrace: Operation not permitted.")
    assert text.startswith("ptrace is not allowed to attach to PID 123: gdb: ptrace: Operation not permitted")
    assert expected in text
    assert "xlalab dump-stacks PID --signal" in text  # the way out that needs no ptrace


def _as_nobody() -> list[str] | None:
    """A command prefix that runs a stdlib-only Python as user nobody, or None when we cannot."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return None
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        probe = subprocess.run(
            [*prefix, python, "-c", f"open({str(DUMP_STACKS_PY)!r}).close()"], capture_output=True, timeout=30
        )
        if probe.returncode == 0:
            return [*prefix, python]
    return None


def test_ptrace_refused_is_explained(sleeper: subprocess.Popen[str]) -> None:
    """As an unprivileged user, attaching to root's process fails; the message says what to do."""
    if os.geteuid() != 0:
        pytest.skip(
            "a refusal needs a second user attaching to our process, and only root can become one; "
            "as root (CI) this test runs"
        )
    nobody = _as_nobody()
    assert nobody is not None, "setpriv (util-linux) and a python that user nobody can run are needed"
    missing = _ptrace_tool_missing("py-spy") or _ptrace_tool_missing("gdb")
    assert missing is None, f"{missing} (make install installs py-spy and gdb)"
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('ds', {str(DUMP_STACKS_PY)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"sys.exit(m.main([{str(sleeper.pid)!r}]))\n"
    )
    path = os.pathsep.join(
        p for p in (os.path.dirname(dump_stacks.find_py_spy() or ""), "/usr/bin", "/bin") if p
    )
    proc = subprocess.run(
        [*nobody, "-c", code], capture_output=True, text=True, timeout=60, env={"PATH": path}
    )
    assert proc.returncode == 1, proc.stderr
    assert f"ptrace is not allowed to attach to PID {sleeper.pid}" in proc.stderr
    assert "xlalab dump-stacks PID --signal" in proc.stderr


# --------------------------------------------------------------------------- the command line


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, words in (
        (["--help"], ["debug-run", "dump-stacks"]),
        (["debug-run", "--help"], ["--outfile", "--tidy", "python -u", "TOKEN, KEY, SECRET"]),
        (["dump-stacks", "--help"], ["--signal", "install_signal_handler", "ptrace_scope"]),
    ):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 0
        out = capsys.readouterr().out
        for w in words:
            assert w in out, (argv, w)
    assert cli.main([]) == 2


def test_cli_dispatches_and_modules_run_as_main(
    tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "c.tar.gz"
    assert cli.main(["debug-run", "--quiet", "--outfile", str(out), "--", sys.executable, "-c", "pass"]) == 0
    assert out.exists()
    pid = str(_pid_max() + 1)
    assert cli.main(["dump-stacks", pid]) == 1
    # `python -m xlalab.tools.dump_stacks` / `.debug_run`: the same mains behind `if __name__ == ...`.
    for module, argv in (
        ("xlalab.tools.dump_stacks", [pid]),
        ("xlalab.tools.debug_run", ["--outfile", str(out)]),
    ):
        monkeypatch.setattr(sys, "argv", [module, *argv])
        with pytest.warns(RuntimeWarning, match="found in sys.modules"), pytest.raises(SystemExit) as exc:
            runpy.run_module(module, run_name="__main__")
        assert exc.value.code in (1, 2)
    err = capsys.readouterr().err
    assert "no process with PID" in err and "no command to run" in err


def test_console_script_declared() -> None:
    # A regex, not tomllib: the project supports Python 3.10, which has no tomllib.
    scripts = re.search(
        r"^\[project\.scripts\]\n(?P<body>(?:[^\[\n].*\n?)*)", (REPO / "pyproject.toml").read_text(), re.M
    )
    assert scripts is not None and 'xlalab = "xlalab.tools.cli:main"' in scripts["body"]
    eps = [ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == "xlalab"]
    if eps:  # installed (pip install -e .): the entry point resolves to the same function
        assert eps[0].load() is cli.main
