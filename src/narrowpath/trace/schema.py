"""The one copy of the Kineto (PyTorch profiler) trace schema narrowpath reads, and how names are classified.

Kineto writes Chrome-trace events: `ph` (phase, "X" = complete event), `cat`, `name`, `pid`, `tid`,
`ts` and `dur` in microseconds (with ns resolution as three decimals in newer versions), `args`.
GPU activities (`cat` kernel / gpu_memcpy / gpu_memset) carry `args.stream` and `args.correlation`, which
links them to the CUDA runtime/driver call that launched them (`cat` cuda_runtime / cuda_driver).
Collective metadata (`Collective name`, `In msg nelems`, `Out msg nelems`, `Group size`, `dtype`,
`Process Group Name`) sits on NCCL kernels (PyTorch >= 2.1) or on the `record_param_comms` CPU op.

Kernel classes follow Holistic Trace Analysis (HTA, hta/utils/utils.py, v0.5.0) exactly, so percentages
are comparable: communication = name matches `^nccl.*Kernel` (both `ncclKernel_*` and `ncclDevKernel_*`);
memory = `^Memcpy|^Memset|^dma`; computation = not `(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)`
(re.match semantics); everything else is "other".
"""
from __future__ import annotations

import re

SCHEMA_VERSION = 1
"""Version of this field mapping; bump when a field or a classification rule changes."""

# Event kinds kept in the activity table (int8 codes).
KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_HOST_OP, KIND_HOST_COMM, KIND_SYNC = 0, 1, 2, 3, 4, 5
GPU_CATEGORIES = {"kernel": KIND_KERNEL, "Kernel": KIND_KERNEL, "gpu_memcpy": KIND_MEMCPY,
                  "Memcpy": KIND_MEMCPY, "gpu_memset": KIND_MEMSET, "Memset": KIND_MEMSET,
                  "cuda_sync": KIND_SYNC}
"""`cuda_sync` ("Event Sync" on a stream: the stream waits for an event) counts as a device activity, as in
HTA's GPU-kernel filter (`_filter_gpu_kernels_with_cuda_sync`); its name matches `.*Sync`, so its class is
"other". Events on stream -1 ("Context Sync") are left out, as HTA's `stream != -1` does."""
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
HOST_OP_CATEGORIES = frozenset({"cpu_op", "Operator", "user_annotation"})
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
HOST_COMM_RE = re.compile(r"^(gloo|nccl|mpi|ucc|c10d)[:_]?.*(all_?reduce|all_?gather|reduce_?scatter|"
                          r"all_?to_?all|broadcast|send|recv|barrier|reduce)", re.IGNORECASE)
"""Host-side collective work (gloo worker-thread annotations such as `gloo:all_reduce`)."""
HOST_COMM_EXCLUDE_RE = re.compile(r"^c10d::")
"""`c10d::allreduce_` on the training thread only enqueues the collective; it is not the transfer."""

# HTA kernel types (hta/utils/utils.py).
CLASS_COMM, CLASS_MEMORY, CLASS_COMPUTE, CLASS_OTHER = 0, 1, 2, 3
CLASS_NAMES = ("communication", "memory", "computation", "other")
_NCCL_RE = re.compile(r"^nccl.*Kernel")
_MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def kernel_class(name: str) -> int:
    """HTA's `get_kernel_type`: communication, memory, computation or other (see module docstring)."""
    if _NCCL_RE.match(name):
        return CLASS_COMM
    if _MEMORY_RE.match(name):
        return CLASS_MEMORY
    if not _NOT_COMPUTE_RE.match(name):
        return CLASS_COMPUTE
    return CLASS_OTHER


def host_class(name: str) -> int:
    """Class of a host activity in a CPU-only trace: a gloo/MPI collective is communication, else compute."""
    if HOST_COMM_RE.match(name) and not HOST_COMM_EXCLUDE_RE.match(name):
        return CLASS_COMM
    return CLASS_COMPUTE


