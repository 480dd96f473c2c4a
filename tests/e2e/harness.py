"""A real ``jupyter lab`` server and a real Chromium page driving it, for the end-to-end tests.

One server and one browser serve the whole session. The server runs from temporary
directories only (notebooks, runtime, settings, workspaces, config, kernel spec), so nothing
from the user's own Jupyter state leaks in, and it is shut down with its kernels at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LABEXTENSION_DIR = REPO / "xlalab" / "labextension"
FIX_HINT = (
    "Run `make install` in the repository root: "
    "it installs Debian's chromium and builds and installs the extension."
)

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# Generous but bounded waits (seconds), for a loaded 2-core CI machine.
SERVER_START_TIMEOUT = 120
LAB_LOAD_TIMEOUT = 120
KERNEL_READY_TIMEOUT = 120
CELL_TIMEOUT = 180
UI_TIMEOUT = 30


def chromium_path() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def labextension_name() -> str | None:
    """The npm name of the built extension, or None when it is not built."""
    pkg = LABEXTENSION_DIR / "package.json"
    if not pkg.is_file():
        return None
    try:
        return str(json.loads(pkg.read_text())["name"])
    except (ValueError, KeyError):
        return None


def installed_labextension_dirs(name: str) -> list[Path]:
    """Where Jupyter finds a federated extension called ``name`` (what make install linked)."""
    from jupyter_core.paths import jupyter_path

    out = []
    for base in jupyter_path("labextensions"):
        candidate = Path(base, *name.split("/"))
        if (candidate / "package.json").is_file():
            out.append(candidate)
    return out


def prerequisite_problems() -> list[str]:
    """Everything missing for the end-to-end tests, each with how to fix it."""
    problems = []
    if chromium_path() is None:
        problems.append(
            f"Chromium is not installed (looked for `chromium` on PATH and /usr/bin/chromium). {FIX_HINT}"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append(f"The Python package `playwright` is not installed. {FIX_HINT}")
    name = labextension_name()
    if name is None:
        problems.append(
            f"The JupyterLab extension is not built: {LABEXTENSION_DIR}/package.json is missing. {FIX_HINT}"
        )
    elif not installed_labextension_dirs(name):
        problems.append(
            f"The extension {name} is built but JupyterLab does not find it "
            f"(`jupyter labextension list` does not show it). {FIX_HINT} "
            f"(it links xlalab/labextension into the environment's share/jupyter/labextensions)."
        )
    else:
        # A develop install is a link to the build; a stale copy would test old code.
        for found in installed_labextension_dirs(name):
            if found.resolve() != LABEXTENSION_DIR.resolve():
                problems.append(
                    f"JupyterLab loads the extension {name} from {found}, not from this checkout's build "
                    f"{LABEXTENSION_DIR}. {FIX_HINT}"
                )
    for module in ("xlalab.lab", "ipykernel", "jupyterlab", "nbformat"):
        try:
            __import__(module)
        except Exception as e:
            problems.append(f"`import {module}` fails ({type(e).__name__}: {e}). {FIX_HINT}")
    return problems


def die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when the test process dies, even by SIGKILL (Linux only).
    A server that outlives its test run would hold kernels and a port for nothing."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pythonpath_env() -> dict[str, str]:
    """The environment for the server and its kernels: this checkout's xlalab comes first."""
    env = dict(os.environ)
    parts = [str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


class LabServer:
    """``jupyter lab`` on a free port with a token, rooted at ``root`` (a temporary directory)."""

    def __init__(self, root: Path, state: Path) -> None:
        self.root = root
        self.state = state
        self.token = secrets.token_hex(16)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = state / "jupyter-lab.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write_isolated_config(self) -> Path:
        config_dir = self.state / "config"
        data_dir = self.state / "data"
        for d in ("runtime", "settings", "workspaces", "config", "ipython"):
            (self.state / d).mkdir(parents=True, exist_ok=True)
        # The python3 kernel is this interpreter (the env's own kernel.json says just "python").
        spec_dir = data_dir / "kernels" / "python3"
        spec_dir.mkdir(parents=True, exist_ok=True)
        (spec_dir / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Python 3 (ipykernel)",
                    "language": "python",
                    "metadata": {"debugger": False},
                }
            )
        )
        # No news or update toasts over the UI.
        notif = self.state / "settings" / "@jupyterlab" / "apputils-extension"
        notif.mkdir(parents=True, exist_ok=True)
        (notif / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False})
        )
        cfg = config_dir / "jupyter_lab_e2e_config.py"
        cfg.write_text(
            "\n".join(
                [
                    "c.ServerApp.ip = '127.0.0.1'",
                    f"c.ServerApp.port = {self.port}",
                    "c.ServerApp.port_retries = 0",
                    f"c.IdentityProvider.token = {self.token!r}",
                    "c.ServerApp.open_browser = False",
                    f"c.ServerApp.root_dir = {str(self.root)!r}",
                    "c.ServerApp.terminals_enabled = False",
                    f"c.ServerApp.allow_root = {os.geteuid() == 0}",  # CI containers run as root
                    # Nothing from the network: no extension manager queries, news or update checks.
                    "c.LabApp.extension_manager = 'readonly'",
                    "c.LabApp.news_url = None",
                    "c.LabApp.check_for_updates_class = "
                    "'jupyterlab.handlers.announcements.NeverCheckForUpdate'",
                    # window.jupyterapp: used to open files and run cells the way the UI does.
                    "c.LabApp.expose_app_in_browser = True",
                    "c.LanguageServerManager.autodetect = False",
                    "c.MappingKernelManager.cull_idle_timeout = 0",
                    # Notebook trust signatures: not in the user's data dir.
                    "c.NotebookNotary.db_file = ':memory:'",
                    "",
                ]
            )
        )
        return cfg

    def env(self) -> dict[str, str]:
        env = pythonpath_env()
        env.update(
            JUPYTER_RUNTIME_DIR=str(self.state / "runtime"),
            JUPYTER_CONFIG_DIR=str(self.state / "config"),
            JUPYTERLAB_SETTINGS_DIR=str(self.state / "settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(self.state / "workspaces"),
            # The kernels' IPython profile (history, startup files, config) is a fresh one too.
            IPYTHONDIR=str(self.state / "ipython"),
            # Ahead of the environment's data dirs: our python3 kernel spec wins.
            JUPYTER_PATH=os.pathsep.join(
                [str(self.state / "data")]
                + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
            ),
            PYTHONUNBUFFERED="1",
        )
        env.pop("JUPYTER_TOKEN", None)
        return env

    def start(self) -> None:
        last_error = ""
        for _attempt in range(3):
            self.port = free_port()
            cfg = self._write_isolated_config()
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterlab", f"--config={cfg}"],
                cwd=self.root,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
            )
            log.close()
            deadline = time.monotonic() + SERVER_START_TIMEOUT
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    last_error = f"jupyter lab exited with {self.proc.returncode}"
                    break
                try:
                    self.api("GET", "/api/status", timeout=5)
                    return
                except (OSError, urllib.error.URLError):
                    time.sleep(0.3)
            else:
                last_error = f"/api/status did not answer within {SERVER_START_TIMEOUT} s"
                self.stop()
                break
            if "address already in use" not in self.log_tail().lower():
                break
        raise RuntimeError(f"jupyter lab did not start: {last_error}\n--- server log ---\n{self.log_tail()}")

    def api(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def kernels(self) -> list[dict[str, Any]]:
        return list(self.api("GET", "/api/kernels"))

    def shutdown_all_kernels(self) -> None:
        for session in self.api("GET", "/api/sessions"):
            with contextlib.suppress(Exception):
                self.api("DELETE", f"/api/sessions/{session['id']}")
        for kernel in self.kernels():
            with contextlib.suppress(Exception):
                self.api("DELETE", f"/api/kernels/{kernel['id']}")

    def _kernel_pids(self) -> list[int]:
        """Kernels this server started: their connection files are in our private runtime dir."""
        runtime = str(self.state / "runtime")
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "ipykernel_launcher" in cmdline and runtime in cmdline:
                pids.append(int(proc.name))
        return pids

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.shutdown_all_kernels()
            with contextlib.suppress(Exception):
                self.api("POST", "/api/shutdown", timeout=10)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=10)
        # Kernels run in their own sessions; end any that outlived the server, by pid.
        for pid in self._kernel_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc = None

    def log_tail(self, lines: int = 200) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def normalize_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# --- the page ---------------------------------------------------------------------------------

