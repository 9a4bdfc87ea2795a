"""Measure one CUDA GPU the way the model prices it: GEMMs at transformer shapes (BF16, FP8), attention (training
flash/cuDNN, by head width; decode over a KV cache), element-wise kernels, a whole Llama-3-8B decode and prefill
step, a training step of a Llama-3-8B-shaped model with fewer layers (with its PyTorch profiler trace), MoE
training steps (one expert-parallel rank's layers: per-expert GEMMs behind the dispatcher's host sync, or one
grouped kernel) and the host's own costs (per issued kernel, per synchronisation).

Run on the GPU machine (nothing here is fitted; `benchmarks/heldout_h200.py` prices the same work with the model
and compares):

    python3 benchmarks/gpu_measure.py --out DIR [--budget-s 300]

Every section appends to DIR/gpu_measure.json as it finishes, so a run cut short keeps what it measured.
Timing: CUDA events around back-to-back launches after warm-up; each sample lasts at least `MIN_SAMPLE_S`; the
median of the samples is kept. `--smoke` runs every section at toy sizes on the CPU (a check of this script).
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

MIN_SAMPLE_S = 0.01
SAMPLES = 7

LLAMA3_8B = dict(hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128, vocab=128256, layers=32)
TRAINING_VARIANTS = [(8, 8192, 1, "flash"), (8, 4096, 2, None), (4, 16384, 1, None), (16, 2048, 4, None)]
"""(layers, sequence, micro-batch, SDPA backend) beside the main training step: FlashAttention-2 forced, and the
same tokens at other sequence lengths and depths."""
KERNEL_TABLE_PAIRS = {(1, 1024), (1, 8192), (32, 2048), (128, 2048), (256, 1024)}
MOE_RUNS = [("qwen3", 1, False, "moe_qwen3_mb1_trace"), ("qwen3", 4, False, "moe_qwen3_mb4_trace"),
            ("qwen3", 2, False, None), ("gpt-oss", 1, False, None), ("gpt-oss", 4, False, "moe_gptoss_mb4_trace"),
            ("qwen3", 1, True, None), ("qwen3", 4, True, None)]
"""(model, micro-batch, grouped kernel, trace name) of the MoE training steps: the per-expert GEMMs first (as
Transformer Engine's GroupedLinear), then one grouped kernel (`torch._grouped_mm`, no host sync)."""
GPT_OSS_FEATURES = [{"attn": "flex"}, {"attn": "flex", "window": 128, "window_every": 2},
                    {"attn": "flex", "window": 128, "window_every": 2, "sinks": True},
                    {"attn": "flex", "window": 128, "window_every": 2, "sinks": True, "expert_bias": True},
                    {"attn": "flex", "window": 128, "window_every": 2, "sinks": True, "expert_bias": True,
                     "clamped_glu": True}]
"""GPT-OSS's own features added one at a time to the GPT-OSS-shaped MoE step (micro-batch 4, one GEMM pair per
expert), all on FlexAttention so that the attention kernel stays the same: sliding windows of 128 tokens on every
other layer, learnable sinks, expert biases, the clamped GLU — what each costs on a real kernel."""
MOE_COMPILED_RUNS = [("qwen3", 1, "moe_qwen3_mb1_compiled_trace"), ("qwen3", 4, "moe_qwen3_mb4_compiled_trace"),
                     ("gpt-oss", 4, None), ("gpt-oss", 1, None), ("qwen3", 2, None)]
"""(model, micro-batch, trace name) of the compiled MoE steps (grouped kernel)."""
TOY = dict(hidden=64, ffn=128, heads=4, kv_heads=2, head_dim=16, vocab=256, layers=2)


class Run:
    def __init__(self, out: str, budget_s: float, smoke: bool):
        self.out, self.smoke = out, smoke
        self.dev = "cpu" if smoke else "cuda"
        self.deadline = time.monotonic() + budget_s
        self.result: dict = {"schema": "narrowpath-gpu-measure/1", "sections": {}}
        os.makedirs(out, exist_ok=True)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def save(self, name: str, rows) -> None:
        self.result["sections"][name] = rows
        with open(os.path.join(self.out, "gpu_measure.json"), "w") as f:
            json.dump(self.result, f, indent=1)
        print(f"[{name}] {len(rows) if hasattr(rows, '__len__') else ''} rows, {self.left_s():.0f} s left", flush=True)

    def sync(self) -> None:
        if self.dev == "cuda":
            torch.cuda.synchronize()

    def time_s(self, fn, samples: int = SAMPLES) -> float:
        """Median seconds per call of fn."""
        fn()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        one = max(time.perf_counter() - t0, 1e-6)
        reps = max(1, min(1000, math.ceil(MIN_SAMPLE_S / one)))
        if self.smoke:
            samples, reps = 2, 1
        out = []
        for _ in range(samples):
            if self.dev == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(reps):
                    fn()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b) / 1e3 / reps)
            else:
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn()
                out.append((time.perf_counter() - t0) / reps)
        return statistics.median(out)


def graph_time_s(run: Run, fn, calls: int = 20) -> float:
    """Seconds per call of fn replayed from a captured CUDA graph of `calls` back-to-back calls: the GPU's time
    for kernels too short to outrun the host's launches."""
    if run.dev != "cuda":
        return run.time_s(fn)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    t = run.time_s(g.replay) / calls
    del g
    return t


