"""The lab as a newcomer sees it: legible graphs, counts that match, words a person writes, one
card per finding, a Clear that clears everything, where the kernel runs, and a recompile drawn
as two graphs side by side.

Every test saves screenshots of what it checked into the artifacts directory
(``tests/e2e/artifacts/``), so a reviewer can look at each panel view and the graph viewer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jax
import torch
from playwright.sync_api import expect

from . import notebooks as nb
from .harness import Lab, wait_for
from .test_lab import line_of, number, warnings

# A count next to its noun, the way nobody writes it.
BAD_PLURAL = re.compile(r"\b1 (transfers|compiles|nodes|devices|executions|differences)\b")
SIZE = re.compile(r"^\d+(\.\d)? (B|KB|MB|GB)$")


def shoot(lab: Lab, artifacts: Path, name: str, element: Any = None) -> None:
    """A screenshot of the page, and of ``element`` alone when given."""
    lab.screenshot(artifacts / f"{name}.png")
    if element is not None:
        element.screenshot(path=str(artifacts / f"{name}-element.png"))


def label_px(graph: Any) -> float:
    """The smallest on-screen height (px) of a node label's font among the nodes in view."""
    px: float = graph.evaluate(
        """(root) => {
             const svg = root.querySelector('svg.xlalab-Graph-svg');
             const box = svg.getBoundingClientRect();
             let smallest = Infinity;
             for (const text of svg.querySelectorAll('g.node text')) {
               const r = text.getBoundingClientRect();
               const outside = r.bottom < box.top || r.top > box.bottom
                 || r.right < box.left || r.left > box.right;
               if (outside) continue;
               const size = Number(text.getAttribute('font-size')) * text.getScreenCTM().a;
               smallest = Math.min(smallest, size);
             }
             return smallest;
           }"""
    )
    return px


def drawn_nodes(graph: Any) -> list[dict[str, Any]]:
    """Each drawn IR node (dot name ``node<N>``): its name and its text lines."""
    nodes: list[dict[str, Any]] = graph.evaluate(
        """(root) => Array.from(root.querySelectorAll('svg g.node')).map((g) => ({
             name: (g.querySelector('title') || {}).textContent || '',
             lines: Array.from(g.querySelectorAll('text')).map((t) => t.textContent.trim()),
           })).filter((n) => /^node\\d+$/.test(n.name))"""
    )
    return nodes


def test_graph_viewer_is_legible_and_its_counts_match(lab: Lab, artifacts: Path) -> None:
    path = "newcomer_graphs.ipynb"
    lab.open_notebook(path)
    lab.run_cells(path, *range(nb.ROOTS_GRAPH_CELL + 1))

    # An 80-node chain: fitted whole into the output it would have 2 px text; the first view
    # zooms to where the labels can be read.
    chain = lab.cell(path, nb.CHAIN_GRAPH_CELL).get_by_test_id("xlalab-graph")
    expect(chain.locator("svg g.node").first).to_be_visible()
    wait_for(lambda: label_px(chain) >= 11, 10, "node labels of at least 11 px at the first zoom")
    nodes = drawn_nodes(chain)
    assert len(nodes) == nb.LEGIBLE_CHAIN + 2, f"the chain and its two inputs: {len(nodes)} drawn"
    for node in nodes:
        shapes = [
            line
            for line in node["lines"]
            if re.fullmatch(r"(xla_shape=)?[a-z]+\d*\[[\d,]*\](\{[\d,]*\})?", line)
        ]
        assert len(shapes) == 1, f"{node['name']} should show its shape once: {node['lines']}"
    header = chain.locator(".xlalab-Graph-header").inner_text()
    assert len(re.findall(r"\b\d+ nodes\b", header)) == 1, f"the node count once in the header: {header!r}"
    assert f"{nb.LEGIBLE_CHAIN + 2} nodes" in header
    chain.scroll_into_view_if_needed()
    shoot(lab, artifacts, "graph-viewer-legible", chain)
    chain.get_by_test_id("xlalab-graph-fit").click()
    wait_for(lambda: label_px(chain) < 11, 10, "Fit to show the whole chain, smaller")

    # More outputs than --max-nodes: at most that many nodes drawn, and the header and the
    # op-count note agree with the graph's own count.
    many = lab.cell(path, nb.ROOTS_GRAPH_CELL).get_by_test_id("xlalab-graph")
    expect(many.locator("svg g.node").first).to_be_visible()
    nodes = drawn_nodes(many)
    header = many.locator(".xlalab-Graph-header").inner_text()
    shown = re.search(r"\((\d+) nodes\b.*?\)\s*(\d+) of them shown", header, re.S)
    assert shown is not None, header
    assert len(re.findall(r"\b\d+ nodes\b", header)) == 1, f"the node count once in the header: {header!r}"
    assert len(nodes) == int(shown[2]) == nb.MAX_NODES, (
        f"--max-nodes {nb.MAX_NODES} drew {len(nodes)}: {header!r}"
    )
    note = many.evaluate(
        """(root) => Array.from(root.querySelectorAll('svg g.node'))
             .filter((g) => (g.querySelector('title') || {}).textContent === 'op_counts')
             .flatMap((g) => Array.from(g.querySelectorAll('text')).map((t) => t.textContent.trim()))"""
    )
    total = sum(int(m[1]) for line in note if (m := re.search(r"=(\d+)$", line)))
    assert total == int(shown[1]), (
        f"the op counts {note!r} should add up to the {shown[1]} nodes of the header"
    )
    many.scroll_into_view_if_needed()
    shoot(lab, artifacts, "graph-viewer-max-nodes", many)


