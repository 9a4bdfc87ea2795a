"""`narrowpath catalog`: list devices, systems, models, calibration profiles and scenarios."""
from __future__ import annotations

import json

from narrowpath import catalog
from narrowpath.report.console import table
from narrowpath.workload.counts import parameter_count


def register(sub) -> None:
    p = sub.add_parser("catalog", help="list the embedded devices, systems, models and scenarios")
    p.add_argument("kind", nargs="?", choices=("devices", "systems", "models", "profiles", "scenarios"))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _rows(kind: str) -> tuple[list[str], list[list]]:
    if kind == "devices":
        rows = []
        for d in catalog.device_ids():
            dev = catalog.device(d)
            rows.append([d, f"{dev.matrix_peak('bf16') / 1e12:.0f}", f"{dev.peak_matrix_flop_per_s.get('fp8', 0) / 1e12:.0f}",
                         f"{dev.hbm.capacity_bytes / 1e9:.0f}", f"{dev.hbm.bw_bytes_per_s / 1e12:.2f}", f"{dev.tdp_w:.0f}"])
        return ["device", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GB", "HBM TB/s", "TDP W"], rows
    if kind == "systems":
        rows = []
        for s in catalog.system_ids():
            sy = catalog.system(s)
            up, out = sy.tier("scale_up"), sy.tier("scale_out")
            rows.append([s, sy.device.name, sy.gpus_per_node, sy.scale_up_domain, f"{up.bw_bytes_per_s_per_gpu / 1e9:.0f}",
                         f"{out.bw_bytes_per_s_per_gpu * 8 / 1e9:.0f}", f"{out.oversubscription:g}"])
        return ["system", "device", "GPUs/node", "scale-up GPUs", "scale-up GB/s/GPU", "NIC Gb/s/GPU", "oversub"], rows
    if kind == "models":
        rows = []
        for m in catalog.model_ids():
            mo = catalog.model(m)
            rows.append([m, mo.arch + ("-moe" if mo.moe else ""), mo.layers, mo.hidden, mo.heads, mo.kv_heads,
                         mo.ffn, mo.vocab, mo.seq_len, f"{parameter_count(mo) / 1e9:.1f}"])
        return ["model", "arch", "layers", "hidden", "heads", "kv", "ffn", "vocab", "seq", "params (B)"], rows
    if kind == "profiles":
        rows = []
        for pid in catalog.entries("profiles"):
            c = catalog.calibration_for(catalog.entries("profiles")[pid].get("device", pid))
            rows.append([pid, c.matrix_eff("bf16"), c.vector_bw_efficiency, c.attention_kernel,
                         c.tier("scale_up").bw_efficiency, c.tier("scale_out").bw_efficiency])
        return ["profile", "matrix eff bf16", "HBM eff", "attention", "scale-up eff", "scale-out eff"], rows
    rows = [[sid, d.get("system"), d.get("model"), d.get("num_gpus"), d.get("description", "")]
            for sid, d in catalog.entries("scenarios").items()]
    return ["scenario", "system", "model", "GPUs", "description"], rows


def run(args) -> int:
    kinds = [args.kind] if args.kind else ["devices", "systems", "models", "profiles", "scenarios"]
    if args.json:
        out = {}
        for k in kinds:
            head, rows = _rows(k)
            out[k] = [dict(zip(head, r)) for r in rows]
        print(json.dumps(out, indent=2, default=str))
        return 0
    for k in kinds:
        head, rows = _rows(k)
        print(f"\n{k.upper()}")
        print(table(head, rows))
    return 0
