"""SPMD: programs sharded over 8 CPU devices by XLA's partitioner, against one device.

The device count is fixed per process, so the 8-device checks run once, in a subprocess started
with XLA_NUM_DEVICES=8 (tests/spmd_script.py); the tests here read its report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from xlalab.runtime import sharding

SCRIPT = Path(__file__).with_name("spmd_script.py")


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    env = {**os.environ, "XLA_NUM_DEVICES": "8", "PJRT_DEVICE": "CPU"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_use_spmd_switches_mode_and_counts_devices(report: dict[str, Any]) -> None:
    assert report["before_use_spmd"] is False
    assert report["is_spmd"] is True
    assert report["device_count"] == 8


def test_2d_data_model_sharded_mlp_trains_as_on_one_device(report: dict[str, Any]) -> None:
    np.testing.assert_allclose(report["spmd_losses"], report["cpu_losses"], rtol=1e-5)
    # The first step compiles for unsharded leaves, the second for the sharded values the first
    # produced; after that the program is reused.
    assert report["compiles"] <= 2


def test_collectives_the_partitioner_inserted_are_listed_with_their_ops(report: dict[str, Any]) -> None:
    found = report["mlp_collectives"]
    # The second layer's weight is split over 'model' along its input features: each device
    # holds a partial product of addmm, summed by an all-reduce over the 'model' groups.
    assert any(kind == "all-reduce" and "aten__addmm" in op and size > 0 for kind, op, size in found), found
    assert {kind for kind, _, _ in found} <= {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                             "collective-permute"}  # fmt: skip


def test_a_large_reshard_is_named_with_its_op_and_line(report: dict[str, Any]) -> None:
    assert report["product_close"]
    # Both operands split by columns, the product wanted by rows: the partitioner gathers a whole
    # (64, 64) operand for the matmul on the user's line.
    assert any(
        r.startswith("all-gather of f32[64,64]")
        and "aten::mm" in r
        and r.endswith(f"at {report['reshard_line']}")
        for r in report["reshards"]
    ), report["reshards"]


def test_parameters_stay_sharded_across_optimizer_steps(report: dict[str, Any]) -> None:
    # (32, 16) weight split 4 ways on rows over 'model', replicated over 'data' (2 ways).
    assert report["w_spec_after_training"] == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
    assert report["w_shard_shapes"] == [[8, 16]]
    assert report["w_num_devices"] == 8


def test_spec_string_sharding_type_and_local_shards(report: dict[str, Any]) -> None:
    assert report["spec_4x1"] == "{devices=[4,1]0,1,2,3}"
    assert report["type_4x1"] == "TILED"
    assert report["local_shards"] == [[[2, 2], f"xla:{i}"] for i in range(4)]
    assert report["sum_on_4"] == 240.0  # a program over a mesh of half the devices
    assert report["spec_cleared"] == ""


def test_mark_sharding_on_intermediate_is_a_constraint(report: dict[str, Any]) -> None:
    assert report["spec_intermediate"] == "{devices=[8]0,1,2,3,4,5,6,7}"
    assert report["intermediate_close"]
    assert report["constraint_in_hlo"]
    assert "xla::custom_sharding(%" in report["ir_text"]


def test_visualize_tensor_sharding_table(report: dict[str, Any]) -> None:
    rows = [line for line in report["table"].splitlines() if "CPU" in line]
    cells = [[c.strip() for c in row.strip("│").split("│")] for row in rows]
    assert cells == [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"], ["CPU 4", "CPU 5"], ["CPU 6", "CPU 7"]]


def test_html_table_and_per_device_memory(report: dict[str, Any]) -> None:
    assert report["html_cells"] == 8
    # The 1 MiB tensor was on xla:0 alone; sharded, each device holds a 256 KiB block (a few small
    # arrays made meanwhile, the same on every device, may come along), and xla:0 lost the rest.
    growth = report["memory_growth"]
    assert len(set(growth[1:])) == 1 and 256 * 1024 <= growth[1] < 264 * 1024, growth
    assert growth[0] < 0


def test_fsdpv2_mlp_trains_as_on_one_device(report: dict[str, Any]) -> None:
    np.testing.assert_allclose(report["fsdp_losses"], report["cpu_losses"], rtol=1e-5)
    assert report["fsdp_specs"] == [
        "{devices=[8,1]0,1,2,3,4,5,6,7}",
        "{devices=[8]0,1,2,3,4,5,6,7}",
        "{devices=[8,1]0,1,2,3,4,5,6,7}",
        "{devices=[8]0,1,2,3,4,5,6,7}",
    ]


def test_fsdpv2_with_an_extra_data_axis_trains_as_on_one_device(report: dict[str, Any]) -> None:
    np.testing.assert_allclose(report["hsdp_losses"], report["cpu_losses"], rtol=1e-5)


def test_mark_sharding_with_gradients_trains_as_on_one_device(report: dict[str, Any]) -> None:
    np.testing.assert_allclose(report["grad_constrained_losses"], report["cpu_losses"], rtol=1e-5)


def test_xla_distribute_tensor_and_module(report: dict[str, Any]) -> None:
    # Shard(0) over the mesh's first axis ('data', 2 ways), replicated over 'model' (4 ways).
    assert report["distribute_tensor_spec"] == "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"
    assert report["distribute_tensor_sum"] == 496.0
    np.testing.assert_allclose(report["distribute_module_losses"], report["cpu_losses"], rtol=1e-5)
    assert report["distribute_module_spec"] == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"


def test_sharding_spec_applies_later(report: dict[str, Any]) -> None:
    assert report["spec_apply"] == "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"


def test_hybrid_and_global_meshes(report: dict[str, Any]) -> None:
    assert report["hybrid_ids"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    ids = list(range(8))
    assert report["global_mesh"] == f"Mesh(device_ids={ids}, mesh_shape=(8,), axis_names=('fsdp',))"


def test_fsdpv2_small_gpt2_trains_as_on_one_device(report: dict[str, Any]) -> None:
    np.testing.assert_allclose(report["gpt_fsdp_losses"], report["gpt_cpu_losses"], rtol=1e-5)


def test_uneven_shardings_train_as_on_one_device(report: dict[str, Any]) -> None:
    # 30 features and 10 rows split over a 4-way axis: no equal blocks, as torch_xla allows.
    np.testing.assert_allclose(report["uneven_spmd_losses"], report["uneven_cpu_losses"], rtol=1e-5)
    assert report["uneven_weights_close"]
    assert report["uneven_spec"] == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"


def test_uneven_blocks_are_cut_as_xla_cuts_them(report: dict[str, Any]) -> None:
    # 10 rows over 4 devices: blocks of ceil(10/4) = 3 rows, the last holding the 1 row left,
    # padded to 3 in ``data`` (rows 0..9 of a (10, 2) arange sum to 15, 51, 87 and 37).
    assert report["uneven_shards"] == [
        ["xla:0", [3, 2], [0, 3], 15.0],
        ["xla:1", [3, 2], [3, 6], 51.0],
        ["xla:2", [3, 2], [6, 9], 87.0],
        ["xla:3", [3, 2], [9, 10], 37.0],
    ]
    assert report["uneven_sum"] == 380.0
    assert report["uneven_table_rows"] == 4


def test_uneven_constraint_on_a_pending_value_is_padded_by_the_partitioner(report: dict[str, Any]) -> None:
    assert report["uneven_pending_spec"] == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
    assert report["uneven_pending_close"]
    assert report["uneven_pending_padded"]  # each device computes 2 of the 6 rows (one padded)


def test_parallel_loader_input_sharding_shards_each_batch(report: dict[str, Any]) -> None:
    data_rows = "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"  # rows over 'data' (2 ways)
    assert report["loader_spec"] == [data_rows, data_rows]
    np.testing.assert_allclose(report["loader_losses"], report["loader_cpu_losses"], rtol=1e-5)
    # A dict of specs, keyed like the batch's dict: each tensor its own sharding.
    assert report["loader_dict_specs"] == [[data_rows, "{devices=[2,4]0,1,2,3,4,5,6,7}"]]
    assert report["loader_dict_close"]
    errors = report["errors"]
    assert "'z'" in errors["loader_key"] and "its keys: 'x', 'y'" in errors["loader_key"]
    assert "got a tuple" in errors["loader_type"] and "xs.ShardingSpec(mesh" in errors["loader_type"]


def test_torch_compile_trains_with_the_inputs_shardings(report: dict[str, Any]) -> None:
    np.testing.assert_allclose(report["compiled_losses"][:3], report["cpu_losses"], rtol=1e-5)
    assert report["compiled_late_compiles"] == 0  # later steps reuse the programs
    # The parameter the compiled optimizer updates in place keeps its sharding.
    assert report["compiled_w_spec"] == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
    assert "P('model', None)" in report["compiled_input_specs"], report["compiled_input_specs"]
    assert "P('data', None)" in report["compiled_input_specs"]
    assert "all-reduce" in report["compiled_collectives"]


def test_fsdpv2_gpt2_under_torch_compile_trains_as_on_one_device(report: dict[str, Any]) -> None:
    np.testing.assert_allclose(report["gpt_fsdp_compiled_losses"], report["gpt_cpu_losses"], rtol=1e-5)


def test_mark_sharding_inside_a_compiled_function(report: dict[str, Any]) -> None:
    # Traced as the op xla::dynamo_mark_sharding, a constraint in the one graph (fullgraph=True
    # compiles): the partitioned (16, 32) product is (8, 8) per device, the constraint's
    # (data, model) blocks, not the (16, 8) the weight's row split alone gives.
    assert report["mark_inside_close"] and report["mark_inside_graphs"] == 1
    assert report["mark_inside_dots"] == ["f32[8,8]{1,0}"], report["mark_inside_dots"]
    assert report["mark_op_close"]  # torch_xla's spelling, the op called directly


def test_op_by_op_runs_each_node_over_the_mesh(report: dict[str, Any]) -> None:
    # Loss, the constrained activation and every gradient equal the fused program's.
    assert report["op_by_op_close"]
    assert report["op_by_op_h_spec"] == "P('data', 'model')"  # the constraint node's layout
    assert report["op_by_op_new_compiles"] == 0  # a second run reuses each node's program


def test_send_cpu_data_to_device_shards_with_input_sharding(report: dict[str, Any]) -> None:
    assert report["sent_specs"] == report["loader_dict_specs"][0]  # as MpDeviceLoader lays them out
    assert report["sent_equal"]
    assert report["sent_one_spec"] == report["loader_spec"][0]
    assert "xs.ShardingSpec(mesh" in report["errors"]["sent_type"]


def test_mistakes_name_the_fix(report: dict[str, Any]) -> None:
    errors = report["errors"]
    assert "one entry per dimension" in errors["spec_length"]
    assert "'nope' does not exist" in errors["axis"] and "('data', 'model')" in errors["axis"]


@pytest.mark.parametrize(
    ("shape", "names", "partition", "expected"),
    [
        ((4,), ("x",), ("x", None), "{devices=[4,1]0,1,2,3}"),
        ((2, 2), ("a", "b"), ("b", "a"), "{devices=[2,2]0,2,1,3}"),
        (
            (2, 4),
            ("data", "model"),
            ("data", None),
            "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}",
        ),
        ((2, 2), ("a", "b"), (None, None), "{replicated}"),
        ((2, 2), ("a", "b"), (("a", "b"),), "{devices=[4]0,1,2,3}"),
    ],
)
def test_spec_strings_follow_xla_tile_assignment(
    shape: tuple[int, ...], names: tuple[str, ...], partition: tuple[Any, ...], expected: str
) -> None:
    ids = tuple(range(int(np.prod(shape))))
    assert sharding.ShardingSpec(ids, shape, names, partition).hlo_string() == expected


def test_mark_sharding_outside_spmd_mode_says_how_to_enable() -> None:
    import xlalab.distributed.spmd as xs

    # SPMD mode is process-wide and has no off switch: an earlier test may have turned it on.
    was = sharding._enabled[0]
    sharding._enabled[0] = False
    try:
        assert not xs.is_spmd()
        mesh = xs.Mesh(np.arange(1), (1,), ("x",))
        with pytest.raises(RuntimeError, match=r"use_spmd\(\)"):
            xs.mark_sharding(torch.zeros(2, device="xla"), mesh, ("x",))
    finally:
        sharding._enabled[0] = was