def test_node_inspector_links_frames_to_cells(lab: Lab, artifacts: Path) -> None:
    path = "newcomer_graphs.ipynb"
    lab.open_notebook(path)
    state = lab.run_cells(path, 0, 1, 2, *range(nb.ROOTS_GRAPH_CELL + 1, nb.NO_FRAMES_GRAPH_CELL + 1))

    # Recorded while xlalab is loaded: each frame is a link to its cell and line.
    graph = lab.cell(path, nb.CHAIN_GRAPH_CELL).get_by_test_id("xlalab-graph")
    graph.locator("svg g.node").filter(has_text="aten::add").first.click()
    inspector = lab.cell(path, nb.CHAIN_GRAPH_CELL).get_by_test_id("xlalab-graph-inspector")
    link = inspector.get_by_test_id("xlalab-frame-link").first
    expect(link).to_be_visible()
    line = line_of(state["cells"][nb.FRAMES_CELL]["source"], nb.FRAMES_LINE)
    assert link.get_attribute("data-cell-id") == state["cells"][nb.FRAMES_CELL]["id"]
    assert link.get_attribute("data-line") == str(line)
    expect(link).to_contain_text(f"line {line}")
    inspector.scroll_into_view_if_needed()
    shoot(lab, artifacts, "graph-inspector", graph)
    link.click()
    expect(lab.cell(path, nb.FRAMES_CELL)).to_have_class(re.compile(r"\bjp-mod-active\b"))
    cursor = lab.cursor(path)
    assert cursor is not None and cursor["line"] == line - 1, cursor

    # Built with %xla_debug off: no frames, and the inspector says what records them.
    bare = lab.cell(path, nb.NO_FRAMES_GRAPH_CELL).get_by_test_id("xlalab-graph")
    bare.locator("svg g.node").filter(has_text="aten::exp").first.click()
    hint = lab.cell(path, nb.NO_FRAMES_GRAPH_CELL).get_by_test_id("xlalab-graph-no-frames")
    expect(hint).to_contain_text("%xla_debug on")


