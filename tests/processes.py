"""Run one worker script as two processes of a jax.distributed job and collect their results.

Each process gets the coordinator's port (a free one on 127.0.0.1) and its process id as
arguments, and prints one line ``RESULT <json>``; settings that would fix the device count or
xlalab's own behaviour are left out of the environment, so each worker chooses its own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_two(script: Path, timeout: float = 240) -> list[dict[str, Any]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_NUM_DEVICES", "XLALAB_"))}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(port), str(pid)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid in range(2)
    ]
    outs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            assert p.returncode == 0, stderr[-4000:]
            line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
            outs.append(json.loads(line.removeprefix("RESULT ")))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs
