"""Sizes and counts for people (``xlalab.debug.units``) and the shared recompilation rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xlalab.debug import graph_diff, recompiles, units


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (4, "4 B"),
        (1023, "1023 B"),
        (1024, "1.0 KB"),
        (5222, "5.1 KB"),
        (19_968, "19.5 KB"),
        (200_704, "196 KB"),
        (1024 * 1024 - 1, "1.0 MB"),  # not "1024 KB"
        (3 * 2**30 + 2**29, "3.5 GB"),
        (2**60 * 5, "5120 PB"),  # the largest unit goes on counting
        (-2048, "-2.0 KB"),
        (1536.0, "1.5 KB"),
    ],
)
def test_format_size(nbytes: float, text: str) -> None:
    assert units.format_size(nbytes) == text


@given(st.integers(min_value=0, max_value=2**62))
def test_format_size_is_short_and_round_trips_roughly(nbytes: int) -> None:
    text = units.format_size(nbytes)
    number, unit = text.split(" ")
    assert len(number) <= 4 and unit in ("B", "KB", "MB", "GB", "TB", "PB"), text
    value = float(number) * 1024 ** ("B", "KB", "MB", "GB", "TB", "PB").index(unit)
    # Three significant digits: within 5% (and exact for bytes).
    assert value == nbytes if unit == "B" else abs(value - nbytes) <= 0.05 * nbytes, text


def test_counts_read_as_written() -> None:
    assert units.count(1, "transfer") == "1 transfer"
    assert units.count(2, "transfer") == "2 transfers"
    assert units.count(0, "step") == "0 steps"
    assert units.count(3, "batch") == "3 batches"
    assert units.count(2, "entry") == "2 entries"
    assert units.count(2, "day") == "2 days"
    assert units.count(2, "cache hit") == "2 cache hits"
    assert units.count(2, "child", "children") == "2 children"
    assert [units.times(n) for n in (1, 2, 3, 0)] == ["once", "twice", "3 times", "0 times"]


def test_part_of_never_says_one_of_zero() -> None:
    assert units.part_of(1, 3, "step") == "1 of 3 steps"
    assert units.part_of(0, 3, "step") == "0 of 3 steps"
    assert units.part_of(3, 3, "step") == "all 3 steps"
    assert units.part_of(2, 2, "step") == "both steps"
    assert units.part_of(1, 1, "step") == "the only step"
    # No step finished (the transfers happened before any barrier): not "1 of 0 steps".
    assert units.part_of(1, 0, "step") == "1 step"
    assert units.part_of(2, 1, "step") == "2 steps"


# --------------------------------------------------------------------------- the warm-up rule

MODEL = ("device_data", "mm", "add")
WITH_MOMENTUM = ("device_data", "mm", "add", "device_data", "mul", "add")


def _judge(events: list[tuple[str, ...] | None]) -> list[bool | None]:
    """Feed a place its compilations (op tuples) and cache hits (None); the verdicts in order."""
    place = recompiles.PlaceHistory()
    out: list[bool | None] = []
    for ops in events:
        if ops is None:
            place.cache_hit()
            out.append(None)
        else:
            out.append(place.compiled(ops))
    return out


def test_second_compile_with_new_ops_is_warm_up() -> None:
    # Step 1 has no optimizer state; step 2 creates the momentum buffer; step 3 hits the cache.
    assert _judge([MODEL, WITH_MOMENTUM, None]) == [False, False, None]
    place = recompiles.PlaceHistory()
    place.compiled(MODEL)
    place.compiled(WITH_MOMENTUM)
    assert (place.warm_up_compiles, place.recompiles) == (1, 0)


def test_second_compile_with_same_ops_is_a_recompile() -> None:
    # Same op sequence, new graph: a shape or a baked-in value changed, which warm-up does not explain.
    assert _judge([MODEL, MODEL]) == [False, True]


def test_any_variant_after_warm_up_is_a_recompile() -> None:
    assert _judge([MODEL, WITH_MOMENTUM, WITH_MOMENTUM[:-1]]) == [False, False, True]
    # A cache hit means the loop came round: the place has settled even after one compile.
    assert _judge([MODEL, None, WITH_MOMENTUM]) == [False, None, True]


def test_rule_functions_agree_with_the_history() -> None:
    assert recompiles.in_warm_up(0, 0) and recompiles.in_warm_up(1, 0)
    assert not recompiles.in_warm_up(2, 0) and not recompiles.in_warm_up(1, 1)
    assert recompiles.same_ops(["a", "b"], ("a", "b")) and not recompiles.same_ops(["a"], ["a", "b"])
    assert not recompiles.is_recompile(warm_up=True, same_op_sequence=False)
    assert recompiles.is_recompile(warm_up=True, same_op_sequence=True)
    assert recompiles.is_recompile(warm_up=False, same_op_sequence=False)


def _leaf(shape: str) -> graph_diff.NodeSig:
    return graph_diff.NodeSig("xla::device_data", f"f32[{shape}]", hash(shape), True, None)


def _op(name: str, shape: str) -> graph_diff.NodeSig:
    return graph_diff.NodeSig(name, f"f32[{shape}]", hash((name, shape)), False, None)


def test_a_resized_input_is_an_input_shape_change() -> None:
    old = (_leaf("8,4"), _leaf("4,3"), _op("aten::mm", "8,3"))
    new = (_leaf("9,4"), _leaf("4,3"), _op("aten::mm", "9,3"))
    change = graph_diff.first_change(old, new)
    assert (change.kind, change.old, change.new) == ("input_shape", "f32[8,4]", "f32[9,4]")
    assert change.input_position == 0
    # A loop over the resized input's rows adds inputs too: still the input's shape.
    longer = (_leaf("9,4"), _leaf("4,3"), _leaf("4,3"), _op("aten::mm", "9,3"))
    assert graph_diff.first_change(old, longer).kind == "input_shape"


def test_another_input_at_the_same_place_is_another_path() -> None:
    """A layer that ran in one step only (layer drop): at the first difference the new graph
    reads the layer's weight where the old read the head's. The head's weight is in both."""
    old = (_leaf("4,32"), _leaf("32,251"), _op("aten::mm", "4,251"))
    new = (_leaf("4,32"), _leaf("32,32"), _op("aten::mm", "4,32"), _leaf("32,251"), _op("aten::mm", "4,251"))
    change = graph_diff.first_change(old, new)
    assert change.kind == "ops", change
    assert (change.old, change.new) == ("aten::mm f32[4,251]", "aten::mm f32[4,32]")
