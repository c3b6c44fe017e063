"""Per-kernel report of the compiled CUDA codec, without a GPU: registers, shared memory,
spills, resident blocks per SM, and the global loads of every loop in the SASS.

Compiles ``xla_ffi/codec_cuda.cu`` to a cubin per architecture with the build's flags
(``CMakeLists.txt``: ``-O3 -fmad=false --expt-relaxed-constexpr``), reads ptxas's resource
usage (``-Xptxas -v``) and disassembles the cubin with ``nvdisasm`` (from the CUDA toolkit or
the ``nvidia-cuda-nvdisasm`` wheel). A loop is a backward branch and the code between its target
and it; for each kernel the report gives the loop with the most 128-bit global loads
(``LDG.E.128``) and, for comparison, the loads of every width in all its loops. Resident blocks
per SM follow ``occupancy_blocks`` in ``xla_ffi/cuda_launch.h`` with the limits of an H100/H200
(sm_90) or an A100 (sm_80); on the DLRM exchange shape (208 chunks of 4 tiles) the grid gives
each SM 208 / SMs blocks on average whatever the occupancy, except decompress and the
multi-block fixed-rate encoder, which spread a chunk over up to 8 blocks, one per half tile at
most (cuda_launch.h decode_parts / encode_parts): 1664 work items, so the resident blocks bound
the grid (``exchange blocks/SM``; ``exchange warps/SM`` = that x 4 warps, the issue's 8 blocks'
worth being 32).

Usage::

    python tools/sass_report.py                 # sm_80 and sm_90, Markdown on stdout
    python tools/sass_report.py --arch 90 --json report.json

Exit status 1 when the compiler or nvdisasm is missing or the build fails.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "xla_ffi" / "codec_cuda.cu"
THREADS = 128  # lc::gpu::kThreads

#: Per-SM limits (CUDA programming guide, compute capabilities table) and SM counts.
LIMITS = {
    "80": dict(sms=108, threads=2048, blocks=32, regs=65536, smem=167936, reserved=1024),
    "90": dict(sms=132, threads=2048, blocks=32, regs=65536, smem=233472, reserved=1024),
}
EXCHANGE_CHUNKS = 8 * 26  # DLRM exchange: 8 peers x 26 tables of [256, 64]
EXCHANGE_UNITS = 256 * 64 // 2048  # half tiles (lc::gpu::kUnit values) per chunk
MAX_PARTS = 8  # cuda_launch.h kMaxDecodeParts / kMaxEncodeParts

KERNEL = re.compile(r"lc3gpu(\d+)(\w+?_kernel)ILi(\d)E(?:Lb(\d)E)?")
DTYPES = {"0": "f32", "1": "bf16", "2": "f16"}


def pretty(mangled: str) -> str:
    """``encode_fixed_kernel<f32>`` from a mangled name."""
    m = KERNEL.search(mangled)
    if not m:
        return mangled
    name = m.group(2)
    args = DTYPES[m.group(3)]
    if m.group(4) is not None:
        args += ", write" if m.group(4) == "1" else ", status"
    return f"{name}<{args}>"


def find_nvdisasm() -> str | None:
    found = shutil.which("nvdisasm")
    if found:
        return found
    nvcc = shutil.which("nvcc")
    candidates = [Path(nvcc).resolve().parent / "nvdisasm"] if nvcc else []
    for entry in sys.path:
        candidates += sorted(Path(entry).glob("nvidia/cu*/bin/nvdisasm"))
        candidates += sorted(Path(entry).glob("nvidia/cuda_nvdisasm/bin/nvdisasm"))
    return next((str(c) for c in candidates if c.is_file()), None)


def ffi_include() -> str:
    import jax.ffi

    return jax.ffi.include_dir()


def compile_cubin(arch: str, out: Path) -> dict[str, dict]:
    """Builds the cubin; returns ptxas's resource usage per mangled kernel name."""
    cmd = [
        "nvcc", "-std=c++17", "-O3", "-fmad=false", "--expt-relaxed-constexpr",
        f"-arch=sm_{arch}", "-cubin", "-Xptxas", "-v", f"-I{ffi_include()}",
        f"-I{ROOT / 'xla_ffi'}", str(SOURCE), "-o", str(out),
    ]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"nvcc failed for sm_{arch}:\n{run.stderr[-3000:]}")
    usage: dict[str, dict] = {}
    current = None
    for line in run.stderr.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            current = usage.setdefault(m.group(1), {})
            continue
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = usage.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        m = re.search(
            r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line
        )
        if m:
            current.update(
                stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3))
            )
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            current["smem"] = int(s.group(1)) if s else 0
    return {k: v for k, v in usage.items() if "_kernel" in k and "regs" in v}


