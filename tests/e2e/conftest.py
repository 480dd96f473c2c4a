"""Fixtures for the end-to-end tests: one ``jupyter lab`` server, one Chromium, one page.

They live as long as the tests of this package (``tests/e2e``), so the server, its kernels
and the browser are gone before the rest of ``make test`` runs.

The tests need Debian's chromium, the Python playwright package and the built extension
(``make install`` sets up all three); without them every test fails saying so. Screenshots,
and on failure the server log's tail and the browser console, go to ``tests/e2e/artifacts/``
or ``$XLALAB_E2E_ARTIFACTS``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import notebooks
from .harness import CHROMIUM_ARGS, REPO, Lab, LabServer, chromium_path, prerequisite_problems

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "e2e: end-to-end test in a real browser against a real jupyter lab (deselect: -m 'not e2e')",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"_e2e_report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def artifacts() -> Path:
    d = Path(os.environ.get("XLALAB_E2E_ARTIFACTS") or HERE / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    for stale in d.glob("FAILED-*"):  # from an earlier run
        stale.unlink()
    return d


@pytest.fixture(scope="session")
def e2e_ready() -> None:
    problems = prerequisite_problems()
    if problems:
        pytest.fail("the end-to-end tests cannot run:\n- " + "\n- ".join(problems), pytrace=False)


@pytest.fixture(scope="package")
def expected(e2e_ready: None) -> Iterator[notebooks.ExpectedCounts]:
    """The runtime's own counts for the notebooks, computed in the background while lab starts."""
    names = ["compile_recompile.ipynb", "fallback.ipynb", "two_a.ipynb", "two_b.ipynb", "two_pages.ipynb"]
    sources = {name: notebooks.NOTEBOOKS[name] for name in names}
    counts = notebooks.ExpectedCounts(sources)
    yield counts
    counts.kill()


@pytest.fixture(scope="package")
def lab_server(
    e2e_ready: None,
    expected: notebooks.ExpectedCounts,
    tmp_path_factory: pytest.TempPathFactory,
    artifacts: Path,
) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("xlalab-e2e")
    root, state = base / "notebooks", base / "state"
    root.mkdir()
    state.mkdir()
    notebooks.write_all(root)
    examples = REPO / "examples"
    if examples.is_dir():
        shutil.copytree(examples, root / "examples", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    server = LabServer(root, state)
    server.start()
    yield server
    server.stop()
    shutil.copyfile(server.log_path, artifacts / "jupyter-lab.log")


@pytest.fixture(scope="package")
def browser(e2e_ready: None) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="package")
def lab_session(browser: Any, lab_server: LabServer, artifacts: Path) -> Iterator[Lab]:
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(30_000)
    lab = Lab(page, lab_server)
    lab.load()
    yield lab
    (artifacts / "browser-console.log").write_text("\n".join(lab.console) + "\n")
    context.close()


@pytest.fixture
def lab(lab_session: Lab, request: pytest.FixtureRequest, artifacts: Path) -> Iterator[Lab]:
    """The page, with every document closed and every kernel shut down after the test."""
    console = lab_session.console
    seen = len(console)
    yield lab_session
    report = getattr(request.node, "_e2e_report_call", None)
    if report is not None and report.failed:
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        try:
            lab_session.screenshot(artifacts / f"FAILED-{name}.png")
        except Exception as e:
            print(f"no screenshot: {e}")
        (artifacts / f"FAILED-{name}-server-log.txt").write_text(lab_session.server.log_tail(300) + "\n")
        (artifacts / f"FAILED-{name}-console.txt").write_text("\n".join(console[seen:]) + "\n")
    try:
        lab_session.close_all()
    finally:
        lab_session.server.shutdown_all_kernels()
    thrown = lab_session.extension_errors(seen)
    if thrown:
        pytest.fail("the extension threw in the page:\n" + "\n".join(thrown), pytrace=False)
