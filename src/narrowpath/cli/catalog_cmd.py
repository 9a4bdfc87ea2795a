"""`narrowpath catalog`: list devices, systems, models, calibration profiles, scenarios and a stack's performance
configs."""
from __future__ import annotations

import json

from narrowpath import catalog
from narrowpath.catalog.perf_configs import perf_configs
from narrowpath.report.console import table
from narrowpath.workload.counts import parameter_count


def register(sub) -> None:
    p = sub.add_parser("catalog", help="list the embedded devices, systems, models and scenarios",
                       description="List the embedded catalog: devices (peaks, memory), systems (node size, "
                       "links), models (shapes, parameters), calibration profiles and scenarios; the ids are what "
                       "--model, --system, --profile and a scenario argument accept. `perf-configs` lists the "
                       "performance configs a stack published, whose settings a validation case of the same model, "
                       "GPU, format and layout takes where it states none (catalog/perf_configs.yaml; --json for "
                       "settings too long for the terminal).")
    p.add_argument("kind", nargs="?", choices=KINDS + ("perf-configs",),
                   help="list only this kind (default: all but perf-configs)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


KINDS = ("devices", "systems", "models", "profiles", "scenarios")
"""What `narrowpath catalog` lists by default."""


def _settings(k: dict) -> str:
    """A config's settings in few words: the exchange (its dispatcher, `+overlap`), the recompute modules (or `no
    recompute`, `full recompute of N layers`) and the layers offloaded, CUDA graphs or eager, sync-free experts."""
    out = []
    if "ep_overlap" in k or "ep_dispatch" in k:
        out.append(k.get("ep_dispatch", "?") + ("+overlap" if k.get("ep_overlap") else ""))
    if "recompute" in k:
        kept = "+".join(k.get("recompute_modules", ())) or f"{k['recompute']} recompute".replace("none ", "no ")
        if k.get("recompute_layers"):
            kept += f" of {k['recompute_layers']} layers"
        if k.get("offload_layers"):
            kept += f", {k['offload_layers']} layers offloaded"
        out.append(kept)
    if "cuda_graphs" in k:
        out.append("graphs" if k["cuda_graphs"] else "eager")
    if k.get("moe_sync_free"):
        out.append("sync-free")
    return ", ".join(out) or "-"


def _perf_config_rows() -> tuple[list[str], list[list]]:
    rows = []
    for r in perf_configs():
        lay = r["layout"]
        layout = f"{lay['num_gpus']}:" + (f" tp{lay['tp']}" if lay["tp"] > 1 else "") + f" pp{lay['pp']}" + \
            (f" vpp{lay['vpp']}" if lay["vpp"] > 1 else "") + (f" cp{lay['cp']}" if lay["cp"] > 1 else "") + \
            f" ep{lay['ep']} mbs{lay['mbs']} gbs{lay['gbs']}" + (" fsdp" if lay["fsdp"] else "")
        name = r["config"].replace("_PRETRAIN_CONFIG", "").removesuffix("_CONFIG")
        rows.append([name, "/".join(r["precision"]), layout, _settings(r["knobs"])])
    return ["config", "format", "GPUs: layout", "settings"], rows


def _rows(kind: str) -> tuple[list[str], list[list]]:
    if kind == "perf-configs":
        return _perf_config_rows()
    if kind == "devices":
        rows = []
        for d in catalog.device_ids():
            dev = catalog.device(d)
            rows.append([d, f"{dev.peak_matrix_flop_per_s.get('bf16', 0) / 1e12:.0f}",  # 0: no such tensor format
                         f"{dev.peak_matrix_flop_per_s.get('fp8', 0) / 1e12:.0f}",
                         f"{dev.hbm.capacity_bytes / 2**30:.1f}", f"{dev.hbm.capacity_bytes / 1e9:.1f}",
                         f"{dev.hbm.bw_bytes_per_s / 1e12:.2f}", f"{dev.tdp_w:.0f}"])
        # an "80GB" part holds 80 GiB = 85.9 GB: both, named (it printed "HBM GB 86")
        return ["device", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GiB (2^30 B)", "HBM GB (1e9 B)", "HBM TB/s",
                "TDP W"], rows
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


MAX_WIDTH = 120
"""Terminal tables stay within this many columns: a long last column (a scenario's description) is cut."""


def _fit(head: list[str], rows: list[list]) -> list[list]:
    """Rows whose last column is cut (with "…") so that the table is at most MAX_WIDTH wide (--json keeps all)."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(head)]
    room = MAX_WIDTH - 2 - sum(w + 2 for w in widths[:-1])
    room = max(room, len(head[-1]), 10)
    return [[*r[:-1], str(r[-1]) if len(str(r[-1])) <= room else str(r[-1])[:room - 1] + "…"] for r in rows]


def run(args) -> int:
    kinds = [args.kind] if args.kind else list(KINDS)
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
        print(table(head, _fit(head, rows)))
    return 0
