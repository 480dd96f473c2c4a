"""Set-up as a newcomer meets it, on a copy of this working tree.

- ``pip install`` of the wheel into a brand-new venv, with no Node.js on PATH, gives the lab:
  JupyterLab lists the extension, ``%load_ext xlalab`` works in a kernel of that venv, and the
  MNIST example trains.
- ``make PYTHON=<venv>/bin/python install`` works with the venv neither activated nor on PATH,
  and PATH holding no Jupyter at all: nothing is found on PATH that the chosen Python did not
  install.
- The lock file pins everything the test environment holds, at the versions installed.
- ``make lab`` serves working copies of the examples: opening, running and saving a notebook
  there leaves ``git status`` clean.

The two installs share one venv (the wheel first, then ``make install`` over it), so the heavy
packages are installed once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "lock.txt"
EXT_BUILD = REPO / "xlalab" / "labextension"
NODE_MODULES = REPO / "extension" / "node_modules"
# What the lock must pin by name (the brief of the lock: the compiler, the lab, the tests' tools).
MUST_PIN = (
    "torch",
    "jax",
    "jaxlib",
    "jupyterlab",
    "ipykernel",
    "ipywidgets",
    "playwright",
    "hypothesis",
    "transformers",
    "pytest",
    "nbclient",
    "hatchling",
    "hatch-jupyter-builder",
)
INSTALL_TIMEOUT = 900


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = INSTALL_TIMEOUT) -> str:
    """Run a command; on failure, fail the test with its output (the useful part of a broken install)."""
    proc = subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} exited {proc.returncode} in {cwd}:\n{proc.stdout[-6000:]}", pytrace=False
        )
    return proc.stdout


def _copy_tree(dst: Path) -> Path:
    """This working tree as git would commit it (tracked and new files, nothing ignored), plus the
    prebuilt extension, with modification times kept so make sees the build as up to date.
    ``node_modules`` is linked, not copied: a rebuild, if the sources are newer, needs no network."""
    if not (EXT_BUILD / "package.json").is_file():
        pytest.fail("xlalab/labextension is not built: run `make install` first", pytrace=False)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        stdout=subprocess.PIPE,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    shutil.copytree(EXT_BUILD, dst / "xlalab" / "labextension", copy_function=shutil.copy2)
    (dst / "extension" / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
    return dst


def _bare_path() -> str:
    """A PATH with the system's tools (make, sh, node/npm for an extension rebuild) and no Python
    environment's scripts: a make recipe that calls `jupyter` or `jupyter-builder` fails here."""
    dirs = ["/usr/bin", "/bin"]
    for tool in ("make", "node", "npm"):
        found = shutil.which(tool)
        if found and os.path.dirname(found) not in dirs:
            dirs.append(os.path.dirname(found))
    path = os.pathsep.join(dirs)
    for tool in ("jupyter", "jupyter-builder", "jupyter-lab"):
        assert shutil.which(tool, path=path) is None, (
            f"{tool} is on the bare PATH {path}: the test would prove nothing"
        )
    return path


