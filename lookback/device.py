"""Where and in what precision a model runs: device choice, autocast, CPU settings.

train.device: auto | cpu | cuda       auto takes the GPU when torch sees one
train.precision: auto | fp32 | bf16 | fp16   bf16/fp16 autocast the forward pass; fp16 (GPU
    only) scales the loss against underflow; auto is bf16 where the device runs it natively
    (a CUDA GPU that supports it, a CPU with avx512_bf16 or amx_bf16 that oneDNN may use), else fp32
decode.precision, and --device / --precision of every command that loads a model:
                                      the same for translating
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import shutil
from collections.abc import Iterator
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# oneDNN keeps a compiled kernel, with its own copy of the weights in bf16, for every
# tensor shape it has seen, up to 1,024 of them. Sentences give ever new shapes, so
# with bf16 on CPU the cache alone grew a run by gigabytes; 64 kernels cost no speed.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")


@contextlib.contextmanager
def gradients_in_eval_mode() -> Iterator[None]:
    """Gradients of a model in eval mode (dropout off), as the attention diagnostics and the
    attributions take them: cuDNN's RNN backward refuses to run outside training mode, so on a
    GPU these few passes use PyTorch's own RNN kernels instead (on a CPU nothing changes)."""
    with torch.enable_grad(), torch.backends.cudnn.flags(enabled=False):
        yield


def cores() -> int:
    """The CPU cores this process may use (Linux counts its affinity mask; others all cores)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_per_process() -> int:
    """train.threads 0 under torchrun: this machine's cores shared by its processes (0: torch's default)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, cores() // local) if local > 1 else 0


def resolve_device(name: str, setting: str = "train.device") -> torch.device:
    """The torch device of `name`; a clear error, naming `setting`, when CUDA is asked for but absent."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{setting} is 'cuda' but this torch sees no CUDA GPU; use 'auto' or 'cpu'")
    return torch.device(name)


def resolve_precision(device: torch.device, precision: str, setting: str = "train.precision") -> str:
    """`precision`, auto made bf16 where the device runs it natively and fp32 elsewhere (logged);
    fp16 needs a GPU; bf16 that the device would only emulate (2-20x slower) is a warning."""
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"{setting} fp16 needs a CUDA GPU; on a CPU use bf16 or fp32")
    native = native_bf16(device)
    why = f"this {device.type} {'runs' if native else 'has no'} native bf16"
    if device.type == "cpu" and _onednn_below_bf16():
        why += f" with ONEDNN_MAX_CPU_ISA={_onednn_max_isa()}"
    if precision == "auto":
        logger.info("%s auto: %s (%s)", setting, "bf16" if native else "fp32", why)
        return "bf16" if native else "fp32"
    if precision == "bf16" and not native:
        lacks = " (no avx512_bf16 or amx_bf16)" if device.type == "cpu" else ""
        logger.warning("%s bf16: %s%s, so it is emulated, 2-20x slower than fp32", setting, why, lacks)
    return precision


def resolve_compile(device: torch.device, compile: bool) -> bool:
    """train.compile as said; on a CPU, inductor builds C++: without a compiler that is refused in
    one line here, not by inductor's trace at the first update. Whether compiling pays is
    measured by `python -m bench compiled` (docs/performance.md)."""
    if compile and device.type == "cpu" and cpp_compiler() is None:
        raise ValueError(
            "train.compile true needs a C++ compiler on a CPU (none found: set CXX or install g++)"
        )
    return compile


def cpp_compiler() -> str | None:
    """The C++ compiler inductor's CPU backend would build with ($CXX, else g++, c++, clang++)."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    return next((path for name in names if (path := shutil.which(name))), None)


def native_bf16(device: torch.device) -> bool:
    """Does `device` run bf16 natively: a CUDA GPU that says so, a CPU with avx512_bf16 or amx_bf16?"""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return bool({"avx512_bf16", "amx_bf16"} & _cpu_flags()) and not _onednn_below_bf16()


def _onednn_below_bf16() -> bool:
    """Is oneDNN, which runs bf16 matrix products on a CPU, told to stay below the instructions
    that do them (ONEDNN_MAX_CPU_ISA=AVX2, say, to behave as a CPU without AVX-512 would)?"""
    isa = _onednn_max_isa().upper()
    return not (isa == "ALL" or "BF16" in isa or "AMX" in isa or isa.startswith("AVX10"))


