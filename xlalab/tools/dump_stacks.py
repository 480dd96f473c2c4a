"""The Python stack of every thread of a running process, for hung training jobs.

    xlalab dump-stacks PID > /tmp/stack-traces.log
    python -m xlalab.tools.dump_stacks PID

From the outside (ptrace), with the first tool that is available:

1. ``py-spy dump`` (``pip install py-spy``): reads the process's memory, never runs code in it.
2. ``gdb`` with CPython's ``py-bt`` command, when the interpreter's gdb extension is installed
   (read-only as well).
3. ``gdb`` injecting a few lines of Python through ``PyRun_SimpleString`` that write
   ``sys._current_frames()`` to a file. This runs code in the target under its GIL: it waits for a
   thread that holds the GIL in C code, and gives up after ``--timeout`` seconds.

All three need ptrace. When it is refused, the error says why and what to run: as root,
``echo 0 > /proc/sys/kernel/yama/ptrace_scope`` (Yama scope 1 lets only a parent attach), or run
the dump as root / with CAP_SYS_PTRACE (``docker run --cap-add=SYS_PTRACE``).

From the inside, without ptrace: a program calls ``install_signal_handler()`` at start, and
``xlalab dump-stacks PID --signal`` sends it SIGUSR1. faulthandler then writes every thread's
stack from the signal handler itself, so it works even while the main thread is stuck in C code
(an XLA compile, a collective, a lock). dump-stacks reads the new text from the handler's file.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import faulthandler
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

__all__ = [
    "DumpStacksError",
    "dump_stacks",
    "install_signal_handler",
    "main",
    "signal_dump",
    "stacks_file_for",
    "uninstall_signal_handler",
]

PROG = "xlalab dump-stacks"
YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")


class DumpStacksError(Exception):
    """Why the stacks could not be read: a message meant for the user, one paragraph or a few."""


class PtraceDenied(DumpStacksError):
    pass


# --------------------------------------------------------------------------- in-process handler

_handler_files: dict[int, IO[str]] = {}


def stacks_file_for(pid: int) -> Path:
    """Where ``install_signal_handler()`` writes by default: ``<tmp>/xlalab-stacks-<pid>.txt``."""
    return Path(tempfile.gettempdir()) / f"xlalab-stacks-{pid}.txt"


def _default_signal() -> int:
    sig = getattr(signal, "SIGUSR1", None)
    if sig is None:
        raise DumpStacksError("this platform has no SIGUSR1; use a ptrace tool (py-spy) instead")
    return int(sig)


def install_signal_handler(sig: int | None = None, file: str | os.PathLike[str] | None = None) -> Path:
    """Make this process write all threads' Python stacks to ``file`` when it receives ``sig``.

    ``sig`` defaults to SIGUSR1 and ``file`` to ``stacks_file_for(os.getpid())``; the path is
    returned. Trigger it with ``xlalab dump-stacks PID --signal`` (or ``kill -USR1 PID`` and read
    the file). faulthandler writes from the C signal handler, so this works while Python code
    cannot run, e.g. when the main thread waits inside XLA.
    """
    signum = _default_signal() if sig is None else int(sig)
    path = Path(file) if file is not None else stacks_file_for(os.getpid())
    # Line-buffered append: faulthandler writes to the raw fd, and several dumps accumulate.
    fh = open(path, "a", buffering=1)
    old = _handler_files.pop(signum, None)
    # faulthandler keeps only the fd number: the file object must outlive the registration.
    _handler_files[signum] = fh
    faulthandler.register(signum, file=fh, all_threads=True, chain=False)
    if old is not None:
        old.close()
    atexit.register(_remove_if_empty, path)
    return path


def _remove_if_empty(path: Path) -> None:
    # A file nobody asked to fill is litter in /tmp; one holding dumps is kept for the user.
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()


def uninstall_signal_handler(sig: int | None = None) -> None:
    signum = _default_signal() if sig is None else int(sig)
    faulthandler.unregister(signum)
    fh = _handler_files.pop(signum, None)
    if fh is not None:
        fh.close()


# --------------------------------------------------------------------------- the target process


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _proc_name(pid: int) -> str:
    return (_read(f"/proc/{pid}/comm") or "?").strip()


def check_process(pid: int) -> None:
    """Raise a DumpStacksError that says what is wrong when ``pid`` is not a live process."""
    if pid <= 0:
        raise DumpStacksError(
            f"{pid} is not a process id; find the Python process with `ps aux | grep python`"
        )
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise DumpStacksError(
            f"no process with PID {pid}: it has exited, or the id is wrong. "
            "Find the running Python process with `ps aux | grep python` (or `pgrep -af python`)."
        ) from None
    except PermissionError:
        pass  # it exists but belongs to another user: ptrace will say more
    status = _read(f"/proc/{pid}/status") or ""
    m = re.search(r"^State:\s*(\S)", status, re.MULTILINE)
    if m and m.group(1) in "ZX":
        raise DumpStacksError(
            f"PID {pid} ({_proc_name(pid)}) has exited (a zombie waiting for its parent): it has no stacks."
        )


def python_check(pid: int) -> str | None:
    """None when ``pid`` looks like a Python process (or we cannot tell), else why it does not."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    base = os.path.basename(exe).replace(" (deleted)", "")
    if re.match(r"(python|pypy)", base):
        return None
    maps = _read(f"/proc/{pid}/maps")
    if maps is None or "libpython" in maps:
        return None  # an embedded interpreter (uwsgi, a C++ trainer) still counts
    return (
        f"PID {pid} ({_proc_name(pid)}, {exe}) is not a Python process: no python binary or libpython in it."
    )


