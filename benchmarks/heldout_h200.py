"""Held out: the model against one real H200 — nothing fitted.

benchmarks/data/h200/gpu_measure.json holds what benchmarks/gpu_measure.py measured on the project's device
machine (one H200 SXM, 700 W, PyTorch 2.11, CUDA 13): whole training steps of Llama-3-8B-shaped models on one GPU,
a Llama-3 8B decode (CUDA graph) and prefill, and single kernels (GEMMs in BF16 and FP8 at transformer shapes,
fused attention forward and backward, decode attention over a KV cache, element-wise streams). Each is priced
here with the H200's shipped calibration profile (the H100 SXM5 profile, fitted on published multi-GPU runs) and
the same functions `predict` and `serve` use:

- training steps: `schedule.step.predict` on the same model, plan and kernel (PyTorch's SDPA picked cuDNN's
  fused attention — `flash`; the FlashAttention-2 backend forced — `flash2`);
- kernels: `cost.roofline.op_time_s` on the op the workload builds for them (`workload.ops.gemm`, the flash
  attention op of `workload.attention`, `workload.serving.decode_attention_op`, `workload.ops.vector`);
- serving: `schedule.serving_cost.ServingCost` under the vLLM stack (PyTorch, CUDA graphs for decode);
- MoE training steps: `predict` on one expert-parallel rank's share (16 local experts, ep 1, force-balanced
  routing; the grouped-kernel runs as `moe_sync_free`); the host's cost per kernel beside `host_dispatch_s`.

What the numbers say, and what they do not (docs/model.md, "Measured on an H200"): the script's model is plain
eager PyTorch, not Megatron-Core or TensorRT-LLM, so kernel counts and fusions differ from the stacks the
profiles were fitted on; a step-level agreement can hide compensating per-class errors, which `narrowpath trace
benchmarks/data/h200/train_trace.json.gz --against benchmarks/data/h200/train-8l.yaml` shows kernel class by
kernel class.

    python benchmarks/heldout_h200.py [--json]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

DATA = ROOT / "benchmarks" / "data" / "h200" / "gpu_measure.json"
DEVICE = "H200-SXM-141GB"
LLAMA3_8B = {"hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "ffn_act": "swiglu", "norm": "rmsnorm",
             "vocab": 128256}


def row(case: str, regime: str, measured_s: float, predicted_s: float, **extra) -> dict:
    """One comparison: predicted beside measured, error = predicted / measured − 1."""
    return {"case": case, "regime": regime, "measured_s": measured_s, "predicted_s": predicted_s,
            "error": predicted_s / measured_s - 1.0, **extra}


def load(path: Path = DATA) -> dict:
    return json.loads(path.read_text())["sections"]


def _device_and_profile():
    from narrowpath.catalog import calibration_for, store
    return store.device(DEVICE), calibration_for(DEVICE)


def probed_profile():
    """The profile `narrowpath calibrate` fitted on the H200 itself from `probe memory` and `probe compute` (GEMMs
    replayed from CUDA graphs) on the shipped one (h200/h200-probed.yaml): matrix rates and their size table, the
    L2 and HBM levels and vector_bw_efficiency measured, all else the shipped profile's."""
    from narrowpath.catalog.resolve import calibration_from
    return calibration_from(str(DATA.parent / "h200-probed.yaml"))


def training_rows(sections: dict, calibration=None) -> list[dict]:
    """Every measured training step beside `predict` on the same model, plan and attention kernel (under
    `calibration`, default the shipped profile)."""
    from narrowpath.catalog.resolve import scenario_from_dict
    from narrowpath.schedule.step import predict
    runs = [sections["training"], *sections.get("training_variants", [])]
    if "training_compiled" in sections:
        runs.append({**sections["training_compiled"], "attention_backend": "default", "compiled": True})
    rows = []
    for r in runs:
        attention = "flash2" if r.get("attention_backend") == "flash" else "flash"
        scn = scenario_from_dict({
            "name": f"h200-{r['layers']}l-s{r['seq']}-mb{r['micro_batch']}-{attention}", "system": "dgx-h200",
            "num_gpus": 1, "model": {"name": "llama3-8b-shape", "layers": r["layers"], "seq_len": r["seq"],
                                     **LLAMA3_8B},
            "plan": {"tp": 1, "pp": 1, "dp": 1, "mbs": r["micro_batch"], "gbs": r["micro_batch"], "zero_stage": 0,
                     "recompute": "none", "precision": "bf16", "attention": attention}})
        scn = scn[0] if isinstance(scn, tuple) else scn
        pred = predict(scn, calibration).step_time_s
        rows.append(row(scn.name + (" (compiled)" if r.get("compiled") else ""),
                        "torch.compile" if r.get("compiled") else "eager", r["step_s"], pred))
    return rows


