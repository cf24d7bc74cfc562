"""The builder-log parser on every shared fixture, with values read off the files by hand.

Line numbers, counts and tactics below were checked against the fixture text with grep/sed
(e.g. ``sed -n 25,57p <file> | grep -c "Tactic Name"`` for the first block's 28 candidates).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reprobuild.errors import LogParseError
from reprobuild.logs.diff import diff_records
from reprobuild.logs.parser import LogParser
from reprobuild.logs.reader import iter_file, parse_file, parse_lines
from reprobuild.logs.records import TacticRecord
from reprobuild.logs.values import parse_tactic

FIX = Path(__file__).resolve().parent.parent / "fixtures"
TRT = FIX / "trt-logs"
OWN = FIX / "logparse"
LOG_FIXTURES = sorted(TRT.glob("*.log")) + sorted(OWN.glob("*.log"))


def recs(name: str) -> list[TacticRecord]:
    return parse_file(TRT / name).records


def by_line(records: list[TacticRecord]) -> dict[int, TacticRecord]:
    return {r.line: r for r in records}


# --- parse_tactic ----------------------------------------------------------------------------


def test_parse_tactic_compares_as_integers() -> None:
    assert parse_tactic("0x665ded9abbf88") == 0x665DED9ABBF88
    assert parse_tactic("0x00000000000003ea") == parse_tactic("1002") == 1002
    assert parse_tactic("0x0000000000000000") == parse_tactic("0") == 0
    # 7.x prints the same unsigned 64-bit value as a signed decimal
    assert parse_tactic("-1") == 0xFFFFFFFFFFFFFFFF
    assert parse_tactic("-3263369460438823196") == 2**64 - 3263369460438823196
    assert parse_tactic("1825138533642645384") == 0x195431D38BA5AF88


@pytest.mark.parametrize("bad", ["", "zz", "0x", "0xg1", "0x1" + "0" * 16, "-" + str(2**63 + 1)])
def test_parse_tactic_rejects_non_tactics(bad: str) -> None:
    with pytest.raises(LogParseError, match="not a tactic"):
        parse_tactic(bad)


# --- 10.16 trtexec (runner blocks, Myelin table, cached results, Layer lines) ------------------


def test_trtexec_1016_runner_blocks() -> None:
    records = recs("trt1016_cookbook_trtexec_verbose_excerpt.log")
    assert len(records) == 16
    b = by_line(records)
    first = b[25]
    assert (first.layer, first.format, first.runner) == (
        "node_conv2d + node_relu",
        "runner",
        "CaskConvolution",
    )
    assert first.formats == "Float(784,784,28,1) -> Float(25088,784,28,1)"
    assert len(first.candidates) == 28
    assert first.chosen == 0x5B8BF1B8028629D9
    assert first.chosen_kernel == (
        "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3"
        "_warpsize1x2x1_g1_ffma_t1r5s5_aligna4_alignc4"
    )
    assert first.chosen_cost_ms == pytest.approx(0.00534603)
    assert first.candidates[0].tactic_hash == 0x967F94E9DB2001A8
    assert first.candidates[0].cost_ms == pytest.approx(0.00615314)
    assert first.candidates[-1].tactic_hash == 0xE40B38338A3A7D7E
    assert all(c.runner == "CaskConvolution" and c.tactic_id is None for c in first.candidates)
    assert (len(b[58].candidates), b[58].chosen) == (31, 0x880B696BD0160609)
    assert (len(b[103].candidates), b[103].chosen) == (32, 0x98E92DB98836B738)
    assert b[103].formats == "Half(784,1:2,28,1) -> Half(12544,1:2,448,16)"
    # cut off by the excerpt before its "Chose Runner Type" line: no choice is invented
    assert (len(b[143].candidates), b[143].chosen, b[143].chosen_kernel) == (5, None, None)
    # the second Shuffle tactic was "skipped" (scratch), so only one candidate was timed
    view = b[152]
    assert (view.layer, len(view.candidates), view.chosen, view.runner) == (
        "node_view",
        1,
        0,
        "Shuffle",
    )
    assert view.chosen_cost_ms == pytest.approx(0.00314842)


def test_trtexec_1016_myelin_table_and_foreign_node() -> None:
    b = by_line(recs("trt1016_cookbook_trtexec_verbose_excerpt.log"))
    op = b[169]
    assert (op.layer, op.key, op.format, op.onnx_layers) == (
        "node_linear_1_2",
        None,
        "myelin",
        ("node_linear_1",),
    )
    assert len(op.candidates) == 28
    # no key, no selection line: the sorted table's first row is the choice
    assert op.chosen == 0x630E9FED90A4C and op.chosen_cost_ms == pytest.approx(0.0102624)
    assert op.chosen_kernel == (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4"
    )
    assert [c.tactic_id for c in op.candidates[:3]] == [0, 2, 1]
    assert (op.candidates[-1].tactic_id, op.candidates[-1].tactic_hash) == (24, 0x3EADE8B34DB1C)
    outer = b[164]
    assert (outer.layer, outer.runner, outer.chosen, outer.onnx_layers) == (
        "{ForeignNode[node_linear_1_2]}",
        "Myelin",
        0,
        ("node_linear_1",),
    )
    assert outer.chosen_cost_ms == pytest.approx(0.00952286)


def test_trtexec_1016_cached_results() -> None:
    records = recs("trt1016_cookbook_trtexec_verbose_excerpt.log")
    cached = [r for r in records if r.from_cache]
    assert [r.line for r in cached] == [211, 212, 222, 226, 230, 232, 233, 234, 235]
    r = by_line(cached)[226]
    assert (r.layer, r.format, r.runner, r.chosen, r.candidates) == (
        "node_conv2d + node_relu",
        "cached",
        "CaskConvolution",
        0x112767CF498572EA,
        [],
    )
    assert r.formats == "Half(784,1:4,28,1) -> Half(3136,1:8,112,4)"
    assert r.chosen_cost_ms == pytest.approx(0.00556765)
    pool = by_line(cached)[235]
    assert (pool.layer, pool.runner, pool.chosen) == (
        "node_max_pool2d",
        "CaskPooling",
        0xF9AE51E35FF7F5DB,
    )


def test_trtexec_1016_warnings_and_engine_layers() -> None:
    res = parse_file(TRT / "trt1016_cookbook_trtexec_verbose_excerpt.log")
    assert [(w.line, w.kind) for w in res.warnings] == [
        (20, "cache-not-used"),
        (22, "cache-in-use"),
        (251, "cache-not-used"),
        (255, "cache-serialized"),
        (258, "cache-serialized"),
    ]
    assert res.warnings[3].message == "Serialized 170 timing cache entries"
    assert [(e.name, e.layer_type, e.tactic_value) for e in res.engine_layers] == [
        ("{ForeignNode[node_conv2d...node_relu]}", "Myelin", 0),
        ("node_max_pool2d", "CaskPooling", 0xDD39499496C9CC38),
        (
            "Reformatting CopyNode for Input Tensor 0 to "
            "{ForeignNode[node_conv2d_1...node_relu_1]}",
            "Reformat",
            0,
        ),
        ("{ForeignNode[node_conv2d_1...node_relu_1]}", "Myelin", 0),
        ("node_max_pool2d_1", "CaskPooling", 0xF9AE51E35FF7F5DB),
        (
            "{ForeignNode[gemm2.bias + ONNXTRT_Broadcast_4...ONNXTRT_castHelper_9]}",
            "Myelin",
            0,
        ),
    ]


# --- 10.16 Python logger ---------------------------------------------------------------------


def test_python_logger_1016() -> None:
    res = parse_file(TRT / "trt1016_cookbook_python_logger_verbose_excerpt.log")
    summary = [(r.line, r.format, r.layer, len(r.candidates), r.chosen) for r in res.records]
    assert summary == [
        (14, "runner", "node_conv2d + node_relu", 28, 0x5B8BF1B8028629D9),
        (54, "myelin", "node_linear", 100, 0x2C80CE2F5C4A6),
        (157, "myelin", "node_linear_1_2", 100, 0x45780D7633278),
        (50, "runner", "{ForeignNode[gemm1.weight...ONNXTRT_castHelper_9]}", 1, 0),
        (266, "reformat", "Optimizer Reformat(x -> <out>)", 3, 0),
        (272, "reformat", "Optimizer Reformat(x -> <out>)", 3, 0),
    ]
    b = by_line(res.records)
    # the Myelin op's ONNX list is joined by \x1f, the ForeignNode metadata by \x1e
    assert b[54].onnx_layers == ("node_linear", "node_relu_2")
    assert b[50].onnx_layers == (
        "node_view",
        "node_linear",
        "node_relu_2",
        "node_linear_1",
        "node_softmax",
        "node_argmax",
    )
    assert b[157].candidates[0].tactic_id == 6
    assert b[157].chosen_kernel == (
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x2x1_tensor16x8x8"
        "_aligna4_alignc4"
    )
    assert b[266].formats == "Float(784,784,28,1) -> Float(784,1,28,1)"
    assert b[266].chosen_cost_ms == pytest.approx(0.00354644)
    assert [c.tactic_hash for c in b[266].candidates] == [0x3E8, 0x3EA, 0]
    assert [(w.line, w.kind) for w in res.warnings] == [(9, "cache-local")]
    assert len(res.engine_layers) == 16
    conv = res.engine_layers[1]
    assert (conv.name, conv.layer_type, conv.tactic_value) == (
        "node_conv2d + node_relu",
        "CaskConvolution",
        0xCF8EA142095F02D2,
    )
    assert (
        res.engine_layers[-1].name
        == "{ForeignNode[gemm1.weight...ONNXTRT_castHelper_9]} [profile 1]"
    )


# --- engine inspector kONELINE -----------------------------------------------------------------


def test_engine_inspector_oneline() -> None:
    res = parse_file(TRT / "trt1016_cookbook_engineinspector_oneline.log")
    assert res.records == []
    layers = {e.name: e for e in res.engine_layers}
    assert len(res.engine_layers) == 26
    conv = layers["node_conv2d + node_relu"]
    assert (conv.layer_type, conv.tactic_value, conv.metadata) == (
        "CaskConvolution",
        0x5B8BF1B8028629D9,
        ("node_conv2d", "node_relu"),
    )
    resh = layers["__myl_Resh_myl5_1"]
    assert (resh.layer_type, resh.tactic_name, resh.tactic_value, resh.metadata) == (
        "kgen",
        "__myl_Resh_0x46ec30df4d4f6d10cd7803e73bbd0428",
        None,
        ("node_view",),
    )
    assert layers["node_linear_myl5_2"].metadata == ("node_linear", "node_relu_2")
    assert layers["__mye260_0_myl5_0"].tactic_name is None
    assert (
        layers["node_max_pool2d [profile 1]"].tactic_name
        == "sm50_xmma_pooling_fw_4d_FP32FP32NCHW_Max"
    )


# --- 10.4 trtexec doc, 10.8 editable-cache README ----------------------------------------------


def test_trtexec_104_doc() -> None:
    res = parse_file(TRT / "trt104_fuzzylabs_trtexec_verbose_doc_excerpt.log")
    layer = "/features/features.0/Conv + /features/features.1/Relu"
    assert [(r.line, r.layer, len(r.candidates), r.chosen) for r in res.records] == [
        (6, layer, 8, 0xD828F024626FA982),
        (19, layer, 5, 0xD4E0DD17E4D87903),
        (33, layer, 4, 0x1BF48A356BD0C083),
    ]
    first, second, _ = res.records
    assert first.chosen_kernel == (
        "sm80_xmma_fprop_implicit_gemm_indexed_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize64x64x8"
        "_stage3_warpsize1x4x1_g1_ffma_aligna4_alignc4"
    )
    # its candidate line was elided ("...more"); the cost comes from the Fastest line
    assert second.chosen_kernel is None and second.chosen_cost_ms == pytest.approx(0.0251124)
    assert [(w.line, w.kind) for w in res.warnings] == [(3, "cache-not-used")]
    assert [(e.layer_type, e.tactic_value) for e in res.engine_layers] == [
        ("Reformat", 0x3E8),
        ("CaskConvolution", 0x280B0AD3C23D8442),
        ("gemm", None),
    ]


def test_editable_cache_readme() -> None:
    res = parse_file(TRT / "trt108-111_sampleEditableTimingCache_readme_excerpt.log")
    assert len(res.records) == 1  # the sample's "Profiling table" summary is not a block
    r = res.records[0]
    assert (r.line, r.layer, r.key, r.format) == (
        3,
        "matMul1",
        "0x1814870c44ff0f8574df6e3dda04cbd7",
        "editable",
    )
    assert [c.tactic_id for c in r.candidates] == [3, 5, 6]
    assert [c.tactic_hash for c in r.candidates] == [
        0x665DED9ABBF88,
        0x393E4EF8AD243,
        0x2AD3A182FB05C,
    ]
    assert r.chosen == 0x665DED9ABBF88 and r.chosen_cost_ms == pytest.approx(0.011264)
    assert r.chosen_kernel == (
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x1x2_tensor16x8x8"
    )
    (layer,) = res.engine_layers
    assert (layer.name, layer.layer_type, layer.tactic_value) == ("matMul1_myl0_0", "gemm", None)


# --- 8.6 / 8.5 / 7.x ---------------------------------------------------------------------------


def test_jetson_862_chunks_do_not_merge() -> None:
    (r,) = recs("trt862_jetson_inference_issue1855_excerpt.log")
    assert r.layer == "node_of_229 + node_of_230 + PWN(node_of_231)"
    # chunk 1's five candidates belong to another block and must not leak into this one
    assert [c.tactic_hash for c in r.candidates] == [
        0x9D9FDB5FD9945F64,
        0x1673E3594CE11CEA,
        0xBB8C3889C7EACD30,
    ]
    assert (r.chosen, r.runner, r.format) == (0x9D9FDB5FD9945F64, "CaskConvolution", "runner")
    assert r.chosen_cost_ms == pytest.approx(0.139889)


def test_vaccel_851_chosen_runner_is_not_last_fastest() -> None:
    records = recs("trt851_vaccel_docs_jetson_inference_logger_excerpt.log")
    assert [(r.line, r.layer, r.chosen, r.runner) for r in records] == [
        (15, "loss3/classifier", 0x20318, "CaskGemmConvolution"),
        (18, "prob", 0x3EA, "CudaSoftMax"),
        (25, "prob", 0x3EA, "CudaSoftMax"),
        (32, "prob", 0x12, "CudaSoftMax"),
    ]
    first = records[0]
    # "Fastest Tactic: 0x017a89ce2d82b850" was printed last, but the choice is 0x20318
    assert first.chosen != 0x017A89CE2D82B850
    assert first.format == "legacy" and len(first.candidates) == 6
    # two-line form: the kernel comes from the "Set Tactic Name" line with the same tactic
    assert (first.candidates[1].tactic_hash, first.candidates[1].kernel) == (
        0xC110E19C9F5AA36E,
        "volta_h884cudnn_256x128_ldg8_relu_exp_small_nhwc_tn_v1",
    )
    assert first.candidates[0].kernel is None  # its Set line was elided ("...")
    assert records[1].formats == "Float(1000,1,1,1) -> Float(1000,1,1,1)"
    assert len(records[1].candidates) == 1


def test_legacy_7x_80_decimal_tactics() -> None:
    records = recs("trt7x-80_legacy_python_logger_issue_excerpts.log")
    assert [(r.line, r.format, r.layer, r.chosen) for r in records] == [
        (7, "legacy", "001_convolutional", None),
        (18, "legacy", "vgg0_conv1_fwd + vgg0_relu1_fwd", 2**64 - 3263369460438823196),
        (26, "reformat", "Optimizer Reformat", 0),
        (31, "legacy", "Flatten_21", 0),
        (37, "legacy", "Flatten_21", 0),
    ]
    conv = records[0]
    assert [(c.tactic_hash, c.kernel, c.cost_ms) for c in conv.candidates] == [
        (1825138533642645384, "volta_scudnn_128x128_relu_medium_nn_v1", 0.198944),
        (
            2775507031594384867,
            "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
            0.14992,
        ),
        (2842488832350522458, "volta_scudnn_128x64_relu_xregs_large_nn_v1", 0.116928),
    ]
    assert records[1].runner == "CaskConvolution" and records[1].candidates == []
    reformat = records[2]
    assert reformat.formats == "Float(1536,3,1) -> Half(1536,3,1)"
    assert [c.tactic_hash for c in reformat.candidates] == [1002, 0]
    assert reformat.chosen_cost_ms == pytest.approx(0.006144)
    assert records[4].formats == "Half(1536,3,1) -> Half(3,1)"
    assert records[4].candidates[1].cost_ms == pytest.approx(0.009216)


def test_timing_cache_messages() -> None:
    res = parse_file(TRT / "trt7x-86_timing_cache_messages_issue_excerpts.log")
    assert res.records == []
    assert [(w.line, w.kind) for w in res.warnings] == [
        (3, "cache-invalid"),
        (4, "cache-invalid"),
        (5, "cache-invalid"),
        (6, "cache-invalid"),
        (7, "cache-invalid"),
        (9, "cache-invalid"),
        (10, "cache-invalid"),
        (11, "cache-invalid"),
        (12, "cache-invalid"),
        (20, "cache-not-used"),
        (22, "cache-loaded"),
        (23, "cache-error"),
        (24, "cache-not-used"),
        (29, "cache-invalid"),
        (31, "cache-invalid"),
        (33, "cache-invalid"),
    ]
    assert res.warnings[9].message == "4: The timing cache will not be used!"
    assert res.warnings[13].message == "Invalid timing cache, using freshly created one"


# --- own fixtures: reference backend, no table -------------------------------------------------


def test_reference_backend_editable_log() -> None:
    res = parse_file(OWN / "ref_editable.log")
    summary = [(r.line, r.format, r.layer, r.key, len(r.candidates), r.chosen) for r in res.records]
    assert summary == [
        (2, "editable", "conv 1 (main)", "0x0123456789abcdef0123456789abcdef", 3, 0xB2),
        (11, "editable", "matMul1", "0x" + "1" * 32, 1, 0x665DED9ABBF88),
        (17, "editable", "matMul1", "0x" + "2" * 32, 2, 0x393E4EF8AD243),
        (24, "editable", "weird (op) (x)", "0x" + "3" * 32, 0, 0xDEADBEEF),
        (30, "myelin", "fused gelu", None, 2, 0x7),
        (36, "cached", "matMul1", None, 0, 0x665DED9ABBF88),
        (39, "editable", "tail", "0x" + "4" * 32, 1, None),
    ]
    b = by_line(res.records)
    # the selection line wins over the table order; "0x00b2" and "0xb2" are the same tactic
    assert (b[2].chosen_kernel, b[2].chosen_cost_ms) == ("ref_conv_im2col", 0.06)
    assert b[2].onnx_layers == ("conv1", "relu1")
    assert b[30].onnx_layers == ("mul_1", "erf_2")
    assert (b[24].chosen_kernel, b[24].chosen_cost_ms) == (None, 1.5)
    assert (b[36].formats, b[36].runner, b[36].from_cache) == (
        "Float(128,1) -> Float(128,1)",
        "ref_gemm_blas",
        True,
    )
    assert [(w.line, w.kind) for w in res.warnings] == [
        (1, "cache-loaded"),
        (37, "cache-invalid"),
        (38, "cache-serialized"),
    ]


def test_no_table_log() -> None:
    res = parse_file(OWN / "no_table.log")
    (r,) = res.records
    assert (r.format, r.layer, r.chosen, r.runner, len(r.candidates)) == (
        "runner",
        "{ForeignNode[/fc1/Gemm...Softmax]}",
        0,
        "Myelin",
        1,
    )
    assert [e.name for e in res.engine_layers] == ["{ForeignNode[/fc1/Gemm...Softmax]}"]
    assert list(parse_lines(["[I] [TRT] Engine built in 1 s.", "", "   "])) == []


# --- prefixes, streaming, decoding -------------------------------------------------------------

BLOCK = [
    "Autotuning op my op (a)(key: 0xb222b0832016f1115ff61116c094875a): [ONNX Layer: a]",
    "Sorted table of all evaluated tactics:",
    "tactic_id, cost(in ms), cost/fastest_cost, prediction_correlation, kernel_name, "
    "tactic_hash, tunable_parameter",
    "   4, 0.0200000, 1.00000, 0.50000, k_fast, 0x2ad3a182fb05c,",
    "   9, 0.0300000, 1.50000, 0.50000, k_slow, 0x393e4ef8ad243,",
    "The selected tactic is (tactic hash, cost(in ms)):0x2ad3a182fb05c,  0.020000",
    "Writing the best tactic (0x2ad3a182fb05c) to cache",
]

PREFIXES = [
    "",
    "[07/07/2026-02:11:00] [V] [TRT] ",
    "[07/07/2026-06:12:17] [TRT] [V] ",
    "[TensorRT] VERBOSE: ",
    "[TRT]    ",
    "[2023-12-25 12:50:09][Debug][TRT] ",
    "2023-01-11 13:19:51-0600: TensorRT backend: ",
    "[11/21/2026-10:00:00] [V] [REF] ",
    "[07/07/2026-06:12:17] [TRT] [V]  (foreignNode) ",
    "    ",
]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_every_prefix_gives_the_same_record(prefix: str) -> None:
    (r,) = list(parse_lines(prefix + line for line in BLOCK))
    assert (r.layer, r.key, r.onnx_layers, r.chosen, r.chosen_kernel) == (
        "my op (a)",
        "0xb222b0832016f1115ff61116c094875a",
        ("a",),
        0x2AD3A182FB05C,
        "k_fast",
    )
    assert [(c.tactic_id, c.kernel, c.cost_ms) for c in r.candidates] == [
        (4, "k_fast", 0.02),
        (9, "k_slow", 0.03),
    ]


def test_feed_returns_records_when_their_block_completes() -> None:
    p = LogParser()
    for line in BLOCK[:-1]:
        assert p.feed(line) == []
    (r,) = p.feed(BLOCK[-1])
    assert r.line == 1 and p.finish() == []
    # a runner block completes on its "Chose Runner Type" line
    assert p.feed("--------------- Timing Runner: fc (CaskGemm[0x8000001d])") == []
    assert p.feed("Tactic Name: k1 Tactic: 0x00000000000000aa Time: 0.5") == []
    (r2,) = p.feed(">>>>>>>>>>>>>>> Chose Runner Type: CaskGemm Tactic: 0x00000000000000aa")
    assert (r2.layer, r2.chosen, r2.chosen_kernel, r2.line) == ("fc", 0xAA, "k1", 8)


def test_parse_lines_is_lazy() -> None:
    consumed = 0

    def source() -> Iterator[str]:
        nonlocal consumed
        while True:  # an endless pipe
            for line in BLOCK:
                consumed += 1
                yield line

    gen = parse_lines(source())
    assert next(gen).chosen == 0x2AD3A182FB05C
    assert consumed == len(BLOCK)


def test_feed_splits_embedded_newlines_and_ignores_trailing_ones() -> None:
    p = LogParser()
    out = p.feed("\n".join(BLOCK) + "\n")
    assert len(out) == 1 and p.lineno == len(BLOCK)


def test_crlf_and_invalid_utf8_files(tmp_path: Path) -> None:
    lf = (TRT / "trt862_jetson_inference_issue1855_excerpt.log").read_bytes()
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(lf.replace(b"\n", b"\r\n"))
    assert list(iter_file(crlf)) == recs("trt862_jetson_inference_issue1855_excerpt.log")
    noisy = tmp_path / "noisy.log"
    noise = bytes(range(256)).replace(b"\n", b"") * 3
    noisy.write_bytes(noise + b"\n" + "\n".join(BLOCK).encode() + b"\n\xff\xfe\x00garbage\n")
    (r,) = list(iter_file(noisy))
    assert (r.line, r.chosen) == (2, 0x2AD3A182FB05C)


def test_unreadable_files_raise_log_parse_error(tmp_path: Path) -> None:
    with pytest.raises(LogParseError, match="missing.log: cannot read the log"):
        parse_file(tmp_path / "missing.log")
    with pytest.raises(
        LogParseError, match="is a directory, not a regular file; give the builder log"
    ):
        list(iter_file(tmp_path))


def test_memory_stays_flat_on_a_long_stream() -> None:
    """A long log is parsed without being held: the traced peak does not grow with it."""
    v = "[07/07/2026-02:11:00] [V] [TRT] "
    block = [
        v + "=============== Computing costs for conv",
        v + "*************** Autotuning format combination: Float(1) -> Float(1) ***",
        v + "--------------- Timing Runner: conv (CaskConvolution[0x80000009])",
        *[v + f"Tactic Name: sm80_kernel_{i} Tactic: 0x{i:016x} Time: 0.01" for i in range(40)],
        v + ">>>>>>>>>>>>>>> Chose Runner Type: CaskConvolution Tactic: 0x0000000000000003",
        "[07/07/2026-02:11:00] [W] [TRT] Cache result detected as invalid for node: conv, "
        "LayerImpl: X, tactic: 0x1",
    ]

    def peak(repeats: int) -> tuple[int, int]:
        parser = LogParser(max_warnings=100)
        tracemalloc.start()
        n = 0
        for r in parse_lines((line for _ in range(repeats) for line in block), parser):
            n += r.chosen == 3
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert parser.warnings_dropped == repeats - 100
        return n, top

    n_small, small = peak(200)
    n_big, big = peak(2000)  # ten times the input: ~2.5 MB of log text
    assert (n_small, n_big) == (200, 2000)
    assert big < small * 1.5 + 200_000


# --- diff ------------------------------------------------------------------------------------


def test_diff_matches_by_key_and_compares_integers() -> None:
    a = list(parse_lines(BLOCK))
    b_lines = [line.replace("0x2ad3a182fb05c", "0x0002ad3a182fb05c") for line in BLOCK]
    assert diff_records(a, parse_lines(b_lines)).same
    c_lines = BLOCK[:5] + [
        "The selected tactic is (tactic hash, cost(in ms)):0x393e4ef8ad243, 0.03",
        "Writing the best tactic (0x393e4ef8ad243) to cache",
    ]
    d = diff_records(a, parse_lines(c_lines))
    assert d.matched_by == "key" and d.compared == 1
    ((ra, rb),) = d.changed
    assert (ra.chosen, rb.chosen, rb.chosen_kernel) == (0x2AD3A182FB05C, 0x393E4EF8AD243, "k_slow")


def test_diff_matches_by_layer_and_occurrence_without_keys() -> None:
    a = recs("trt1016_cookbook_trtexec_verbose_excerpt.log")
    text = (TRT / "trt1016_cookbook_trtexec_verbose_excerpt.log").read_text()
    changed = text.replace(
        "Chose Runner Type: CaskConvolution Tactic: 0x880b696bd0160609",
        "Chose Runner Type: CaskConvolution Tactic: 0x0a143be7a52f301a",
    )
    d = diff_records(a, parse_lines(changed.split("\n")))
    assert (d.matched_by, d.compared, d.only_a, d.only_b) == ("layer", 16, [], [])
    ((ra, rb),) = d.changed
    assert (ra.layer, ra.line, ra.chosen, rb.chosen) == (
        "node_conv2d + node_relu",
        58,
        0x880B696BD0160609,
        0x0A143BE7A52F301A,
    )
    # a log with keys and one without: everything is matched by layer name + occurrence
    d2 = diff_records(parse_lines(BLOCK), parse_lines(["   " + line for line in BLOCK[1:]]))
    assert d2.matched_by == "layer" and len(d2.only_a) == 1


# --- hypothesis: nothing but LogParseError, whatever the input ----------------------------------

_FIXTURE_LINES = [
    line
    for path in LOG_FIXTURES
    for line in path.read_bytes().decode("utf-8", errors="replace").split("\n")
]
_lines_st = st.lists(st.sampled_from(_FIXTURE_LINES), max_size=60)
_garbage_st = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=200
)


def _cut(line: str, where: float) -> str:
    return line[: int(len(line) * where)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    real=_lines_st,
    garbage=st.lists(_garbage_st, max_size=20),
    cuts=st.lists(st.floats(0, 1), max_size=60),
    order=st.randoms(use_true_random=False),
)
def test_garbage_truncation_and_interleaving_never_raise(
    real: list[str], garbage: list[str], cuts: list[float], order
) -> None:
    lines = [
        (_cut(line, c) if c < 0.5 else line)
        for line, c in zip(real, cuts + [1.0] * 60, strict=False)
    ]
    mixed = lines + garbage
    order.shuffle(mixed)
    for stream in (lines, mixed):
        try:
            out = list(parse_lines(stream))
        except LogParseError:
            continue
        assert all(isinstance(r, TacticRecord) and r.layer or r.key for r in out)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=4000), blocks=st.lists(st.sampled_from(_FIXTURE_LINES), max_size=30))
def test_binary_noise_files_and_line_feed_agree(tmp_path_factory, data: bytes, blocks) -> None:
    path = tmp_path_factory.mktemp("noise") / "noise.log"
    payload = data + b"\n" + "\n".join(blocks).encode("utf-8", errors="replace") + b"\n" + data
    path.write_bytes(payload)
    try:
        from_file = list(iter_file(path))
    except LogParseError:
        return
    # the file reader and the line-by-line API see the same log
    text = payload.decode("utf-8", errors="replace")
    assert from_file == list(parse_lines(text.split("\n")))


_FRAGMENTS = [
    "Tactic: ", "Tactic Name: ", " Time: ", " time ", "0x", "0x1f", "-12", "inf", ", ", ",", "(",
    ")", "[", "]", "Autotuning op ", "(key: ", "0x" + "a" * 32, "):", ": [ONNX Layer: ", "\x1e",
    "\x1f", "Autotuning format combination:", "Autotuning Reformat", "Timing Runner: ",
    " (Cask[0x80000009])", "Chose Runner Type: ", "Fastest Tactic: ",
    " profiling completed in 1 seconds. ", "Set Tactic Name: ", "Computing costs for",
    "] got cached result: ", ", tactic ", " ms", "(tactic hash, cost(in ms)):",
    "Writing the best tactic (", "Layer(", "): ", ", Tactic: ", "Name: ", ", LayerType: ",
    ", TacticName: ", ", TacticValue: ", ", Metadata: ", "ForeignNode ", " metadata: ", "Layers:",
    "# ", "timing cache will not be used", "Error Code 1", "   3", " 0.5", "\r", "\x00",
    "[V] [TRT] ",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=12).map("".join), max_size=30))
def test_keyword_fragments_never_raise(lines: list[str]) -> None:
    """Lines built from the parser's own trigger words reach every handler with bad data."""
    parser = LogParser()
    out = list(parse_lines(lines, parser))
    assert parser.lineno == len(lines)
    assert all(r.chosen is None or 0 <= r.chosen < 2**64 for r in out)
