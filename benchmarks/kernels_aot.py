"""Compiles every Triton kernel for real GPUs without one, and reports registers, spills and main loops.

``triton.compile`` with an explicit ``GPUTarget`` runs the whole pipeline with no GPU, driver or vendor toolkit:
for NVIDIA to PTX, then ptxas to a cubin (ptxas and cuobjdump ship inside the triton wheel); for AMD to AMDGCN
assembly and an hsaco, by the LLVM inside the wheel. Each kernel is compiled at the block sizes and warp counts
its launcher uses (token_stats: the configs its autotuner can pick, ``fitting_configs``, for rows of 1000 and of
151936 logits, with the NVIDIA_FORMS its launcher passes on the target's vendor) for every target in TARGETS.

NVIDIA: registers, stack, shared and local memory from ``cuobjdump --dump-resource-usage``, spill bytes from the
ptxas log, the main loop from ``cuobjdump -sass``. AMD: VGPRs (``registers``), AGPRs, SGPRs, spilled VGPRs and
SGPRs, scratch and LDS bytes from the kernel's metadata in the AMDGCN text, the main loop from that text. The main
loop is the longest one (from the target of a branch back to it, through the branch), reported per logit for
token_stats: ROWS * BLOCK_V / (warp size * num_warps) logits a thread an iteration, at the warp size the backend
compiled for (64 lanes a wavefront on CDNA). Exits with status 1 on a compile error or on any spill, so it doubles
as a CI test (``tests/ops/test_kernels_compile.py``). The compiles run in os.cpu_count() processes.

    python benchmarks/kernels_aot.py [--targets sm_80,gfx942] [--out DIR]     # writes DIR/kernels-aot.json
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Before triton is imported: a fresh cache so that ptxas really runs (its log carries the spills),
# the compiler rather than the interpreter, and the fp-fusion default stated (triton 3.9 warns otherwise).
# The cache goes when the script ends: every CI run compiles anew, so a kept one only fills the disk. The worker
# processes are forked, so they share it, and only this process removes it.
os.environ.pop("TRITON_INTERPRET", None)
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="mia-fast-aot-")
os.environ["TRITON_ALWAYS_COMPILE"] = "1"
os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import argparse
import contextlib
import functools
import importlib
import io
import json
import multiprocessing
import re
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
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
NVIDIA_TARGETS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
AMD_TARGETS = ("gfx90a", "gfx942", "gfx950")
TARGETS = NVIDIA_TARGETS + AMD_TARGETS
VENDORS = {"cuda": "nvidia", "hip": "amd"}


def gpu_target(name: str) -> GPUTarget:
    """``sm_XY`` (an NVIDIA compute capability) or an AMD ``gfx`` arch as triton's target; AMD's at 64 lanes a
    wavefront, CDNA's (triton's hip backend takes the warp size from the arch: 64 before gfx10)."""
    if re.fullmatch(r"sm_\d+", name):
        return GPUTarget("cuda", int(name[3:]), 32)
    if re.fullmatch(r"gfx[0-9a-f]+", name):
        return GPUTarget("hip", name, 64)
    raise ValueError(f"unknown target {name!r}: sm_XY or gfxNNN")


@functools.cache
def cases(vendor: str) -> list[dict]:
    """(kernel, argument types, constexprs, num_warps) at every configuration the launchers use on vendor's GPUs."""
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
            for config in token_stats.fitting_configs(vocab):
                rows, block = config.kwargs["ROWS"], config.kwargs["BLOCK_V"]
                found.append(
                    dict(
                        kernel=kernel,
                        types=types,
                        constexprs={**config.kwargs, "NVIDIA_FORMS": vendor == "nvidia"},
                        integers={"row_stride": vocab, "vocab_size": vocab},
                        warps=config.num_warps,
                        stages=config.num_stages,
                        logits_per_block=rows * block,
                        config=f"{dtype} V={vocab} ROWS={rows} BLOCK_V={block}",
                    )
                )
    kernel = aggregate.BOTTOM_K_MEANS_KERNEL
    for n_ks in (1, 2, 4, 8, 10):  # 10: the default k's
        block_l, block_k = aggregate.bottom_k_blocks(n_ks, amd=vendor == "amd")
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


@dataclass(frozen=True)
class Instruction:
    opcode: str
    operands: tuple[str, ...]
    back_to: int | None = None  # a branch back to an earlier instruction: that instruction's index


