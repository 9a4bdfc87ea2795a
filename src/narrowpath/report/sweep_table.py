"""The summary of a sweep: one table row per cell (best plan, step time, tokens/s per GPU and per watt), the
reasons of cells where nothing fits as numbered notes, and the JSON document `sweep --json` prints."""
from __future__ import annotations

from typing import Any, Sequence

from narrowpath.report.console import table

JSON_SCHEMA_VERSION = 1
_RECOMPUTE = {"none": "", "selective": " rc=sel", "full": " rc=full"}


def plan_label(plan: dict[str, Any] | None) -> str:
    """Compact knobs of a row's best plan: `tp2 pp4x2 cp1 dp8 mbs1 z1 rc=full:2 off:3 sp` (pp4x2: 4 stages, vpp 2;
    rc=full:2 the first 2 layers of a chunk recomputed; off:3 three layers' activations offloaded — without them a
    copied label may not fit)."""
    if not plan:
        return "-"
    pp = f"pp{plan['pp']}" + (f"x{plan['vpp']}" if plan.get("vpp", 1) > 1 else "")
    ep = f" ep{plan['ep']}" if plan.get("ep", 1) > 1 else ""
    rc = _RECOMPUTE.get(plan['recompute'], ' rc=' + str(plan['recompute']))
    rc += f":{plan['recompute_layers']}" if rc and plan.get("recompute_layers") else ""
    off = f" off:{plan['offload_layers']}" if plan.get("offload_layers") else ""
    return (f"tp{plan['tp']} {pp} cp{plan['cp']} dp{plan['dp']}{ep} mbs{plan['mbs']} z{plan['zero_stage']}"
            f"{rc}{off}{' sp' if plan['sequence_parallel'] else ''}")


def format_sweep(rows: Sequence[dict[str, Any]], *, num_reused: int = 0, num_computed: int | None = None,
                 rows_path: str | None = None) -> str:
    """The summary table; cells without a fitting plan show a note number and their reason below."""
    objectives = {r["objective"] for r in rows}
    headers = ["system", "model", "GPUs", "batch"] + (["objective"] if len(objectives) > 1 else []) + [
        "best plan", "step (s)", "tokens/s/GPU", "tokens/s/W", "GB/GPU"]
    notes: dict[str, int] = {}
    body = []
    for r in rows:
        head = [r["system"], r["model"], r["num_gpus"], r["gbs"]] + ([r["objective"]] if len(objectives) > 1 else [])
        if r["fits"]:
            per_w = r["tokens_per_s_per_w"]
            body.append(head + [plan_label(r["plan"]), float(r["step_time_s"]), f"{r['tokens_per_s_per_gpu']:,.0f}",
                                "-" if per_w is None else f"{per_w:,.2f}", f"{r['memory_per_gpu_bytes'] / 1e9:.1f}"])
        else:
            n = notes.setdefault(str(r["reason"]), len(notes) + 1)
            body.append(head + [f"no plan fits ({n})", "-", "-", "-", "-"])
    fits = sum(1 for r in rows if r["fits"])
    out = [table(headers, body)]
    out += [f"  ({n}) {reason}" for reason, n in notes.items()]
    computed = len(rows) - num_reused if num_computed is None else num_computed
    tail = f"  {len(rows)} cells, {fits} with a fitting plan; {computed} searched now, {num_reused} reused"
    if rows_path:
        tail += f" from {rows_path}"
    out.append(tail)
    out.append("  tokens/s/W: tokens per joule the job's GPUs use (the energy ledger's GPU level for the best plan: "
               "compute, data movement, idle); `analyze` also gives the node, cluster and facility levels, which "
               "add hosts, network and cooling")
    return "\n".join(out)


def sweep_to_json(rows: Sequence[dict[str, Any]], *, num_reused: int, rows_path: str,
                  files_written: Sequence[str]) -> dict[str, Any]:
    return {"schema_version": JSON_SCHEMA_VERSION, "num_cells": len(rows),
            "num_fit": sum(1 for r in rows if r["fits"]), "num_reused": num_reused, "rows_path": rows_path,
            "files_written": list(files_written), "rows": list(rows)}
