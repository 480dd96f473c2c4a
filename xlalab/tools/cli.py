"""The ``xlalab`` command: ``xlalab debug-run ...`` and ``xlalab dump-stacks ...``.

Each subcommand is also a module: ``python -m xlalab.tools.debug_run`` and
``python -m xlalab.tools.dump_stacks`` take the same arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from . import debug_run, dump_stacks


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xlalab",
        description="xlalab's troubleshooting tools.",
        epilog="Run `xlalab COMMAND --help` for a command's options.",
    )
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    dr = sub.add_parser(
        "debug-run",
        help="run a script with the debug outputs on; pack them and a recompilation summary into a tar.gz",
    )
    debug_run.build_parser(dr)
    dr.set_defaults(func=debug_run.run)
    ds = sub.add_parser("dump-stacks", help="print the Python stack of every thread of a running process")
    dump_stacks.build_parser(ds)
    ds.set_defaults(func=dump_stacks.run)
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