def _onednn_max_isa() -> str:
    """oneDNN's instruction-set cap, as its environment variable sets it (ALL: none)."""
    return (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").strip()


def vnni() -> bool:
    """Does this CPU multiply int8 with VNNI (avx512_vnni or avx_vnni), summing byte products
    into 32 bits? Without it, x86 int8 kernels sum pairs of them into 16 bits first."""
    return bool({"avx512_vnni", "avx_vnni"} & _cpu_flags())


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The forward pass in bf16/fp16 where it is safe (matrix products), fp32 elsewhere.

    On a CPU whose oneDNN has no bf16 kernels (AVX2 only, or capped by ONEDNN_MAX_CPU_ISA),
    oneDNN's LSTM, which torch takes for a padded batch or one of equal lengths, refuses bf16
    ("could not create a primitive descriptor"): there torch's own LSTM runs instead, its
    products cast one by one, as a GRU's always are."""
    dtype = DTYPES.get(precision, torch.float32)
    cast = torch.autocast(device.type, dtype=dtype, enabled=precision in DTYPES)
    if device.type != "cpu" or precision != "bf16" or onednn_bf16():
        return cast
    return _without_onednn(cast)


@contextlib.contextmanager
def _without_onednn(cast: torch.autocast) -> Iterator[None]:
    was = torch.backends.mkldnn.enabled  # its flags() would set TF32 and determinism too
    torch.backends.mkldnn.enabled = False
    try:
        with cast:
            yield
    finally:
        torch.backends.mkldnn.enabled = was


def onednn_bf16() -> bool:
    """Does oneDNN have bf16 kernels on this CPU (AVX-512 with BW, VL and DQ, natively bf16 or
    not), uncapped? Where not, its LSTM refuses bf16 input."""
    if not torch.backends.mkldnn.is_available():
        return False
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and not _onednn_below_bf16()


SPEED_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
)


def cpu_flags() -> list[str]:
    """The CPU flags that decide fp32, bf16 and int8 speed on x86, of those this CPU has."""
    have = _cpu_flags()
    return [f for f in SPEED_FLAGS if f in have]


def kernels() -> str:
    """The vector instructions PyTorch's CPU kernels use in this process: "AVX512", "AVX2",
    "DEFAULT" ... An AVX-512 CPU run with ATEN_CPU_CAPABILITY=avx2 says AVX2 here while its
    flags still list avx512f, so a results file needs both."""
    return torch.backends.cpu.get_cpu_capability()


def machine() -> dict:
    """What a results file records of the machine that made it: the CPU, its flags, the kernels
    PyTorch uses on it, the threads."""
    return {
        "cpu": cpu_name(),
        "cpu_flags": cpu_flags(),
        "kernels": kernels(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def _cpu_flags() -> set[str]:
    """The CPU's flags as /proc/cpuinfo lists them (Linux), or none."""
    return set((_cpuinfo("flags") or "").split())


def _cpuinfo(key: str) -> str | None:
    """The first `key` line of /proc/cpuinfo (Linux), or None."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(key)), None)


def cpu_name() -> str:
    """The CPU's model name where the system tells it (Linux), else its architecture."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def describe(device: torch.device, precision: str) -> str:
    """One line for the log: which device, how many threads, which precision."""
    if device.type == "cuda":
        where = f"cuda ({torch.cuda.get_device_name(device)})"
    else:
        n = torch.get_num_threads()
        where = f"cpu ({cpu_name()}, {n} thread{'' if n == 1 else 's'}, {kernels()} kernels)"
    return f"device: {where}; precision: {precision}"


M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt(3)'s names for the two settings keep_freed_memory makes


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the memory training frees, for the next update to reuse. By
    default it maps each block of over 32 MB afresh and unmaps it when freed: an update's
    (tokens x V) logits, their log-probabilities and the additive scores' (T, B, S, A) tanh
    (35-45 MB each at 1,100 tokens and 8,000 words) then fault in every 4 kB page, zeroed by
    the system, on first touch, at up to 0.4 ms a MB on a 2-core EPYC: more than the arithmetic
    on them (docs/lab/performance.md, session 55). With mapping off and the heap's trim
    threshold out of reach, the process holds its peak and reuses it. Linux with glibc only;
    elsewhere it does nothing and returns False."""
    if platform.system() != "Linux":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # another C library (musl has no mallopt)
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def set_threads(n: int) -> None:
    """train.threads, per process; 0 under torchrun shares this machine's cores among its processes."""
    n = n or threads_per_process()
    if n:
        torch.set_num_threads(n)


def free_memory(device: torch.device) -> int:
    """Bytes this process can still allocate on `device`: the GPU's free memory, or the CPU's
    available memory (Linux's MemAvailable; elsewhere the free physical pages)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