def gemm_graph(run: Run, m: dict) -> list:
    """The small-M GEMMs of `gemms` again, timed from CUDA graphs (decode's weight-streaming regime)."""
    h, f, hd = m["hidden"], m["ffn"], m["head_dim"]
    shapes = {"qkv": (h, (m["heads"] + 2 * m["kv_heads"]) * hd), "o": (m["heads"] * hd, h), "gate_up": (h, 2 * f),
              "down": (f, h), "lm_head": (h, m["vocab"])}
    ms = (1, 16) if run.smoke else (1, 8, 32, 64, 128, 256, 512, 1024)
    rows = []
    for dtype in ("bf16",) if run.smoke else ("bf16", "fp8"):
        for name, (k, n) in shapes.items():
            if run.left_s() < 60:
                break
            w = torch.randn(n, k, device=run.dev, dtype=torch.bfloat16) * 0.02
            w8 = w.to(torch.float8_e4m3fn) if dtype == "fp8" else None
            one = torch.ones((), device=run.dev, dtype=torch.float32)
            for M in ms:
                x = torch.randn(M, k, device=run.dev, dtype=torch.bfloat16)
                x8 = x.to(torch.float8_e4m3fn) if dtype == "fp8" else None
                try:
                    if dtype == "bf16":
                        fn = (lambda x=x, w=w: torch.matmul(x, w.t()))
                    else:
                        fn = (lambda x8=x8, w8=w8, one=one: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                                              out_dtype=torch.bfloat16))
                    t = graph_time_s(run, fn)
                    rows.append(dict(dtype=dtype, name=name, M=M, K=k, N=n, time_s=t,
                                     weight_tb_per_s=n * k * (1 if dtype == "fp8" else 2) / t / 1e12,
                                     tflops=2 * M * k * n / t / 1e12))
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(dtype=dtype, name=name, M=M, K=k, N=n, error=str(e).splitlines()[0][:200]))
    return rows


MOE_SHAPES = {  # (hidden, expert ffn, local experts): the first expert GEMM (gate and up fused: n = 2 x ffn)
    "deepseek-v3 ep64": (7168, 2048, 4), "qwen3-30b-a3b ep8": (2048, 768, 16), "gpt-oss-120b ep8": (2880, 2880, 16),
    "mixtral-8x7b ep8": (4096, 14336, 1)}
MOE_TOKENS = (16, 64, 256, 1024, 4096)
"""Rows (tokens) per local expert."""


def moe_gemm(run: Run) -> list:
    """The experts' first GEMM of one MoE layer on one GPU, E local experts with T rows each, BF16, timed from a CUDA
    graph two ways: one GEMM per expert (Transformer Engine's GroupedLinear issues one cuBLAS GEMM per expert) and
    one grouped kernel (`torch._grouped_mm`, CUTLASS grouped GEMM as Megatron-Core's `moe_grouped_gemm` runs)."""
    rows = []
    shapes = {"toy": (64, 32, 4)} if run.smoke else MOE_SHAPES
    for name, (h, f, E) in shapes.items():
        w = torch.randn(E, h, 2 * f, device=run.dev, dtype=torch.bfloat16) * 0.02
        wt = [w[e].t().contiguous() for e in range(E)]  # [2f, h] row-major, as nn.Linear holds it
        for T in ((4, 16) if run.smoke else MOE_TOKENS):
            if run.left_s() < 45:
                break
            x = torch.randn(E * T, h, device=run.dev, dtype=torch.bfloat16)
            xs = list(x.split(T))
            offs = torch.arange(T, E * T + 1, T, device=run.dev, dtype=torch.int32)
            row = dict(shape=name, hidden=h, ffn=f, experts=E, tokens_per_expert=T,
                       flop=2.0 * E * T * h * 2 * f, weight_bytes=E * h * 2 * f * 2)
            try:
                row["per_expert_s"] = graph_time_s(run, lambda: [torch.matmul(xe, we.t()) for xe, we in zip(xs, wt)],
                                                   calls=4)
            except Exception as e:  # noqa: BLE001
                row["per_expert_error"] = str(e).splitlines()[0][:200]
            try:
                row["grouped_s"] = graph_time_s(run, lambda: torch._grouped_mm(x, w, offs=offs), calls=8)
            except Exception as e:  # noqa: BLE001
                row["grouped_error"] = str(e).splitlines()[0][:200]
            rows.append(row)
        del w, wt
    return rows


def kernel_table(run: Run, fn) -> list:
    """GPU kernels of one call of fn (torch.profiler), summed by name: [name, count, total seconds]."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    run.sync()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.dev == "cuda" else [])
    with profile(activities=acts) as prof:
        fn()
        run.sync()
    table: dict = {}
    for e in prof.events():
        if run.dev == "cuda" and getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            name = e.name[:160]
            c = table.setdefault(name, [name, 0, 0.0])
            c[1] += 1
            c[2] += e.time_range.elapsed_us() / 1e6
    return sorted(table.values(), key=lambda r: -r[2])


def machine(run: Run) -> dict:
    info = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if run.dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, sms=p.multi_processor_count, memory_bytes=p.total_memory,
                    capability=f"{p.major}.{p.minor}")
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.max.sm,"
                                "clocks.max.mem", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            info["nvidia_smi"] = q.stdout.strip()
        except Exception as e:  # noqa: BLE001
            info["nvidia_smi"] = f"unavailable: {e}"
    return info


def gemms(run: Run, m: dict) -> list:
    """y[M,N] = x[M,K] · Wᵀ for the projections of Llama-3 8B (and 70B's tp-8 slices), M = tokens."""
    h, f, hd = m["hidden"], m["ffn"], m["head_dim"]
    shapes = {"qkv": (h, (m["heads"] + 2 * m["kv_heads"]) * hd), "o": (m["heads"] * hd, h), "gate_up": (h, 2 * f),
              "down": (f, h), "lm_head": (h, m["vocab"])}
    if not run.smoke:
        shapes.update({"70b_tp8_qkv": (8192, 1280), "70b_tp8_down": (3584, 8192), "70b_tp8_gate_up": (8192, 7168)})
    ms = (1, 16, 64) if run.smoke else (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    rows = []
    for dtype in ("bf16", "fp8"):
        for name, (k, n) in shapes.items():
            if run.left_s() < 60:
                break
            w = torch.randn(n, k, device=run.dev, dtype=torch.bfloat16) * 0.02
            if dtype == "fp8":
                if run.smoke:
                    continue
                w8 = w.to(torch.float8_e4m3fn)
                one = torch.ones((), device=run.dev, dtype=torch.float32)
            for M in ms:
                if name == "lm_head" and M > 8192:
                    continue
                x = torch.randn(M, k, device=run.dev, dtype=torch.bfloat16)
                try:
                    if dtype == "bf16":
                        fn = (lambda x=x, w=w: torch.matmul(x, w.t()))
                    else:
                        x8 = x.to(torch.float8_e4m3fn)
                        fn = (lambda x8=x8, w8=w8, one=one: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                                              out_dtype=torch.bfloat16))
                    t = run.time_s(fn)
                    rows.append(dict(dtype=dtype, name=name, M=M, K=k, N=n, time_s=t,
                                     tflops=2 * M * k * n / t / 1e12))
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(dtype=dtype, name=name, M=M, K=k, N=n, error=str(e).splitlines()[0][:200]))
                del x
            del w
    return rows