def _env(path: str) -> dict[str, str]:
    """This environment with another PATH, less what would point a child at another Python
    environment, and less an outer make's flags (`make test` runs pytest)."""
    dropped = ("VIRTUAL_ENV", "PYTHON", "CONDA", "JUPYTER", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["PATH"] = path
    return env


def _lock_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{LOCK}: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version.strip()
    return pins


@dataclass
class WheelVenv:
    """A venv with the wheel installed, and what it showed before `make install` went over it."""

    root: Path
    src: Path
    python: Path
    labextension_list: str
    xlalab_file: str
    kernel: dict[str, object]
    mnist: str
    seconds: dict[str, float]


# Run by the venv's own Python: a kernel of that venv (its ipykernel spec, its jupyter_client).
KERNEL_SCRIPT = r"""
import json, sys
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="python3")
out = {"stdout": "", "errors": [], "kernel_python": ""}

def hook(msg):
    kind, content = msg["msg_type"], msg["content"]
    if kind == "stream":
        out["stdout"] += content["text"]
    elif kind in ("display_data", "execute_result"):
        out["stdout"] += content["data"].get("text/plain", "") + "\n"
    elif kind == "error":
        out["errors"].append(content["ename"] + ": " + content["evalue"])

cells = [
    "%load_ext xlalab",
    "import sys, torch\nx = torch.arange(6.0, device='xla').reshape(2, 3)",
    "print('sum', (x * 2).sum().item())",
    "%xla_metrics --short",
    "print('kernel python', sys.executable)",
]
try:
    for cell in cells:
        kc.execute_interactive(cell, timeout=300, output_hook=hook)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print("KERNEL-RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    root = tmp_path_factory.mktemp("install")
    src = _copy_tree(root / "src")
    seconds: dict[str, float] = {}
    venv, dist, outside = root / "venv", root / "dist", root / "elsewhere"
    outside.mkdir()
    # No Node.js anywhere on PATH: only the venv's scripts (and, to build, this Python's).
    no_node = _env(str(venv / "bin"))
    assert shutil.which("node", path=no_node["PATH"]) is None
    build_env = _env(os.path.dirname(sys.executable)) | {"PIP_CONSTRAINT": str(LOCK)}
    assert shutil.which("node", path=build_env["PATH"]) is None

    t = time.perf_counter()
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(src)],
        cwd=root,
        env=build_env,
    )
    seconds["build wheel"] = time.perf_counter() - t
    (wheel,) = dist.glob("xlalab-*.whl")

    t = time.perf_counter()
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root, env=build_env)
    python = venv / "bin" / "python"
    # The lock keeps the versions CI tested; torch==2.13.0 is the local CPU wheel.
    _run(
        [str(python), "-m", "pip", "install", "--no-compile", "-c", str(LOCK), f"{wheel}[lab]"],
        cwd=outside,
        env=no_node,
    )
    seconds["pip install wheel[lab]"] = time.perf_counter() - t

    listing = _run([str(python), "-m", "jupyter", "labextension", "list"], cwd=outside, env=no_node)
    xlalab_file = _run([str(python), "-c", "import xlalab; print(xlalab.__file__)"], cwd=outside, env=no_node)

    t = time.perf_counter()
    kernel_out = _run([str(python), "-c", KERNEL_SCRIPT], cwd=outside, env=no_node, timeout=600)
    seconds["kernel"] = time.perf_counter() - t
    marker = [line for line in kernel_out.splitlines() if line.startswith("KERNEL-RESULT ")]
    assert marker, kernel_out[-4000:]
    kernel = json.loads(marker[-1].removeprefix("KERNEL-RESULT "))

    t = time.perf_counter()
    mnist = _run(
        [str(python), str(src / "examples" / "mnist_train.py"), "--steps", "5", "--batch", "16"],
        cwd=outside,
        env=no_node,
        timeout=600,
    )
    seconds["mnist 5 steps"] = time.perf_counter() - t
    return WheelVenv(root, src, python, listing, xlalab_file.strip(), kernel, mnist, seconds)


def test_wheel_installs_the_lab_extension_without_node(wheel_venv: WheelVenv) -> None:
    line = [ln for ln in wheel_venv.labextension_list.splitlines() if "xlalab-jupyterlab" in ln]
    assert line, wheel_venv.labextension_list
    plain = re.sub(r"\x1b\[[0-9;]*m", "", line[0])
    assert "enabled" in plain and "OK" in plain and "(python, xlalab)" in plain, plain
    # The extension comes from the wheel's shared-data inside the venv, not from this checkout.
    assert (
        str(wheel_venv.root / "venv" / "share" / "jupyter" / "labextensions") in wheel_venv.labextension_list
    )
    assert wheel_venv.xlalab_file.startswith(str(wheel_venv.root / "venv")), wheel_venv.xlalab_file


def test_wheel_kernel_loads_xlalab(wheel_venv: WheelVenv) -> None:
    kernel = wheel_venv.kernel
    assert kernel["errors"] == [], kernel
    stdout = str(kernel["stdout"])
    assert "sum 30.0" in stdout, stdout
    assert "CompileTime" in stdout, stdout  # the metrics report of the cell before
    assert f"kernel python {wheel_venv.python}" in stdout, stdout


def test_wheel_trains_the_mnist_example(wheel_venv: WheelVenv) -> None:
    losses = [float(m) for m in re.findall(r"^step +\d+ +loss (\S+)", wheel_venv.mnist, re.M)]
    assert losses and all(loss == loss and loss < 10 for loss in losses), wheel_venv.mnist
    assert "training on xla:0" in wheel_venv.mnist
    assert "CompileTime" in wheel_venv.mnist


@dataclass
class MadeVenv:
    venv: WheelVenv
    output: str
    again: str
    labextension_list: str
    xlalab_file: str
    seconds: float


@pytest.fixture(scope="module")
def make_installed(wheel_venv: WheelVenv) -> MadeVenv:
    """`make install` into the wheel's venv, named by path: not activated, not on PATH."""
    env = _env(_bare_path())
    argv = ["make", f"PYTHON={wheel_venv.python}", "install"]
    t = time.perf_counter()
    output = _run(argv, cwd=wheel_venv.src, env=env)
    seconds = time.perf_counter() - t
    again = _run(argv, cwd=wheel_venv.src, env=env)
    listing = _run(
        [str(wheel_venv.python), "-m", "jupyter", "labextension", "list"], cwd=wheel_venv.root, env=env
    )
    xlalab_file = _run(
        [str(wheel_venv.python), "-c", "import xlalab; print(xlalab.__file__)"], cwd=wheel_venv.root, env=env
    )
    return MadeVenv(wheel_venv, output, again, listing, xlalab_file.strip(), seconds)


def test_make_install_with_a_venv_python_by_path(make_installed: MadeVenv) -> None:
    src = make_installed.venv.src
    assert not re.search(r"deprecat", make_installed.output, re.I), make_installed.output[-4000:]
    # An editable install of the copy, with the built extension linked where pip put the wheel's copy.
    assert make_installed.xlalab_file == str(src / "xlalab" / "__init__.py")
    link = make_installed.venv.root / "venv" / "share" / "jupyter" / "labextensions" / "xlalab-jupyterlab"
    assert link.is_symlink() and link.resolve() == (src / "xlalab" / "labextension").resolve()
    plain = re.sub(r"\x1b\[[0-9;]*m", "", make_installed.labextension_list)
    assert re.search(r"xlalab-jupyterlab v\S+ enabled +OK", plain), plain
    # The stamp belongs to this venv: a second run installs nothing.
    assert "pip install" not in make_installed.again, make_installed.again
    print(
        "install times (s):", make_installed.venv.seconds | {"make install over it": make_installed.seconds}
    )


def test_make_install_reinstalls_when_the_environment_holds_another_checkout(
    make_installed: MadeVenv, tmp_path: Path
) -> None:
    """A checkout installed into an environment once, then another checkout installed over it:
    the first checkout's stamp must not say it is still the installed one."""
    src = make_installed.venv.src
    other = _copy_tree(tmp_path / "other-checkout")
    for stamp in src.glob(".install-*.stamp"):
        shutil.copy2(stamp, other / stamp.name)
    env = _env(_bare_path())
    argv = ["make", "-n", f"PYTHON={make_installed.venv.python}", "install"]
    assert "pip install" not in _run(argv, cwd=src, env=env)
    assert "pip install" in _run(argv, cwd=other, env=env)


def test_lock_pins_what_the_test_environment_holds() -> None:
    """Every package that xlalab[test] brings (transitively) is pinned, at the version installed here."""
    import importlib.metadata as md

    pins = _lock_pins()
    for name in MUST_PIN:
        assert canonicalize_name(name) in pins, f"{name} is not pinned in {LOCK.relative_to(REPO)}"
    assert "xlalab" not in pins
    env = default_environment()
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [("xlalab", frozenset({"test", "lab"}))]
    problems = []
    while todo:
        name, extras = todo.pop()
        key = f"{canonicalize_name(name)}{sorted(extras)}"
        if key in seen:
            continue
        seen.add(key)
        dist = md.distribution(name)
        canonical = canonicalize_name(name)
        if canonical != "xlalab":
            if canonical not in pins:
                problems.append(f"{name} {dist.version} is installed for xlalab[test] but not in the lock")
            elif Version(pins[canonical]) != Version(dist.version):
                problems.append(f"{name}: the lock says {pins[canonical]}, {dist.version} is installed")
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate(env | {"extra": e}) for e in extras or {""}):
                continue
            todo.append((req.name, frozenset(req.extras)))
    assert not problems, "run `make lock` (a dependency changed) or `make install`:\n" + "\n".join(problems)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lab_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository holding a copy of this tree, all committed: `git status` starts clean."""
    repo = _copy_tree(tmp_path_factory.mktemp("lab-repo"))
    git = ["git", "-c", "user.name=xlalab test", "-c", "user.email=test@xlalab.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run(git + args, cwd=repo, check=True)
    return repo


def _git_status(repo: Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, check=True, stdout=subprocess.PIPE, text=True
    ).stdout


@pytest.fixture
def lab_server(lab_repo: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`make lab` in the copy (its install step taken as done: this Python is installed)."""
    port, token = _free_port(), "xlalab-test-token"
    args = f"--no-browser --port {port} --ServerApp.token={token} --ServerApp.ip=127.0.0.1"
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen(
        ["make", "-o", "install", f"PYTHON={sys.executable}", f"LAB_ARGS={args}", "lab"],
        cwd=lab_repo,
        env=_env(os.environ["PATH"]),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = (tmp_path / "lab.log").read_text()
                    pytest.fail(f"make lab did not serve on {base}:\n{out[-4000:]}", pytrace=False)
                time.sleep(0.5)
        yield base, token
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _api(base: str, token: str, method: str, path: str, body: object = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{base}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return dict(json.loads(response.read() or b"{}"))


def test_make_lab_leaves_the_repository_clean(lab_repo: Path, lab_server: tuple[str, str]) -> None:
    """Open an example in the lab `make lab` serves, run it, save it and checkpoint it, as
    JupyterLab's autosave does: the tracked notebook stays as it was and git sees nothing."""
    base, token = lab_server
    name = "quickstart.ipynb"
    tracked = (lab_repo / "examples" / name).read_bytes()
    assert _git_status(lab_repo) == ""

    opened = _api(base, token, "GET", f"/api/contents/{name}?content=1")
    assert opened["type"] == "notebook"
    _api(base, token, "POST", f"/api/contents/{name}/checkpoints")
    nb = nbformat.from_dict(opened["content"])
    served = lab_repo / ".lab" / "examples"
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(served)}}
    ).execute()
    assert any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")
    _api(base, token, "PUT", f"/api/contents/{name}", {"type": "notebook", "format": "json", "content": nb})
    _api(base, token, "POST", f"/api/contents/{name}/checkpoints")

    saved = nbformat.read(served / name, as_version=4)
    assert any(cell.get("outputs") for cell in saved.cells if cell.cell_type == "code"), (
        "the save went elsewhere"
    )
    assert (served / ".ipynb_checkpoints").is_dir()
    assert (lab_repo / "examples" / name).read_bytes() == tracked
    assert _git_status(lab_repo) == ""