def ptrace_help(pid: int, detail: str = "") -> str:
    """Why ptrace was refused and what the user can do about it."""
    scope_text = _read(YAMA)
    scope = scope_text.strip() if scope_text is not None else None
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    lines = [f"ptrace is not allowed to attach to PID {pid}" + (f": {detail}" if detail else ".")]
    if scope is None:
        lines.append(
            "Yama is not active here (no /proc/sys/kernel/yama/ptrace_scope), so the refusal comes from "
            "ownership, capabilities or the container: run the dump as the process's user or as root, and in "
            "a container allow ptrace (docker run --cap-add=SYS_PTRACE, or a seccomp profile permitting it)."
        )
    elif scope == "0":
        lines.append(
            "ptrace_scope is 0 (classic): attach as the same user as the process, or as root; in a container "
            "add CAP_SYS_PTRACE (docker run --cap-add=SYS_PTRACE)."
        )
    elif scope == "1":
        lines.append(
            "ptrace_scope is 1: only a parent process may attach. Either run the dump as root "
            "(sudo xlalab dump-stacks PID), or allow attaching until the next reboot by running, as root:\n"
            "    echo 0 > /proc/sys/kernel/yama/ptrace_scope"
        )
    elif scope == "2":
        lines.append(
            "ptrace_scope is 2: only root (CAP_SYS_PTRACE) may attach. Run: sudo xlalab dump-stacks PID"
            + ("" if not root else " (you are root: the container lacks CAP_SYS_PTRACE)")
        )
    else:
        lines.append(f"ptrace_scope is {scope}: attaching is disabled for everyone until the next reboot.")
    lines.append(
        "Without ptrace: have the program call xlalab.tools.dump_stacks.install_signal_handler() at start, "
        "then run: xlalab dump-stacks PID --signal"
    )
    return "\n".join(lines)


_DENIED = re.compile(r"Operation not permitted|Permission denied|ptrace.*(?:EPERM|denied)", re.IGNORECASE)


