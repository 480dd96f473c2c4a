"""``python -m xlalab.testing.fuzz --programs N --seed S [--seconds T] [--save] [--compiled]``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

from .campaign import describe, run_campaign, save_regression
from .differential import Finding
from .menu import MENU
from .program import Program


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m xlalab.testing.fuzz",
        description="Differential fuzzing: random programs on xla:0 against eager CPU.",
    )
    parser.add_argument("--programs", type=int, default=1000, help="how many programs to run (default 1000)")
    parser.add_argument(
        "--seed", type=int, default=int(time.time()), help="campaign seed (default: the clock)"
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="stop after this long, even if fewer programs ran"
    )
    parser.add_argument(
        "--save", action="store_true", help="save each shrunk finding under tests/fuzz/regressions/"
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help='run each program inside torch.compile(..., backend="xlalab") instead of lazily',
    )
    args = parser.parse_args(argv)

    # Programs deliberately hit eager's own warnings (std of one element...): not news.
    warnings.simplefilter("ignore")

    def on_finding(finding: Finding, program: Program) -> None:
        print(f"\n=== finding {finding.signature}\n{describe(finding, program)}", flush=True)
        if args.save:
            print(f"saved as {save_regression(finding, program)}", flush=True)

    journal = Path(tempfile.gettempdir()) / f"xlalab-fuzz-{os.getpid()}.json"
    print(f"fuzzing: up to {args.programs} programs, seed {args.seed}", flush=True)
    print(f"(should the process die, the program it was running is in {journal})", flush=True)
    checker = None
    if args.compiled:
        from . import compiled

        checker = compiled.check
        # A program may end with an op eager rejects, on purpose: dynamo's fake tensors log each
        # such rejection with its traceback before raising it (the comparison sees the error).
        logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    report = run_campaign(
        args.programs, args.seed, args.seconds, on_finding=on_finding, journal=journal, checker=checker
    )
    journal.unlink(missing_ok=True)
    print("\n" + report.summary(len(MENU)))
    if args.compiled:
        print(compiled.STATS.summary())
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
