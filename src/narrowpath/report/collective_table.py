"""Text and JSON renderings of collective predictions: an nccl-tests-style sweep, a corpus check, a log compare.

Columns follow nccl-tests (size in bytes, count in elements, time in µs, algbw/busbw in GB/s = 1e9 bytes/s),
with the algorithm and protocol the model chose added on the right.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, slots=True)
class SweepRow:
    size_bytes: float
    count: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    algorithm: str
    protocol: str


@dataclass(frozen=True, slots=True)
class CorpusRow:
    case_id: str
    op: str
    num_gpus: int
    algorithm: str
    predicted_busbw_bytes_per_s: float
    measured_busbw_bytes_per_s: float
    chosen: str

    @property
    def error(self) -> float:
        """Signed relative error (predicted − measured) / measured."""
        return self.predicted_busbw_bytes_per_s / self.measured_busbw_bytes_per_s - 1.0


def sweep_text(rows: Sequence[SweepRow], *, title: str, dtype: str = "float") -> str:
    lines = [f"# {title}",
             f"#{'size':>12} {'count':>12} {'type':>6} {'time':>10} {'algbw':>8} {'busbw':>8}  algorithm",
             f"#{'(B)':>12} {'(elements)':>12} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}"]
    for r in rows:
        lines.append(f" {int(r.size_bytes):>12} {r.count:>12} {dtype:>6} {r.time_s * 1e6:>10.2f} "
                     f"{r.algbw_bytes_per_s / 1e9:>8.2f} {r.busbw_bytes_per_s / 1e9:>8.2f}  {r.algorithm}/{r.protocol}")
    if rows:
        avg = sum(r.busbw_bytes_per_s for r in rows) / len(rows)
        lines.append(f"# Avg bus bandwidth    : {avg / 1e9:.4f}  (predicted)")
    return "\n".join(lines)


def corpus_text(rows: Sequence[CorpusRow], source: str, failed: Sequence[tuple[str, str]] = ()) -> str:
    lines = [f"# collective corpus {source}: predicted vs measured busbw (GB/s = 1e9 bytes/s)",
             f"{'case':<36} {'op':<14} {'gpus':>5} {'algorithm':<10} {'chosen':<18} {'predicted':>10} "
             f"{'measured':>9} {'error':>8}"]
    for r in rows:
        lines.append(f"{r.case_id:<36} {r.op:<14} {r.num_gpus:>5} {r.algorithm:<10} {r.chosen:<18} "
                     f"{r.predicted_busbw_bytes_per_s / 1e9:>10.1f} {r.measured_busbw_bytes_per_s / 1e9:>9.1f} "
                     f"{r.error:>+8.1%}")
    lines += [f"FAILED {cid}: {why}" for cid, why in failed]
    mean, worst = summary(rows)
    lines.append(f"mean |error| {mean:.1%}, max |error| {worst:.1%} over {len(rows)} cases"
                 + (f" ({len(failed)} not priced)" if failed else ""))
    return "\n".join(lines)


def summary(rows: Sequence[CorpusRow]) -> tuple[float, float]:
    errs = [abs(r.error) for r in rows]
    return (sum(errs) / len(errs), max(errs)) if errs else (0.0, 0.0)


def corpus_json(rows: Sequence[CorpusRow], failed: Sequence[tuple[str, str]] = ()) -> dict:
    mean, worst = summary(rows)
    extra = {"failed": [{"id": cid, "failure": why} for cid, why in failed]} if failed else {}
    return {"cases": [{"id": r.case_id, "op": r.op, "num_gpus": r.num_gpus, "algorithm": r.algorithm,
                       "chosen": r.chosen, "predicted_busbw_GBps": r.predicted_busbw_bytes_per_s / 1e9,
                       "measured_busbw_GBps": r.measured_busbw_bytes_per_s / 1e9, "error": r.error} for r in rows],
            "mean_abs_error": mean, "max_abs_error": worst, **extra}


def compare_text(pairs: Sequence[tuple[float, float, float, SweepRow]], *, title: str) -> str:
    """pairs: (size_bytes, measured time_s, measured busbw bytes/s, predicted row)."""
    lines = [f"# {title}",
             f"#{'size':>12} {'meas time':>10} {'pred time':>10} {'meas busbw':>10} {'pred busbw':>10} "
             f"{'error':>8}  algorithm",
             f"#{'(B)':>12} {'(us)':>10} {'(us)':>10} {'(GB/s)':>10} {'(GB/s)':>10} {'(time)':>8}"]
    for size, t_meas, bus_meas, p in pairs:
        err = p.time_s / t_meas - 1.0 if t_meas > 0 else float("nan")
        lines.append(f" {int(size):>12} {t_meas * 1e6:>10.2f} {p.time_s * 1e6:>10.2f} {bus_meas / 1e9:>10.2f} "
                     f"{p.busbw_bytes_per_s / 1e9:>10.2f} {err:>+8.1%}  {p.algorithm}/{p.protocol}")
    return "\n".join(lines)