def longest_loop(listing: list[Instruction]) -> list[Instruction]:
    """The longest loop of a listing: from the target of a branch back to it, through that branch."""
    loops = [
        listing[instruction.back_to : index + 1]
        for index, instruction in enumerate(listing)
        if instruction.back_to is not None
    ]
    return max(loops, key=len, default=[])


class ArchRefused(RuntimeError):
    """The wheel's cuobjdump and nvdisasm (CUDA 13.1) no longer read the cubin's arch (sm_70)."""


def _cuobjdump(cubin: bytes, option: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        result = subprocess.run([str(TOOLS / "cuobjdump"), option, f.name], capture_output=True, text=True)
    if result.returncode:
        raise (ArchRefused if "is deprecated" in result.stderr else RuntimeError)(result.stderr.strip())
    return result.stdout


SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
SASS_BRANCH_TARGET = re.compile(r"(?:`\()?(?:\.L_x_\d+|0x([0-9a-f]+))\)?")


def sass(cubin: bytes) -> list[Instruction]:
    """The instructions of the cubin, from ``cuobjdump -sass``; a branch to an earlier address marks its target
    (the branch's last operand: sm_100 and sm_120 write ``BRA.U UP0, 0x730``)."""
    found = SASS_LINE.findall(_cuobjdump(cubin, "-sass"))
    index_at = {int(address, 16): index for index, (address, _, _) in enumerate(found)}
    listing = []
    for address, opcode, operand_text in found:
        operands = tuple(o.strip() for o in operand_text.split(",") if o.strip())
        target = SASS_BRANCH_TARGET.fullmatch(operands[-1]) if opcode.startswith("BRA") and operands else None
        back = target is not None and target.group(1) is not None and int(target.group(1), 16) <= int(address, 16)
        listing.append(Instruction(opcode, operands, index_at[int(target.group(1), 16)] if back else None))
    return listing


AMDGCN_LABEL = re.compile(r"([.\w$]+):")
AMDGCN_INSTRUCTION = re.compile(r"\s+([a-z][a-z0-9_]*)\b([^;]*)")


def amdgcn(text: str) -> list[Instruction]:
    """The instructions of AMDGCN assembly (not labels, directives or comments); a branch (``s_branch``,
    ``s_cbranch_*``) to a label above it marks the instruction after that label."""
    label_at: dict[str, int] = {}
    listing = []
    for line in text.splitlines():
        if label := AMDGCN_LABEL.match(line):
            label_at[label.group(1)] = len(listing)
        elif instruction := AMDGCN_INSTRUCTION.match(line):
            opcode = instruction.group(1)
            operands = tuple(o.strip() for o in instruction.group(2).split(",") if o.strip())
            branch = opcode.startswith(("s_branch", "s_cbranch_")) and operands
            listing.append(Instruction(opcode, operands, label_at.get(operands[0]) if branch else None))
    return listing


def _registers(operand: str, width: int = 1) -> set[int]:
    found = set()
    for number, wide in re.findall(r"\bR(\d+)(\.64)?\b", operand):
        found.update(range(int(number), int(number) + (2 if wide else width)))
    return found


def loads_ahead(loop: list[Instruction]) -> bool:
    """Whether a SASS loop's global loads are in flight ahead of their use: each copies to shared memory (LDGSTS,
    cp.async) or its result is read by no later instruction of the same iteration (a prefetch for the next)."""
    loads = [i for i, instruction in enumerate(loop) if instruction.opcode.split(".")[0] in ("LDG", "LDGSTS")]
    for i in loads:
        opcode, operands = loop[i].opcode, loop[i].operands
        if opcode.startswith("LDGSTS"):
            continue
        bits = int(re.search(r"\.(\d+)$", opcode).group(1)) if re.search(r"\.(64|128)$", opcode) else 32
        loaded = _registers(operands[0], bits // 32)
        if any(loaded & _registers(operand) for later in loop[i + 1 :] for operand in later.operands[1:]):
            return False
    return bool(loads)


def nvidia_report(compiled, ptxas_log: str) -> tuple[dict, list[Instruction] | None]:
    """Resources and spills, and the main loop where the wheel's tools can list the SASS (None where not: the row
    says why in ``sass_refused``)."""
    listing = _cuobjdump(compiled.asm["cubin"], "--dump-resource-usage")
    usage = {key.lower(): int(value) for key, value in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", listing)}
    spilled = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas_log)
    if spilled is None:
        raise RuntimeError(f"no ptxas report in the compile log:\n{ptxas_log}")
    report = {
        "registers": usage["reg"],
        "stack_bytes": usage["stack"],
        "shared_bytes": usage["shared"],
        "spills": {
            "store_bytes": int(spilled.group(1)),
            "load_bytes": int(spilled.group(2)),
            "local_bytes": usage["local"],
        },
    }
    try:
        loop = longest_loop(sass(compiled.asm["cubin"]))
    except ArchRefused as refusal:
        return report | {"sass_refused": str(refusal)}, None
    return report | {"loads_ahead": loads_ahead(loop)}, loop


AMDGCN_NOTE = re.compile(r"^[\s-]+\.(\w+):\s+(\d+)\s*$", re.MULTILINE)


def amd_report(compiled) -> tuple[dict, list[Instruction]]:
    """Registers, LDS, spills and scratch from the kernel's metadata in the AMDGCN text, and its main loop."""
    text = compiled.asm["amdgcn"]
    notes = {key: int(value) for key, value in AMDGCN_NOTE.findall(text)}
    report = {
        "registers": notes["vgpr_count"],
        "vgprs": notes["vgpr_count"],
        "agprs": notes["agpr_count"],
        "sgprs": notes["sgpr_count"],
        "shared_bytes": notes["group_segment_fixed_size"],
        "spills": {
            "vgprs": notes["vgpr_spill_count"],
            "sgprs": notes["sgpr_spill_count"],
            "scratch_bytes": notes["private_segment_fixed_size"],
        },
    }
    return report, longest_loop(amdgcn(text))


def compile_case(case: dict, target_name: str) -> dict:
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
    target = gpu_target(target_name)
    log = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(
            ASTSource(fn=kernel, signature=signature, constexprs=case["constexprs"], attrs=aligned),
            target=target,
            options=options,
        )
    seconds = time.perf_counter() - started
    report, loop = nvidia_report(compiled, log.getvalue()) if target.backend == "cuda" else amd_report(compiled)
    row = {
        "kernel": kernel.__name__,
        "arch": target_name,
        "vendor": VENDORS[target.backend],
        "config": case["config"],
        "num_warps": case["warps"],
        **report,
    }
    if loop is not None:
        row["loop_instructions"] = len(loop)
        if "logits_per_block" in case:
            logits_per_thread = case["logits_per_block"] / (compiled.metadata.warp_size * case["warps"])
            row["instructions_per_logit"] = round(len(loop) / logits_per_thread, 2)
    row["compile_seconds"] = round(seconds, 2)
    return row


def compile_job(job: tuple[int, str]) -> dict | str:
    """A row, or what failed: a compile error of any kind is the finding."""
    index, target_name = job
    case = cases(VENDORS[gpu_target(target_name).backend])[index]
    try:
        return compile_case(case, target_name)
    except Exception as exc:
        return f"{case['kernel'].__name__} {target_name} {case['config']}: {type(exc).__name__}: {exc}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(TARGETS), help="e.g. sm_80,gfx942 (default: TARGETS, all)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for kernels-aot.json")
    args = parser.parse_args()
    targets = args.targets.split(",")
    for name in targets:
        gpu_target(name)
    uncovered = kernel_names() - {c["kernel"].__name__ for c in cases("nvidia")}
    if uncovered:
        print(f"kernels without an AOT case: {sorted(uncovered)}", file=sys.stderr)
        return 1
    jobs = [(index, name) for index in range(len(cases("nvidia"))) for name in targets]
    rows, failures = [], []
    print(
        f"{'kernel':<28} {'arch':<6} {'config':<40} {'warps':>5} {'regs':>5} {'spill':>5} "
        f"{'loop':>5} {'/logit':>6} {'ahead':>5} {'s':>5}"
    )
    # Forked before any compile: the workers inherit the environment above, the cache folder and the cases.
    with ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("fork")) as pool:
        for row in pool.map(compile_job, jobs):
            if isinstance(row, str):
                failures.append(row)
                continue
            rows.append(row)
            spilled = sum(row["spills"].values())
            print(
                f"{row['kernel']:<28} {row['arch']:<6} {row['config']:<40} {row['num_warps']:>5} "
                f"{row['registers']:>5} {spilled:>5} {row.get('loop_instructions', '-'):>5} "
                f"{row.get('instructions_per_logit', ''):>6} {row.get('loads_ahead', '-')!s:>5} "
                f"{row['compile_seconds']:>5}",
                flush=True,
            )
            if spilled:
                failures.append(f"{row['kernel']} {row['arch']} {row['config']}: spills {row['spills']}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "kernels-aot.json"
    path.write_text(json.dumps({"triton": triton.__version__, "rows": rows, "failures": failures}, indent=1) + "\n")
    print(f"wrote {path}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