def moe_training_rows(sections: dict, calibration=None) -> list[dict]:
    """MoE training steps (gpu_measure's `moe_training`: one expert-parallel rank's 16 local experts, no all-to-all)
    beside `predict` on the same model and plan: Megatron-Core's all-to-all dispatcher path (its host sync, one GEMM
    pair per expert) as the stack default prices it, the grouped-kernel runs (eager, and with the forward compiled)
    as `moe_sync_free`."""
    from narrowpath.catalog.resolve import scenario_from_dict
    from narrowpath.schedule.step import predict
    rows = []
    for r in [*sections.get("moe_training", []), *sections.get("moe_compiled", [])]:
        if "step_s" not in r:
            continue
        m = r["shape"]
        scn = scenario_from_dict({
            "name": f"h200-{r['model']}-16e-mb{r['micro_batch']}" + ("-grouped" if r["grouped"] else "")
            + ("-compiled" if r.get("compiled") else ""),
            "system": "dgx-h200", "num_gpus": 1,
            "model": {"name": f"{r['model']}-16e", "layers": m["layers"], "seq_len": r["seq"], "hidden": m["hidden"],
                      "heads": m["heads"], "kv_heads": m["kv_heads"], "head_dim": m["head_dim"],
                      "ffn": m["expert_ffn"], "ffn_act": "swiglu", "norm": "rmsnorm", "vocab": m["vocab"],
                      "moe": {"num_experts": m["experts"], "top_k": m["top_k"], "expert_ffn": m["expert_ffn"]}},
            "plan": {"tp": 1, "pp": 1, "dp": 1, "ep": 1, "mbs": r["micro_batch"], "gbs": r["micro_batch"],
                     "zero_stage": 0, "recompute": "none", "precision": "bf16", "attention": "flash",
                     # the script's AdamW runs on BF16 parameters with BF16 gradients and moments; the closest plan
                     # the model states (it keeps an FP32 master copy besides: the update's bytes are rescaled below)
                     "grad_precision": "bf16", "optimizer_moments": "bf16",
                     "moe_routing": "dropless-balanced", **({"moe_sync_free": True} if r["grouped"] else {})}})
        scn = scn[0] if isinstance(scn, tuple) else scn
        pred = predict(scn, calibration)
        # the update itself at the script's bytes (SCRIPT_ADAM_BYTES): the plan's Adam with an FP32 master copy moves
        # _adam_bytes of its workload, a memory-bound pass scaled by the ratio
        opt_s = pred.breakdown_s["optimizer"]
        step_s = pred.step_time_s - opt_s * (1.0 - SCRIPT_ADAM_BYTES / _adam_bytes(pred.workload))
        regime = ("grouped kernel, compiled" if r.get("compiled") else "grouped kernel (no host sync)") \
            if r["grouped"] else "one GEMM pair per expert"
        rows.append(row(scn.name, regime,
                        r["step_s"], step_s, gpu_busy_s=r.get("gpu_busy_s"), kernels=r.get("kernels"),
                        predicted_host_wait_s=pred.host_wait_s))
    return rows


SCRIPT_ADAM_BYTES = 14.0
"""Bytes per parameter of gpu_measure's fused AdamW on BF16 parameters, gradients and moments: reads 4 x 2, writes
3 x 2."""


def _adam_bytes(wl) -> float:
    """Bytes per parameter the model's optimizer update moves in workload `wl` (its optimizer ops)."""
    return sum(op.hbm_bytes * n for op, n in wl.optimizer_ops) / wl.stages[0].params


def host_rows(sections: dict) -> list[dict]:
    """The host's cost to issue one kernel (gpu_measure's `host`: tiny eager ops of one kernel each, wall clock over
    thousands) beside the profile's `host_dispatch_s`. (The section's nn.Linear times are per call: the kernels a
    call launches were not counted on the device, so they are not divided into a per-kernel figure here; its
    sync figures came from a loop the host, not the GPU, bound — the script measures them from the profiler now.)"""
    h = sections.get("host")
    if not h:
        return []
    _, cal = _device_and_profile()
    per = cal.host_dispatch_s
    return [row("eager element-wise op", "host per kernel", h["eager_op_s"], per),
            row("autograd op, forward", "host per kernel", h["autograd_fwd_op_s"], per),
            row("autograd op, backward", "host per kernel", h["autograd_bwd_op_s"], per)]


