"""Regenerate what the validation produces as shipped artefacts, in one command:

    python -m narrowpath.validate.regenerate [--check]

- `src/narrowpath/catalog/residuals.json`: each priced case's regime features and residual ln(pred/measured),
  the data behind every error band (analysis.band);
- `docs/validation.md`: the validation tables (by regime, by ranking, case by case) and the leave-one-source-out
  check of the bands;
- `docs/serving-validation.md`: the serving corpus (`inference-public.yaml`) figure by figure and by group.

`--check` writes nothing and exits 1 when any of the files differs from what the model produces now (CI runs it, so a
physics change cannot leave stale numbers behind).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from importlib import resources
from pathlib import Path

from narrowpath.analysis.band import LEVEL, BandParts, band_parts, features, spread_residual
from narrowpath.schedule.step import predict
from narrowpath.validate.corpus import load_corpus, shipped_corpus_path
from narrowpath.errors import NarrowpathError
from narrowpath.validate.inference import InferenceReport, run_inference_validation
from narrowpath.validate.run import ValidationReport, regimes, run_validation


def residual_records() -> list[dict]:
    """One record per priced case of the shipped corpora: id, source group, sweep, features, residual."""
    out = []
    for case in load_corpus(None):
        if case.scenario is None:
            continue
        try:
            pred = predict(case.scenario)
        except NarrowpathError:  # a case the model refuses has no residual; validate reports why
            continue
        feats = {k: round(v, 6) if isinstance(v, float) else v for k, v in features(pred.scenario).items()}
        # rounded so that the shipped file does not depend on the last bits of a machine's arithmetic
        out.append({"id": case.id, "source": regimes(case.scenario, case.source)["source"][0], "sweep": case.sweep,
                    "features": feats, "residual": round(math.log(pred.step_time_s / case.measured_step_time_s), 6)})
    return out


def with_out_of_fold(records: list[dict]) -> tuple[list[dict], list[str]]:
    """The records with each case's out-of-fold residual (`residual_oof`: the profiles refitted without its source,
    catalog/residuals_oof.json, written by benchmarks/loso_refit.py --write) where it was computed against today's
    in-sample residual; and the ids whose stored one is missing or stale (the model changed since)."""
    path = resources.files("narrowpath.catalog").joinpath("residuals_oof.json")
    stored = json.loads(path.read_text())["cases"] if path.is_file() else {}
    out, stale = [], []
    for r in records:
        s = stored.get(r["id"])
        if s is not None and s["residual"] == r["residual"]:
            # a case whose device had no constants fitted without its source keeps an in-sample "out-of-fold" one
            out.append({**r, "residual_oof": s["oof"], **({} if s.get("refit", True) else {"oof_in_sample": True})})
        else:
            out.append(r)
            stale.append(r["id"])
    return out, stale


SCALE_GRID = tuple(round(0.5 + 0.05 * i, 2) for i in range(71))
"""Scales tried for the bands' half-widths: 0.50 to 4.00."""


def _held_out(records: list[dict], exclude: frozenset[str], judged: frozenset[str] | None = None
              ) -> list[tuple[float, BandParts]]:
    """(out-of-fold residual, unscaled band from the records of the other sources, none of `exclude` either) of
    every case of the sources `judged` (default: all not in `exclude`) — a case whose residual is in-sample although
    stored (`oof_in_sample`: its device had no constants fitted without its source) is left out: its fit saw it."""
    out = []
    for src in sorted(judged if judged is not None else {r["source"] for r in records} - exclude):
        train = [r for r in records if r["source"] != src and r["source"] not in exclude]
        for r in records:
            if r["source"] == src and not r.get("oof_in_sample") and train:
                out.append((spread_residual(r), band_parts(r["features"], train)))
    return out


def _inside(r: float, parts: BandParts, scale: float) -> bool:
    """Whether the measured time t·e^(−r) of a case predicted t lies in its band at `scale`."""
    lo, hi = parts.bounds(scale)
    return lo <= r <= hi


