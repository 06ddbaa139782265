"""Compiles every Triton kernel for real GPUs without one, and reports registers and spills.

``triton.compile`` with an explicit ``GPUTarget`` runs the whole pipeline (TTIR, TTGIR, LLVM IR, PTX,
then ptxas to a cubin); ptxas and cuobjdump ship inside the triton wheel, so no GPU, driver or CUDA
install is needed. Each kernel is compiled at the block sizes and warp counts its launcher uses (token_stats:
every config of its autotune space, for rows of 1000 and of 151936 logits), for sm_80 (A100) and sm_90
(H100). Registers, stack and local memory come from ``cuobjdump --dump-resource-usage`` on the cubin, spill
bytes from the ptxas log. Exits with status 1 on a compile error or on any spill, so it doubles as a CI test
(``tests/test_kernels_compile.py``).

    python benchmarks/kernels_aot.py [--archs 80,90] [--out DIR]     # writes DIR/kernels-aot.json
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Before triton is imported: a fresh cache so that ptxas really runs (its log carries the spills),
# the compiler rather than the interpreter, and the fp-fusion default stated (triton 3.9 warns otherwise).
# The cache (30 MB) goes when the script ends: every CI run compiles anew, so a kept one only fills the disk.
os.environ.pop("TRITON_INTERPRET", None)
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="mia-fast-aot-")
os.environ["TRITON_ALWAYS_COMPILE"] = "1"
os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import argparse
import contextlib
import importlib
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

atexit.register(shutil.rmtree, os.environ["TRITON_CACHE_DIR"], ignore_errors=True)

# By module name: the package re-exports a function called token_stats.
aggregate = importlib.import_module("mia_fast.kernels.aggregate")
token_stats = importlib.import_module("mia_fast.kernels.token_stats")

RESULTS = Path(__file__).resolve().parent / "results"
TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def cases() -> list[dict]:
    """(kernel, argument types, constexprs, num_warps) at every configuration the launchers use."""
    found = []
    kernel = token_stats.TOKEN_STATS_KERNEL
    for dtype in ("bf16", "fp16", "fp32"):
        types = {
            "logits_ptr": f"*{dtype}",
            "row_stride": "i32",
            "targets_ptr": "*i64",
            "logp_ptr": "*fp32",
            "mu_ptr": "*fp32",
            "var_ptr": "*fp32",
            "max_logp_ptr": "*fp32",
            "n_rows": "i32",
            "vocab_size": "i32",
            "ignore_index": "i32",
            "rows_bucket": "i32",
        }
        for vocab in (1000, 151936):  # rows of 1000 are not 16-aligned, rows of 151936 are (vectorised loads)
            for config in token_stats.TOKEN_STATS_CONFIGS:
                rows, block = config.kwargs["ROWS"], config.kwargs["BLOCK_V"]
                found.append(
                    dict(
                        kernel=kernel,
                        types=types,
                        constexprs=config.kwargs,
                        integers={"row_stride": vocab, "vocab_size": vocab},
                        warps=config.num_warps,
                        stages=config.num_stages,
                        logits_per_thread=rows * block // (32 * config.num_warps),
                        config=f"{dtype} V={vocab} ROWS={rows} BLOCK_V={block}",
                    )
                )
    kernel = aggregate.BOTTOM_K_MEANS_KERNEL
    for n_ks in (1, 2, 4, 8, 10):  # 10: the default k's
        block_l, block_k = aggregate.bottom_k_blocks(n_ks)
        types = {
            "values_ptr": "*fp32",
            "offsets_ptr": "*i64",
            "counts_ptr": "*i64",
            "means_ptr": "*fp64",
            "n_ks": "i32",
        }
        found.append(
            dict(
                kernel=kernel,
                types=types,
                constexprs={"BLOCK_L": block_l, "BLOCK_K": block_k},
                warps=4,
                config=f"{n_ks} k's: BLOCK_L={block_l}, BLOCK_K={block_k}",
            )
        )
    kernel = aggregate.CAPPED_FIRST_MEAN_KERNEL
    types = {
        "ids_ptr": "*i64",
        "logp_ptr": "*fp32",
        "first_ptr": "*i8",
        "offsets_ptr": "*i64",
        "log_frequencies_ptr": "*fp64",
        "means_ptr": "*fp64",
        "cap": "fp32",
    }
    found.append(
        dict(
            kernel=kernel,
            types=types,
            constexprs={"BLOCK_L": aggregate.BLOCK_POSITIONS},
            warps=4,
            config=f"BLOCK_L={aggregate.BLOCK_POSITIONS}",
        )
    )
    return found


def kernel_names() -> set[str]:
    """Every kernel (a @triton.jit function named ``*_kernel``) in mia_fast.kernels."""
    return {
        name
        for module in (token_stats, aggregate)
        for name, value in vars(module).items()
        if isinstance(value, triton.runtime.JITFunction) and name.endswith("_kernel")
    }


def resource_usage(cubin: bytes) -> dict[str, int]:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        listing = subprocess.run(
            [str(TOOLS / "cuobjdump"), "--dump-resource-usage", f.name], check=True, capture_output=True, text=True
        ).stdout
    return {key.lower(): int(value) for key, value in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", listing)}


SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")


def sass(cubin: bytes) -> list[tuple[int, str, list[str]]]:
    """(address, opcode, operands) of each instruction in the cubin, from ``cuobjdump -sass``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        listing = subprocess.run(
            [str(TOOLS / "cuobjdump"), "-sass", f.name], check=True, capture_output=True, text=True
        ).stdout
    return [
        (int(address, 16), opcode, [o.strip() for o in operands.split(",") if o.strip()])
        for address, opcode, operands in SASS_LINE.findall(listing)
    ]


