"""Command-line tools for the troubleshooting guide's workflows.

- ``xlalab debug-run --outfile OUT.tar.gz [--tidy] -- python -u SCRIPT [ARGS...]``
  (``xlalab.tools.debug_run``): run a script with every debug output switched on and pack the
  interleaved log, graphs, metrics, versions, a redacted environment and a recompilation summary.
- ``xlalab dump-stacks PID [--signal]`` (``xlalab.tools.dump_stacks``): the Python stack of every
  thread of a running process.

``dump_stacks`` imports only the standard library, so it can be loaded by path and used when
torch or jax are broken (a hung process is often why they seem so).
"""
