"""Where the device time goes (acgan.measure.profile): grouping by XLA's HLO, by names, and the step range."""

import pytest

from acgan.measure import profile

HLO = """HloModule jit__step, entry_computation_layout={()->f32[]}

%fused_convert (param_0: f32[8]) -> bf16[8] {
  %param_0 = f32[8]{0} parameter(0)
  ROOT %convert.1 = bf16[8]{0} convert(%param_0), metadata={op_name="jit(_step)/jvp(g_fc2)/convert_element_type"}
}

%fused_adam (param_0.1: f32[8], param_1: f32[8]) -> f32[8] {
  %param_0.1 = f32[8]{0} parameter(0)
  %param_1 = f32[8]{0} parameter(1)
  ROOT %multiply.3 = f32[8]{0} multiply(%param_0.1, %param_1), metadata={op_name="jit(_step)/d_optimizer_adam/mul"}
}

%fused_bn (param_0.2: f32[8]) -> f32[8] {
  %param_0.2 = f32[8]{0} parameter(0)
  ROOT %rsqrt.1 = f32[8]{0} rsqrt(%param_0.2), metadata={op_name="jit(_step)/jvp(d_bn2)/jit(_var)/rsqrt"}
}

%fused_transpose (param_0.3: f32[2,4]) -> f32[4,2] {
  %param_0.3 = f32[2,4]{1,0} parameter(0)
  ROOT %transpose.1 = f32[4,2]{1,0} transpose(%param_0.3), dimensions={1,0}
}

%gemm_computation (p0: f32[2,4], p1: f32[4,3]) -> f32[2,3] {
  %p0 = f32[2,4]{1,0} parameter(0)
  %p1 = f32[4,3]{1,0} parameter(1)
  ROOT %dot.2 = f32[2,3]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main.9 (a: f32[8], b: f32[2,4], c: f32[4,3]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %b = f32[2,4]{1,0} parameter(1)
  %c = f32[4,3]{1,0} parameter(2)
  %wrapped_convert.11 = bf16[8]{0} fusion(%a), kind=kLoop, calls=%fused_convert
  %multiply_add_fusion.6 = f32[8]{0} fusion(%a, %a), kind=kLoop, calls=%fused_adam
  %loop_rsqrt_fusion = f32[8]{0} fusion(%a), kind=kLoop, calls=%fused_bn
  %loop_transpose_fusion = f32[4,2]{1,0} fusion(%b), kind=kLoop, calls=%fused_transpose
  %gemm_fusion_dot.4 = f32[2,3]{1,0} fusion(%b, %c), kind=kCustom, calls=%gemm_computation
  %cudnn-conv.33 = (f32[1,4,4,64]{3,2,1,0}, u8[0]{0}) custom-call(%b, %c), window={size=14x14}, custom_call_target="__cudnn$convForward"
  ROOT %exp.5 = f32[8]{0} exponential(%a)
}
"""


def test_hlo_index_groups_by_what_an_instruction_computes():
    index = profile.hlo_index(HLO)
    assert index["wrapped_convert.11"] == "casts"
    assert index["multiply_add_fusion.6"] == "optimizer updates"
    assert index["loop_rsqrt_fusion"] == "batch norm"
    assert index["loop_transpose_fusion"] == "copies and transposes"
    assert index["gemm_fusion_dot.4"] == "matrix products"
    assert index["cudnn-conv.33"] == "convolutions"
    assert index["exp.5"] == "other elementwise and reductions"


@pytest.mark.parametrize(
    "name, group",
    [
        ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32", "convolutions"),
        ("trunk/d_conv2/Conv2D:Conv2D", "convolutions"),
        ("cutlass_80_tensorop_s1688gemm", "matrix products"),
        ("model/dense/MatMul:MatMul", "matrix products"),
        ("q_optimizer_adam/Sub_27:Sub", "optimizer updates"),
        ("g_bn1/FusedBatchNormV3:FusedBatchNormV3", "batch norm"),
        ("Cast_3:Cast", "casts"),
        ("MemcpyD2D", "copies and transposes"),
        ("loop_add_fusion_3", "other elementwise and reductions"),
    ],
)
def test_names_alone_give_a_group(name, group):
    assert profile.group_of_name(name) == group


def test_device_kernels_are_preferred_and_summary_lines_left_out():
    stats = {"hlo_op": "fusion.1"}
    events = [
        ("/host:CPU", "python", "PjitFunction(_step)", 900.0, {}),
        ("/host:CPU", "tf_XLA", "fusion.1", 50.0, stats),
        ("/device:GPU:0", "XLA Modules", "jit__step", 1000.0, {}),
        ("/device:GPU:0", "Stream #13(compute)", "loop_add_fusion_1", 40.0, stats),
        (
            "/device:GPU:0",
            "Stream #13(compute)",
            "sm90_xmma_fprop",
            60.0,
            {"hlo_op": "cudnn-conv.2"},
        ),
    ]
    assert profile.device_ops(events) == [
        ("fusion.1", 40.0, "loop_add_fusion_1"),
        ("cudnn-conv.2", 60.0, "sm90_xmma_fprop"),
    ]
    # a CPU: XLA's operations
    assert profile.device_ops(events[:2]) == [("fusion.1", 50.0, "fusion.1")]


@pytest.mark.parametrize("text, expected", [("10:14", (10, 14)), (" 3 : 3 ", (3, 3))])
def test_step_range(text, expected):
    assert profile.parse_step_range(text) == expected


@pytest.mark.parametrize("text", ["14:10", "0:3", "10", "a:b", "", None])
def test_bad_step_range(text):
    with pytest.raises(ValueError, match="is not a step range A:B"):
        profile.parse_step_range(text)