def _registers(operand: str, width: int = 1) -> set[int]:
    found = set()
    for number, wide in re.findall(r"\bR(\d+)(\.64)?\b", operand):
        found.update(range(int(number), int(number) + (2 if wide else width)))
    return found


def main_loop(instructions: list[tuple[int, str, list[str]]]) -> dict:
    """The longest loop (a branch back to an earlier address, through to it) of a SASS listing: its
    instruction count, and whether its loads are in flight ahead of their use: each global load either
    copies to shared memory (LDGSTS, cp.async) or its result is read by no later instruction of the same
    iteration (a prefetch for the next one)."""
    loops = []
    for index, (address, opcode, operands) in enumerate(instructions):
        target = re.fullmatch(r"(?:`\()?(?:\.L_x_\d+|0x([0-9a-f]+))\)?", operands[0]) if operands else None
        if opcode.startswith("BRA") and target and target.group(1) and int(target.group(1), 16) <= address:
            first = next(i for i, (a, _, _) in enumerate(instructions) if a == int(target.group(1), 16))
            loops.append(instructions[first : index + 1])
    if not loops:
        return {"loop_instructions": 0, "loads_ahead": False}
    body = max(loops, key=len)
    loads = [i for i, (_, opcode, _) in enumerate(body) if opcode.split(".")[0] in ("LDG", "LDGSTS")]
    ahead = bool(loads)
    for i in loads:
        opcode, operands = body[i][1], body[i][2]
        if opcode.startswith("LDGSTS"):
            continue
        bits = int(re.search(r"\.(\d+)$", opcode).group(1)) if re.search(r"\.(64|128)$", opcode) else 32
        loaded = _registers(operands[0], bits // 32)
        if any(loaded & _registers(operand) for _, _, later in body[i + 1 :] for operand in later[1:]):
            ahead = False
    return {"loop_instructions": len(body), "loads_ahead": ahead}


def spills(ptxas_log: str) -> dict[str, int]:
    found = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas_log)
    if found is None:
        raise RuntimeError(f"no ptxas report in the compile log:\n{ptxas_log}")
    return {"spill_stores": int(found.group(1)), "spill_loads": int(found.group(2))}


def compile_case(case: dict, arch: int) -> dict:
    kernel = case["kernel"]
    missing = set(kernel.arg_names) - set(case["types"]) - set(case["constexprs"])
    if missing:
        raise RuntimeError(f"{kernel.__name__} has arguments this script does not know: {sorted(missing)}")
    signature = {name: case["types"].get(name, "constexpr") for name in kernel.arg_names}
    # The launcher sees 16-byte-aligned torch allocations and specialises pointers on it, and integers on
    # being multiples of 16.
    aligned_names = [n for n, t in case["types"].items() if t.startswith("*")]
    aligned_names += [n for n, value in case.get("integers", {}).items() if value % 16 == 0]
    aligned = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned_names}
    options = {"num_warps": case["warps"]}
    if "stages" in case:
        options["num_stages"] = case["stages"]
    log = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(
            ASTSource(fn=kernel, signature=signature, constexprs=case["constexprs"], attrs=aligned),
            target=GPUTarget("cuda", arch, 32),
            options=options,
        )
    seconds = time.perf_counter() - started
    usage = resource_usage(compiled.asm["cubin"])
    loop = main_loop(sass(compiled.asm["cubin"]))
    if "logits_per_thread" in case:
        loop["instructions_per_logit"] = round(loop["loop_instructions"] / case["logits_per_thread"], 2)
    return {
        "kernel": kernel.__name__,
        "arch": f"sm_{arch}",
        "config": case["config"],
        "num_warps": case["warps"],
        "registers": usage["reg"],
        "stack_bytes": usage["stack"],
        "local_bytes": usage["local"],
        "shared_bytes": usage["shared"],
        **spills(log.getvalue()),
        **loop,
        "compile_seconds": round(seconds, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="80,90", help="compute capabilities, e.g. 80,90")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for kernels-aot.json")
    args = parser.parse_args()
    archs = [int(a) for a in args.archs.split(",")]
    all_cases = cases()
    uncovered = kernel_names() - {c["kernel"].__name__ for c in all_cases}
    if uncovered:
        print(f"kernels without an AOT case: {sorted(uncovered)}", file=sys.stderr)
        return 1
    rows, failures = [], []
    print(
        f"{'kernel':<28} {'arch':<6} {'config':<40} {'warps':>5} {'regs':>5} {'spills st/ld':>12} {'local':>6} "
        f"{'loop':>5} {'/logit':>6} {'ahead':>5} {'s':>5}"
    )
    for case in all_cases:
        for arch in archs:
            try:
                row = compile_case(case, arch)
            except Exception as exc:  # a compile error of any kind is the finding
                failures.append(f"{case['kernel'].__name__} sm_{arch} {case['config']}: {type(exc).__name__}: {exc}")
                continue
            rows.append(row)
            print(
                f"{row['kernel']:<28} {row['arch']:<6} {row['config']:<40} {row['num_warps']:>5} {row['registers']:>5} "
                f"{row['spill_stores']:>5}/{row['spill_loads']:<6} {row['local_bytes']:>6} "
                f"{row['loop_instructions']:>5} {row.get('instructions_per_logit', ''):>6} "
                f"{row['loads_ahead']!s:>5} {row['compile_seconds']:>5}"
            )
            if row["spill_stores"] or row["spill_loads"] or row["local_bytes"]:
                failures.append(f"{row['kernel']} {row['arch']} {row['config']}: spills to local memory")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "kernels-aot.json"
    path.write_text(json.dumps({"triton": triton.__version__, "rows": rows, "failures": failures}, indent=1) + "\n")
    print(f"wrote {path}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
