"""The notebook face of the stepper (``%xla_step [TENSOR ...]``): an ipywidgets panel.

The panel shows the row about to run (op, shape, source line), buttons Next / Run to node /
Run to end / Compare with eager / Find divergence / Reset, previews of the last computed value
and of the current row's inputs, and a window of the node list around the cursor.
``stepper_text`` gives the same view as plain text for frontends without widgets.

Every string shown is ``html.escape``d: op names, file names and tensor values come from
user code.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import torch

from xlalab.debug.stepper import Stepper

__all__ = ["StepperPanel", "stepper_panel", "stepper_text", "stepper_widget"]

# How many of the current row's inputs get a preview: an op has few, a concat may have hundreds.
MAX_INPUT_PREVIEWS = 4


def _as_stepper(tensors_or_stepper: Stepper | torch.Tensor | Iterable[torch.Tensor]) -> Stepper:
    if isinstance(tensors_or_stepper, Stepper):
        return tensors_or_stepper
    return Stepper(tensors_or_stepper)


def _import_widgets() -> Any:
    try:
        import ipywidgets
    except ImportError as e:
        raise ImportError(
            "stepper_widget needs ipywidgets (pip install 'xlalab[lab]', or pip install ipywidgets); "
            "stepper_text(stepper) gives the same view as plain text"
        ) from e
    return ipywidgets


# --------------------------------------------------------------------------- text


def current_text(stepper: Stepper) -> str:
    view = stepper.current
    if view is None:
        return f"finished: all {len(stepper)} rows have run"
    return f"next: {view}"


def last_value_text(stepper: Stepper) -> str:
    last = stepper.last
    if last is None:
        return "nothing has run yet"
    return f"last: {last}\n  = {_indent(stepper.preview(last.row))}"


def inputs_text(stepper: Stepper) -> str:
    """Previews of the current row's inputs (every input of the row about to run has run)."""
    view = stepper.current
    if view is None or not view.operands:
        return ""
    lines = ["inputs:"]
    for name in view.operands[:MAX_INPUT_PREVIEWS]:
        lines.append(f"  {name} = {_indent(stepper.preview(name))}")
    if len(view.operands) > MAX_INPUT_PREVIEWS:
        lines.append(f"  ... {len(view.operands) - MAX_INPUT_PREVIEWS} more")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return text.replace("\n", "\n    ")


def stepper_text(stepper: Stepper) -> str:
    """The panel as plain text: the row about to run, the last value, its inputs, the listing."""
    parts = [current_text(stepper), last_value_text(stepper), inputs_text(stepper), stepper.listing()]
    return "\n\n".join(p for p in parts if p)


# --------------------------------------------------------------------------- widget


def rewind(stepper: Stepper) -> None:
    """Puts the cursor back on the first row and forgets every computed value: the graph is
    kept (never the tensors), so stepping again runs the same nodes on the same inputs."""
    stepper._env = [None] * len(stepper.graph.nodes)
    stepper._computed = 0
    stepper.cursor = 0


def _pre(text: str) -> str:
    return f"<pre style='margin:0'>{html.escape(text)}</pre>"


class StepperPanel:
    """The widgets and their callbacks; ``widget`` is what a notebook displays."""

    def __init__(self, stepper: Stepper, widgets: Any) -> None:
        self.stepper = stepper
        self.current = widgets.HTML()
        self.next_button = widgets.Button(description="Next", tooltip="compute the row about to run")
        self.target = widgets.Text(
            placeholder="%N, op name or file:line", layout=widgets.Layout(width="220px")
        )
        self.run_to_button = widgets.Button(
            description="Run to node", tooltip="run through the first row from the cursor that matches"
        )
        self.run_to_end_button = widgets.Button(description="Run to end", tooltip="compute every row")
        self.compare_button = widgets.Button(
            description="Compare with eager",
            tooltip="run the last row's aten op in eager PyTorch on the CPU and diff",
            layout=widgets.Layout(width="auto"),
        )
        self.divergence_button = widgets.Button(
            description="Find divergence",
            tooltip="run on comparing every row with eager; stop after the first that differs by over 1e-4",
            layout=widgets.Layout(width="auto"),
        )
        self.reset_button = widgets.Button(
            description="Reset", tooltip="back to the first row, every value forgotten: step again"
        )
        self.status = widgets.HTML()
        self.preview = widgets.HTML()
        self.listing = widgets.HTML()
        buttons = widgets.HBox(
            [
                self.next_button,
                self.target,
                self.run_to_button,
                self.run_to_end_button,
                self.compare_button,
                self.divergence_button,
                self.reset_button,
            ],
            layout=widgets.Layout(flex_flow="row wrap"),
        )
        self.widget = widgets.VBox([self.current, buttons, self.status, self.preview, self.listing])
        self.next_button.on_click(lambda _: self._act(self.stepper.next))
        self.run_to_button.on_click(lambda _: self._act(self._run_to_target))
        self.run_to_end_button.on_click(lambda _: self._act(self.stepper.run_to_end))
        self.compare_button.on_click(lambda _: self._act(self._compare))
        self.divergence_button.on_click(lambda _: self._act(self._divergence))
        self.reset_button.on_click(lambda _: self._act(self._reset))
        self.refresh()

    def _reset(self) -> str:
        rewind(self.stepper)
        return f"reset: back at %0, {len(self.stepper)} rows to run"


    def _run_to_target(self) -> None:
        text = self.target.value.strip()
        if not text:
            raise ValueError("type a row (%N), an op name (aten::addmm) or a source line (file.py:12)")
        self.stepper.run_to(text)

    def _compare(self) -> str:
        return str(self.stepper.compare_with_eager())

    def _divergence(self) -> str:
        found = self.stepper.divergence()
        if found is None:
            return "no row differs from eager by more than 1e-4"
        return f"first divergence: {found}"

    def _act(self, action: Any) -> None:
        """Run a button's action; its message or error goes to the status line, never lost
        (an exception escaping a widget callback only reaches the kernel's log)."""
        try:
            message = action()
        except Exception as e:
            self.refresh(f"{type(e).__name__}: {e}", error=True)
            return
        self.refresh(message if isinstance(message, str) else "")

    def refresh(self, message: str = "", error: bool = False) -> None:
        s = self.stepper
        self.current.value = f"<b>{html.escape(current_text(s))}</b>"
        done = s.finished
        self.next_button.disabled = done
        self.run_to_button.disabled = done
        self.run_to_end_button.disabled = done
        self.divergence_button.disabled = done
        self.compare_button.disabled = s.last is None
        self.reset_button.disabled = s.cursor == 0
        colour = "#b00020" if error else "inherit"
        self.status.value = f"<span style='color:{colour}'>{_pre(message)}</span>" if message else ""
        previews = "\n".join(p for p in (last_value_text(s), inputs_text(s)) if p)
        self.preview.value = _pre(previews)
        self.listing.value = _pre(s.listing())


def stepper_panel(tensors_or_stepper: Stepper | torch.Tensor | Iterable[torch.Tensor]) -> StepperPanel:
    """The panel object (its widgets and stepper), for code that drives it."""
    widgets = _import_widgets()
    return StepperPanel(_as_stepper(tensors_or_stepper), widgets)


def stepper_widget(tensors_or_stepper: Stepper | torch.Tensor | Iterable[torch.Tensor]) -> Any:
    """An ipywidgets panel stepping the pending graph of the tensors (or an existing Stepper).

    Raises ImportError with what to install when ipywidgets is missing.
    """
    return stepper_panel(tensors_or_stepper).widget