def band_scale(records: list[dict], exclude: frozenset[str] = frozenset()) -> float:
    """The smallest scale of SCALE_GRID at which LEVEL of the held-out cases (each source's against the band built
    from the others', `exclude` left out altogether) lie inside their band: split-conformal calibration of the
    bands' width on held-out errors (Vovk et al. 2005; Angelopoulos & Bates 2021, 'A gentle introduction to
    conformal prediction' §2) — the neighbours' spread alone read 67 % of held-out cases inside an 80 % band
    (fifty-sixth session), since one source's runs differ from another's by more than either's own scatter."""
    held = _held_out(records, exclude)
    for scale in SCALE_GRID:
        if held and int(sum(_inside(r, p, scale) for r, p in held)) >= LEVEL * len(held):
            return scale
    return SCALE_GRID[-1]


def loso_coverage(records: list[dict]) -> dict[str, tuple[int, int]]:
    """Leave one source out: per source S (inside band, cases), each of S's cases' out-of-fold residual (the device
    profiles refitted without S) against the band built from the other sources' residuals, at the scale
    calibrated without S (`band_scale` over the other sources alone: nested, so S's own errors never set the width
    its cases are judged by). Cases whose residual is in-sample although stored are left out (`_held_out`)."""
    out: dict[str, tuple[int, int]] = {}
    for src in sorted({r["source"] for r in records}):
        scale = band_scale(records, frozenset({src}))
        held = _held_out(records, frozenset(), frozenset({src}))
        out[src] = (int(sum(_inside(r, p, scale) for r, p in held)), len(held))
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}"


