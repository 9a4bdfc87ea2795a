"""Terminal report of a serving run: throughput and latency, capacity and KV use, MFU / MBU, the accounts per
generated token, the distance budget, collectives per token and the verdict with its what-ifs."""
from __future__ import annotations

from narrowpath.analysis.serving_accounts import ServingAccounts
from narrowpath.analysis.serving_whatif import ServingVerdict
from narrowpath.report.console import human_bytes, human_time, table
from narrowpath.schedule.serving_run import ServingRun
from narrowpath.schedule.serving_stats import STATS


def _layout(p, moe: bool) -> list[str]:
    """tp, pp, attention dp and (MoE) ep of one layout."""
    return [f"tp {p.tp}", f"pp {p.pp}"] + ([f"attention dp {p.dp}"] if p.dp > 1 else []) + \
        ([f"ep {p.ep}"] if moe else [])


def _plan_line(run: ServingRun) -> str:
    p, lim = run.scenario.plan, run.limits
    parts = _layout(p, run.scenario.model.moe is not None) \
        + ([f"expert balance {p.expert_balance}"] if run.scenario.model.moe is not None and p.ep > 1 else []) \
        + ([f"{p.redundant_experts} redundant experts"] if p.redundant_experts else []) \
        + [f"replicas {p.replicas}"]
    if p.disaggregated and run.prefill_limits is not None:
        ql = run.prefill_limits
        layout = ", ".join(_layout(p.prefill_pool(), run.scenario.model.moe is not None))
        parts.append(f"{p.prefill_replicas} prefill-only of their own layout ({layout}, max batch {ql.max_batch}, "
                     f"token budget {ql.max_num_tokens})")
    elif p.disaggregated:
        parts.append(f"{p.prefill_replicas} prefill-only")
    parts += [f"weights {p.weight_precision}", f"KV {p.kv_precision}", f"policy {p.policy}",
              f"admission {p.admission}", f"chunked prefill {'on' if p.chunked_prefill else 'off'}",
              f"max batch {lim.max_batch}", f"token budget {lim.max_num_tokens}"]
    if p.spec_tokens:
        parts.append(f"speculative k={p.spec_tokens} α={p.spec_acceptance:g}")
    sizes = run.cost.graph_sizes
    if sizes:
        parts.append(f"decode graphs {len(sizes)} sizes to {sizes[-1]} "
                     f"({'padded' if run.cost.graph_padding else 'exact'})")
    elif sizes is not None:
        parts.append("decode graphs none within the limits (every decode iteration eager)")
    return ", ".join(parts)


def _pool_lines(res) -> list[str]:
    """A disaggregated deployment's pools apart: the share of the run each pool's lanes iterate (the one near 100 %
    is the narrow pool) and their KV use."""
    if res.pools is None:
        return []
    t = res.makespan_s
    parts = [f"{name} {pool.gpus} GPUs busy {pool.busy_share(t):.0%} (KV {pool.kv_utilisation(t):.1%})"
             for name, pool in res.pools.items()]
    return ["  pools: " + ", ".join(parts)]


