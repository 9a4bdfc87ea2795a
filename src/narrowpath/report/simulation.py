"""Render a SimResult: terminal text and the `simulate --json` document (stable keys, SI units in the names).

JSON contract (checked by scripts): `seed`, `steps`, `step_time_s` {mean, p50, p90, p99, max},
`closed_form_step_time_s` (what `predict` says), `lost_time_s_by_cause` (cause → seconds per step), `goodput`
(fraction of wall time doing useful training: the long run's with faults, else noise-free / mean step).
"""
from __future__ import annotations

from narrowpath.report.console import human_time, table
from narrowpath.schedule.sim import SimResult


def simulation_to_json(r: SimResult) -> dict:
    scn = r.prediction.scenario
    out = {
        "scenario": scn.name,
        "num_gpus": scn.num_gpus,
        "schedule": r.schedule,
        "seed": r.seed,
        "steps": r.steps,
        "noise": list(r.noise.notes),
        "step_time_s": r.stats(),
        "closed_form_step_time_s": r.closed_form_step_time_s,
        "noise_free_step_time_s": r.noise_free_step_time_s,
        "lost_time_s_by_cause": dict(r.lost_time_s_by_cause),
        "goodput": r.goodput,
        "wait_s_by_collective": dict(r.waits_s),
        "slowest_ranks": [{"rank": rank, "stage": stage, "steps_last": n, "mean_lead_s": lead}
                          for rank, stage, n, lead in r.slowest],
        "units_per_stage": r.units_per_stage,
    }
    if r.long_run is not None:
        lr = r.long_run
        out["long_run"] = {
            "horizon_s": lr.horizon_s, "replications": lr.replications,
            "interruptions_by_class": dict(lr.interruptions_by_class),
            "interruptions_unexpected": sum(lr.interruptions_by_class.values()),
            "interruptions_unexpected_sd": lr.interruptions_sd,
            "interruptions_planned": lr.planned_interruptions,
            "checkpoint_interval_s": lr.checkpoint_interval_s, "checkpoint_write_s": lr.checkpoint_write_s,
            "checkpoint_reload_s": lr.reload_s, "lost_s": dict(lr.lost_s),
            "effective_training_time_ratio": lr.effective_training_time_ratio, "goodput": lr.goodput,
            "steps_kept": lr.steps_kept,
        }
    return out


def format_simulation(r: SimResult) -> str:
    scn = r.prediction.scenario
    st = r.stats()
    lines = [f"{scn.name}: {scn.num_gpus} GPUs, {r.schedule} schedule, {r.steps} steps, seed {r.seed}"
             + (f", noise {', '.join(r.noise.notes)}" if r.noise.notes else ", no noise"),
             "", "Step time"]
    lines.append(table(["", "s"], [["closed form (predict)", r.closed_form_step_time_s],
                                   ["simulated without noise", r.noise_free_step_time_s],
                                   *[[k, v] for k, v in st.items()]]))
    if r.schedule == "zb-h1":
        lines += ["  the closed form prices 1F1B: ZB-H1, which defers weight gradients into the bubbles, has none",
                  "  of its own (the simulated noise-free step is its reference)"]
    if r.lost_time_s_by_cause:
        lines += ["", "Lost time per step by cause (on the critical path; slack = delays other paths absorbed)"]
        rows = [[k, v, 100 * v / r.noise_free_step_time_s] for k, v in
                sorted(r.lost_time_s_by_cause.items(), key=lambda kv: -abs(kv[1]))]
        lines.append(table(["cause", "s per step", "% of noise-free step"], rows))
    if r.waits_s:
        lines += ["", "Mean wait of a rank per step, by collective kind"]
        lines.append(table(["collective", "s"], sorted(([k, v] for k, v in r.waits_s.items()), key=lambda x: -x[1])))
    if r.slowest:
        lines += ["", "Last to arrive at the step's end (a unit = the tp ranks from this rank on)"]
        lines.append(table(["rank", "stage", "steps last", "mean lead over median"],
                           [[a, b, c, human_time(d)] for a, b, c, d in r.slowest]))
    if r.long_run is not None:
        lr = r.long_run
        lines += ["", f"Over {lr.horizon_s / 86400:.3g} days ({lr.replications} replications): "
                      f"{sum(lr.interruptions_by_class.values()):.1f} unexpected interruptions "
                      f"(sd {lr.interruptions_sd:.1f}), {lr.planned_interruptions:.1f} planned; "
                      f"checkpoint every {human_time(lr.checkpoint_interval_s)}, write {human_time(lr.checkpoint_write_s)}"]
        lines.append(table(["class", "interruptions"], [[k, v] for k, v in lr.interruptions_by_class.items()]))
        lines.append(table(["lost to", "hours"], [[k, v / 3600] for k, v in lr.lost_s.items()]))
        lines.append(f"  effective training-time ratio {lr.effective_training_time_ratio:.3f}, "
                     f"goodput {lr.goodput:.3f}")
    else:
        lines.append(f"\n  goodput (noise-free / mean step) {r.goodput:.4f}")
    return "\n".join(lines)