def _run_tool(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise DumpStacksError(
            f"{os.path.basename(cmd[0])} did not finish within {timeout:.0f} s "
            "(raise --timeout, or use --signal)"
        ) from e


# --------------------------------------------------------------------------- py-spy


def find_py_spy() -> str | None:
    # This interpreter's own scripts first (a venv used by path is not on PATH, and PATH may
    # hold another environment's py-spy), then PATH.
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        beside = Path(folder) / "py-spy"
        try:
            if beside.is_file() and os.access(beside, os.X_OK):
                return str(beside)
        except OSError:
            pass
    return shutil.which("py-spy")


def dump_with_py_spy(pid: int, timeout: float, native: bool = False) -> str:
    exe = find_py_spy()
    if exe is None:
        raise DumpStacksError("py-spy is not installed (pip install py-spy)")
    cmd = [exe, "dump", "--pid", str(pid)] + (["--native"] if native else [])
    proc = _run_tool(cmd, timeout)
    text = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout
    if _DENIED.search(text):
        raise PtraceDenied(ptrace_help(pid, "py-spy: " + text.strip().splitlines()[-1]))
    raise DumpStacksError(f"py-spy dump failed (exit code {proc.returncode}):\n{text.strip()}")


# --------------------------------------------------------------------------- gdb

# Runs inside the target. It writes every thread's stack, innermost last like a traceback, and
# leaves its own frames out (they are compiled under a recognisable file name).
_INJECTED = r"""
import sys as _s, threading as _t, traceback as _tb
def _xlalab_dump(path):
    names = {t.ident: t for t in _t.enumerate()}
    out = []
    for ident, frame in _s._current_frames().items():
        t = names.get(ident)
        label = "not a threading.Thread"
        if t is not None:
            label = f"{t.name}, native id {t.native_id}{', daemon' if t.daemon else ''}"
        stack = [f for f in _tb.extract_stack(frame) if f.filename != "<xlalab-dump-stacks>"]
        # This thread runs us through PyRun_SimpleString: exactly one <string> frame of its own.
        own = ident == _t.get_ident()
        if own and stack and (stack[-1].filename, stack[-1].name) == ("<string>", "<module>"):
            stack.pop()
        out.append(f"Thread {ident:#x} ({label}), most recent call last:\n")
        out.extend(_tb.format_list(stack))
        out.append("\n")
    with open(path, "w") as fh:
        fh.write("".join(out))
_xlalab_dump(OUT_PATH)
"""


def _gdb_base(gdb: str, pid: int) -> list[str]:
    return [gdb, "-q", "-batch", "-p", str(pid), "-ex", "set pagination off", "-ex", "set confirm off"]


def _gdb_errors(pid: int, text: str) -> None:
    if re.search(r"ptrace: (Operation not permitted|Permission denied)", text) or (
        "Could not attach" in text and _DENIED.search(text)
    ):
        line = next((s for s in text.splitlines() if "ptrace" in s or "attach" in s), "")
        raise PtraceDenied(ptrace_help(pid, "gdb: " + line.strip()))
    if "No such process" in text:
        raise DumpStacksError(f"no process with PID {pid} (gdb could not find it; it may have just exited)")


def dump_with_gdb(pid: int, timeout: float) -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        raise DumpStacksError("gdb is not installed (apt-get install gdb)")
    # Read-only first: CPython's gdb extension, when this interpreter ships one.
    proc = _run_tool([*_gdb_base(gdb, pid), "-ex", "thread apply all py-bt"], timeout)
    text = proc.stdout + proc.stderr
    _gdb_errors(pid, text)
    if "Undefined command" not in text and re.search(r"Traceback \(most recent call first\)", text):
        return proc.stdout
    return _dump_with_gdb_injection(gdb, pid, timeout)


def _dump_with_gdb_injection(gdb: str, pid: int, timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="xlalab-dump-stacks-") as d:
        # The target may run as another user: let it read the script and write the result.
        os.chmod(d, 0o777)
        script = Path(d) / "dump.py"
        out = Path(d) / "stacks.txt"
        script.write_text(_INJECTED.replace("OUT_PATH", repr(str(out))))
        script.chmod(0o644)
        code = f"exec(compile(open({str(script)!r}).read(), '<xlalab-dump-stacks>', 'exec'), {{}})"
        c_string = code.replace("\\", "\\\\").replace('"', '\\"')
        cmd = [
            *_gdb_base(gdb, pid),
            # If the call is interrupted, unwind back to where the process was instead of leaving
            # it parked inside our call.
            "-ex", "set unwindonsignal on",
            "-ex", "call (int) PyGILState_Ensure()",
            "-ex", f'call (int) PyRun_SimpleString("{c_string}")',
            "-ex", "call (void) PyGILState_Release($1)",
        ]  # fmt: skip
        proc = _run_tool(cmd, timeout)
        text = proc.stdout + proc.stderr
        _gdb_errors(pid, text)
        if out.exists() and out.stat().st_size:
            return out.read_text(errors="replace")
        if re.search(r"No symbol .*PyGILState_Ensure|No symbol table is loaded", text):
            raise DumpStacksError(
                f"gdb attached to PID {pid} but found no CPython symbols (PyGILState_Ensure): it is not a "
                "CPython process, or its interpreter is stripped. Try py-spy (pip install py-spy)."
            )
        raise DumpStacksError(f"gdb could not run Python code in PID {pid}:\n{text.strip()[-2000:]}")


# --------------------------------------------------------------------------- signal


def _caught_signals(pid: int) -> int | None:
    status = _read(f"/proc/{pid}/status")
    if status is None:
        return None
    m = re.search(r"^SigCgt:\s*([0-9a-fA-F]+)", status, re.MULTILINE)
    return int(m.group(1), 16) if m else None


def _find_stacks_file(pid: int) -> Path | None:
    """The handler's file: open in the target under our default name, else the default path."""
    name = f"xlalab-stacks-{pid}.txt"
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        for fd in fd_dir.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if os.path.basename(target) == name and os.path.isfile(target):
                return Path(target)
    except OSError:
        pass
    default = stacks_file_for(pid)
    return default if default.is_file() else None


def signal_dump(
    pid: int, sig: int | None = None, stacks_file: str | os.PathLike[str] | None = None, timeout: float = 10.0
) -> str:
    """Ask a process that called ``install_signal_handler()`` to write its stacks; return them."""
    check_process(pid)
    signum = _default_signal() if sig is None else int(sig)
    signame = signal.Signals(signum).name
    caught = _caught_signals(pid)
    if caught is not None and not caught & (1 << (signum - 1)):
        # Sending it anyway would run the default action, which for SIGUSR1 is to terminate.
        raise DumpStacksError(
            f"PID {pid} ({_proc_name(pid)}) has no handler for {signame}; sending it would kill the process. "
            "Have the program call xlalab.tools.dump_stacks.install_signal_handler() at start, "
            "or drop --signal to read the stacks through ptrace (py-spy or gdb)."
        )
    path = Path(stacks_file) if stacks_file is not None else _find_stacks_file(pid)
    if path is None or not path.is_file():
        raise DumpStacksError(
            f"PID {pid} catches {signame}, but not through install_signal_handler(): no "
            f"{stacks_file_for(pid).name} is open in it. Pass --stacks-file with the file it was given, "
            "or drop --signal to use ptrace."
        )
    before = path.stat().st_size
    try:
        os.kill(pid, signum)
    except PermissionError:
        raise DumpStacksError(
            f"not allowed to send {signame} to PID {pid}: it belongs to another user. "
            "Run the dump as that user, or as root."
        ) from None
    deadline = time.monotonic() + timeout
    size, stable_since = before, time.monotonic()
    # faulthandler writes in pieces; the dump is complete once the file stops growing.
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = path.stat().st_size
        if now != size:
            size, stable_since = now, time.monotonic()
        elif size > before and time.monotonic() - stable_since > 0.3:
            break
    if size <= before:
        raise DumpStacksError(
            f"sent {signame} to PID {pid} but nothing was written to {path} within {timeout:.0f} s "
            "(is the process stopped, e.g. under a debugger or SIGSTOP?)"
        )
    with open(path, errors="replace") as fh:
        fh.seek(before)
        return fh.read()


# --------------------------------------------------------------------------- entry point


def _own_stacks() -> str:
    """The caller asked for its own PID: no tool needed."""
    import traceback

    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f"Thread {ident:#x}, most recent call last:\n")
        out.extend(traceback.format_stack(frame))
    return "".join(out)