def _backends():
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def attention_training(run: Run, m: dict, seqs=None, backends=None) -> list:
    """Causal self-attention, forward and forward+backward, heads × head_dim of `m` (Llama-3 8B's; K/V expanded)."""
    from torch.nn.attention import sdpa_kernel
    H, D = m["heads"], m["head_dim"]
    seqs = (32, 64) if run.smoke else (seqs or (1024, 2048, 4096, 8192, 16384))
    rows = []
    for backend, bk in _backends().items():
        if (run.smoke and backend != "efficient") or (backends and not run.smoke and backend not in backends):
            continue
        for S in seqs:
            if run.left_s() < 60:
                break
            B = max(1, 16384 // S) if not run.smoke else 1
            q = torch.randn(B, H, S, D, device=run.dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(B, H, S, D, device=run.dev, dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(B, H, S, D, device=run.dev, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(B, H, S, D, device=run.dev, dtype=torch.bfloat16)
            flop_fwd = 4 * B * H * S * S * D / 2  # causal: half the score matrix
            row = dict(backend=backend, batch=B, heads=H, seq=S, head_dim=D, causal=True, flop_fwd=flop_fwd)
            try:
                with sdpa_kernel([bk]):
                    def fwd():
                        with torch.no_grad():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    row["fwd_s"] = run.time_s(fwd)

                    def fwdbwd():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        o.backward(g)
                        q.grad = k.grad = v.grad = None
                    row["fwd_bwd_s"] = run.time_s(fwdbwd)
                row["fwd_tflops"] = flop_fwd / row["fwd_s"] / 1e12
                row["bwd_tflops"] = 2.5 * flop_fwd / (row["fwd_bwd_s"] - row["fwd_s"]) / 1e12
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e).splitlines()[0][:200]
            rows.append(row)
    return rows


def decode_attention(q, kc, vc, groups: int):
    """One new token per sequence against its whole cache: the query heads of one KV head ride as query rows
    (the grouped-query decode layout), so each K/V byte is read once."""
    B, KV, L, D = kc.shape
    qg = q.view(B, KV, groups, D)
    return F.scaled_dot_product_attention(qg, kc, vc)


def attention_decode(run: Run, m: dict) -> list:
    KV, D, groups = m["kv_heads"], m["head_dim"], m["heads"] // m["kv_heads"]
    pairs = [(1, 64), (4, 128)] if run.smoke else [(1, 1024), (1, 8192), (1, 32768), (8, 4096), (32, 2048),
                                                   (64, 4096), (128, 1024), (128, 4096), (256, 2048)]
    rows = []
    for B, L in pairs:
        if run.left_s() < 60:
            break
        kc = torch.randn(B, KV, L, D, device=run.dev, dtype=torch.bfloat16)
        vc = torch.randn(B, KV, L, D, device=run.dev, dtype=torch.bfloat16)
        q = torch.randn(B, KV * groups, D, device=run.dev, dtype=torch.bfloat16)
        with torch.no_grad():
            t = run.time_s(lambda: decode_attention(q, kc, vc, groups))
        kv_bytes = 2 * B * KV * L * D * 2
        rows.append(dict(batch=B, context=L, kv_heads=KV, heads=KV * groups, head_dim=D, time_s=t, kv_bytes=kv_bytes,
                         tb_per_s=kv_bytes / t / 1e12))
        del kc, vc, q
    return rows


def elementwise(run: Run) -> list:
    n = 1 << 16 if run.smoke else 1 << 30  # elements: 2 GiB of bf16
    rows = []
    x = torch.randn(n, device=run.dev, dtype=torch.bfloat16)
    y = torch.randn(n, device=run.dev, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    cases = {
        "copy": (lambda: out.copy_(x), 2 * 2 * n),
        "add": (lambda: torch.add(x, y, out=out), 3 * 2 * n),
        "silu_mul": (lambda: torch.mul(F.silu(x), y, out=out), None),
        "cast_fp8": (lambda: x.to(torch.float8_e4m3fn), 3 * n),
    }
    rows_n = n // 4096
    xr = x[: rows_n * 4096].view(rows_n, 4096)
    wn = torch.ones(4096, device=run.dev, dtype=torch.bfloat16)
    cases["rms_norm_fused"] = (lambda: F.rms_norm(xr, (4096,), wn, 1e-5), 2 * 2 * xr.numel())

    def rms_eager():
        v = xr.float()
        return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16) * wn
    cases["rms_norm_eager"] = (rms_eager, 2 * 2 * xr.numel())
    for name, (fn, nbytes) in cases.items():
        if run.smoke and name == "cast_fp8":
            continue
        try:
            t = run.time_s(fn)
            rows.append(dict(name=name, elements=(xr.numel() if name.startswith("rms") else n), time_s=t,
                             bytes=nbytes, tb_per_s=(nbytes / t / 1e12) if nbytes else None))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(name=name, error=str(e).splitlines()[0][:200]))
    del x, y, out
    return rows


class Llama(torch.nn.Module):
    """Llama-3 layout with random weights: embedding, layers of RMSNorm → fused QKV → RoPE → attention → O → RMSNorm
    → fused gate/up → SiLU·mul → down, final norm, output layer."""

    def __init__(self, m: dict, layers: int, dev: str, dtype):
        super().__init__()
        h, f, H, KV, D = m["hidden"], m["ffn"], m["heads"], m["kv_heads"], m["head_dim"]
        self.m, self.L = m, layers
        p = lambda *s: torch.nn.Parameter(torch.randn(*s, device=dev, dtype=dtype) * 0.02)  # noqa: E731
        self.emb = p(m["vocab"], h)
        self.qkv = torch.nn.ParameterList([p((H + 2 * KV) * D, h) for _ in range(layers)])
        self.o = torch.nn.ParameterList([p(h, H * D) for _ in range(layers)])
        self.gu = torch.nn.ParameterList([p(2 * f, h) for _ in range(layers)])
        self.down = torch.nn.ParameterList([p(h, f) for _ in range(layers)])
        self.n1 = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(h, device=dev, dtype=dtype))
                                          for _ in range(layers)])
        self.n2 = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(h, device=dev, dtype=dtype))
                                          for _ in range(layers)])
        self.nf = torch.nn.Parameter(torch.ones(h, device=dev, dtype=dtype))
        self.head = p(m["vocab"], h)
        inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        self.register_buffer("inv_freq", inv, persistent=False)

    def rope(self, x, pos):
        """x [B, heads, T, D], pos [T] (or [B, 1] for decode)."""
        ang = pos.float()[..., None] * self.inv_freq
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        if cos.dim() == 3:  # decode: [B, 1, D/2] → [B, 1, 1, D/2]
            cos, sin = cos[:, None], sin[:, None]
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def block(self, i, x, attn):
        m = self.m
        H, KV, D = m["heads"], m["kv_heads"], m["head_dim"]
        B, T, h = x.shape
        a = F.rms_norm(x, (h,), self.n1[i], 1e-5)
        qkv = a @ self.qkv[i].t()
        q, k, v = qkv.split([H * D, KV * D, KV * D], dim=-1)
        a = attn(i, q.view(B, T, H, D).transpose(1, 2), k.view(B, T, KV, D).transpose(1, 2),
                 v.view(B, T, KV, D).transpose(1, 2))
        x = x + a.transpose(1, 2).reshape(B, T, H * D) @ self.o[i].t()
        a = F.rms_norm(x, (h,), self.n2[i], 1e-5)
        g, u = (a @ self.gu[i].t()).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ self.down[i].t()

    def forward_train(self, tokens, last_only: bool = False):
        """Causal forward over whole sequences; the output layer on every token, or on the last one
        (`last_only`: a serving engine's prefill)."""
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        groups = self.m["heads"] // self.m["kv_heads"]

        def attn(i, q, k, v):
            q, k = self.rope(q, pos), self.rope(k, pos)
            k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = F.embedding(tokens, self.emb)
        for i in range(self.L):
            x = self.block(i, x, attn)
        if last_only:
            x = x[:, -1:]
        return F.rms_norm(x, (x.shape[-1],), self.nf, 1e-5) @ self.head.t()

    def decode_step(self, tokens, pos, kcache, vcache):
        """tokens [B, 1]; pos [B, 1] (each sequence's next position); caches [layers, B, KV, Lmax, D]."""
        groups = self.m["heads"] // self.m["kv_heads"]
        B = tokens.shape[0]
        idx = pos.view(B, 1, 1, 1).expand(B, self.m["kv_heads"], 1, self.m["head_dim"])

        def attn(i, q, k, v):
            q, k = self.rope(q, pos), self.rope(k, pos)
            kcache[i].scatter_(2, idx, k)
            vcache[i].scatter_(2, idx, v)
            return decode_attention(q.reshape(B, -1, self.m["head_dim"]), kcache[i], vcache[i], groups).reshape(
                B, -1, 1, self.m["head_dim"])
        x = F.embedding(tokens, self.emb)
        for i in range(self.L):
            x = self.block(i, x, attn)
        return (F.rms_norm(x, (x.shape[-1],), self.nf, 1e-5) @ self.head.t()).argmax(-1)


