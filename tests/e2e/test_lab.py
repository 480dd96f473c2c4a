"""xlalab in JupyterLab, end to end: a real ``jupyter lab``, Debian's Chromium driven by Playwright.

Each test does what a user does (open a notebook, run its cells, look at the XLA panel, click
a warning) and asserts what the user relies on. The numbers the panel must show are read
from the runtime itself, in a plain Python process running the same cells
(``notebooks.ExpectedCounts``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from . import notebooks as nb
from .harness import Lab, wait_for

# The panel follows the kernel through throttled comm updates: poll, with a bounded wait.
expect.set_options(timeout=60_000)

COUNT_IDS = [
    "xlalab-compiles-uncached",
    "xlalab-compiles-cached",
    "xlalab-executions",
    "xlalab-transfers-to",
    "xlalab-transfers-from",
    "xlalab-fallbacks",
]


def number(lab: Lab, testid: str) -> int:
    text = (lab.testid(testid).text_content() or "").strip()
    assert re.fullmatch(r"\d+", text), f"[data-testid={testid}] should be just a number, got {text!r}"
    return int(text)


def warnings(lab: Lab, category: str) -> Any:
    return lab.panel.locator(f'[data-testid="xlalab-warning"][data-category="{category}"]')


def line_of(source: str, needle: str) -> int:
    """1-based line of ``needle`` in a cell's source."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if needle in line)


def test_kernel_without_xlalab_says_how_to_enable_it(lab: Lab, artifacts: Path) -> None:
    tab = lab.sidebar_tab()
    expect(tab).to_have_count(1)
    assert "XLA" in ((tab.get_attribute("title") or "") + (tab.text_content() or "")), (
        "the right sidebar tab of #xlalab-panel should be titled XLA"
    )
    lab.open_panel_from_palette()
    expect(lab.panel).to_be_visible()
    expect(lab.panel.get_by_test_id("xlalab-state")).to_contain_text("no kernel")

    lab.open_notebook("plain.ipynb")
    state = lab.run_all("plain.ipynb")
    assert state["cells"][0]["text"] == "42"
    status = lab.panel.get_by_test_id("xlalab-state")
    expect(status).to_contain_text("not enabled")
    expect(status).to_contain_text("%load_ext xlalab")
    # The status bar says so too, instead of counting compiles that cannot happen.
    expect(lab.testid("xlalab-status")).to_have_text("XLA: not loaded")
    lab.screenshot(artifacts / "not-enabled.png")