# Small helpers run in the page. They reach JupyterLab through window.jupyterapp
# (LabApp.expose_app_in_browser) only to open documents and run cells exactly as the UI's
# commands do; everything the tests assert is read from the DOM the user sees.
_JS_FIND = """
window.__e2eFind = (path) => {
  const app = window.jupyterapp;
  for (const w of app.shell.widgets('main')) {
    if (w.context && w.context.path === path && w.content && w.content.widgets) return w;
  }
  return null;
};
window.__e2eState = (path) => {
  const w = window.__e2eFind(path);
  if (!w) return null;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = w.content.widgets.map((c) => {
    const m = c.model;
    const outputs = m.type === 'code' ? m.outputs.toJSON() : [];
    return {
      type: m.type,
      id: m.id,
      count: m.type === 'code' ? m.executionCount : null,
      source: m.sharedModel.getSource(),
      errors: outputs.filter((o) => o.output_type === 'error')
                     .map((o) => o.ename + ': ' + o.evalue + '\\n' + (o.traceback || []).join('\\n')),
      text: outputs.map((o) => o.text || (o.data && o.data['text/plain']) || '').join(''),
    };
  });
  return {status: kernel ? kernel.status : 'no-kernel', kernelId: kernel ? kernel.id : null,
          active: w.content.activeCellIndex, cells};
};
"""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class NotebookRunError(AssertionError):
    pass