def validation_markdown(rep: ValidationReport, coverage: dict[str, tuple[int, int]]) -> str:
    L = ["# Validation", "",
         "Generated by `python -m narrowpath.validate.regenerate` (CI fails when this file is stale). Every case of the",
         "shipped training corpora (`training-public.yaml`, `training-sweeps-public.yaml` — unmodified copies of",
         "`shared/validation/` — and the held-out llm-foundry, torchtitan and Llama 3 runs `published-extra.yaml`), one",
         "calibration profile per device (`catalog/calibration.yaml`; `benchmarks/fit_profiles.py` records what each",
         "constant was fitted on). Error = (predicted − measured) / measured. Knobs a source did not publish are chosen",
         "without the measurement (the stack's documented default, or the fastest setting that fits memory — for an",
         "engine no stack names, its interleaving and gradient overlap too) and listed per case in",
         "`narrowpath validate --json` (`chosen`). A case's model identical in every other architecture field to a",
         "catalog model takes from it what the corpus schema has no key for — norm, tied embeddings, node-limited",
         "routing, GPT-OSS's clamped GLU and expert biases, the layer pattern or windows one schema or the other lacks",
         "(`catalog/known_models.py`; listed in `chosen` too). A Megatron-Bridge case whose model, GPU, format and",
         "whole stated layout (its Megatron-FSDP sharding too) equal one of the stack's published performance",
         "configs takes that config's expert all-to-all overlap, dispatcher, recompute (modules or layers),",
         "activation offloading, CUDA graphs and fused-MoE switch where it states none",
         "(`catalog/perf_configs.yaml`, each with the file versions it was read in; a setting the stored versions",
         "do not all give alike is left to the default). Any case is a scenario of every command: `narrowpath",
         "analyze FILE#CASE_ID` takes it apart with the same choices.", "",
         f"**All cases: mean |error| {_pct(rep.mean_abs_error)} %, worst {_pct(rep.max_abs_error)} % "
         f"({rep.worst.id if rep.worst else '-'}); {len(rep.ok_cases)} of {len(rep.cases)} priced.**", "",
         "## By regime", "", "| kind | group | cases | mean abs error (%) | worst (%) |", "|---|---|---|---|---|"]
    for g in rep.groups():
        L.append(f"| {g.kind} | {g.name} | {g.n} | {_pct(g.mean_abs_error)} | {_pct(g.max_abs_error)} |")
    r, q = rep.ranking, rep.repeatability
    L += ["", "## Ranking of plans (sweep groups)", "",
          "Cases of one sweep ran the same model on the same hardware and batch and differ only in plan or",
          "precision. Pairs whose measured times differ by more than 3 % are compared.", "",
          f"- sweep groups: {r.sweeps}; pairs compared: {r.pairs}",
          f"- pairwise order agreement: {_pct(r.order_agreement)} %",
          f"- top-1 regret (measured time of the model's first choice over the measured best − 1): mean "
          f"{_pct(r.top1_regret_mean)} %, worst {_pct(r.top1_regret_max)} %", "",
          "## The corpus against itself", "",
          "Cases that state the same configuration (model, system, GPU count, every plan knob after the unpublished",
          "ones are chosen) but were measured apart — another container version, a re-run table — get one",
          "prediction from any model of what the corpus states; where their measured times differ, that model",
          "cannot match them all (validate.repeatability: the best single prediction of a group is the 1/m-weighted",
          "median for mean |error| and 2·m_min·m_max/(m_min + m_max) for the worst).", "",
          f"- configurations measured more than once: {q.groups} ({q.cases} cases)",
          f"- their measured times differ by {_pct(q.median_spread)} % at the median, up to {_pct(q.max_spread)} % "
          f"({q.spreads[0][0] if q.spreads else '-'})",
          f"- error floor of any such predictor over all {q.total} priced cases: mean |error| "
          f"{_pct(q.floor_mean_abs_error)} %, worst {_pct(q.floor_max_abs_error)} %", "",
          "## The stated model against its own measurement", "",
          "Where a case publishes model TFLOP/s beside tokens/s, their ratio is the FLOPs per token of the model its",
          "source ran; the stated model must do as many, counting attention scores whole or causally halved",
          "(validate.flop_check).", ""]
    L += [f"- {line}" for line in rep.flop_summary()]
    L += ["",
          "## Error bands: leave one source out", "",
          "Each case predicted with the device profiles refitted without its source (`benchmarks/loso_refit.py`,",
          "as `benchmarks/fit_profiles.py` fits them; stored in `catalog/residuals_oof.json`) against its "
          f"{int(LEVEL * 100)} % band", "built from the other sources' out-of-fold residuals (analysis.band), its "
          "half-widths scaled by the factor at which", f"{int(LEVEL * 100)} % of the *other* sources' held-out cases "
          "fall inside theirs (`band_scale`: split-conformal calibration of the", "width, nested so that a source's "
          "own errors never set the width its cases are judged by; the bands `predict`", "prints use the factor "
          "from every source, stored in `catalog/residuals.json`). Cases whose device had no", "constants fitted "
          "without their source would be left out (none are: a device with no other source's dense case",
          "takes its prior's, `benchmarks/loso_refit.py` PRIOR_DEVICE). Not nested: the other sources' stored",
          "out-of-fold residuals were each computed with a fit that held out only their own source, so the judged",
          "source's dense cases were in their fits (re-pricing every source inside every fold would remove that).", "",
          "| source | inside the band | cases | coverage (%) |", "|---|---|---|---|"]
    hit_all = n_all = 0
    for src, (hit, n) in coverage.items():
        L.append(f"| {src} | {hit} | {n} | {_pct(hit / n if n else None)} |")
        hit_all += hit
        n_all += n
    L += [f"| **all** | {hit_all} | {n_all} | {_pct(hit_all / n_all if n_all else None)} |", "",
          "## Case by case", "", "| case | corpus | predicted (s) | measured (s) | error (%) | MFU (%) |",
          "|---|---|---|---|---|---|"]
    for c in rep.cases:
        if c.error is None:
            L.append(f"| {c.id} | {c.corpus} | - | {c.measured_step_time_s or '-'} | FAILED: {c.failure} | - |")
        else:
            L.append(f"| {c.id} | {c.corpus} | {c.predicted_step_time_s:.3f} | {c.measured_step_time_s:.3f} | "
                     f"{c.error * 100:+.1f} | {c.mfu * 100:.1f} |")
    return "\n".join(L) + "\n"


