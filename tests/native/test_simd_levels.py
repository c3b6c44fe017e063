"""The CPU codec's vector kernels (xla_ffi/simd_cpu.h) against its portable path.

The handlers pick the widest kernel set the CPU runs (AVX-512, AVX2 + BMI2, else SSE2/NEON);
the environment variable ``JLC_SIMD`` caps it. Every level must write the same frames byte for
byte and decode them to the same bits: the fast routes (no-clamp quantization with a strict
``|x - x_hat| < eb_abs`` test, quantization fused with pext bit-packing straight into the frame,
pdep unpacking) hand every vector they cannot prove to the exact code. The inputs here are made
to reach those hand-overs: rounding midpoints (neighbour-code retries patched into packed
codes), NaN/Inf inside the vector prefix, more than 127 outliers (the codes move by a byte),
capacities too small to pack into the frame, lengths that are not multiples of the vector width.
Each level runs in its own process (the level is fixed at first use).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from support import DUMPS, load_dump

import jax_lossy_comm as jlc
from jax_lossy_comm import _ffi, frame

pytestmark = [
    pytest.mark.skipif(not _ffi.available(), reason="compiled extension absent"),
    # One worker builds the per-level results (four processes) for every test here.
    pytest.mark.xdist_group("simd_levels"),
]

# A level this CPU lacks runs as the next lower one. Each run's environment: the level, and for the x86 levels the bit (un)packing by pext/pdep
# (JLC_PDEP=1) or by the portable shifts that AMD Zen 1/2 get (JLC_PDEP=0), so both routes are
# compared with sse2 on any AVX2 machine.
RUNS = {
    "sse2": {"JLC_SIMD": "sse2"},
    "avx2": {"JLC_SIMD": "avx2", "JLC_PDEP": "1"},
    "avx2-shifts": {"JLC_SIMD": "avx2", "JLC_PDEP": "0"},
    "avx512": {"JLC_SIMD": "avx512", "JLC_PDEP": "1"},
}
CODECS = ("fixed", "auto", "dedup", "entropy", "raw")


MID_LO, MID_HI, MID_EB = -1.0, 1.0, 0.02


def _midpoints(rng) -> np.ndarray:
    """Values at the midpoints of the REL 0.02 grid over [-1, 1]: lo + (k + 1/2) * step."""
    step = np.float32(2 * np.float32(MID_EB * (MID_HI - MID_LO)))
    k = rng.integers(0, 25, (512, 64)).astype(np.float32)
    mid = (np.float32(MID_LO) + (k + np.float32(0.5)) * step).astype(np.float32)
    mid[0, 0], mid[-1, -1] = MID_LO, MID_HI
    return mid


def _near_ties(x: np.ndarray, eb_abs: float) -> int:
    """Values whose float32 |x - x_hat| is not below eb_abs: the exact code decides them."""
    lo, eb = np.float32(x.min()), np.float32(eb_abs)
    step = np.float32(eb * np.float32(2))
    q = np.rint((x - lo) * (np.float32(1) / step)).astype(np.float32)
    return int(np.sum(np.abs(x - (lo + q * step)) >= eb))


def _cases() -> dict[str, tuple[np.ndarray, float, int | None]]:
    """name -> (float32[rows, dim] chunk, REL error bound, capacity or None for the default)."""
    rng = np.random.default_rng(7)
    cases = {}
    raw_cap = frame.frame_capacity((512, 64), np.float32, "raw")  # room for any outliers
    x = rng.standard_normal((512, 64)).astype(np.float32)
    cases["normal"] = (x, 0.01, None)
    # Values at rounding midpoints of the quantization grid: |x - x_hat| lands on eb_abs, where
    # the tie test and the neighbour-code retry decide.
    cases["midpoints"] = (_midpoints(rng), MID_EB, raw_cap)
    sp = x.copy().reshape(-1)
    pos = rng.choice(4096, 80, replace=False)
    sp[pos[:40]], sp[pos[40:60]], sp[pos[60:]] = np.nan, np.inf, -np.inf
    cases["specials_in_prefix"] = (sp.reshape(512, 64), 0.01, raw_cap)
    many = x.copy().reshape(-1)
    many[rng.choice(many.size, 300, replace=False)] = np.nan  # n_outliers varint of 2 bytes
    cases["many_outliers"] = (
        many.reshape(512, 64),
        0.01,
        frame.frame_capacity((512, 64), np.float32, "fixed", 0.01, outliers=400),
    )
    cases["capacity_tight"] = (
        x,
        0.01,
        frame.frame_capacity((512, 64), np.float32, "fixed", 0.01) - 40,
    )
    cases["odd_length"] = (rng.standard_normal((37, 29)).astype(np.float32), 0.03, None)
    cases["just_vector"] = (rng.standard_normal((3, 32)).astype(np.float32), 0.05, None)
    cases["wide_codes"] = (x, 0.0005, raw_cap)  # 10-bit codes: no fused packing
    for b in range(1, 9):  # every width the vector (un)packing takes: codes 0 .. 2^b - 1
        k = rng.integers(0, 2**b, (256, 64)).astype(np.float32)
        k[0, :2] = 0, 2**b - 1  # the range that gives REL bound 1 / (2 (2^b - 1)) width b
        cases[f"bits{b}"] = (k * np.float32(0.25), 1.0 / (2 * (2**b - 1)), None)
    cases["constant"] = (np.full((64, 64), 3.5, np.float32), 0.01, None)
    rep = x[rng.integers(0, 16, 512)]  # repeated rows: dictionary forms
    cases["repeated_rows"] = (rep, 0.01, None)
    if DUMPS is not None:
        for name in sorted(p.name for p in DUMPS.glob("*.bin")):
            for eb_rel in (0.01, 0.05):
                cases[f"{name}@{eb_rel}"] = (load_dump(name), eb_rel, None)
    return cases


_WORKER = textwrap.dedent("""
    import sys, numpy as np, jax, jax_lossy_comm as jlc
    from jax_lossy_comm import frame, _ext
    src, dst, codecs = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    print("level", _ext.simd_level(), "pdep", int(_ext.simd_pdep()))
    cases = dict(np.load(src, allow_pickle=True).items())
    out = {}
    for key in sorted(k[:-2] for k in cases if k.endswith(".x")):
        x, eb, cap = cases[key + ".x"], float(cases[key + ".eb"]), int(cases[key + ".cap"])
        for codec in codecs:
            capacity = cap if cap > 0 else frame.frame_capacity(
                x.shape, np.float32, codec, min_error_bound=eb if codec == "fixed" else None)
            f, n = jlc.compress(x, eb, codec=codec, capacity=capacity)
            v, s = jlc.decompress_with_status(f, n, shape=x.shape)
            out[f"{key}|{codec}|frames"] = np.asarray(f)
            out[f"{key}|{codec}|nbytes"] = np.asarray(n)
            out[f"{key}|{codec}|values"] = np.asarray(v).view(np.uint32)
            out[f"{key}|{codec}|status"] = np.asarray(s)
    np.savez(dst, **out)
