"""This machine, read in one place: the CPU's model and feature flags, cores, memory, GPUs, and the
versions of installed packages. Backends, the run's limits, environment.json, the summary and
`compare` all take their description of a machine from here."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil

CPUINFO = Path("/proc/cpuinfo")
UNKNOWN_MACHINE = "unknown machine"
# bfloat16 on an x86 CPU is oneDNN's (PyTorch's CPU kernels, and OpenVINO's), which has two thresholds
# (its `mayiuse` in cpu_isa_traits.hpp, and `has_data_type_support`):
# - it takes bfloat16 at all only on `avx512_core` (avx512f, avx512bw, avx512vl, avx512dq) or on `avx2_vnni_2`
#   (avx2, avx_vnni, avx_vnni_int8, avx_ne_convert); elsewhere PyTorch stops with "mkldnn_linear: bf16 path
#   needs the cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq";
# - it computes in bfloat16 natively on `avx512_core_bf16` (avx512_core with avx512_vnni and avx512_bf16; AMX's
#   amx_bf16 is built on it) and on `avx2_vnni_2` (AVX-NE-CONVERT loads bfloat16 directly); on a plain
#   avx512_core it converts in software, and bfloat16 is slower than float32 there.
# Linux keeps avx_vnni_int8 and avx_ne_convert out of /proc/cpuinfo (KVM-only features), so an AVX2 CPU with
# them is told "no native bfloat16": a cell left unsupported, never a oneDNN error.
BF16_DOT_FLAGS = ("avx512_bf16", "amx_bf16")
AVX512_CORE_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
BF16_AVX512_FLAGS = (*AVX512_CORE_FLAGS, "avx512_vnni", "avx512_bf16")
BF16_AVX2_FLAGS = ("avx2", "avx_vnni", "avx_vnni_int8", "avx_ne_convert")
BF16_CONVERT_FLAG = "avx_ne_convert"
# oneDNN's instruction sets, lowest first, as ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) names them: a cap keeps
# oneDNN off every set above it, its native bfloat16 paths (AVX2_VNNI_2, AVX512_CORE_BF16) included
ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16",
               "AVX10_1_512", "AVX512_CORE_FP16", "AVX10_1_512_AMX", "AVX512_CORE_AMX", "AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16")
ONEDNN_ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def cpu_model(cpuinfo: Path | None = None) -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else `platform`)."""
    for line in _cpuinfo_lines(cpuinfo):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags(cpuinfo: Path | None = None) -> set[str] | None:
    """The CPU's feature flags (the first `flags` line of /proc/cpuinfo), or None where there is no such file."""
    lines = _cpuinfo_lines(cpuinfo)
    if lines is None:
        return None
    for line in lines:
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _cpuinfo_lines(cpuinfo: Path | None) -> list[str] | None:
    try:
        return (CPUINFO if cpuinfo is None else cpuinfo).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None