SERVING_CORPUS = "inference-public.yaml"
FIGURE_LABELS = {"output_tokens_per_s": "out tok/s", "total_tokens_per_s": "total tok/s", "ttft_s": "TTFT",
                 "tpot_s": "TPOT", "e2e_latency_s": "e2e"}


def _figure(key: str, value: float) -> str:
    """A serving figure as the table shows it: tokens/s whole, seconds in s or ms."""
    if key.endswith("_per_s"):
        return f"{value:,.0f}"
    return f"{value:.1f} s" if value >= 1.0 else f"{value * 1e3:.1f} ms"


def serving_validation_markdown(rep: InferenceReport) -> str:
    L = ["# Serving validation", "",
         "Generated by `python -m narrowpath.validate.regenerate` (CI fails when this file is stale): every case of",
         f"`{SERVING_CORPUS}` (an unmodified copy of `shared/validation/`) run through `narrowpath validate --corpus`,",
         "the same calibration profiles as training. Error = (predicted − measured) / measured per published figure;",
         "docs/serving.md says what each stack setting does and why the large errors remain.", "",
         f"**All figures: mean |error| {_pct(rep.mean_abs_error)} %, worst {_pct(rep.max_abs_error)} % "
         f"({len(rep.all_errors)} figures of {len(rep.cases)} cases).**", "",
         "## By group", "", "| kind | group | figures | mean abs error (%) | worst (%) |", "|---|---|---|---|---|"]
    for kind in ("regime", "generation", "precision", "family", "stack"):
        for name, g in rep.grouped(kind).items():
            L.append(f"| {kind} | {name} | {g['figures']} | {_pct(g['mean_abs_error'])} | {_pct(g['max_abs_error'])} |")
    L += ["", "## Figure by figure", "", "| case | figure | predicted | measured | error (%) |", "|---|---|---|---|---|"]
    for c in rep.cases:
        if c.failure is not None:
            L.append(f"| {c.id} | - | - | - | FAILED: {c.failure} |")
        for key, f in c.figures.items():
            L.append(f"| {c.id} | {FIGURE_LABELS.get(key, key)} | {_figure(key, f.predicted)} | "
                     f"{_figure(key, f.measured)} | {f.error * 100:+.1f} |")
    return "\n".join(L) + "\n"


def residuals_json(records: list[dict]) -> str:
    return json.dumps({"schema": "narrowpath-residuals/1",
                       "note": "generated by python -m narrowpath.validate.regenerate; do not edit",
                       "band_scale": band_scale(records), "cases": records}, indent=1, sort_keys=True) + "\n"


def targets() -> tuple[Path, Path, Path]:
    residuals = Path(str(resources.files("narrowpath.catalog").joinpath("residuals.json")))
    docs = Path(__file__).resolve().parents[3] / "docs"
    return residuals, docs / "validation.md", docs / "serving-validation.md"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m narrowpath.validate.regenerate", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a shipped file is stale")
    args = ap.parse_args(argv)
    records, stale_oof = with_out_of_fold(residual_records())
    if stale_oof:
        print(f"{'stale' if args.check else 'warning'}: {len(stale_oof)} cases' out-of-fold residuals "
              f"(catalog/residuals_oof.json, e.g. {stale_oof[0]}) were computed for another model: run python "
              "benchmarks/loso_refit.py --write, then this again", file=sys.stderr)
    texts = {}
    res_path, doc_path, serving_path = targets()
    texts[res_path] = residuals_json(records)
    texts[doc_path] = validation_markdown(run_validation(None), loso_coverage(records))
    texts[serving_path] = serving_validation_markdown(run_inference_validation(shipped_corpus_path(SERVING_CORPUS)))
    stale = [p for p, t in texts.items() if not p.exists() or p.read_text() != t]
    if args.check:
        for p in stale:
            print(f"stale: {p} (run python -m narrowpath.validate.regenerate)", file=sys.stderr)
        return 1 if stale or stale_oof else 0
    for p, t in texts.items():
        p.write_text(t)
        print(f"wrote {p}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
