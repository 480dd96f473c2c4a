"""Ctrl-C (SIGINT) on a program using xla tensors: a KeyboardInterrupt in the user's code, every
time, promptly, and never a dead process.

Each case runs in a child process: a signal handler is the process's, and the failure this
guards against (torch's C++ aborting on a KeyboardInterrupt raised inside it) kills the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ENV = {**os.environ, "XLALAB_TORCH_XLA": "1"}


def _run(code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=ENV)


def test_interrupts_during_autograd_recording_always_reach_the_loop() -> None:
    # Autograd records each op on a tensor that requires grad; torch's C++ checks for signals
    # inside a function that must not throw while it does. Interrupts at random moments, each
    # must end the loop with a KeyboardInterrupt (one lost, or an abort, fails).
    run = _run("""
        import os, random, signal, threading, time
        import torch, torch_xla
        dev = torch_xla.device()
        w = torch.randn(16, 16, device=dev, requires_grad=True)
        x = torch.randn(4, 16, device=dev)
        rnd = random.Random(4)
        caught = finished = 0
        for trial in range(40):
            timer = threading.Timer(rnd.uniform(0.05, 0.4), os.kill, (os.getpid(), signal.SIGINT))
            try:
                try:
                    timer.start()
                    deadline = time.monotonic() + 10  # the interrupt comes within 0.4 s
                    i = 0
                    while time.monotonic() < deadline:
                        y = (x @ w).relu().sum() * 2
                        if i % 50 == 0:
                            y.backward()
                        i += 1
                    finished += 1
                finally:
                    timer.join()
            except KeyboardInterrupt:
                caught += 1
        print("caught", caught, "finished", finished)
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "caught 40 finished 0" in run.stdout, run.stdout + run.stderr[-3000:]


def test_an_interrupt_in_a_blocking_call_or_a_pure_python_loop_comes_promptly() -> None:
    run = _run("""
        import os, signal, threading, time
        import torch, torch_xla
        (torch.ones(2, device=torch_xla.device()) * 2).cpu()  # the device is in use
        def spin():
            n = 0
            while True:
                n += 1
        for name, body in [("sleep", lambda: time.sleep(30)), ("loop", spin)]:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            t0 = time.monotonic()
            try:
                body()
            except KeyboardInterrupt:
                print(name, "interrupted after", round(time.monotonic() - t0, 2))
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    waits = {line.split()[0]: float(line.split()[-1]) for line in run.stdout.splitlines()}
    assert set(waits) == {"sleep", "loop"}, run.stdout
    assert all(w < 5.0 for w in waits.values()), waits  # not the 30 s sleep: a fraction of a second


def test_the_handler_comes_back_after_a_kernel_resets_it_and_others_are_left_alone() -> None:
    run = _run("""
        import signal
        import torch, torch_xla
        from xlalab.runtime import interrupts
        dev = torch_xla.device()
        print("installed", signal.getsignal(signal.SIGINT) is interrupts.deferring)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # what ipykernel does per cell
        torch.ones(2, device=dev) + 1
        print("reinstalled", signal.getsignal(signal.SIGINT) is interrupts.deferring)
        def mine(signum, frame):
            pass
        signal.signal(signal.SIGINT, mine)
        torch.ones(2, device=dev) + 1
        print("left alone", signal.getsignal(signal.SIGINT) is mine)
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["installed", "True", "reinstalled", "True", "left", "alone", "True"]


def test_under_a_tracer_the_interrupt_is_raised_where_python_checks() -> None:
    # A debugger or coverage tool owns sys.settrace: the handler in place runs at once.
    run = _run("""
        import os, signal, sys, threading, time
        import torch, torch_xla
        (torch.ones(2, device=torch_xla.device()) * 2).cpu()
        sys.settrace(lambda frame, event, arg: None)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            time.sleep(30)
        except KeyboardInterrupt:
            print("interrupted")
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "interrupted"


def test_a_forked_child_gets_pythons_handler_back_and_ours_at_its_first_xla_op() -> None:
    run = _run("""
        import os, signal
        import torch, torch_xla
        from xlalab.runtime import interrupts
        dev = torch_xla.device()
        torch.ones(2, device=dev) + 1
        pid = os.fork()
        if pid == 0:
            before = signal.getsignal(signal.SIGINT) is signal.default_int_handler
            torch.ones(2, device=dev) + 1
            after = signal.getsignal(signal.SIGINT) is interrupts.deferring
            os._exit(0 if before and after else 1)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "child 0", run.stdout + run.stderr[-2000:]