""")


@pytest.fixture(scope="module")
def per_level(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("simd")
    cases = _cases()
    arrays = {}
    for i, (name, (x, eb, cap)) in enumerate(cases.items()):
        key = f"c{i:02d}"
        arrays[key + ".x"], arrays[key + ".eb"], arrays[key + ".cap"] = x, eb, cap or -1
        arrays[key + ".name"] = np.asarray(name)
    src = tmp / "cases.npz"
    np.savez(src, **arrays)
    names = {f"c{i:02d}": n for i, n in enumerate(cases)}
    results, used = {}, {}
    for run_name, run_env in RUNS.items():
        dst = tmp / f"{run_name}.npz"
        env = dict(os.environ, **run_env, JLC_REQUIRE_EXTENSION="1", XLA_FLAGS="")
        run = subprocess.run(
            [sys.executable, "-c", _WORKER, str(src), str(dst), ",".join(CODECS)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        results[run_name] = dict(np.load(dst).items())
        words = run.stdout.split("level", 1)[1].split()
        used[run_name] = words[0]
        if words[0] != "sse2" and words[0] != "portable":  # the override is honoured
            assert words[2] == run_env["JLC_PDEP"], (run_name, run.stdout)
    return names, cases, results, used


@pytest.mark.parametrize("run_name", list(RUNS)[1:])
def test_levels_write_identical_frames_and_values(per_level, run_name):
    names, _, results, used = per_level
    level = RUNS[run_name]["JLC_SIMD"]
    if used["sse2"] != "sse2":
        pytest.skip(f"no x86 kernel levels here (the handlers run {used['sse2']} code)")
    if used[run_name] != level:  # the CPU lacks it: the comparison would test nothing new
        pytest.skip(f"this CPU runs JLC_SIMD={level} as {used[run_name]}")
    base, other = results["sse2"], results[run_name]
    assert base.keys() == other.keys()
    for k in sorted(base):
        case, codec, what = k.split("|")
        np.testing.assert_array_equal(
            other[k],
            base[k],
            err_msg=f"{what} differ: {names[case]} codec={codec} {run_name} vs sse2",
        )


def test_cases_reach_the_hand_overs(per_level):
    """The crafted inputs do what they are for (else the comparison above proves little)."""
    names, cases, results, _ = per_level
    by_name = {n: c for c, n in names.items()}
    r = results["sse2"]

    def info(name, codec="fixed"):
        c = by_name[name]
        return jlc.frame_info(r[f"{c}|{codec}|frames"][None], r[f"{c}|{codec}|nbytes"][None])[0]

    mid = info("midpoints")
    assert mid.form == "quantized" and _near_ties(cases["midpoints"][0], mid.eb_abs) > 1000
    assert info("specials_in_prefix").n_outliers == 80
    many = info("many_outliers")
    assert many.form == "quantized" and many.n_outliers >= 300
    assert info("capacity_tight").form in ("raw", "overflow")
    assert info("wide_codes").bits > 8
    for b in range(1, 9):
        assert info(f"bits{b}").bits == b and info(f"bits{b}").n_outliers == 0, b
    for name, (x, _eb, _) in cases.items():  # the bound holds wherever values were quantized
        c = by_name[name]
        for codec in CODECS:
            st = r[f"{c}|{codec}|status"]
            if int(r[f"{c}|{codec}|nbytes"]) < 0:
                assert int(st) == frame.STATUS_OVERFLOW
                continue
            assert int(st) == 0, (name, codec)
            v = r[f"{c}|{codec}|values"].view(np.float32).astype(np.float64)
            fin = np.isfinite(x)
            eb_abs = info(name, codec).eb_abs or 0.0
            assert np.all(np.abs(v[fin] - x[fin].astype(np.float64)) <= eb_abs), (name, codec)
            np.testing.assert_array_equal(np.isnan(v), np.isnan(x))
            np.testing.assert_array_equal(v[np.isinf(x)], x[np.isinf(x)])


def _cpu_vendor_family() -> tuple[str, int] | None:
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return None
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in info.splitlines()[:30])
    )
    if "vendor_id" not in fields or "cpu family" not in fields:
        return None
    return fields["vendor_id"], int(fields["cpu family"])


def test_pext_pdep_off_where_microcoded():
    """AMD family 17h (Zen 1/2) and Hygon 18h run pext/pdep in microcode, which made the
    fixed-rate form 2.6x / 5x slower to compress / decompress there than the portable
    shifts: the default leaves them out on those CPUs only; JLC_PDEP overrides."""
    from jax_lossy_comm import _ext

    vf = _cpu_vendor_family()
    if vf is None or _ext.simd_level() not in ("avx2", "avx512") or "JLC_PDEP" in os.environ:
        pytest.skip("needs an x86 CPU with AVX2 + BMI2, /proc/cpuinfo and no JLC_PDEP set")
    slow = vf in (("AuthenticAMD", 0x17), ("HygonGenuine", 0x18))
    assert _ext.simd_pdep() is (not slow), vf