def test_panel_says_where_it_runs_in_words_and_fits_its_tables(lab: Lab, artifacts: Path) -> None:
    path = "compile_recompile.ipynb"
    lab.open_notebook(path)
    lab.open_panel()
    tab = lab.sidebar_tab()
    assert (tab.get_attribute("title") or "").startswith("XLA"), "the sidebar icon's tooltip names the panel"
    lab.run_cells(path, 0)
    runtime = lab.testid("xlalab-runtime")
    expect(runtime).to_contain_text("not started yet")  # loading xlalab starts no device
    state = lab.run_cells(path, 1, 2, nb.RECOMPILE_CELL, nb.CACHE_DIR_CELL)
    expect(runtime).to_contain_text("CPU, 1 device")
    expect(runtime).to_contain_text(f"JAX {jax.__version__}")
    expect(runtime).to_contain_text(f"torch {torch.__version__}")
    cache_dir = state["cells"][nb.CACHE_DIR_CELL]["text"].strip()
    expect(runtime).to_contain_text(
        re.compile(r"Compile cache\s*off") if cache_dir == "None" else f"Compile cacheon, in {cache_dir}"
    )

    text = lab.panel.inner_text()
    assert not BAD_PLURAL.search(text), BAD_PLURAL.search(text)
    for testid in ("xlalab-bytes-to", "xlalab-bytes-from"):
        size = lab.testid(testid).inner_text().strip()
        assert SIZE.fullmatch(size), f"{testid}: {size!r} is not a size as a person writes it"
    status = lab.testid("xlalab-status").inner_text()
    assert not BAD_PLURAL.search(status), status

    # Wide enough for what it shows: nothing in it is cut or scrolls sideways.
    width = lab.panel.evaluate("(el) => el.getBoundingClientRect().width")
    assert width >= 300, f"the panel is {width:.0f} px wide"
    overflowing = lab.panel.evaluate(
        """(panel) => Array.from(panel.querySelectorAll('table, section, li, svg'))
             .filter((el) => el.getBoundingClientRect().right > panel.getBoundingClientRect().right + 1)
             .map((el) => el.tagName + '.' + el.className.baseVal ?? el.className)"""
    )
    assert not overflowing, f"wider than the panel: {overflowing}"

    legend = lab.testid("xlalab-timeline-legend")
    for label in ("compile", "cache hit", "execute", "transfer", "read", "CPU fallback"):
        expect(legend).to_contain_text(label)
    expect(lab.testid("xlalab-timeline-window")).to_have_value("all")
    shoot(lab, artifacts, "panel-connected", lab.panel)


def test_recompile_opens_both_graphs_with_the_change_marked(lab: Lab, artifacts: Path) -> None:
    path = "compile_recompile.ipynb"
    lab.open_notebook(path)
    lab.open_panel()
    lab.run_cells(path, 0, 1, 2, nb.RECOMPILE_CELL)
    card = warnings(lab, "recompile")
    expect(card).to_have_count(1)
    card.get_by_test_id("xlalab-compare-graphs").click()
    diff = lab.page.get_by_test_id("xlalab-graph-diff")
    expect(diff).to_be_visible()
    before, after = diff.get_by_test_id("xlalab-diff-before"), diff.get_by_test_id("xlalab-diff-after")
    for side in (before, after):
        expect(side.locator("svg g.node").first).to_be_visible()
    expect(diff.get_by_test_id("xlalab-diff-summary")).to_contain_text("f32[8,4] → f32[7,4]")
    changed_after = after.locator("svg g.node.xlalab-mod-changed")
    expect(changed_after.first).to_be_visible()
    expect(after.locator("svg g.node.xlalab-mod-changed", has_text="was f32[8,4]")).to_have_count(1)
    expect(before.locator("svg g.node.xlalab-mod-changed", has_text="now f32[7,4]")).to_have_count(1)
    # Only what differs is marked: the weights and most ops are the same in both graphs.
    assert changed_after.count() < after.locator("svg g.node").count() / 2
    shoot(lab, artifacts, "recompile-graphs-side-by-side", diff)


def test_one_card_per_finding_and_clear_resets_everything(lab: Lab, artifacts: Path) -> None:
    path = "compile_recompile.ipynb"
    lab.open_notebook(path)
    lab.open_panel()
    lab.run_cells(path, 0, 1, 2, nb.RECOMPILE_CELL, nb.RECOMPILE_AGAIN_CELL)
    # Batch 8 -> 7, then 7 -> 6: two findings of the kernel about one line, one card.
    recompile = warnings(lab, "recompile")
    expect(recompile.get_by_test_id("xlalab-warning-count")).to_have_text(re.compile(r"^\D*2$"))
    expect(recompile).to_have_count(1)
    expect(recompile).to_contain_text("f32[7,4] → f32[6,4]")  # the newest
    cards = lab.panel.get_by_test_id("xlalab-warning").all()
    places = [
        (c.get_attribute("data-category"), c.get_attribute("data-cell-id"), c.get_attribute("data-line"))
        for c in cards
    ]
    assert len(places) == len(set(places)), places
    shoot(lab, artifacts, "panel-warnings", lab.panel)

    lab.panel.get_by_test_id("xlalab-show-report").click()
    report = lab.testid("xlalab-report")
    expect(report).to_contain_text("Metric: CompileTime")
    report.scroll_into_view_if_needed()
    shoot(lab, artifacts, "panel-metrics-report", lab.panel)

    timeline = lab.panel.get_by_test_id("xlalab-timeline")
    lab.panel.get_by_test_id("xlalab-clear").click()
    for testid in (
        "xlalab-compiles-uncached",
        "xlalab-compiles-cached",
        "xlalab-executions",
        "xlalab-transfers-to",
    ):
        expect(lab.testid(testid)).to_have_text("0")
    expect(lab.testid("xlalab-bytes-to")).to_have_text("0 B")
    expect(lab.panel.get_by_test_id("xlalab-warning")).to_have_count(0)
    expect(lab.panel.get_by_test_id("xlalab-warnings")).to_contain_text("No warnings.")
    expect(timeline.locator("rect.xlalab-Timeline-mark")).to_have_count(0)
    expect(report).not_to_be_visible()  # the report from before the clear is gone
    expect(lab.testid("xlalab-status")).to_have_text("XLA: 0 compiles")
    lab.panel.get_by_test_id("xlalab-show-report").click()
    expect(report).to_be_visible()
    assert "CompileTime" not in report.inner_text(), "a report asked for after Clear shows cleared metrics"
    shoot(lab, artifacts, "panel-after-clear", lab.panel)


