"""JSON of a serving run. Contract (checked by scripts): `output_tokens_per_s`, `total_tokens_per_s`, and
`ttft_s`, `tpot_s`, `e2e_latency_s` each {mean, p50, p90, p99}, at the top level; the rest is documentation."""
from __future__ import annotations

import dataclasses

from narrowpath.analysis.serving_accounts import ServingAccounts
from narrowpath.analysis.serving_whatif import ServingVerdict
from narrowpath.schedule.serving_run import ServingRun
from narrowpath.schedule.serving_stats import summary


def _plain(obj):
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalar
        return obj.item()
    return obj


def serving_to_json(run: ServingRun, acc: ServingAccounts, verdict: ServingVerdict | None) -> dict:
    res, scn, lim = run.result, run.scenario, run.limits
    p = scn.plan
    out = res.figures()
    out.update({
        "scenario": {"name": scn.name, "model": scn.model.name, "system": scn.system.name,
                     "device": scn.system.device.name, "num_gpus": scn.num_gpus,
                     "plan": {f.name: getattr(p, f.name) for f in dataclasses.fields(p)},
                     "load": {"arrival": scn.load.arrival, "rate_per_s": scn.load.rate_per_s,
                              "concurrency": scn.load.concurrency, "num_requests": int(res.input_tokens.size),
                              "mean_input_tokens": float(res.input_tokens.mean()),
                              "mean_output_tokens": float(res.output_tokens.mean()), "seed": scn.load.seed}},
        "output_tokens_per_s_per_gpu": res.output_tokens_per_s / scn.num_gpus,
        "makespan_s": res.makespan_s,
        "kv_cache": {"utilisation": res.kv_utilisation, "peak_utilisation": res.kv_peak_utilisation,
                     "blocks_per_lane": res.kv_blocks_per_lane, "block_tokens": res.block_tokens,
                     "tokens_per_rank": lim.memory.kv_tokens, "pool_bytes_per_gpu": lim.memory.kv_pool_bytes,
                     "preemptions": res.totals.preemptions},
        "memory_per_gpu": _plain(lim.memory),
        "max_batch": lim.max_batch, "max_num_tokens": lim.max_num_tokens,
        "decode_graphs": {"sizes": run.cost.graph_sizes, "padding": run.cost.graph_padding},
        "mfu": acc.mfu, "mbu": acc.mbu,
        "accounts": {"mean_iteration": _plain(acc.mean), "useful_flop_per_token": acc.useful_flop_per_token,
                     "time_split": acc.time_split, "gpu_busy_share": acc.gpu_busy_share, "levels": _plain(acc.levels),
                     "collectives": _plain(acc.collectives), "distance": _plain(acc.distance)},
        "assumptions": list(res.notes),
    })
    if res.kv_ready_s is not None:  # disaggregated: the hand-off's end to the decode instance's admission
        out["decode_admission_wait_s"] = summary(res.first_token_s - res.kv_ready_s)
    if res.pools is not None:
        out["pools"] = {name: {"gpus": pool.gpus, "lanes": pool.lanes, "busy_share": pool.busy_share(res.makespan_s),
                               "kv_utilisation": pool.kv_utilisation(res.makespan_s),
                               "kv_blocks_per_lane": pool.kv_blocks_per_lane,
                               "iterations": pool.totals.iterations, "prompt_tokens": pool.totals.prompt_tokens,
                               "decode_tokens": pool.totals.decode_tokens, "handoff_s": pool.totals.handoff_s}
                        for name, pool in res.pools.items()}
    if run.prefill_limits is not None:
        pl = run.prefill_limits
        out["prefill_pool"] = {"max_batch": pl.max_batch, "max_num_tokens": pl.max_num_tokens,
                               "memory_per_gpu": _plain(pl.memory)}
    if verdict is not None:
        out["verdict"] = _plain(verdict)
    return out