def loops_of(sass: str) -> dict[str, list[dict]]:
    """Loops (backward branches) of every function with their global loads by width."""
    funcs: dict[str, list[tuple[int, str]]] = {}
    labels: dict[str, dict[str, int]] = {}
    name = None
    for line in sass.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            name = m.group(1)
            funcs[name], labels[name] = [], {}
            pending: list[str] = []
            continue
        if name is None:
            continue
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            addr = int(m.group(1), 16)
            for label in pending:
                labels[name][label] = addr
            pending = []
            funcs[name].append((addr, m.group(2)))
    result = {}
    for fn, insts in funcs.items():
        loops = []
        for addr, text in insts:
            b = re.search(r"\bBRA\b.*?`?\(?(\.L_x_\d+)", text)
            if not b or b.group(1) not in labels[fn]:
                continue
            start = labels[fn][b.group(1)]
            if start >= addr:
                continue
            body = [t for a, t in insts if start <= a <= addr]
            widths: dict[str, int] = {}
            for t in body:
                # LDG: global loads; LD: generic loads (global unless the pointer is local or
                # shared), counted apart as "generic".
                g = re.search(r"\b(LDG|LD)\.E(\.\w+)*", t)
                if g:
                    w = re.search(r"\.(128|64|U16|S16|U8|S8)\b", g.group(0))
                    key = (w.group(1) if w else "32") + (" generic" if g.group(1) == "LD" else "")
                    widths[key] = widths.get(key, 0) + 1
            if widths:
                loops.append(dict(start=start, end=addr, insts=len(body), ldg=widths))
        result[fn] = loops
    return result


def occupancy(lim: dict, regs: int, smem: int) -> int:
    """xla_ffi/cuda_launch.h occupancy_blocks: registers per warp in units of 256 from each of
    the SM's 4 sub-partitions, shared memory in units of 128 bytes plus the reservation."""
    warps = math.ceil(THREADS / 32)
    b = min(lim["blocks"], lim["threads"] // (32 * warps))
    regs_warp = math.ceil(regs * 32 / 256) * 256
    if regs_warp:
        b = min(b, (lim["regs"] // 4 // regs_warp) * 4 // warps)
    s = math.ceil(smem / 128) * 128 + lim["reserved"]
    b = min(b, lim["smem"] // s)
    return max(b, 1)


def report(arch: str, nvdisasm: str, tmp: Path) -> list[dict]:
    cubin = tmp / f"sm_{arch}.cubin"
    usage = compile_cubin(arch, cubin)
    sass = subprocess.run(
        [nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True
    ).stdout
    loops = loops_of(sass)
    lim = LIMITS[arch]
    rows = []
    for fn, u in sorted(usage.items(), key=lambda kv: pretty(kv[0])):
        fl = loops.get(fn, [])
        best = max(fl, key=lambda lp: (lp["ldg"].get("128", 0), -lp["insts"]), default=None)
        widths: dict[str, int] = {}
        for lp in fl:
            for k, v in lp["ldg"].items():
                widths[k] = widths.get(k, 0) + v
        occ = occupancy(lim, u["regs"], u["smem"])
        # cuda_launch.h decode_parts / encode_parts: decompress and the fixed-rate encoder
        # spread a chunk over several blocks (up to 8, one per half tile at most; the
        # encoder's parts records fit the budget on this shape)
        parts = 1
        if ("decode_fast_kernel" in fn and "Lb1E" in fn) or "encode_fixed_parts_kernel" in fn:
            parts = min(math.ceil(lim["sms"] * occ / EXCHANGE_CHUNKS), EXCHANGE_UNITS, MAX_PARTS)
        grid = min(EXCHANGE_CHUNKS * parts, lim["sms"] * occ)
        exch = round(grid / lim["sms"], 1)
        rows.append(
            dict(
                arch=f"sm_{arch}",
                kernel=pretty(fn),
                regs=u["regs"],
                smem=u["smem"],
                spill_bytes=u.get("spill_stores", 0) + u.get("spill_loads", 0),
                blocks_per_sm=occ,
                warps_per_sm=occ * THREADS // 32,
                exchange_blocks_per_sm=exch,
                exchange_warps_per_sm=round(grid * THREADS / 32 / lim["sms"], 1),
                loop_ldg128=best["ldg"].get("128", 0) if best else 0,
                loop_insts=best["insts"] if best else 0,
                loop_ldg=widths,
            )
        )
    return rows


def markdown(rows: list[dict]) -> str:
    out = [
        "| arch | kernel | regs | smem (B) | spills (B) | blocks/SM | warps/SM | exchange blocks/SM (avg) "
        "| exchange warps/SM (avg) "
        "| 128-bit LDG in its best loop (loop size) | LDG in loops by width |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        w = ", ".join(f"{k}: {v}" for k, v in sorted(r["loop_ldg"].items()))
        out.append(
            f"| {r['arch']} | {r['kernel']} | {r['regs']} | {r['smem']} | {r['spill_bytes']} | "
            f"{r['blocks_per_sm']} | {r['warps_per_sm']} | {r['exchange_blocks_per_sm']} | "
            f"{r['exchange_warps_per_sm']} | "
            f"{r['loop_ldg128']} ({r['loop_insts']} instructions) | {w} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=["80", "90"], choices=sorted(LIMITS))
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    if not shutil.which("nvcc"):
        print("nvcc not found on PATH", file=sys.stderr)
        return 1
    nvdisasm = find_nvdisasm()
    if not nvdisasm:
        print("nvdisasm not found (pip install nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.arch:
            rows += report(arch, nvdisasm, Path(tmp))
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