def gpu_precision_reason(device: str, precision: str) -> str | None:
    """Why GPU `device` has no units of its own for `precision` (bfloat16, tf32): a compute capability before 8.0
    (Ampere), where torch emulates bfloat16 (`torch.cuda.is_bf16_supported()` counts that) and TF32 does not exist; None
    where it has them."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if major >= 8 and (precision != "bfloat16" or torch.cuda.is_bf16_supported(including_emulation=False)):
        return None
    return f"{device} has no {precision} units (compute capability {major}.{minor}; they came with 8.0, Ampere)"


def bfloat16_cpu_reason(flags: set[str] | None) -> str | None:
    """Why a CPU with feature `flags` has no native bfloat16 (a number measured there would be a slow
    emulation, or a oneDNN error), or None when it has it: the kit's one rule, oneDNN's `avx512_core_bf16`
    or `avx2_vnni_2` (see BF16_AVX512_FLAGS, BF16_AVX2_FLAGS)."""
    if flags is None:
        return "CPU flags unknown (no /proc/cpuinfo): bfloat16 support cannot be told"
    if set(BF16_AVX512_FLAGS) <= flags or set(BF16_AVX2_FLAGS) <= flags:
        return None
    present = sorted(flags & {*BF16_DOT_FLAGS, BF16_CONVERT_FLAG})
    if not present:
        return (
            f"this CPU has no bfloat16 instructions ({' or '.join(BF16_DOT_FLAGS)}, or {BF16_CONVERT_FLAG}): bfloat16 would be "
            + ("emulated, slower than float32" if set(AVX512_CORE_FLAGS) <= flags else "refused by oneDNN, or emulated slower than float32")
        )
    needed = BF16_AVX2_FLAGS if present == [BF16_CONVERT_FLAG] else BF16_AVX512_FLAGS
    missing = [flag for flag in needed if flag not in flags]
    return f"this CPU has {', '.join(present)} but not {', '.join(missing)}, which oneDNN's native bfloat16 path needs beside it"


def onednn_isa_cap_reason(flags: set[str], environ: dict[str, str] | None = None) -> str | None:
    """Why oneDNN may not use this CPU's native bfloat16 path though it has it: ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA)
    caps it below the set that path needs; None without a cap, or with one above it (an unknown value: oneDNN ignores it)."""
    environ = os.environ if environ is None else environ
    for variable in ONEDNN_ISA_VARIABLES:
        cap = environ.get(variable, "").upper()
        if cap not in ONEDNN_ISAS:
            continue
        native = ["AVX512_CORE_BF16"] if set(BF16_AVX512_FLAGS) <= flags else []
        native += ["AVX2_VNNI_2"] if set(BF16_AVX2_FLAGS) <= flags else []
        if all(ONEDNN_ISAS.index(cap) < ONEDNN_ISAS.index(isa) for isa in native):
            return f"{variable}={cap} keeps oneDNN below {' and '.join(native)}, its native bfloat16 path: bfloat16 would be emulated or refused"
    return None


def bfloat16_here_reason(cpuinfo: Path | None = None) -> str | None:
    """Why this machine's CPU, as oneDNN may use it, has no native bfloat16: its flags (`bfloat16_cpu_reason`),
    then a cap on oneDNN's instruction sets (`onednn_isa_cap_reason`); None when it runs bfloat16 natively. With
    `cpuinfo` (another CPU's description), its flags alone."""
    flags = cpu_flags(cpuinfo)
    capped = cpuinfo is None and flags is not None  # a cap in this process's environment holds for this machine's CPU only
    return bfloat16_cpu_reason(flags) or (onednn_isa_cap_reason(flags) if capped else None)


def cpu_class(flags: set[str] | None) -> str:
    """The kind of x86 CPU, as the kit's machines differ in speed: AMX, AVX512-BF16, AVX-512, AVX2 only."""
    flags = flags or set()
    for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2 only")):
        if flag in flags:
            return name
    return "no AVX2"


def affinity_cores() -> int | None:
    """The CPUs this process may run on (None where the system does not say)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def usable_cores() -> int:
    """The CPUs this process may run on, else the machine's count (at least 1)."""
    return affinity_cores() or os.cpu_count() or 1


def gpus() -> list[dict[str, str]]:
    """GPUs seen by nvidia-smi (name, memory, driver); empty without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    keys = ("name", "memory", "driver")
    return [dict(zip(keys, (part.strip() for part in line.split(",")))) for line in out.splitlines() if line.strip()]


def describe_machine() -> dict[str, Any]:
    """The `machine` section of environment.json."""
    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "affinity_cores": affinity_cores(),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpus(),
        "os": platform.platform(),
    }


def machine_label(environment: dict[str, Any], device: str) -> str:
    """A readable name for the hardware behind `device` in an environment.json's `machine`: the GPU's name
    on cuda, else the CPU, its cores and the machine's memory. Environments are compared only within one label."""
    machine = environment.get("machine") or {}
    if device.split(":")[0] == "cuda":
        found = machine.get("gpus") or []
        index = int(device.split(":")[1]) if ":" in device else 0
        if found:
            gpu = found[min(index, len(found) - 1)]
            return " ".join(str(part) for part in (gpu.get("name"), gpu.get("memory")) if part)
        return UNKNOWN_MACHINE
    cpu = " ".join(str(machine.get("cpu") or "").split())
    if not cpu:
        return UNKNOWN_MACHINE
    cores = machine.get("affinity_cores") or machine.get("logical_cores")
    memory = machine.get("memory_bytes")
    return ", ".join([cpu, *([f"{cores} cores"] if cores else []), *([f"{memory / 2**30:.0f} GiB"] if memory else [])])


def machine_description(environment: dict[str, Any]) -> str:
    """What makes two machines the same type, from an environment.json's `machine`: CPU model, cores,
    memory and GPUs ("AMD EPYC, 2 cores, 24 GiB, no GPU")."""
    machine = environment.get("machine") or {}
    cores, memory = machine.get("affinity_cores") or machine.get("logical_cores"), machine.get("memory_bytes")
    found = ", ".join(" ".join(str(gpu.get(key)) for key in ("name", "memory") if gpu.get(key)) for gpu in machine.get("gpus") or [])
    parts = [" ".join(str(machine.get("cpu") or "unknown CPU").split()), cores and f"{cores} cores", memory and f"{memory / 2**30:.0f} GiB", found or "no GPU"]
    return ", ".join(str(part) for part in parts if part)


def package_version(name: str) -> str | None:
    """Installed version of distribution `name`, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit(folder: Path) -> str | None:
    """The commit checked out in `folder`, if it is a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