def test_lab_copies_keep_edits_until_the_tracked_notebook_changes(lab_repo: Path) -> None:
    make, env = ["make", f"PYTHON={sys.executable}", "lab-notebooks"], _env(os.environ["PATH"])
    name = "stepping.ipynb"
    tracked, copy = lab_repo / "examples" / name, lab_repo / ".lab" / "examples" / name
    subprocess.run(make, cwd=lab_repo, env=env, check=True, capture_output=True)
    assert copy.read_bytes() == tracked.read_bytes()

    edited = copy.read_bytes().replace(
        b'"cells": [', b'"cells": [\n  {"cell_type": "raw", "metadata": {}, "source": ["my note"]},', 1
    )
    copy.write_bytes(edited)
    subprocess.run(make, cwd=lab_repo, env=env, check=True, capture_output=True)
    assert copy.read_bytes() == edited, "make lab overwrote the user's edits"

    # The tracked notebook changes (a pull): the copy follows it, and the edited one is kept.
    future = time.time() + 5
    os.utime(tracked, (future, future))
    out = subprocess.run(make, cwd=lab_repo, env=env, check=True, capture_output=True, text=True).stdout
    assert copy.read_bytes() == tracked.read_bytes()
    assert (copy.parent / "stepping.previous.ipynb").read_bytes() == edited
    assert "stepping.previous.ipynb" in out
    assert _git_status(lab_repo) == ""
