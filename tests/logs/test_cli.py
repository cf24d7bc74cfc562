"""``reprobuild log FILE`` and ``reprobuild log diff A B`` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import run_cli

FIX = Path(__file__).resolve().parent.parent / "fixtures"
TRT = FIX / "trt-logs"
REF = FIX / "logparse" / "ref_editable.log"
TRTEXEC = TRT / "trt1016_cookbook_trtexec_verbose_excerpt.log"


def test_log_table_and_warnings_on_stderr(cli) -> None:
    r = cli("log", str(REF))
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert lines[0].split() == ["LINE", "LAYER", "KEY", "CANDS", "CHOSEN", "CACHED", "KERNEL"]
    row = next(line for line in lines if "0x" + "2" * 32 in line)
    assert row.split() == [
        "17",
        "matMul1",
        "0x" + "2" * 32,
        "2",
        "0x393e4ef8ad243",
        "no",
        "ref_gemm_tiled",
    ]
    cached = next(line for line in lines if " yes " in line)
    assert cached.split()[:6] == ["36", "matMul1", "-", "0", "0x665ded9abbf88", "yes"]
    assert lines[-1] == "7 record(s), 1 from the timing cache, 0 engine layer(s), 3 warning(s)"
    assert f"warning: {REF}:1: cache-loaded: Loaded 4096 bytes" in r.err
    assert f"warning: {REF}:37: cache-invalid:" in r.err
    assert "warning:" not in r.out


def test_log_json(cli) -> None:
    r = cli("log", str(TRTEXEC), "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["file"] == str(TRTEXEC)
    assert len(data["records"]) == 16
    first = data["records"][0]
    assert (first["layer"], first["line"], first["chosen"], first["num_candidates"]) == (
        "node_conv2d + node_relu",
        25,
        "0x5b8bf1b8028629d9",
        28,
    )
    assert first["candidates"][0] == {
        "tactic_id": None,
        "tactic_hash": "0x967f94e9db2001a8",
        "kernel": "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize64x64x8"
        "_stage3_warpsize1x4x1_g1_ffma_t1r5s5_aligna4_alignc4",
        "cost_ms": 0.00615314,
        "runner": "CaskConvolution",
    }
    assert [(w["line"], w["kind"]) for w in data["warnings"]][:2] == [
        (20, "cache-not-used"),
        (22, "cache-in-use"),
    ]
    assert data["engine_layers"][1] == {
        "name": "node_max_pool2d",
        "layer_type": "CaskPooling",
        "tactic_name": None,
        "tactic_value": "0xdd39499496c9cc38",
        "metadata": [],
    }
    assert r.err == ""
    # the option may come first, and "show" may be spelled out
    assert json.loads(cli("log", "--json", str(TRTEXEC)).out) == data
    assert json.loads(cli("log", "show", str(TRTEXEC), "--json").out) == data


def test_log_diff_same_and_different(cli, tmp_path: Path) -> None:
    r = cli("log", "diff", str(REF), str(REF))
    assert r.code == 0, r
    assert r.out.strip() == "same: 7 record(s) matched by key, 0 changed, 0 only in A, 0 only in B"
    changed = tmp_path / "b.log"
    changed.write_bytes(
        REF.read_bytes().replace(
            b"(tactic hash, cost(in ms)):0x393e4ef8ad243, 0.020000",
            b"(tactic hash, cost(in ms)):0x665ded9abbf88, 0.030000",
        )
    )
    r = cli("log", "diff", str(REF), str(changed))
    assert r.code == 1, r
    assert (
        "matMul1" in r.out
        and "0x393e4ef8ad243 ref_gemm_tiled  ->  0x665ded9abbf88 ref_gemm_blas" in r.out
    )
    assert r.out.splitlines()[-1].startswith("different: 7 record(s) matched by key, 1 changed")
    r = cli("log", "diff", str(REF), str(changed), "--json")
    assert r.code == 1
    data = json.loads(r.out)
    assert (data["same"], data["matched_by"], data["compared"]) == (False, "key", 7)
    (ch,) = data["changed"]
    assert (ch["key"], ch["a"]["chosen"], ch["b"]["chosen"]) == (
        "0x" + "2" * 32,
        "0x393e4ef8ad243",
        "0x665ded9abbf88",
    )


def test_log_diff_across_logs_without_keys(cli, tmp_path: Path) -> None:
    b = tmp_path / "b.log"
    b.write_bytes(
        TRTEXEC.read_bytes().replace(
            b"Chose Runner Type: CaskConvolution Tactic: 0x98e92db98836b738",
            b"Chose Runner Type: CaskConvolution Tactic: 0xece74e31d6ab911a",
        )
    )
    r = cli("log", "diff", str(TRTEXEC), str(b), "--json")
    assert r.code == 1, r
    data = json.loads(r.out)
    assert data["matched_by"] == "layer"
    (ch,) = data["changed"]
    assert (ch["layer"], ch["a"]["line"], ch["b"]["chosen"], ch["b"]["chosen_kernel"]) == (
        "node_conv2d + node_relu",
        103,
        "0xece74e31d6ab911a",
        "sm75_xmma_fprop_implicit_gemm_indexed_wo_smem_f16f16_f16f16_f16_nhwckrsc_nhwc"
        "_tilesize128x16x64_stage1_warpsize4x1x1_g1_tensor16x8x8_aligna4_alignc4",
    )


def test_log_errors_and_help(cli, tmp_path: Path) -> None:
    r = cli("log", str(tmp_path / "missing.log"), "--json")
    assert r.code == 2 and r.out == r.err  # one JSON line on stdout, the same on stderr
    error = json.loads(r.out)["error"]
    assert error["code"] == 2 and "missing.log: cannot read the log" in error["message"]
    r = cli("log", str(tmp_path / "missing.log"))
    assert r.code == 2 and r.out == "" and r.err.startswith("error: ")
    r = cli("log", "diff", str(REF), str(tmp_path / "nope.log"))
    assert r.code == 2 and "nope.log: cannot read the log" in r.err
    for args in (("log", "--help"), ("log", "show", "--help"), ("log", "diff", "--help")):
        h = cli(*args)
        assert h.code == 0 and "Example" in h.out, h
    assert "reprobuild log diff" in cli("log", "--help").out


def test_console_entry_point_subprocess() -> None:
    """The real ``python -m reprobuild`` path (no in-process shortcuts)."""
    p = run_cli("log", str(TRT / "trt862_jetson_inference_issue1855_excerpt.log"))
    assert p.returncode == 0, p.stderr
    assert "0x9d9fdb5fd9945f64" in p.stdout and "1 record(s)" in p.stdout
    p = run_cli("log", "diff", str(TRTEXEC), str(TRTEXEC))
    assert p.returncode == 0 and p.stdout.startswith("same: 16 record(s)")