def serving(run: Run, m: dict) -> dict:
    """Llama-3 8B, BF16 weights and KV cache, one GPU: decode steps (CUDA graph and eager) and prefill forwards."""
    torch.manual_seed(0)
    model = Llama(m, m["layers"], run.dev, torch.bfloat16)
    weights = sum(p.numel() for p in model.parameters()) * 2
    out = {"model": "llama3-8b (random weights)", "weight_bytes": weights, "decode": [], "prefill": []}
    pairs = [(1, 64), (2, 32)] if run.smoke else [(1, 1024), (1, 8192), (8, 2048), (32, 2048), (64, 2048),
                                                  (128, 1024), (128, 2048), (256, 1024)]
    KV, D = m["kv_heads"], m["head_dim"]
    with torch.no_grad():
        for B, L in pairs:
            if run.left_s() < 90:
                break
            kc = torch.randn(m["layers"], B, KV, L, D, device=run.dev, dtype=torch.bfloat16)
            vc = torch.randn_like(kc)
            tok = torch.randint(0, m["vocab"], (B, 1), device=run.dev)
            pos = torch.full((B, 1), L - 1, device=run.dev, dtype=torch.long)
            row = dict(batch=B, context=L, kv_bytes=kc.numel() * 2 * 2)
            eager = lambda: model.decode_step(tok, pos, kc, vc)  # noqa: E731
            if B == 1 or run.smoke:
                row["eager_s"] = run.time_s(eager, samples=3)
            if run.dev == "cuda":
                try:
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        for _ in range(2):
                            eager()
                    torch.cuda.current_stream().wait_stream(s)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        eager()
                    row["graph_s"] = run.time_s(graph.replay)
                    del graph
                except Exception as e:  # noqa: BLE001
                    row["graph_error"] = str(e).splitlines()[0][:200]
            if (B, L) in KERNEL_TABLE_PAIRS or run.smoke:
                try:
                    row["kernels"] = kernel_table(run, eager)
                except Exception as e:  # noqa: BLE001
                    row["kernels_error"] = str(e).splitlines()[0][:200]
            out["decode"].append(row)
            run.save("serving", out)
            del kc, vc
            if run.dev == "cuda":
                torch.cuda.empty_cache()
        for T in ((16, 32) if run.smoke else (128, 512, 2048, 8192)):
            if run.left_s() < 90:
                break
            tok = torch.randint(0, m["vocab"], (1, T), device=run.dev)
            # prefill as a serving engine runs it: the output layer on the last token only
            out["prefill"].append(dict(tokens=T, time_s=run.time_s(lambda tok=tok: model.forward_train(
                tok, last_only=True), samples=5)))
            run.save("serving", out)
    del model
    if run.dev == "cuda":
        torch.cuda.empty_cache()
    return out