def format_serving(run: ServingRun, acc: ServingAccounts, verdict: ServingVerdict | None) -> str:
    scn, res, lim = run.scenario, run.result, run.limits
    load = scn.load
    out = [f"narrowpath serve — {scn.model.name} on {scn.num_gpus} × {scn.system.device.name} ({scn.system.name})",
           f"  plan: {_plan_line(run)}",
           f"  load: {load.arrival}" + (f" at {load.rate_per_s:g} req/s" if load.arrival == "poisson" else "")
           + (f", concurrency {load.concurrency}" if load.concurrency else "")
           + f", {res.input_tokens.size:,} requests, {res.input_tokens.mean():.0f} prompt + "
           f"{res.output_tokens.mean():.0f} output tokens on average", ""]
    fig = res.figures()
    out.append(f"  throughput: {fig['output_tokens_per_s']:,.0f} output tokens/s, {fig['total_tokens_per_s']:,.0f} "
               f"total tokens/s ({fig['output_tokens_per_s'] / scn.num_gpus:,.1f} output tokens/s per GPU) over "
               f"{human_time(res.makespan_s)}")
    rows = [[name] + [human_time(fig[key][s]) for s in STATS] for name, key in
            (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("end-to-end", "e2e_latency_s"))]
    out.append(table(["latency", "mean", "p50", "p90", "p99"], rows))
    mem = lim.memory
    out += ["", f"  memory per GPU: weights {human_bytes(mem.weights_bytes)}, activations "
            f"{human_bytes(mem.activation_bytes)}, runtime {human_bytes(mem.runtime_bytes)}, KV pool "
            f"{human_bytes(mem.kv_pool_bytes)} = {mem.kv_tokens:,} tokens ({mem.kv_blocks:,} blocks of "
            f"{lim.block_tokens}) per attention-DP rank",
            f"  KV cache use: {res.kv_utilisation:.1%} on average, {res.kv_peak_utilisation:.1%} at peak; "
            f"{res.totals.preemptions} preemptions"] + _pool_lines(res) + [
            f"  MFU {acc.mfu:.1%}   MBU {acc.mbu:.1%}   mean iteration {human_time(acc.mean.duration_s)}: "
            f"{acc.mean.decodes:.1f} decodes, {acc.mean.prompt_tokens:.0f} prompt tokens", ""]
    out.append("  where an iteration's time goes" + (f" (the GPU works {acc.gpu_busy_share:.0%} of it, waits for the "
                                                     "host the rest):" if acc.gpu_busy_share < 0.995 else ":"))
    out.append(table(["bound by", "share (%)"], [[k, 100 * v] for k, v in
                                                  sorted(acc.time_split.items(), key=lambda kv: -kv[1]) if v > 0]))
    out += ["", "  data movement per generated token (per GPU):"]
    out.append(table(["level", "bytes/token", "bytes/useful FLOP", "time at peak (us/token)"],
                     [[r.level, human_bytes(r.bytes_per_token), r.bytes_per_useful_flop, r.time_per_token_s * 1e6]
                      for r in acc.levels if r.bytes_per_token > 0]))
    if acc.collectives:
        out += ["", "  collectives per generated token:"]
        out.append(table(["collective", "tier", "group", "message", "per token", "time (us/token)"],
                         [[c.name, c.tier, c.group_size, human_bytes(c.message_bytes), c.per_token,
                           c.time_per_token_s * 1e6] for c in acc.collectives]))
    out += ["", "  distance budget:"]
    out.append(table(["item", "bytes per GPU", "lives in", "read per token", "working set", "fits nearer"],
                     [[d.item, human_bytes(d.bytes_per_gpu), d.level, human_bytes(d.bytes_read_per_token),
                       human_bytes(d.working_set_bytes), d.nearer_level or "-"] for d in acc.distance]))
    if verdict is not None:
        out += ["", f"  narrowest path: {verdict.narrowest} — {verdict.detail}",
                f"  what-ifs (re-simulated on {gpus_owner(verdict.baseline.num_gpus)} baseline{_whatif_load(verdict)}, "
                f"ranked by {verdict.ranked_by}):"]
        rows = [[w.name, w.change, w.output_tokens_per_s_per_gpu, human_time(w.ttft_p50_s), human_time(w.tpot_p50_s),
                 f"{w.gain * 100:+.1f}"] for w in (verdict.baseline, *verdict.whatifs)]
        out.append(table(["what-if", "change", "out tok/s/GPU", "TTFT p50", "TPOT p50", "gain (%)"], rows))
        for name, why in verdict.skipped:
            out.append(f"    not run: {name} — {why}")
    if res.notes:
        out += ["", "  assumptions:"] + [f"    {n}" for n in res.notes]
    return "\n".join(out)


def gpus_owner(n: int) -> str:
    """'1 GPU's', '8 GPUs''."""
    return f"{n} GPU's" if n == 1 else f"{n} GPUs'"


def _whatif_load(verdict: ServingVerdict) -> str:
    """Which load the what-ifs ran: said when it is not the run's own, so their baseline row is not read as the
    headline's."""
    if verdict.requests >= verdict.of_requests:
        return ""
    return (f" on the first {verdict.requests:,} of the {verdict.of_requests:,} requests, so its figures differ from "
            f"the headline's")
