"""Reading cross-slice traffic from HLO text: each form of device groups, loops, Megascale sends.

The HLO below is written by hand in the forms XLA prints (jax 0.10.2's CPU compiler, libtpu
0.0.42.1 for the Megascale send); the expected groups and bytes are counted by hand.
"""
import pytest

from albert_jax.train import dcn_traffic

# 8 partitions in two slices of four: 0-3 and 4-7.
SLICES = [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize("attributes, groups", [
    ("replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("replica_groups={}, to_apply=%add", [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ("replica_groups=[4,2]<=[8], dimensions={0}", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    # arange(8).reshape(2, 4).T, then rows of 2.
    ("replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    # ids arange(8).reshape(4, 2).T = [[0,2,4,6],[1,3,5,7]] on a 2 x 4 mesh; groups along axis_0.
    ("replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([4,2]T(1,0)) {'axis_0'}, "
     "dimensions={0}", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    # The same ids grouped along axis_1 (the rows).
    ("replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([4,2]T(1,0)) {'axis_1'}",
     [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0'}, to_apply=%add",
     [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ("source_target_pairs={{0,1},{3,4}}", [[0, 1], [3, 4]]),
])
def test_device_groups_of_every_form(attributes, groups):
    assert dcn_traffic.device_groups(attributes, 8) == groups


def test_shape_bytes():
    assert dcn_traffic.shape_bytes("f32[16,32]{1,0}") == 2048
    assert dcn_traffic.shape_bytes("bf16[8]{0:T(256)}") == 16
    assert dcn_traffic.shape_bytes("(f32[], /*index=1*/s32[4]{0}, pred[3])") == 4 + 16 + 3


MODULE = """HloModule jit_train_step, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%cond (carry.1: (s32[], f32[16])) -> pred[] {
  %carry.1 = (s32[], f32[16]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%carry.1), index=0
  %limit = s32[] constant(12)
  ROOT %less = pred[] compare(%i.1, %limit), direction=LT
}

%body (carry: (s32[], f32[16])) -> (s32[], f32[16]) {
  %carry = (s32[], f32[16]{0}) parameter(0)
  %i = s32[] get-tuple-element(%carry), index=0
  %w = f32[16]{0} get-tuple-element(%carry), index=1
  %gathered = f32[32]{0} all-gather(%w), channel_id=3, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, use_global_device_ids=true
  %inside = f32[16]{0} all-reduce(%w), channel_id=4, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add
  ROOT %next = (s32[], f32[16]{0}) tuple(%i, %inside)
}

ENTRY %main.1 (grads: f32[100], bias: f32[8,128], w0: f32[16]) -> f32[100] {
  %grads = f32[100]{0} parameter(0)
  %bias = f32[8,128]{1,0:T(8,128)} parameter(1)
  %w0 = f32[16]{0} parameter(2)
  %zero = s32[] constant(0)
  %init = (s32[], f32[16]{0}) tuple(%zero, %w0)
  %loop = (s32[], f32[16]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"12"}}
  %within = f32[100]{0} all-reduce(%grads), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add
  %token = token[] after-all()
  %send = (f32[8,128]{1,0:T(8,128)}, u32[], token[]) send(%bias, %token), channel_id=5, is_host_transfer=true, frontend_attributes={_xla_host_transfer_handler_name="xla_megascale_runtime",_xla_megascale_transfer_type="ALL_REDUCE"}
  %send-done = token[] send-done(%send), channel_id=5, is_host_transfer=true
  ROOT %across = f32[100]{0} all-reduce(%within), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true, to_apply=%add
}
"""


def test_collectives_count_bytes_per_run_and_find_the_slices_they_join():
    found = dcn_traffic.collectives(MODULE, SLICES)
    # Per device: the loop's all-gather puts in its f32[16] (64 B) 12 times and joins
    # partitions p and p+4 (two slices); its all-reduce stays inside groups of four (a slice);
    # the Megascale send carries f32[8,128] between slices; the last all-reduce pairs p, p+4.
    assert [(c.kind, c.bytes_per_device, c.crosses_slices) for c in found] == [
        ("all-gather", 12 * 64, True), ("all-reduce", 12 * 64, False),
        ("all-reduce", 400, False), ("all-reduce", 4096, True), ("all-reduce", 400, True)]
    # Another partition-to-slice map: partitions 0-7 alternate slices, so groups of four
    # ({0,1,2,3}) cross and pairs {p, p+4} do not.
    alternating = dcn_traffic.collectives(MODULE, [0, 1] * 4)
    assert [c.crosses_slices for c in alternating] == [False, True, True, True, False]


def test_a_loop_without_a_known_trip_count_runs_its_condition_bound():
    # The TPU compiler's optimized HLO names no known_trip_count: `counter < 12` from 0 is 12.
    unknown = MODULE.replace(', backend_config={"known_trip_count":{"n":"12"}}', "")
    assert unknown != MODULE
    assert ([c.bytes_per_device for c in dcn_traffic.collectives(unknown, SLICES)]
            == [c.bytes_per_device for c in dcn_traffic.collectives(MODULE, SLICES)])