def dump_stacks(
    pid: int, method: str = "auto", timeout: float = 30.0, native: bool = False
) -> tuple[str, str]:
    """The stacks of ``pid`` and the method that read them (``py-spy``, ``gdb``, ``self``)."""
    check_process(pid)
    if pid == os.getpid():
        return _own_stacks(), "self"
    why_not = python_check(pid)
    if why_not is not None:
        raise DumpStacksError(why_not)
    if method == "py-spy":
        return dump_with_py_spy(pid, timeout, native), "py-spy"
    if method == "gdb":
        return dump_with_gdb(pid, timeout), "gdb"
    failures: list[str] = []
    if find_py_spy() is not None:
        try:
            return dump_with_py_spy(pid, timeout, native), "py-spy"
        except PtraceDenied:
            raise  # gdb would be refused too
        except DumpStacksError as e:
            failures.append(str(e))
    if shutil.which("gdb") is not None:
        try:
            return dump_with_gdb(pid, timeout), "gdb"
        except PtraceDenied:
            raise
        except DumpStacksError as e:
            failures.append(str(e))
    if not failures:
        raise DumpStacksError(
            "neither py-spy nor gdb is available to read another process's stacks: pip install py-spy "
            "(or apt-get install gdb). Or, without any tool: have the program call "
            "xlalab.tools.dump_stacks.install_signal_handler() and use --signal."
        )
    raise DumpStacksError("\n".join(failures))


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    if parser is None:
        parser = argparse.ArgumentParser(prog=PROG)
    parser.description = "Print the Python stack of every thread of a running process."
    parser.epilog = (
        "examples:\n"
        "  xlalab dump-stacks 12345 > /tmp/stack-traces.log      # py-spy or gdb (needs ptrace)\n"
        "  xlalab dump-stacks 12345 --signal                     # no ptrace; the program has called\n"
        "        xlalab.tools.dump_stacks.install_signal_handler()\n"
        "\nIf ptrace is refused, the message says what to run (as root: "
        "echo 0 > /proc/sys/kernel/yama/ptrace_scope).\n"
        "Exit codes: 0 stacks printed, 1 they could not be read, 2 bad arguments."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("pid", type=int, help="the process id (ps aux | grep python)")
    parser.add_argument(
        "--signal",
        action="store_true",
        help="ask the process to dump its own stacks (it must have called install_signal_handler())",
    )
    parser.add_argument(
        "--signal-name", default="SIGUSR1", help="the signal its handler listens to (default SIGUSR1)"
    )
    parser.add_argument(
        "--stacks-file", help="with --signal: the file the handler writes to, if not the default"
    )
    parser.add_argument(
        "--method",
        choices=("auto", "py-spy", "gdb"),
        default="auto",
        help="ptrace tool to use (default: auto)",
    )
    parser.add_argument("--native", action="store_true", help="with py-spy: include native (C/C++) frames")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the dump (default 30)"
    )
    return parser


def _parse_signal(name: str) -> int:
    key = name.upper()
    if key.isdigit():
        return int(key)
    if not key.startswith("SIG"):
        key = "SIG" + key
    try:
        return int(signal.Signals[key])
    except KeyError:
        raise DumpStacksError(f"unknown signal {name!r} (e.g. SIGUSR1, SIGUSR2)") from None


def run(args: argparse.Namespace) -> int:
    try:
        if args.signal:
            text = signal_dump(args.pid, _parse_signal(args.signal_name), args.stacks_file, args.timeout)
            method = f"{args.signal_name.upper()} + faulthandler, most recent call first"
        else:
            text, method = dump_stacks(args.pid, args.method, args.timeout, args.native)
    except DumpStacksError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    print(f"# Python stacks of PID {args.pid} ({_proc_name(args.pid)}) via {method}")
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