def test_compile_then_recompile(lab: Lab, expected: nb.ExpectedCounts, artifacts: Path) -> None:
    path = "compile_recompile.ipynb"
    want = expected.get(path)
    assert want[3]["uncached"] > want[2]["uncached"] and want[3]["cached"] > 0, (
        f"the reference run should compile, hit the cache, then recompile: {want}"
    )
    lab.open_notebook(path)
    lab.open_panel()
    lab.run_cells(path, 0)
    expect(lab.panel.get_by_test_id("xlalab-state")).to_contain_text("connected")

    lab.run_cells(path, 1, 2)  # the model and step(), then step(8) twice: one compile, one cache hit
    expect(lab.testid("xlalab-compiles-uncached")).to_have_text(str(want[2]["uncached"]))
    expect(lab.testid("xlalab-compiles-cached")).to_have_text(str(want[2]["cached"]))
    expect(warnings(lab, "recompile")).to_have_count(0)

    state = lab.run_cells(path, nb.RECOMPILE_CELL)  # step(7): a new input shape
    uncached, cached = want[3]["uncached"], want[3]["cached"]
    expect(lab.testid("xlalab-compiles-uncached")).to_have_text(str(uncached))
    expect(lab.testid("xlalab-compiles-cached")).to_have_text(str(cached))
    expect(lab.testid("xlalab-transfers-to")).to_have_text(str(want[3]["transfers_to"]))
    # The executions come after their compiles, maybe in the next throttled update.
    wait_for(
        lambda: number(lab, "xlalab-executions") >= uncached + cached, 10, "an execution per compiled graph"
    )
    for testid in ("xlalab-compile-time-last", "xlalab-compile-time-total"):
        text = (lab.testid(testid).text_content() or "").strip()
        assert re.fullmatch(r"\d+(\.\d+)?\s*(s|ms|µs|us|min)", text), f"{testid}: {text!r} is not a time"
    expect(lab.testid("xlalab-status")).to_have_text(re.compile(rf"XLA:\s*{uncached}\s+compiles?\b"))
    expect(lab.panel.get_by_test_id("xlalab-timeline")).to_be_visible()
    expect(lab.testid("xlalab-compiling")).to_have_count(0)  # shown only while a compile runs

    warning = warnings(lab, "recompile")
    expect(warning).to_have_count(1)
    text = warning.inner_text()
    assert re.search(r"\[\s*8\s*,\s*4\s*\]", text) and re.search(r"\[\s*7\s*,\s*4\s*\]", text), (
        f"the recompile warning should show the input shape going from [8,4] to [7,4]: {text!r}"
    )
    # The warning points at its cause, the line that made the input whose shape changed; the
    # line that ran the step is among its frames (the card's tooltip).
    source = state["cells"][nb.MODEL_CELL]["source"]
    line = line_of(source, nb.INPUT_LINE)
    assert warning.get_attribute("data-cell-id") == state["cells"][nb.MODEL_CELL]["id"]
    assert warning.get_attribute("data-line") == str(line)
    assert re.search(rf"\bline\s*{line}\b", text), f"the warning should name line {line}: {text!r}"
    ran_at = line_of(state["cells"][nb.RECOMPILE_CELL]["source"], nb.RECOMPILE_LINE)
    assert f"line {ran_at}" in (warning.get_attribute("title") or "")

    # Somewhere else first, then jump.
    lab.cell(path, 0).locator(".jp-InputPrompt").click()
    expect(lab.active_cell(path)).to_contain_text("%load_ext xlalab")
    warning.click()
    active = lab.active_cell(path)
    expect(active).to_have_count(1)
    expect(active).to_contain_text(nb.INPUT_LINE)
    expect(lab.cell(path, nb.MODEL_CELL)).to_have_class(re.compile(r"\bjp-mod-active\b"))
    cursor = lab.cursor(path)
    assert cursor is not None and cursor["line"] == line - 1, (
        f"the cursor should be on line {line} of the cell (0-based {line - 1}): {cursor}"
    )
    lab.screenshot(artifacts / "recompile.png")

    # torch.compile in the same kernel: dynamo's graphs counted beside XLA's compiles.
    expect(lab.testid("xlalab-dynamo-graphs")).to_have_count(1)
    expect(lab.testid("xlalab-dynamo-graphs")).to_be_hidden()  # no compiled function yet
    lab.run_cells(path, nb.COMPILED_CELL)
    compiled = want[nb.COMPILED_CELL]
    assert compiled["dynamo_graphs"] == 2 and compiled["dynamo_recompiles"] == 1, compiled
    expect(lab.testid("xlalab-dynamo-graphs")).to_have_text(str(compiled["dynamo_graphs"]))
    expect(lab.testid("xlalab-dynamo-recompiles")).to_have_text(str(compiled["dynamo_recompiles"]))
    expect(lab.testid("xlalab-dynamo-graphs")).to_be_visible()
    # The XLA compiles the compiled function added (cells 4 and 5 did not run in this kernel).
    added = compiled["uncached"] - want[nb.COMPILED_CELL - 1]["uncached"]
    expect(lab.testid("xlalab-compiles-uncached")).to_have_text(str(uncached + added))


def test_example_recompilation_hunt_finds_the_recompile(lab: Lab, artifacts: Path) -> None:
    example = "examples/recompilation_hunt.ipynb"
    lab.open_notebook(example)
    lab.open_panel()
    state = lab.run_all(example)
    expect(lab.panel.get_by_test_id("xlalab-state")).to_contain_text("connected")
    warning = warnings(lab, "recompile").first
    expect(warning).to_be_visible()
    text = warning.inner_text()
    assert re.search(r"\[[\d,\s]+\]\s*→\s*\w*\[[\d,\s]+\]", text), f"no shape change in {text!r}"
    assert number(lab, "xlalab-compiles-uncached") >= 2

    # The warning leads to a cell of this notebook, at a line that exists there.
    cell_id, line = warning.get_attribute("data-cell-id"), int(warning.get_attribute("data-line") or 0)
    index = next((i for i, c in enumerate(state["cells"]) if c["id"] == cell_id), None)
    assert index is not None, f"the warning points at cell {cell_id!r}, not in {example}"
    assert 1 <= line <= len(state["cells"][index]["source"].splitlines())
    warning.click()
    expect(lab.cell(example, index)).to_have_class(re.compile(r"\bjp-mod-active\b"))
    lab.screenshot(artifacts / "example-recompilation-hunt.png")

    # As the notebook's first cell says: Compare graphs marks the input whose shape changed.
    warning.get_by_test_id("xlalab-compare-graphs").click()
    after = lab.page.get_by_test_id("xlalab-graph-diff").get_by_test_id("xlalab-diff-after")
    expect(after.locator("svg g.node.xlalab-mod-changed", has_text="was f32[16,8]")).to_have_count(1)
    lab.screenshot(artifacts / "example-recompilation-hunt-graphs.png")