def test_timeline_draws_fallbacks_as_counted_and_reads_as_reads(lab: Lab, artifacts: Path) -> None:
    example = "examples/fallback_hunt.ipynb"
    lab.open_notebook(example)
    lab.open_panel()
    lab.run_all(example)
    expect(lab.panel.get_by_test_id("xlalab-state")).to_contain_text("connected")
    fallbacks = number(lab, "xlalab-fallbacks")
    assert fallbacks >= 4  # one aten::nonzero per step
    timeline = lab.panel.get_by_test_id("xlalab-timeline")
    expect(timeline.locator('rect[data-kind="fallback"]')).to_have_count(fallbacks)
    assert timeline.locator('rect[data-kind="read"]').count() >= 1  # the loss.item() at the end
    card = warnings(lab, "fallback")
    expect(card).to_have_count(1)
    expect(card.get_by_test_id("xlalab-warning-count")).to_have_text(re.compile(rf"^\D*{fallbacks}$"))
    cards = lab.panel.get_by_test_id("xlalab-warning").all()
    places = [
        (c.get_attribute("data-category"), c.get_attribute("data-cell-id"), c.get_attribute("data-line"))
        for c in cards
    ]
    assert len(places) == len(set(places)), places
    shoot(lab, artifacts, "panel-timeline-fallbacks", lab.panel)


def test_examples_read_in_order(lab: Lab, artifacts: Path) -> None:
    """The quickstart runs top to bottom with no warning, as its first cell says."""
    example = "examples/quickstart.ipynb"
    lab.open_notebook(example)
    lab.open_panel()
    state = lab.run_all(example)
    first = state["cells"][0]
    assert first["type"] == "markdown" and "In the XLA panel" in first["source"]
    expect(lab.panel.get_by_test_id("xlalab-state")).to_contain_text("connected")
    expect(lab.panel.get_by_test_id("xlalab-warning")).to_have_count(0)
    assert number(lab, "xlalab-compiles-uncached") == 3, "2 for the training step, 1 for the evaluation"
    shoot(lab, artifacts, "example-quickstart", lab.panel)


def test_stepping_widget_runs_to_the_end_and_resets(lab: Lab, artifacts: Path) -> None:
    """The stepping notebook keeps bf16 on to its end, so its widget still shows the lesson; after
    Run to end, Reset steps again from the first row."""
    example = "examples/stepping.ipynb"
    lab.open_notebook(example)
    state = lab.run_all(example)
    assert 'XLA_USE_BF16", bf16_before' not in "".join(c["source"] for c in state["cells"])
    index = next(i for i, c in enumerate(state["cells"]) if c["source"].startswith("%xla_step"))
    widget = lab.cell(example, index)
    current = widget.locator(".widget-html").first
    expect(current).to_contain_text("next: %0")
    widget.get_by_role("button", name="Run to end").click()
    expect(current).to_contain_text("finished")
    widget.get_by_role("button", name="Find divergence").wait_for()
    widget.get_by_role("button", name="Reset").click()
    expect(current).to_contain_text("next: %0")
    widget.get_by_role("button", name="Find divergence").click()
    expect(widget).to_contain_text("first divergence")
    expect(widget).to_contain_text("aten::add")  # under bf16, as the lesson said
    widget.scroll_into_view_if_needed()
    shoot(lab, artifacts, "example-stepping-widget", widget)
