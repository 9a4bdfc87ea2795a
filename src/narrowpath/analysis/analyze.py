"""Facade: `analyze(scenario) -> Analysis` — the five accounts, three budgets, verdict and energy of one step.

Order of work: predict once, derive the shared context, then each account from it (what-ifs and the sweep
re-run the core model on changed copies of the scenario).
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.communication import CommBudget, build_communication
from narrowpath.analysis.context import Context, build_context
from narrowpath.analysis.distance import DistanceBudget, build_distance
from narrowpath.analysis.energy import EnergyAccount, build_energy
from narrowpath.analysis.failures import FailureBudget
from narrowpath.analysis.inventory import InventoryRow, build_inventory
from narrowpath.analysis.ledger import LedgerRow, build_ledger
from narrowpath.analysis.options import AnalysisOptions
from narrowpath.analysis.overlap import OverlapAccount, build_overlap
from narrowpath.analysis.scaling import ScalingPoint, scaling_sweep
from narrowpath.analysis.synchronisation import SyncBudget, build_synchronisation, failures_of
from narrowpath.analysis.topology import TopologyFit, build_topology
from narrowpath.analysis.verdict import Verdict, build_verdict
from narrowpath.schedule.step import StepPrediction, predict
from narrowpath.spec.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Analysis:
    prediction: StepPrediction
    context: Context
    options: AnalysisOptions
    data_movement: tuple[LedgerRow, ...]
    collectives: tuple[InventoryRow, ...]
    overlap: OverlapAccount
    topology: TopologyFit
    scaling: tuple[ScalingPoint, ...]
    distance: DistanceBudget
    communication: CommBudget
    synchronisation: SyncBudget
    verdict: Verdict
    energy: EnergyAccount


def checkpoint_amortisation(ctx: Context, fb: FailureBudget) -> tuple[float, float]:
    """(checkpoint bytes per rank, steps between checkpoints at the Daly interval); the ledger's front-end row
    carries bytes per rank / steps."""
    per_rank = fb.checkpoint_bytes / ctx.num_gpus
    steps = fb.daly_interval_s / ctx.pred.step_time_s
    return per_rank, steps


def full_energy(pred: StepPrediction, opts: AnalysisOptions) -> EnergyAccount:
    """Energy of one step of `pred` exactly as the analysis reports it (ledger incl. the amortised checkpoint);
    the scaling sweep uses it so that its base point equals the energy account."""
    ctx = build_context(pred)
    per_rank, steps = checkpoint_amortisation(ctx, failures_of(pred, opts))
    return build_energy(ctx, build_ledger(ctx, per_rank / steps if steps > 0 else 0.0))


def analyze_prediction(pred: StepPrediction, opts: AnalysisOptions | None = None) -> Analysis:
    opts = opts or AnalysisOptions()
    ctx = build_context(pred)
    inventory = build_inventory(ctx)
    sync = build_synchronisation(ctx, inventory, opts)
    ckpt_per_rank, interval_steps = checkpoint_amortisation(ctx, sync.failures)
    ledger = build_ledger(ctx, ckpt_per_rank / interval_steps if interval_steps > 0 else 0.0)
    return Analysis(
        prediction=pred, context=ctx, options=opts,
        data_movement=ledger,
        collectives=inventory,
        overlap=build_overlap(ctx),
        topology=build_topology(ctx),
        scaling=scaling_sweep(pred, opts.sweep_factors, opts.failures_per_gpu_hour,
                              lambda p: full_energy(p, opts).total_j),
        distance=build_distance(ctx, opts, ckpt_per_rank, interval_steps),
        communication=build_communication(ctx, ledger, inventory, opts.compression_ratio, opts.what_ifs),
        synchronisation=sync,
        verdict=build_verdict(ctx, opts.what_ifs, opts.sram_usable_fraction),
        energy=build_energy(ctx, ledger),
    )


def analyze(scenario: Scenario, opts: AnalysisOptions | None = None) -> Analysis:
    """Analyse one training step of `scenario` (see module docstring)."""
    return analyze_prediction(predict(scenario), opts)