class Lab:
    """The JupyterLab page: open notebooks, run cells, read the xlalab panel."""

    def __init__(self, page: Any, server: LabServer) -> None:
        self.page = page
        self.server = server
        self.console: list[str] = []  # browser console errors/warnings and uncaught exceptions
        page.on(
            "console",
            lambda m: self.console.append(f"[{m.type}] {m.text}") if m.type in ("error", "warning") else None,
        )
        page.on("pageerror", lambda e: self.console.append(f"[pageerror] {e.message}\n{e.stack or ''}"))

    def extension_errors(self, since: int = 0) -> list[str]:
        """Uncaught exceptions thrown from the extension's code (its chunks are served under its name)."""
        return [m for m in self.console[since:] if m.startswith("[pageerror]") and "xlalab" in m]

    # -- loading
    def load(self) -> None:
        self.page.goto(
            f"{self.server.base_url}/lab?reset&token={self.server.token}", timeout=LAB_LOAD_TIMEOUT * 1000
        )
        # JupyterLab may navigate once more (to a workspace of its own when another page of this
        # browser holds the default one): wait on whichever page stays.
        for attempt in range(3):
            try:
                self.page.wait_for_function(
                    "() => window.jupyterapp && window.jupyterapp.shell", timeout=LAB_LOAD_TIMEOUT * 1000
                )
                self.page.evaluate("async () => { await window.jupyterapp.restored; }")
                self.page.evaluate(_JS_FIND)
                break
            except Exception as e:
                if "context was destroyed" not in str(e) or attempt == 2:
                    raise
                self.page.wait_for_load_state("domcontentloaded")
        self.page.locator("#jp-main-dock-panel").wait_for(state="visible", timeout=LAB_LOAD_TIMEOUT * 1000)

    def js(self, expression: str, arg: Any = None) -> Any:
        if self.page.evaluate("() => typeof window.__e2eFind") != "function":
            self.page.evaluate(_JS_FIND)
        return self.page.evaluate(expression, arg)

    # -- documents
    def open_notebook(self, path: str) -> None:
        """Open ``path`` (relative to the server root) and wait for its kernel to be idle."""
        self.js(
            "async (path) => { await window.jupyterapp.commands.execute('docmanager:open',"
            " {path, factory: 'Notebook'}); }",
            path,
        )
        self.wait_kernel_idle(path)
        self.activate(path)

    def wait_kernel_idle(self, path: str, timeout: float = KERNEL_READY_TIMEOUT) -> None:
        self.js(
            """async (path) => {
                 let w = null;
                 for (let i = 0; i < 600 && !(w = window.__e2eFind(path)); i++)
                   await new Promise((r) => setTimeout(r, 100));
                 if (!w) throw new Error('no notebook widget for ' + path);
                 await w.context.ready;
                 await w.sessionContext.ready;
               }""",
            path,
        )
        wait_for(
            lambda: (self.state(path) or {}).get("status") == "idle",
            timeout,
            f"the kernel of {path} to be idle",
        )

    def tab(self, path: str) -> Any:
        name = path.rsplit("/", 1)[-1]
        return self.page.locator("#jp-main-dock-panel .lm-TabBar-tab").filter(
            has=self.page.locator(".lm-TabBar-tabLabel", has_text=re.compile("^" + re.escape(name) + "$"))
        )

    def activate(self, path: str) -> None:
        """Bring ``path``'s notebook to the front by clicking its tab, as a user would."""
        self.tab(path).first.click()
        wait_for(
            lambda: self.js(
                "(path) => { const w = window.__e2eFind(path);"
                " return !!w && window.jupyterapp.shell.currentWidget === w; }",
                path,
            ),
            UI_TIMEOUT,
            f"{path} to be the current notebook",
        )

    def notebook(self, path: str) -> Any:
        """The notebook panel's DOM node."""
        widget_id = self.js("(path) => { const w = window.__e2eFind(path); return w ? w.id : null; }", path)
        assert widget_id, f"{path} is not open"
        return self.page.locator(f'[id="{widget_id}"]')

    def cell(self, path: str, index: int) -> Any:
        return self.notebook(path).locator(".jp-Notebook .jp-Cell").nth(index)

    def active_cell(self, path: str) -> Any:
        return self.notebook(path).locator(".jp-Notebook .jp-Cell.jp-mod-active")

    def cursor(self, path: str) -> dict[str, int] | None:
        """The active cell's editor cursor, 0-based ``line`` and ``column``."""
        result: dict[str, int] | None = self.js(
            """(path) => { const w = window.__e2eFind(path); const c = w && w.content.activeCell;
                 return c && c.editor ? c.editor.getCursorPosition() : null; }""",
            path,
        )
        return result

    def state(self, path: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self.js("(path) => window.__e2eState(path)", path)
        return result

    def close_all(self) -> None:
        """Close every document without the 'save changes?' dialog."""
        self.js(
            """async () => {
                 const app = window.jupyterapp;
                 for (const w of Array.from(app.shell.widgets('main'))) {
                   if (w.context && w.context.model) w.context.model.dirty = false;
                 }
                 await app.commands.execute('application:close-all');
               }"""
        )
        for dialog in self.page.locator(".jp-Dialog").all():
            with contextlib.suppress(Exception):
                dialog.locator("button.jp-mod-reject").first.click(timeout=2000)

    # -- running cells
    def _run(self, path: str, command: str, indices: list[int] | None, timeout: float) -> dict[str, Any]:
        self.activate(path)
        outcome = self.js(
            """async ([path, command, indices, timeoutMs]) => {
                 const app = window.jupyterapp;
                 const w = window.__e2eFind(path);
                 await w.sessionContext.ready;
                 const run = async () => {
                   if (indices === null) return await app.commands.execute(command);
                   let ok = true;
                   for (const i of indices) {
                     w.content.activeCellIndex = i;
                     w.content.deselectAll();
                     ok = (await app.commands.execute(command)) !== false && ok;
                   }
                   return ok;
                 };
                 const timer = new Promise((r) => setTimeout(() => r('timeout'), timeoutMs));
                 const result = await Promise.race([run(), timer]);
                 return result === 'timeout' ? 'timeout' : 'done';
               }""",
            [path, command, indices, int(timeout * 1000)],
        )
        state = self.state(path) or {}
        errors = [_ANSI.sub("", e) for c in state.get("cells", []) for e in c["errors"]]
        if outcome == "timeout":
            raise NotebookRunError(
                f"{path}: cells still running after {timeout:.0f} s; kernel {state.get('status')}"
            )
        if errors:
            raise NotebookRunError(f"{path}: a cell raised:\n" + "\n\n".join(errors))
        wanted = range(len(state["cells"])) if indices is None else indices
        not_run = [
            i for i in wanted if state["cells"][i]["type"] == "code" and state["cells"][i]["count"] is None
        ]
        if not_run:
            raise NotebookRunError(f"{path}: cells {not_run} did not run (kernel {state.get('status')})")
        return state

    def run_all(self, path: str, timeout: float = CELL_TIMEOUT) -> dict[str, Any]:
        """Run every cell (Run > Run All Cells) and wait until the last one finished."""
        return self._run(path, "notebook:run-all-cells", None, timeout)

    def run_cells(self, path: str, *indices: int, timeout: float = CELL_TIMEOUT) -> dict[str, Any]:
        """Run the cells at ``indices`` one after the other (Ctrl+Enter on each), waiting for each."""
        return self._run(path, "notebook:run-cell", list(indices), timeout)

    def restart_kernel(self, path: str) -> None:
        """Kernel > Restart Kernel…, accept the dialog, wait until the new kernel is idle."""
        self.activate(path)
        before = (self.state(path) or {}).get("kernelId")
        self.js("() => { void window.jupyterapp.commands.execute('notebook:restart-kernel'); }")
        dialog = self.page.locator(".jp-Dialog")
        dialog.locator("button.jp-mod-accept").click(timeout=UI_TIMEOUT * 1000)
        wait_for(
            lambda: (s := self.state(path)) and s["status"] == "idle" and s["kernelId"] is not None,
            KERNEL_READY_TIMEOUT,
            f"the restarted kernel of {path} to be idle (kernel id before: {before})",
        )

    # -- the xlalab panel
    def testid(self, name: str) -> Any:
        return self.page.get_by_test_id(name)

    @property
    def panel(self) -> Any:
        return self.page.locator("#xlalab-panel")

    def sidebar_tab(self) -> Any:
        return self.page.locator('.jp-SideBar .lm-TabBar-tab[data-id="xlalab-panel"]')

    def open_panel(self) -> None:
        """Show the XLA panel by clicking its tab in the right sidebar (if it is not showing)."""
        if not self.panel.is_visible():
            self.sidebar_tab().click(timeout=UI_TIMEOUT * 1000)
        self.panel.wait_for(state="visible", timeout=UI_TIMEOUT * 1000)

    def open_panel_from_palette(self) -> None:
        """Ctrl+Shift+C, type the label of `xlalab:open-panel`, Enter."""
        label = self.js("() => window.jupyterapp.commands.label('xlalab:open-panel')")
        assert label, "the command xlalab:open-panel is not registered (or has no label)"
        search = self.page.locator(".lm-CommandPalette-input")
        for attempt in range(3):
            # Keyboard focus inside the application (the main area's tab bar), then the shortcut.
            self.page.locator("#jp-main-dock-panel .lm-TabBar-content").first.click(force=True)
            self.page.keyboard.press("Control+Shift+C")
            try:
                search.wait_for(state="visible", timeout=5000)
                break
            except Exception:
                if attempt == 2:
                    raise AssertionError("Ctrl+Shift+C did not open the command palette") from None
        search.fill(label)
        # Enter runs the palette's active item: wait until the filtered list has ours on top.
        active = self.page.locator(".lm-CommandPalette-item.lm-mod-active")
        active.filter(has_text=label).wait_for(state="visible", timeout=UI_TIMEOUT * 1000)
        search.press("Enter")
        self.panel.wait_for(state="visible", timeout=UI_TIMEOUT * 1000)

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=False)