def gemm_rows(sections: dict) -> list[dict]:
    """GEMMs: CUDA-graph timings up to 1,024 rows (the eager ones there measured the host), eager beyond."""
    from narrowpath.cost.roofline import op_time_s
    from narrowpath.workload.ops import gemm
    dev, cal = _device_and_profile()
    graph = {(g["dtype"], g["name"], g["M"]): g for g in sections.get("gemm_graph", []) if "time_s" in g}
    rows = []
    for g in sections["gemm"]:
        key = (g["dtype"], g["name"], g["M"])
        src = graph.get(key) if g["M"] <= 1024 else g
        if src is None or "time_s" not in src:
            continue
        w = 1.0 if g["dtype"] == "fp8" else 2.0
        op = gemm(g["name"], "fwd", g["M"], g["K"], g["N"], g["dtype"], w, w, out_bytes=2.0)
        pred = op_time_s(op, dev, cal)
        regime = "weight stream (M < 64)" if g["M"] < 64 else "ramp (64 <= M <= 512)" if g["M"] <= 512 \
            else "large (M >= 1024)"
        rows.append(row(f"{g['dtype']} {g['name']} M={g['M']}", f"{g['dtype']} {regime}", src["time_s"], pred))
    return rows


def attention_rows(sections: dict) -> list[dict]:
    """Causal attention forward and backward beside the flash op the workload builds for the same shape
    (`workload.attention.attention_ops` and `workload.ops.backward_ops`; K/V expanded to every head, as measured)."""
    from narrowpath.catalog.resolve import scenario_from_dict
    from narrowpath.cost.roofline import op_time_s
    from narrowpath.workload.attention import attention_ops
    from narrowpath.workload.ops import backward_ops
    dev, cal = _device_and_profile()
    rows = []
    # the head-width section's 128-wide rows repeat shapes of the first (32 heads of 128): measured once here
    narrow = [a for a in sections.get("attention_head_dim", []) if a["head_dim"] != 128]
    for a in [*sections["attention_training"], *narrow]:
        if "fwd_s" not in a or a["backend"] == "efficient":
            continue
        b, h, s, d = a["batch"], a["heads"], a["seq"], a["head_dim"]
        attention = "flash2" if a["backend"] == "flash" else "flash"
        scn = scenario_from_dict({"system": "dgx-h200", "num_gpus": 1, "model": {
            "name": "attention", "layers": 1, "seq_len": s, "hidden": h * d, "heads": h, "kv_heads": h, "ffn": h * d,
            "vocab": 128}, "plan": {"mbs": b, "gbs": b, "precision": "bf16", "attention": attention}})
        scn = scn[0] if isinstance(scn, tuple) else scn
        (fwd,) = attention_ops(scn.model, scn.plan, "flash")
        (bwd,) = backward_ops([fwd], scn.plan)
        name = ("FlashAttention-2" if attention == "flash2" else "cuDNN fused") + (f" d={d}" if d != 128 else "")
        for phase, op, measured in (("fwd", fwd, a["fwd_s"]), ("bwd", bwd, a["fwd_bwd_s"] - a["fwd_s"])):
            pred = op_time_s(op, dev, cal)
            rows.append(row(f"{name} {phase} b={b} h={h} s={s}", f"{name} {phase}", measured, pred))
    return rows


def _serving_cost():
    from narrowpath.catalog.serving import serving_scenario_from_dict
    from narrowpath.schedule.serving_cost import ServingCost
    scn, _ = serving_scenario_from_dict({
        "system": "dgx-h200", "num_gpus": 1, "model": "llama3-8b",
        "plan": {"tp": 1, "framework": "vllm", "weight_precision": "bf16", "kv_precision": "bf16", "max_batch": 256,
                 "max_num_tokens": 8192},
        "workload": {"scenario": "offline", "input_tokens": 1024, "output_tokens": 128, "num_requests": 8}})
    return scn, ServingCost(scn, 8192)


def decode_attention_rows(sections: dict) -> list[dict]:
    from narrowpath.cost.roofline import op_time_s
    from narrowpath.workload.serving import decode_attention_op
    dev, cal = _device_and_profile()
    scn, cost = _serving_cost()
    rows = []
    for a in sections["attention_decode"]:
        op = decode_attention_op(scn.model, scn.plan, cost.f, a["batch"], a["batch"] * a["context"])
        pred = op_time_s(op, dev, cal)
        regime = "decode attention, batch 1" if a["batch"] == 1 else "decode attention, batch >= 8"
        rows.append(row(f"decode attention b={a['batch']} L={a['context']}", regime, a["time_s"], pred))
    return rows