def _profiled(run: Run, fn, name: str) -> dict:
    """One more call of fn under the PyTorch profiler, its trace gzipped to DIR/`name`.json.gz: {"trace": file} or
    {"trace_error": why}."""
    try:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.dev == "cuda" else [])
        with profile(activities=acts) as prof:
            fn()
            run.sync()
        path = os.path.join(run.out, f"{name}.json")
        prof.export_chrome_trace(path)
        with open(path, "rb") as a, gzip.open(path + ".gz", "wb") as b:
            shutil.copyfileobj(a, b)
        os.remove(path)
        return {"trace": f"{name}.json.gz"}
    except Exception as e:  # noqa: BLE001
        return {"trace_error": str(e).splitlines()[0][:200]}


def training(run: Run, m: dict, layers: int, seq: int = 8192, mb: int = 1, backend: str | None = None,
             trace: str | None = None, compiled: bool = False) -> dict:
    """A training step of a Llama-3-8B-shaped model with `layers` layers: FP32 master weights, BF16 autocast,
    PyTorch's SDPA (its default backend, or `backend`), no recompute, AdamW (fused), micro-batch `mb` at sequence
    `seq`; six steps, the median of the last four kept. `compiled`: the forward compiled by torch.compile (Inductor
    fuses the element-wise work — norms, rotary, activations, casts — as a fused training stack does; the first
    step's time, compilation included, is kept apart). `trace`: one more step profiled into DIR/`trace`.json.gz."""
    import contextlib
    torch.manual_seed(0)
    S = 32 if run.smoke else seq
    model = Llama(m, layers, run.dev, torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=(run.dev == "cuda"))
    tok = torch.randint(0, m["vocab"], (mb, S + 1), device=run.dev)
    if compiled:
        torch._dynamo.reset()  # each configuration compiled afresh, for its static shapes
    fwd = torch.compile(model.forward_train) if compiled else model.forward_train
    params = sum(p.numel() for p in model.parameters())
    res = {"model": f"llama3-8b shape, {layers} layers" + (", forward compiled" if compiled else ""),
           "layers": layers, "params": params, "seq": S, "micro_batch": mb, "attention_backend": backend or "default",
           "precision": "bf16 autocast, fp32 master weights and gradients, fused AdamW"}

    def ctx():
        if backend is None or run.smoke:
            return contextlib.nullcontext()
        from torch.nn.attention import sdpa_kernel
        return sdpa_kernel([_backends()[backend]])

    def step():
        with torch.autocast(run.dev, dtype=torch.bfloat16), ctx():
            logits = fwd(tok[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tok[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _time_steps(run, step, res, compiled)
    if trace:
        res.update(_profiled(run, step, trace))
    del model, opt
    return res


def host_costs(run: Run) -> dict:
    """What the host spends issuing work, in the terms of the calibration's `host_dispatch_s` (CPU time per kernel
    the framework issues) and `host_sync_s` (GPU idle per host synchronisation). Tiny tensors keep every kernel
    shorter than its launch, so the wall clock over many back-to-back calls is the host's time:

    - `eager_op_s`: one eager element-wise op (no autograd);
    - `autograd_fwd_op_s` / `autograd_bwd_op_s`: one element-wise op of a chain that records autograd history, and
      its backward (the autograd engine's C++ thread issues it);
    - `linear_fwd_s` / `linear_bwd_s`: one `torch.nn.Linear` module call under autograd (gradients cleared before
      each timed backward), with the kernels each launches counted by the profiler (`linear_fwd_kernels`,
      `linear_bwd_kernels`);
    - `sync_idle_s` / `tolist_idle_s`: GPU idle per `.item()` / 16-element `.tolist()` (Megatron-Core's all-to-all
      dispatcher copies its tokens-per-expert counts to the host this way), from the profiler: the gap between the
      last kernel before the sync and the first after it, in a loop whose work (~1.5 ms of 4,096² GEMMs a rep)
      keeps the GPU ahead of the host otherwise (one more GEMM after the last rep, so every sync has work after
      it); the same loop without the sync gives the gaps' floor."""
    dev = run.dev
    n = 200 if run.smoke else 4000
    x = torch.zeros(8, device=dev)
    out: dict = {"calls": n}

    def wall(fn) -> float:
        fn()
        run.sync()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            run.sync()
            best = min(best, time.perf_counter() - t0)
        return best
    out["eager_op_s"] = wall(lambda: [x.add_(1.0) for _ in range(n)]) / n
    leaf = torch.zeros(8, device=dev, requires_grad=True)

    def chain():
        y = leaf
        for _ in range(n):
            y = y * 1.0001
        return y
    out["autograd_fwd_op_s"] = wall(chain) / n

    def backward_s(forward, grads) -> float:
        """Best of three: the wall time of one backward of forward().sum(), the gradients in `grads` cleared first."""
        times = []
        for _ in range(3):
            y = forward().sum()
            for t in grads:
                t.grad = None
            run.sync()
            t0 = time.perf_counter()
            y.backward()
            run.sync()
            times.append(time.perf_counter() - t0)
        return min(times)
    out["autograd_bwd_op_s"] = backward_s(chain, [leaf]) / n
    m = n // 10
    lins = torch.nn.Sequential(*[torch.nn.Linear(64, 64, device=dev) for _ in range(m)])
    xin = torch.randn(4, 64, device=dev, requires_grad=True)  # every layer's backward computes its input gradient
    out["linear_fwd_s"] = wall(lambda: lins(xin)) / m
    out["linear_bwd_s"] = backward_s(lambda: lins(xin), [xin, *lins.parameters()]) / m
    one = torch.nn.Linear(64, 64, device=dev)
    out["linear_fwd_kernels"] = _busy(run, lambda: one(xin)).get("kernels")
    yy = [None]

    def bwd():
        one.zero_grad(set_to_none=True)
        xin.grad = None
        yy[0].backward()
    yy[0] = one(xin).sum()
    run.sync()
    out["linear_bwd_kernels"] = _busy(run, bwd).get("kernels")  # includes the sum's backward (one fill)
    k = 64 if run.smoke else 4096
    a = torch.randn(k, k, device=dev, dtype=torch.bfloat16 if dev == "cuda" else torch.float32)
    reps = 4 if run.smoke else 20
    work = 2 if run.smoke else 8  # 8 x 137 GFLOP: ~1.5 ms a rep on an H100-class GPU, far more than 8 launches

    def loop(sync: str):
        def fn():
            for _ in range(reps):
                for _ in range(work):
                    a @ a
                s = a[:4, :4].float().sum(0)
                c = torch.zeros(16, device=dev, dtype=torch.int64).add_(1)
                if sync == "item":
                    s[0].item()
                elif sync == "tolist":
                    c.tolist()
            a @ a  # work after the last sync: each rep's sync is followed by a GEMM whose start the gap ends at
        return fn
    out["work_per_rep_s"] = wall(loop("")) / reps
    for key, sync in (("sync_idle_s", "item"), ("tolist_idle_s", "tolist")):
        base, with_sync = _gaps(run, loop("")), _gaps(run, loop(sync))
        if base is not None:
            out[key] = (with_sync - base) / reps
            out[key.replace("_s", "_wall_s")] = (wall(loop(sync)) - wall(loop(""))) / reps
    return out


def _gaps(run: Run, fn) -> float | None:
    """Total idle time between consecutive GPU activities (kernels, copies) of one call of fn after a warm-up call:
    its span less its busy time (_busy); None on the CPU."""
    fn()
    run.sync()
    b = _busy(run, fn)
    return b["gpu_span_s"] - b["gpu_busy_s"] if b else None


QWEN3_30B_16E = dict(hidden=2048, heads=32, kv_heads=4, head_dim=128, vocab=151936, experts=16, top_k=8,
                     expert_ffn=768, layers=4)
"""Qwen3-30B-A3B's layer on one rank of its expert-parallel 8 recipe (128 experts / 8 = 16 local, each receiving
T/2 rows of a micro-batch of T tokens): here 16 experts, top-8, on one GPU — the same local GEMMs without the
all-to-all — and 4 layers."""
GPT_OSS_16E = dict(hidden=2880, heads=64, kv_heads=8, head_dim=64, vocab=201088, experts=16, top_k=4,
                   expert_ffn=2880, layers=4)
"""GPT-OSS-120B's layer on one rank of expert-parallel 8 (16 local experts, T/4 rows each), without its sinks,
sliding windows and biases."""
TOY_MOE = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=256, experts=4, top_k=2, expert_ffn=32, layers=2)


class _Permute(torch.autograd.Function):
    """Tokens into expert order, each of its k copies (as Transformer Engine's fused moe_permute): a gather forward,
    a gather and a sum over the k copies backward — no atomics."""

    @staticmethod
    def forward(ctx, x, order, inv, k):
        ctx.save_for_backward(inv)
        ctx.k = k
        return x.index_select(0, torch.div(order, k, rounding_mode="floor"))

    @staticmethod
    def backward(ctx, g):
        (inv,) = ctx.saved_tensors
        return g.index_select(0, inv).view(-1, ctx.k, g.shape[-1]).sum(1), None, None, None


class _Unpermute(torch.autograd.Function):
    """The experts' outputs back into token order, each copy weighted by its routing probability and summed (as
    Transformer Engine's fused moe_unpermute with probabilities): gathers forward and backward, no atomics."""

    @staticmethod
    def forward(ctx, ys, w, order, inv):
        T, k = w.shape
        back = ys.index_select(0, inv).view(T, k, -1)
        ctx.save_for_backward(back, w, order)
        return (back * w[..., None]).sum(1)

    @staticmethod
    def backward(ctx, g):
        back, w, order = ctx.saved_tensors
        T, k = w.shape
        src = torch.div(order, k, rounding_mode="floor")
        g_ys = g.index_select(0, src) * w.reshape(-1).index_select(0, order)[:, None]
        g_w = (back * g[:, None, :]).sum(-1)
        return g_ys, g_w, None, None


class MoELlama(torch.nn.Module):
    """A decoder of MoE layers as Megatron-Core runs one rank's share with its all-to-all dispatcher, in eager
    PyTorch: RMSNorm → fused QKV → RoPE → SDPA → O → RMSNorm → FP32 router → softmax top-k (renormalised) →
    permute (sort by expert, gather) → tokens per expert copied to the host (the dispatcher's sync) → one GEMM pair
    per expert with SiLU·mul between (Transformer Engine's GroupedLinear issues one cuBLAS GEMM per expert) →
    unpermute (gather back, weight by the routing probability, sum the copies). Permute and unpermute are gathers
    both ways, as Transformer Engine's fused kernels (run 4 used index_add, BF16 atomics: 2.4 ms a call at
    micro-batch 4), and each expert has its own weights (run 6 indexed stacked ones: every expert's weight gradient
    was added into a zero-filled copy of the stack). BF16 parameters (no casts in the passes)."""

    def __init__(self, m: dict, dev: str, grouped: bool = False):
        super().__init__()
        h, H, KV, D, E, f = m["hidden"], m["heads"], m["kv_heads"], m["head_dim"], m["experts"], m["expert_ffn"]
        self.m, self.L, self.grouped = m, m["layers"], grouped
        bf = torch.bfloat16
        p = lambda *s, dt=bf: torch.nn.Parameter(torch.randn(*s, device=dev, dtype=dt) * 0.02)  # noqa: E731
        L = self.L
        self.emb = p(m["vocab"], h)
        self.qkv = torch.nn.ParameterList([p((H + 2 * KV) * D, h) for _ in range(L)])
        self.o = torch.nn.ParameterList([p(h, H * D) for _ in range(L)])
        self.router = torch.nn.ParameterList([p(E, h, dt=torch.float32) for _ in range(L)])
        if grouped:  # one stacked weight per layer, as the grouped kernel takes it
            self.w1 = torch.nn.ParameterList([p(E, h, 2 * f) for _ in range(L)])
            self.w2 = torch.nn.ParameterList([p(E, f, h) for _ in range(L)])
        else:  # one weight per expert, as GroupedLinear holds them (indexing a stacked one would add each expert's
            # gradient into a zero-filled full-size buffer in backward)
            self.w1 = torch.nn.ModuleList([torch.nn.ParameterList([p(h, 2 * f) for _ in range(E)]) for _ in range(L)])
            self.w2 = torch.nn.ModuleList([torch.nn.ParameterList([p(f, h) for _ in range(E)]) for _ in range(L)])
        if m.get("expert_bias"):  # GPT-OSS's experts have biases (grouped path: not built)
            self.b1 = torch.nn.ModuleList([torch.nn.ParameterList([p(2 * f) for _ in range(E)]) for _ in range(L)])
            self.b2 = torch.nn.ModuleList([torch.nn.ParameterList([p(h) for _ in range(E)]) for _ in range(L)])
        if m.get("sinks"):  # one learnable sink logit per query head (GPT-OSS)
            self.sink = torch.nn.ParameterList([p(H, dt=torch.float32) for _ in range(L)])
        ones = lambda: torch.nn.Parameter(torch.ones(h, device=dev, dtype=bf))  # noqa: E731
        self.n1 = torch.nn.ParameterList([ones() for _ in range(L)])
        self.n2 = torch.nn.ParameterList([ones() for _ in range(L)])
        self.nf = ones()
        self.head = p(m["vocab"], h)
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        self.register_buffer("inv_freq", inv, persistent=False)
        self._masks: dict = {}
        self._flex = None

    def rope(self, x, pos):
        ang = pos.float()[..., None] * self.inv_freq
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def moe(self, i, a):
        m = self.m
        E, k = m["experts"], m["top_k"]
        T, h = a.shape
        probs = torch.softmax(a.float() @ self.router[i].t(), dim=-1)
        probs.topk(k, dim=-1)  # the router's top-k runs, then force balancing overrides its choice:
        # force-balanced routing, as the corpus's runs (Megatron-Core's moe_router_force_load_balancing): every
        # expert gets T·k/E rows; the weights are the router's probabilities of the experts assigned
        idx = (torch.arange(T * k, device=a.device) % E).view(T, k)
        w = probs.gather(1, idx)
        w = (w / w.sum(-1, keepdim=True)).to(a.dtype)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        inv = torch.argsort(order)
        counts = torch.zeros(E, dtype=flat.dtype, device=a.device).scatter_add_(0, flat, torch.ones_like(flat))
        xs = _Permute.apply(a, order, inv, k)
        if self.grouped:
            offs = counts.cumsum(0).to(torch.int32)
            hmid = torch._grouped_mm(xs, self.w1[i], offs=offs)
            g, u = hmid.chunk(2, dim=-1)
            ys = torch._grouped_mm(F.silu(g) * u, self.w2[i], offs=offs)
        else:
            sizes = counts.tolist()  # the dispatcher's host sync: split sizes for the per-expert GEMMs
            outs = []
            bias = m.get("expert_bias")
            for e, xe in enumerate(xs.split(sizes)):
                hmid = xe @ self.w1[i][e]
                g, u = (hmid + self.b1[i][e] if bias else hmid).chunk(2, dim=-1)
                if m.get("clamped_glu"):  # GPT-OSS: clamp at 7, x·sigmoid(1.702x) gate, (up + 1)
                    g, u = g.clamp(max=7.0), u.clamp(-7.0, 7.0)
                    act = g * torch.sigmoid(1.702 * g) * (u + 1)
                else:
                    act = F.silu(g) * u
                o = act @ self.w2[i][e]
                outs.append(o + self.b2[i][e] if bias else o)
            ys = torch.cat(outs)
        return _Unpermute.apply(ys, w, order, inv)

    def flex_attention(self, i, q, k, v):
        """FlexAttention (compiled) with GPT-OSS's features as `m` asks: a sliding window of `window` tokens on every
        `window_every`-th layer (a block mask: out-of-window blocks skipped), causal elsewhere; a learnable sink logit
        per head folded into the softmax's denominator through the returned log-sum-exp (out·sigmoid(lse − sink))."""
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        m, T = self.m, q.shape[2]
        win = m.get("window", 0) if m.get("window_every") and i % m["window_every"] == 0 else 0

        def allowed(b, h, qi, ki):  # the mask: causal, and within the window on a windowed layer
            return (qi >= ki) & (qi - ki < win) if win else qi >= ki
        sinks = m.get("sinks")
        if q.device.type == "cpu":  # --smoke: FlexAttention has no CPU backward; the same function written out
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            s = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
            s = s.masked_fill(~allowed(None, None, torch.arange(T)[:, None], torch.arange(T)[None, :]), float("-inf"))
            o, lse = (torch.softmax(s, -1) @ v.float()).to(q.dtype), torch.logsumexp(s, -1)
        else:
            if (T, win) not in self._masks:
                self._masks[(T, win)] = create_block_mask(allowed, None, None, T, T, device=q.device)
            if self._flex is None:
                self._flex = torch.compile(flex_attention)
            out = self._flex(q, k, v, block_mask=self._masks[(T, win)], enable_gqa=True, return_lse=bool(sinks))
            o, lse = out if sinks else (out, None)
        return o * torch.sigmoid(lse - self.sink[i][None, :, None])[..., None].to(o.dtype) if sinks else o

    def forward_train(self, tokens):
        m = self.m
        H, KV, D = m["heads"], m["kv_heads"], m["head_dim"]
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        x = F.embedding(tokens, self.emb)
        h = x.shape[-1]
        for i in range(self.L):
            a = F.rms_norm(x, (h,), self.n1[i], 1e-6)
            q, kk, v = (a @ self.qkv[i].t()).split([H * D, KV * D, KV * D], dim=-1)
            q = self.rope(q.view(B, T, H, D).transpose(1, 2), pos)
            kk = self.rope(kk.view(B, T, KV, D).transpose(1, 2), pos)
            v = v.view(B, T, KV, D).transpose(1, 2)
            if m.get("attn") == "flex":
                o = self.flex_attention(i, q, kk, v)
            else:
                o = F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
            x = x + o.transpose(1, 2).reshape(B, T, H * D) @ self.o[i].t()
            a = F.rms_norm(x, (h,), self.n2[i], 1e-6)
            x = x + self.moe(i, a.reshape(B * T, h)).view(B, T, h)
        return F.rms_norm(x, (h,), self.nf, 1e-6) @ self.head.t()


def moe_training(run: Run, which: str, mb: int, seq: int = 4096, grouped: bool = False,
                 trace: str | None = None, compiled: bool = False, features: dict | None = None) -> dict:
    """A training step of `which` (QWEN3_30B_16E or GPT_OSS_16E: one expert-parallel rank's MoE layers, the
    all-to-all left out) at micro-batch `mb`: forward, FP32 cross-entropy, backward, fused AdamW on the BF16
    parameters; six steps, the median of the last four. Beside the step: the host's own time to issue it
    (`host_fwd_s`: the forward's CPU time, which includes waiting at its syncs) and, from one profiled step, the
    kernels launched and the GPU's busy time (union of kernel intervals) — the GPU idles for the rest. `compiled`:
    the forward compiled by torch.compile (grouped kernel only: no host sync to break the graph), as a fused stack
    runs the element-wise work; the first step, compilation included, kept apart."""
    torch.manual_seed(0)
    m = {**(TOY_MOE if run.smoke else {"qwen3": QWEN3_30B_16E, "gpt-oss": GPT_OSS_16E}[which]), **(features or {})}
    S = 32 if run.smoke else seq
    model = MoELlama(m, run.dev, grouped=grouped)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=(run.dev == "cuda"))
    tok = torch.randint(0, m["vocab"], (mb, S + 1), device=run.dev)
    if compiled:
        torch._dynamo.reset()  # each configuration compiled afresh, for its static shapes
    fwd = torch.compile(model.forward_train) if compiled else model.forward_train
    res = {"model": which, "shape": m, "seq": S, "micro_batch": mb, "grouped": grouped, "compiled": compiled,
           "features": features or {},
           "params": sum(p.numel() for p in model.parameters()),
           "precision": "bf16 parameters, gradients and AdamW states (fused); fp32 router and cross-entropy"}
    host = []

    def step():
        t0 = time.perf_counter()
        logits = fwd(tok[:, :-1])
        host.append(time.perf_counter() - t0)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tok[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _time_steps(run, step, res, compiled)
    res["host_fwd_s"] = statistics.median(host[2:] if len(host) > 3 else host)
    res.update(_busy(run, step))
    if trace:
        res.update(_profiled(run, step, trace))
    del model, opt
    return res


def _guarded(fn) -> dict:
    """fn(), or {"error": why} (one failed configuration keeps the others)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}


def _busy(run: Run, fn) -> dict:
    """GPU activities one call of fn runs (`kernels`: kernels, copies and memsets), the GPU's busy time (union of
    their intervals) and span (first start to last end: span − busy is the idle inside that one call) against the
    wall time of that profiled call."""
    if run.dev != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn()
        run.sync()
        wall = time.perf_counter() - t0
    iv = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                if str(getattr(e, "device_type", "")).endswith("CUDA"))
    span = (max(e for _, e in iv) - iv[0][0]) / 1e6 if iv else 0.0
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    return {"profiled_wall_s": wall, "gpu_busy_s": busy / 1e6, "gpu_span_s": span, "kernels": len(iv)}


def _time_steps(run: Run, step, res: dict, compiled: bool) -> None:
    """Six training steps (two in smoke mode) into `res`: their wall times, the median of the last four, the first
    one apart when the forward is compiled (compilation included), and the peak memory."""
    times = []
    for _ in range(2 if run.smoke else 6):
        run.sync()
        t0 = time.perf_counter()
        step()
        run.sync()
        times.append(time.perf_counter() - t0)
    res["step_times_s"] = times
    res["step_s"] = statistics.median(times[2:] if len(times) > 3 else times)
    if compiled:
        res["compile_and_first_step_s"] = times[0]
    if run.dev == "cuda":
        res["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--only", help="comma-separated sections")
    a = ap.parse_args()
    run = Run(a.out, a.budget_s, a.smoke)
    m = TOY if a.smoke else LLAMA3_8B
    only = set(a.only.split(",")) if a.only else None
    run.save("machine", machine(run))
    steps = [("elementwise", lambda: elementwise(run)), ("gemm", lambda: gemms(run, m)),
             ("attention_training", lambda: attention_training(run, m)),
             ("attention_decode", lambda: attention_decode(run, m)),
             ("serving", lambda: serving(run, m)),
             ("training", lambda: training(run, m, 2 if a.smoke else 8, trace="train_trace")),
             ("gemm_graph", lambda: gemm_graph(run, m)),
             ("training_variants", lambda: [training(run, m, *v) for v in TRAINING_VARIANTS]),
             ("training_compiled", lambda: training(run, m, 2 if a.smoke else 8, trace="train_compiled_trace",
                                                    compiled=True)),
             ("moe_gemm", lambda: moe_gemm(run)),
             ("host", lambda: host_costs(run)),
             ("attention_head_dim", lambda: [r for hd in ((16, 64), (32, 128), (64, 64)) for r in attention_training(
                 run, {"heads": hd[0] if not a.smoke else 2, "head_dim": hd[1] if not a.smoke else 16},
                 seqs=(2048, 4096, 8192), backends=("cudnn", "flash"))]),
             ("moe_training", lambda: [_guarded(lambda: moe_training(run, w, mb, grouped=g, trace=t))
                                       for w, mb, g, t in MOE_RUNS if run.left_s() > 40]),
             ("moe_compiled", lambda: [_guarded(lambda: moe_training(run, w, mb, grouped=True, trace=t, compiled=True))
                                       for w, mb, t in MOE_COMPILED_RUNS if run.left_s() > 90]),
             ("gptoss_features", lambda: [_guarded(lambda: moe_training(run, "gpt-oss", 4, features=f))
                                          for f in GPT_OSS_FEATURES if run.left_s() > 60])]
    for name, fn in steps:
        if only and name not in only:
            continue
        if run.left_s() < 30:
            print(f"[{name}] skipped: budget spent", flush=True)
            continue
        t0 = time.monotonic()
        try:
            run.save(name, fn())
        except Exception as e:  # noqa: BLE001
            run.save(name, {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
        print(f"[{name}] {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