# Finer kernel categories for the kernel breakdown (first match wins).
KERNEL_CATEGORIES = (
    ("communication", re.compile(r"^nccl.*Kernel|^(gloo|mpi|ucc):", re.I)),
    ("memcpy", re.compile(r"^Memcpy|^dma")),
    ("memset", re.compile(r"^Memset")),
    # attention before gemm: fused attention kernels carry an architecture tag the gemm pattern takes (cuDNN's
    # `cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_...`), and cuDNN's backward helpers (dot(dO, O),
    # the dQ accumulator's conversion) are named for neither — seen in a PyTorch 2.11 SDPA trace on an H200
    # (benchmarks/data/h200/train_trace.json.gz). Named kernels only: FlashAttention-2 `flash_fwd_kernel` /
    # `flash_bwd_*`, FlashAttention-3 `FlashAttnFwdSm90`, `fmha_*`, TensorRT-LLM's `xqa_kernel`, Triton's
    # `_attn_fwd`, FlashInfer's Batch/Single attention kernels — not every name holding "flash" (FlashInfer's
    # CUTLASS segment GEMMs are GEMMs)
    ("attention", re.compile(r"flash_?(fwd|bwd|attn)|flash::|fmha|attention|sdpa|dot_do_o|convert_dq|xqa|"
                             r"_attn_(fwd|bwd)|flashinfer::(batch|single)", re.I)),
    # cuBLAS's Hopper/Blackwell kernels are `nvjet_sm90_tst_...` (the same trace); Inductor's GEMM templates
    # `triton_tem_fused_mm_...`. Not the `gemm` of `fbgemm`: FBGEMM-GPU's embedding, permute and FP8 quantise
    # kernels (`fbgemm_gpu::permute_2D_data_kernel`, and `fbgemm_gpu::` in the template arguments of
    # `split_embedding_backward_codegen_rowwise_adagrad_*`) are no GEMMs — 74.2 of the 108.55 ms counted as
    # gemm on pp-128rank-sampled-rank1 were theirs
    ("gemm", re.compile(r"(?<!fb)gemm|cutlass|xmma|cublas|nvjet|matmul|sm\d+_|triton_tem_|"
                        r"aten::(mm|addmm|bmm|matmul|linear)$", re.I)),
    ("convolution", re.compile(r"conv|wgrad|dgrad|fprop|implicit", re.I)),
    # before normalization: the foreach kernels of the update and of gradient clipping (`multi_tensor_apply_kernel
    # <... LpNormFunctor>`) are the optimizer's
    ("optimizer", re.compile(r"multi_tensor|adam|sgd|optimizer", re.I)),
    # GammaBetaBackward: the weight and bias gradients of PyTorch's layer / RMS norm
    ("normalization", re.compile(r"norm|bn_|batch_norm|layer_norm|rms|gammabeta", re.I)),
    ("reduction", re.compile(r"reduce|scan|sort|softmax", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|copy|fill|triton|aten::", re.I)),
)


def _lowered(pattern: re.Pattern) -> tuple[re.Pattern, bool]:
    """(pattern, whether to match it on the lower-cased name): a case-insensitive pattern becomes its lower-case
    case-sensitive twin (unless it holds an upper-case escape such as \\D, whose meaning lowering would change)."""
    if pattern.flags & re.IGNORECASE and not re.search(r"\\[A-Z]", pattern.pattern):
        return re.compile(pattern.pattern.lower()), True
    return pattern, False


_LOWERED_CATEGORIES = tuple((c, *_lowered(p)) for c, p in KERNEL_CATEGORIES)
"""KERNEL_CATEGORIES for ASCII names lower-cased once: case-insensitive matching over names of hundreds of
characters was most of the analyses' time on a real trace (tests/trace/test_fuzz.py holds the two equal)."""


def kernel_category(name: str) -> str:
    """Coarse category of a kernel (or host op) name for the kernel breakdown; "other" when none matches."""
    if not name.isascii():
        for category, pattern in KERNEL_CATEGORIES:
            if pattern.search(name):
                return category
        return "other"
    lowered = name.lower()
    for category, pattern, ignore_case in _LOWERED_CATEGORIES:
        if pattern.search(lowered if ignore_case else name):
            return category
    return "other"


# Collectives.
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                    "send_recv", "barrier", "unknown")
_KIND_PATTERNS = (
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
    ("all_reduce", re.compile(r"all_?reduce", re.I)),
    ("all_gather", re.compile(r"all_?gather", re.I)),
    ("all_to_all", re.compile(r"all_?to_?all", re.I)),
    ("broadcast", re.compile(r"broadcast", re.I)),
    ("send_recv", re.compile(r"send|recv", re.I)),
    ("barrier", re.compile(r"barrier", re.I)),
    ("reduce", re.compile(r"reduce", re.I)),
)


def collective_kind(text: str) -> str:
    """Normalise a `Collective name` arg, NCCL kernel name or gloo annotation to one of COLLECTIVE_KINDS."""
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(text):
            return kind
    return "unknown"


DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 4 * 2,
               "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
               "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
               "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16}
"""Bytes per element of the `dtype` arg of collectives (PyTorch scalar type names, lower-cased)."""


def dtype_bytes(dtype: object) -> int:
    """Bytes per element for a Kineto `dtype` arg; 0 when unknown (no bandwidth is then derived)."""
    return DTYPE_BYTES.get(str(dtype).lower(), 0) if dtype is not None else 0