def elementwise_rows(sections: dict) -> list[dict]:
    from narrowpath.cost.roofline import op_time_s
    from narrowpath.workload.ops import vector
    dev, cal = _device_and_profile()
    rows = []
    for e in sections["elementwise"]:
        if not e.get("bytes") or e["name"] == "rms_norm_eager":  # eager RMSNorm: five kernels, not one stream
            continue
        pred = op_time_s(vector(e["name"], "fwd", e["bytes"], "bf16"), dev, cal)
        rows.append(row(e["name"], "element-wise stream", e["time_s"], pred))
    return rows


def moe_rows(sections: dict) -> list[dict]:
    """The experts' first GEMM of an MoE layer (E local experts, T rows each) beside the model's grouped op
    (`workload.ops.gemm` with groups = E: one GEMM per expert, each on its own size ramp, as Transformer Engine's
    GroupedLinear issues them), against the measured one-GEMM-per-expert launch sequence."""
    from narrowpath.cost.roofline import op_time_s
    from narrowpath.workload.ops import gemm
    dev, cal = _device_and_profile()
    rows = []
    for r in sections.get("moe_gemm", []):
        if "per_expert_s" not in r:
            continue
        E, T, h, f = r["experts"], r["tokens_per_expert"], r["hidden"], r["ffn"]
        pred = op_time_s(gemm("mlp_up", "fwd", E * T, h, 2 * f, "bf16", 2.0, 2.0, groups=E), dev, cal)
        regime = "rows per expert < 64" if T < 64 else "64-1,024 rows per expert" if T <= 1024 \
            else "4,096 rows per expert"
        rows.append(row(f"{r['shape']} T={T}", regime, r["per_expert_s"], pred, grouped_kernel_s=r.get("grouped_s")))
    return rows


def serving_rows(sections: dict) -> list[dict]:
    """Decode steps (CUDA graph) and prefill forwards of Llama-3 8B on the vLLM stack's pricing."""
    _, cost = _serving_cost()
    rows = []
    for r in sections["serving"]["decode"]:
        b, L = r["batch"], r["context"]
        pred = cost.iteration_s(b, b, b * L)
        rows.append(row(f"decode b={b} L={L}", "decode step" + (" (b >= 64)" if b >= 64 else " (b < 64)"),
                        r["graph_s"], pred, kernels=sum(k[1] for k in r.get("kernels", [])) or None))
    for r in sections["serving"]["prefill"]:
        T = r["tokens"]
        pred = cost.iteration_s(T, 0, 0, pre_tokens=T, pre_pairs=T * (T + 1) / 2, pre_ctx=T, rows=1)
        rows.append(row(f"prefill T={T}", "prefill (eager, T >= 2048)" if T >= 2048 else
                        "prefill (eager, host-bound T < 2048)", r["time_s"], pred))
    return rows


def summarise(rows: list[dict], key: str = "regime") -> list[dict]:
    """Per group: count, mean |error|, geometric-mean bias (predicted / measured − 1) and the worst error."""
    out = {}
    for r in rows:
        out.setdefault(r.get(key, "all"), []).append(r["error"])
    return [{"group": g, "n": len(e), "mean_abs_error": sum(abs(x) for x in e) / len(e),
             "bias": math.exp(sum(math.log1p(x) for x in e) / len(e)) - 1.0, "worst": max(e, key=abs)}
            for g, e in out.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    s = load()
    sections = {"training steps": training_rows(s),
                "training steps, probed profile": training_rows(s, probed_profile()),
                "MoE training steps": moe_training_rows(s),
                "MoE training steps, probed profile": moe_training_rows(s, probed_profile()),
                "host dispatch": host_rows(s),
                "GEMMs": gemm_rows(s),
                "attention (training)": attention_rows(s),
                "decode attention": decode_attention_rows(s),
                "MoE expert GEMMs": moe_rows(s),
                "element-wise": elementwise_rows(s),
                "serving (Llama-3 8B, vLLM pricing)": serving_rows(s)}
    if a.json:
        print(json.dumps({k: {"rows": v, "groups": summarise(v)} for k, v in sections.items()}, indent=1))
        return 0
    for title, rows in sections.items():
        print(f"\n== {title}")
        if title.startswith(("training steps", "MoE training", "serving", "host")):
            for r in rows:
                print(f"  {r['case']:34s} measured {r['measured_s'] * 1e3:9.3f} ms  predicted "
                      f"{r['predicted_s'] * 1e3:9.3f} ms  {r['error']:+7.1%}")
        for g in summarise(rows):
            print(f"  [{g['group']}] n={g['n']}: mean |error| {g['mean_abs_error']:.1%}, bias {g['bias']:+.1%}, "
                  f"worst {g['worst']:+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