def test_cpu_fallback_and_item(lab: Lab, expected: nb.ExpectedCounts, artifacts: Path) -> None:
    path = "fallback.ipynb"
    want = expected.get(path)[-1]
    lab.open_notebook(path)
    lab.open_panel()
    state = lab.run_all(path)

    row = lab.panel.locator('[data-testid="xlalab-fallback-op"][data-op="aten::nonzero"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text(re.compile(rf"\b{want['fallbacks']['aten::nonzero']}\b"))
    rows = lab.panel.get_by_test_id("xlalab-fallback-op")
    per_op = [int(re.findall(r"\d+", t)[-1]) for t in rows.all_text_contents()]
    assert number(lab, "xlalab-fallbacks") == sum(per_op) >= want["fallbacks"]["aten::nonzero"], (
        f"the fallback total should add up the rows {rows.all_text_contents()}"
    )
    expect(lab.testid("xlalab-compiles-uncached")).to_have_text(str(want["uncached"]))
    expect(lab.testid("xlalab-transfers-from")).to_have_text(str(want["transfers_from"]))

    fallback = warnings(lab, "fallback")
    expect(fallback).to_have_count(1)
    expect(fallback).to_contain_text("nonzero")
    assert fallback.get_attribute("data-cell-id") == state["cells"][1]["id"]
    assert fallback.get_attribute("data-line") == str(line_of(state["cells"][1]["source"], "torch.nonzero"))

    # .item() of a pending value, inside each step of a loop: a transfer warning at that line.
    transfer = warnings(lab, "transfer")
    expect(transfer).to_have_count(1)
    expect(transfer).to_contain_text("item")
    assert transfer.get_attribute("data-cell-id") == state["cells"][2]["id"]
    assert transfer.get_attribute("data-line") == str(line_of(nb.ITEM_CELL, nb.ITEM_LINE))

    # The last cell's profiler regions: named spans on the timeline, the step around its forward.
    timeline = lab.panel.get_by_test_id("xlalab-timeline")
    step = timeline.locator('rect[data-kind="region"][data-label="train_step (step 0)"]')
    forward = timeline.locator('rect[data-kind="region"][data-label="forward"]')
    expect(step).to_have_count(1)
    expect(forward).to_have_count(1)
    expect(step.locator("title")).to_contain_text(re.compile(r"in 2\.\d+ s at cell \[\d+\], line 5"))
    outer, inner = step.bounding_box(), forward.bounding_box()
    assert outer and inner and outer["x"] <= inner["x"]
    assert inner["x"] + inner["width"] <= outer["x"] + outer["width"]
    expect(timeline.locator("text.xlalab-Timeline-regionLabel").first).to_contain_text("train")
    lab.screenshot(artifacts / "fallback.png")


def _node_width(graph: Any) -> float:
    """On-screen width of the first drawn node: what zooming changes."""
    width: float = graph.evaluate("(root) => root.querySelector('svg g.node').getBoundingClientRect().width")
    return width


def responsive(lab: Lab, within: float = 5.0) -> None:
    started = time.monotonic()
    assert lab.page.evaluate("1 + 1") == 2
    took = time.monotonic() - started
    assert took < within, f"the page took {took:.1f} s to answer: it should stay responsive"


def test_graph_viewer(lab: Lab, artifacts: Path) -> None:
    path = "graph.ipynb"
    lab.open_notebook(path)
    lab.run_cells(path, 0, 1, 2)
    graph = lab.cell(path, 2).get_by_test_id("xlalab-graph")
    expect(graph).to_be_visible()
    expect(graph.locator("svg").first).to_be_visible()
    nodes = graph.locator("svg g.node")
    expect(nodes.first).to_be_visible()
    assert nodes.count() >= 3, "relu(a @ b).sum(0) has at least a matmul, a relu and a sum"

    node = nodes.filter(has_text=re.compile(r"aten::\w+")).first
    op = re.search(r"aten::\w+", node.text_content() or "")
    assert op is not None
    node.click()
    inspector = lab.cell(path, 2).get_by_test_id("xlalab-graph-inspector")
    expect(inspector).to_be_visible()
    expect(inspector).to_contain_text(op.group(0))

    before = _node_width(graph)
    graph.get_by_test_id("xlalab-graph-zoom-in").click()
    zoomed = wait_for(
        lambda: (w := _node_width(graph)) > before * 1.05 and w, 10, "zoom in to enlarge the nodes"
    )
    graph.get_by_test_id("xlalab-graph-zoom-out").click()
    wait_for(lambda: _node_width(graph) < zoomed * 0.95, 10, "zoom out to shrink the nodes")
    for _ in range(3):
        graph.get_by_test_id("xlalab-graph-zoom-in").click()
    wait_for(lambda: _node_width(graph) > zoomed * 1.05, 10, "zoom in again")
    graph.get_by_test_id("xlalab-graph-fit").click()
    wait_for(lambda: _node_width(graph) < zoomed, 10, "fit to bring the whole graph back into view")
    lab.screenshot(artifacts / "graph.png")

    # 10,000 nodes: a summary instead of a layout, and the page keeps answering, while the
    # output arrives and once it is drawn.
    lab.run_cells(path, 3, 4)
    responsive(lab)
    big = lab.cell(path, 4).get_by_test_id("xlalab-graph")
    expect(big).to_be_visible()
    summary = big.get_by_test_id("xlalab-graph-summary")
    expect(summary).to_be_visible()
    expect(summary).to_contain_text("aten::add")
    responsive(lab)
    summary.scroll_into_view_if_needed()
    lab.screenshot(artifacts / "graph-summary.png")


def test_graph_viewer_colours_shardings_and_marks_collectives(lab: Lab, artifacts: Path) -> None:
    path = "spmd_graph.ipynb"
    lab.open_notebook(path)
    lab.run_cells(path, 0, 1, nb.SPMD_GRAPH_CELL)
    graph = lab.cell(path, nb.SPMD_GRAPH_CELL).get_by_test_id("xlalab-graph")
    expect(graph.locator("svg g.node").first).to_be_visible()
    cols, rows = "{devices=[1,8]0,1,2,3,4,5,6,7}", "{devices=[8,1]0,1,2,3,4,5,6,7}"
    legend = graph.get_by_test_id("xlalab-sharding-legend")
    entries = legend.get_by_test_id("xlalab-sharding-entry")
    expect(entries).to_have_count(2)
    expect(entries.nth(0)).to_have_text(f"{cols} 2 nodes")  # the operands, split by columns
    expect(entries.nth(1)).to_have_text(f"{rows} 1 node")  # the product's constraint, by rows
    # Drawn in their legend colours: both operands alike, the constraint in the second colour.
    fills = graph.evaluate(
        """(root) => [...root.querySelectorAll('svg g.node[data-sharding]')].map(g => [
            g.getAttribute('data-sharding'), g.querySelector('polygon, ellipse').getAttribute('fill')])"""
    )
    swatches = entries.locator(".xlalab-Sharding-swatch").evaluate_all(
        "(els) => els.map(e => getComputedStyle(e).backgroundColor)"
    )

    def rgb(hex_colour: str) -> str:
        r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        return f"rgb({r}, {g}, {b})"

    assert sorted((spec, rgb(fill)) for spec, fill in fills) == sorted(
        [(cols, swatches[0]), (cols, swatches[0]), (rows, swatches[1])]
    ), (fills, swatches)
    assert swatches[0] != swatches[1]
    # The all-gather the partitioner inserted for the matmul: listed with its size, and marked
    # on the aten::mm node.
    gather = legend.get_by_test_id("xlalab-collective").filter(has_text="all-gather")
    expect(gather.first).to_contain_text("all-gather f32[64,64] (16 KB per device) for aten::mm")
    marked = graph.locator('svg g.node[data-collective="true"]')
    expect(marked).to_have_count(1)
    expect(marked).to_contain_text("aten::mm")
    expect(marked).to_contain_text("⇆ all-gather")
    marked.scroll_into_view_if_needed()
    lab.screenshot(artifacts / "graph-spmd.png")

    # The panel: the live data on each of the 8 devices (every device holds its column block of
    # both operands), and the collectives the run carried with their share of the bytes moved.
    lab.open_panel()
    spmd = lab.panel.get_by_test_id("xlalab-spmd")
    expect(spmd).to_be_visible()
    devices = spmd.get_by_test_id("xlalab-device-memory").locator("tr")
    expect(devices).to_have_count(8)
    expect(devices.nth(7)).to_contain_text(re.compile(r"xla:7\s*\d+(\.\d)? KB"))
    expect(spmd.get_by_test_id("xlalab-collective-share")).to_contain_text(
        re.compile(r"\d+(\.\d)?% of the bytes the programs moved: .* per device over \d+ runs?\.")
    )
    expect(spmd.get_by_test_id("xlalab-collective-kinds").locator('[data-kind="all-gather"]')).to_have_count(1)
    spmd.scroll_into_view_if_needed()
    lab.screenshot(artifacts / "panel-spmd.png")


def test_panel_follows_the_active_notebook_and_kernel_restarts(lab: Lab, expected: nb.ExpectedCounts) -> None:
    a, b = "two_a.ipynb", "two_b.ipynb"
    want_a, want_b = expected.get(a)[-1]["uncached"], expected.get(b)[-1]["uncached"]
    assert want_a != want_b
    lab.open_notebook(a)
    lab.run_all(a)
    lab.open_notebook(b)
    lab.run_all(b)
    lab.open_panel()
    uncached = lab.testid("xlalab-compiles-uncached")
    state = lab.panel.get_by_test_id("xlalab-state")

    for path, want in ((a, want_a), (b, want_b), (a, want_a), (b, want_b)):
        lab.activate(path)
        expect(state).to_contain_text("connected")
        expect(uncached).to_have_text(str(want))
        expect(lab.testid("xlalab-status")).to_have_text(re.compile(rf"XLA:\s*{want}\s+compiles?\b"))

    lab.restart_kernel(b)
    expect(state).to_contain_text("not enabled")
    expect(state).to_contain_text("%load_ext xlalab")
    for testid in COUNT_IDS:
        item = lab.testid(testid)
        if item.count() and item.first.is_visible():
            expect(item.first).to_have_text(re.compile(r"^\s*(0|—|-|)\s*$"))

    lab.run_cells(b, 0)
    expect(state).to_contain_text("connected")
    expect(uncached).to_have_text("0")
    lab.run_cells(b, 1)
    expect(uncached).to_have_text(str(want_b))
    lab.activate(a)
    expect(uncached).to_have_text(str(want_a))


def test_untrusted_text_is_shown_as_text(lab: Lab, artifacts: Path) -> None:
    path = "escaping.ipynb"
    lab.open_notebook(path)
    lab.open_panel()
    lab.run_all(path)
    warning = warnings(lab, "fallback")
    expect(warning).to_have_count(1)
    expect(lab.panel).to_contain_text(nb.EVIL)
    expect(lab.panel.locator("b", has_text="bold")).to_have_count(0)
    expect(lab.panel.locator("img")).to_have_count(0)

    # The graph inspector shows the node's source frames: the same file name, as text.
    graph = lab.cell(path, nb.ESCAPING_GRAPH_CELL).get_by_test_id("xlalab-graph")
    node = graph.locator("svg g.node").filter(has_text="aten::mul").first
    expect(node).to_be_visible()
    node.click()
    inspector = lab.cell(path, nb.ESCAPING_GRAPH_CELL).get_by_test_id("xlalab-graph-inspector")
    expect(inspector).to_contain_text(nb.EVIL)
    expect(graph.locator("b", has_text="bold")).to_have_count(0)
    expect(graph.locator("img")).to_have_count(0)

    # Nowhere on the page (the cell's own HTML output included) did the markup come alive.
    expect(lab.page.locator('img[src="x"]')).to_have_count(0)
    assert lab.page.evaluate("() => window.__xlalab_xss") is None
    lab.screenshot(artifacts / "escaping.png")


def test_two_pages_watch_one_kernel(lab: Lab, expected: nb.ExpectedCounts) -> None:
    """A second page (a reload, another tab) asks the running kernel for its state, then both
    pages get every update; Clear and %unload_ext reach both."""
    path = "two_pages.ipynb"
    want = expected.get(path)
    lab.open_notebook(path)
    lab.open_panel()
    lab.run_cells(path, 0, 1)
    expect(lab.testid("xlalab-compiles-uncached")).to_have_text(str(want[1]["uncached"]))

    # Another browser profile: its own storage and workspace, the same server and kernel.
    context = lab.page.context.browser.new_context(viewport={"width": 1600, "height": 1000})
    other = Lab(context.new_page(), lab.server)
    try:
        other.load()
        other.open_notebook(path)  # the same session, the same kernel
        other.open_panel()
        expect(other.panel.get_by_test_id("xlalab-state")).to_contain_text("connected")
        expect(other.testid("xlalab-compiles-uncached")).to_have_text(str(want[1]["uncached"]))

        lab.run_cells(path, 2)
        for page in (lab, other):
            expect(page.testid("xlalab-compiles-uncached")).to_have_text(str(want[2]["uncached"]))
            expect(page.testid("xlalab-status")).to_have_text(
                re.compile(rf"XLA:\s*{want[2]['uncached']}\s+compiles?\b")
            )

        other.panel.get_by_role("button", name="Clear").click()  # the protocol's `clear` request
        for page in (lab, other):
            expect(page.testid("xlalab-compiles-uncached")).to_have_text("0")

        lab.run_cells(path, 3)  # %unload_ext xlalab
        for page in (lab, other):
            expect(page.panel.get_by_test_id("xlalab-state")).to_contain_text("not enabled")
        assert not other.extension_errors(), other.extension_errors()
    finally:
        context.close()
