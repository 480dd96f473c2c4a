"""The IPython magics: %xla_graph, %xla_metrics / %%xla_metrics, %xla_debug, %xla_counters, %xla_step,
%xla_sharding.

Each parses its arguments with IPython's magic_arguments (so ``%xla_graph?`` shows the
usage, and ``--help`` prints it), says what is wrong with bad input as a UsageError (no
traceback, the kernel lives on), and shows its result as a MIME bundle.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import shlex
from html import escape
from typing import Any

import torch
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from xlalab.debug.units import format_size
from xlalab.runtime import config, metrics

from . import graphs, render


def _wants_help(line: str) -> bool:
    try:
        return any(tok in ("-h", "--help") for tok in shlex.split(line))
    except ValueError:
        return False


def _usage(fn: Any) -> None:
    print(fn.__doc__)


def _compiled_report(expr: str, value: Any) -> Any:
    """The ``FunctionReport`` of a compiled function (or the report itself); None for anything
    that is not compiled (a tensor). A compiled function that never ran has no graphs yet."""
    if type(value).__module__.startswith("xlalab.dynamo") and hasattr(value, "graphs"):
        return value
    fn = getattr(value, "_torchdynamo_orig_callable", None)
    module = getattr(value, "_orig_mod", None)
    if isinstance(module, torch.nn.Module):
        fn = type(module).forward  # dynamo records a compiled module under its forward
    if fn is not None:
        fn = inspect.unwrap(fn)  # a decorated function is recorded under its own name and line
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    from xlalab.dynamo import compiled_functions

    for report in compiled_functions():
        if report.is_for(code):
            return report
    raise UsageError(
        f"{expr} is compiled but dynamo has not compiled it yet (or not with backend='xlalab' or "
        "'openxla'): "
        "call it once, then %xla_graph shows its graphs"
    )


def _save(path: str, text: str, what: str) -> None:
    """``%xla_graph --save``: write the dump, or say why not (the kernel goes on)."""
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"--save {path}: {e.strerror or e}") from None
    print(f"saved {what} to {path}")


@magics_class
class XlaMagics(Magics):
    shell: Any

    def __init__(self, shell: Any, session: Any) -> None:
        super().__init__(shell)
        self.session = session

    # ------------------------------------------------------------------ helpers
    def _tensor(self, expr: str) -> Any:
        """The value of ``expr`` in the user's namespace, or a UsageError that names what exists."""
        try:
            return self.shell.ev(expr)
        except NameError:
            names = self._pending_names()
            hint = (
                f"; pending xla tensors: {', '.join(names)}"
                if names
                else "; no variable holds a pending xla tensor"
            )
            raise UsageError(f"no variable named {expr!r} in the notebook{hint}") from None
        except SyntaxError:
            raise UsageError(f"{expr!r} is not a Python expression") from None
        except Exception as e:
            raise UsageError(f"{expr!r} could not be evaluated: {type(e).__name__}: {e}") from None

    def _pending_names(self) -> list[str]:
        from xlalab.runtime import ir
        from xlalab.runtime.tensor import XlaTensor

        return [
            name
            for name, v in list(self.shell.user_ns.items())
            if not name.startswith("_") and isinstance(v, XlaTensor) and v._st.node.op is not ir.DATA
        ]

    def _named_tensors(self, names: list[str]) -> list[tuple[str, torch.Tensor]]:
        return [(n, self._tensor(n)) for n in names]

    # ------------------------------------------------------------------ %xla_graph
    @magic_arguments()
    @argument("tensors", nargs="*", help="tensors (variables or expressions) whose pending IR to show")
    @argument(
        "--format",
        "-f",
        default="text",
        choices=graphs.FORMATS,
        help="text (IR), dot (picture), hlo, stablehlo",
    )
    @argument("--all", action="store_true", help="every live pending tensor (also the default with no names)")
    @argument("--save", metavar="PATH", help="also write the dump (IR text, dot, HLO or StableHLO) to PATH")
    @argument(
        "--max-nodes",
        type=int,
        default=graphs.DEFAULT_MAX_NODES,
        help="summarise graphs larger than this (first and last nodes, roots, op counts); 0: show all",
    )
    @line_magic
    def xla_graph(self, line: str) -> None:
        """Show the pending IR graph of xla tensors, without running anything; for a compiled
        function (torch.compile(..., backend="xlalab"), or an item of
        xlalab.dynamo.compiled_functions()), its FX graphs and the HLO compiled for them."""
        if _wants_help(line):
            return _usage(self.xla_graph)
        args = parse_argstring(self.xla_graph, line)
        if len(args.tensors) == 1 and not args.all:
            report = _compiled_report(args.tensors[0], self._tensor(args.tensors[0]))
            if report is not None:
                return self._show_compiled(report, args)
        named = None if (args.all or not args.tensors) else self._named_tensors(args.tensors)
        try:
            graph, what = graphs.pending_graph(named)
        except graphs.GraphInputError as e:
            raise UsageError(str(e)) from None
        max_nodes = args.max_nodes if args.max_nodes and args.max_nodes > 0 else None
        title = f"pending graph of {what} ({len(graph.nodes)} nodes, hash {graph.hash:x})"
        bundle, text = graphs.graph_bundle(
            graph, self.session.cells, fmt=args.format, title=title, max_nodes=max_nodes
        )
        if args.save:
            _save(args.save, text, f"the {args.format} dump")
        display(bundle, raw=True)

    def _show_compiled(self, report: Any, args: Any) -> None:
        if args.format not in ("text", "hlo", "stablehlo"):
            raise UsageError(
                f"--format {args.format}: a compiled function's graphs show as text (FX graphs and HLO), "
                "hlo or stablehlo"
            )
        text = render.compiled_function_text(
            report, self.session.cells, "stablehlo" if args.format == "stablehlo" else "hlo"
        )
        if args.save:
            _save(args.save, text, f"the graphs of {report.name}")
        display(render.pre_bundle(text), raw=True)

    # ------------------------------------------------------------------ %xla_metrics
    @magic_arguments()
    @argument("--short", action="store_true", help="torch_xla's short report: the main counters and times")
    @argument("--counters", action="store_true", help="only the counters")
    @argument("--since-cell", action="store_true", help="what happened since the previous cell started")
    @line_cell_magic
    def xla_metrics(self, line: str, cell: str | None = None) -> None:
        """Show the metrics report; as %%xla_metrics, run the cell and show what it did."""
        if _wants_help(line):
            return _usage(self.xla_metrics)
        args = parse_argstring(self.xla_metrics, line)
        if cell is not None:
            return self._run_measured(cell)
        if args.since_cell:
            snaps = self.session.cell_snapshots
            before = snaps[0] if len(snaps) == 2 else (snaps[-1] if snaps else render.snapshot())
            d = render.delta(before, render.snapshot())
            display(render.delta_bundle(d, "since the previous cell started:"), raw=True)
            return None
        if args.counters:
            lines = []
            for name in metrics.counter_names():
                lines += [f"Counter: {name}", f"  Value: {metrics.counter_value(name)}"]
            text = "\n".join(lines) + "\n" if lines else "no counters yet\n"
        elif args.short:
            text = metrics.short_metrics_report()
        else:
            text = metrics.metrics_report()
        display(render.pre_bundle(text or "no metrics yet: nothing has run on an xla device\n"), raw=True)
        return None

    def _run_measured(self, cell: str) -> None:
        __tracebackhide__ = True  # IPython shows the user's frames, not the magic's
        before = render.snapshot()
        try:
            self._exec_cell(cell)
        finally:
            d = render.delta(before, render.snapshot())
            display(render.delta_bundle(d, "this cell did:"), raw=True)

    def _exec_cell(self, cell: str) -> None:
        """Run a cell body as IPython would: its lines keep their numbers in the cell (the magic's
        line is line 1), errors show with their traceback, the last expression is displayed."""
        __tracebackhide__ = True
        shell = self.shell
        source = "\n" + shell.transform_cell(cell)
        # The running cell's number as the session knows it (IPython 9 has already counted the
        # next cell by now): the traceback then says "Cell In[N]" as for any other cell.
        number = self.session.cells.current or shell.execution_count
        filename = shell.compile.cache(source, number, raw_code="\n" + cell)
        tree = ast.parse(source, filename)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), shell.user_ns)
        if last is not None:
            value = eval(compile(last, filename, "eval"), shell.user_ns)
            if value is not None:
                shell.displayhook(value)

    # ------------------------------------------------------------------ %xla_debug
    @magic_arguments()
    @argument("mode", nargs="?", choices=("on", "off", "level"), help="on, off, or level N")
    @argument(
        "level",
        nargs="?",
        type=int,
        help="PT_XLA_DEBUG_LEVEL: 0 analysis only, 1 compilations, 2 executions too",
    )
    @line_magic
    def xla_debug(self, line: str) -> None:
        """Turn IR debug (every op records its source line) and the PT_XLA_DEBUG analysis on or off."""
        if _wants_help(line):
            return _usage(self.xla_debug)
        args = parse_argstring(self.xla_debug, line)
        if args.mode == "on":
            config.set("XLA_IR_DEBUG", True)
            config.set("PT_XLA_DEBUG", True)
        elif args.mode == "off":
            config.set("XLA_IR_DEBUG", False)
            config.set("PT_XLA_DEBUG", False)
        elif args.mode == "level":
            if args.level is None or args.level not in (0, 1, 2):
                raise UsageError(
                    "%xla_debug level N takes N = 0 (analysis only), 1 (compilations) or 2 (executions too)"
                )
            config.set("PT_XLA_DEBUG_LEVEL", args.level)
            config.set("PT_XLA_DEBUG", True)
            config.set("XLA_IR_DEBUG", True)
        names = ("XLA_IR_DEBUG", "PT_XLA_DEBUG", "PT_XLA_DEBUG_LEVEL")
        print("xlalab debug: " + ", ".join(f"{n}={config.get(n)}" for n in names))
        return None

    # ------------------------------------------------------------------ %xla_counters
    @line_magic
    def xla_counters(self, line: str) -> None:
        """Show live counters (compiles, executions, transfers, fallbacks) that update as cells run."""
        if _wants_help(line):
            return _usage(XlaMagics.xla_counters)
        from .counters import CountersView

        view = CountersView(self.session.watcher)
        self.session.views.append(view)
        display(view.widget)
        return None

    # ------------------------------------------------------------------ %xla_step
    @magic_arguments()
    @argument(
        "tensors", nargs="*", help="tensors whose pending graph to step through (default: every pending one)"
    )
    @line_magic
    def xla_step(self, line: str) -> None:
        """Step through the pending graph node by node, comparing each op with eager PyTorch."""
        if _wants_help(line):
            return _usage(self.xla_step)
        args = parse_argstring(self.xla_step, line)
        names = args.tensors or self._pending_names()
        if not names:
            raise UsageError("nothing to step through: no variable holds a pending xla tensor")
        tensors = self._named_tensors(names)
        for name, t in tensors:
            if not isinstance(t, torch.Tensor) or t.device.type != "xla":
                where = getattr(t, "device", type(t).__name__)
                raise UsageError(
                    f"{name} is not an xla tensor ({where}): only xla tensors have a pending graph"
                )
        from .step_widget import stepper_widget

        try:
            widget = stepper_widget([t for _, t in tensors])
        except (ValueError, TypeError) as e:
            raise UsageError(str(e)) from None
        display(widget)
        return None

    # ------------------------------------------------------------------ %xla_sharding
    @magic_arguments()
    @argument("tensor", help="a sharded xla tensor (a variable or an expression), 1-D or 2-D")
    @line_magic
    def xla_sharding(self, line: str) -> None:
        """Show which device holds which block of a sharded tensor (SPMD mode), as a table, and the
        bytes of live data on each device."""
        if _wants_help(line):
            return _usage(self.xla_sharding)
        args = parse_argstring(self.xla_sharding, line)
        from xlalab.distributed.spmd import debugging
        from xlalab.distributed.spmd.xla_sharding import XLAShardedTensor, is_spmd, sharding_of

        if not is_spmd():
            raise UsageError(
                "%xla_sharding needs SPMD mode: call torch_xla.runtime.use_spmd() (xr.use_spmd()) "
                "before creating tensors, then shard them with xs.mark_sharding(t, mesh, partition_spec)"
            )
        t = self._tensor(args.tensor)
        if isinstance(t, XLAShardedTensor):
            t = t.global_tensor
        if not isinstance(t, torch.Tensor) or t.device.type != "xla":
            where = getattr(t, "device", type(t).__name__)
            raise UsageError(f"{args.tensor} is not an xla tensor ({where}): only xla tensors are sharded")
        if sharding_of(t) is None:
            raise UsageError(
                f"{args.tensor} has no sharding (each device holds all of it): shard it with "
                f"xs.mark_sharding({args.tensor}, mesh, partition_spec)"
            )
        try:
            html = debugging.tensor_sharding_html(t)
            text = io.StringIO()
            with contextlib.redirect_stdout(text):  # the rich table, drawn without colour
                debugging.visualize_tensor_sharding(t, use_color=False)
        except ValueError as e:  # more than 2 dimensions
            raise UsageError(str(e)) from None
        memory = "live device data: " + ", ".join(
            f"{dev} {format_size(n)}" for dev, n in debugging.device_memory().items()
        )
        display(
            {"text/plain": f"{text.getvalue()}{memory}\n", "text/html": f"{html}<div>{escape(memory)}</div>"},
            raw=True,
        )
        return None
