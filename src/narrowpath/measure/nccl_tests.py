"""Parser of NVIDIA nccl-tests output (`all_reduce_perf`, `all_gather_perf`, …).

The layout (nccl-tests src/common.cu, v2.x): header lines start with `#`; one data row per size:

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
         1048576        262144     float     sum      -1    40.12   26.14   45.74      0    39.87   26.30   46.02      0
    # Avg bus bandwidth    : 83.4247

out-of-place columns first, then in-place. Older releases have no `root` column; `#wrong` reads `N/A` when
checking is off (`-c 0`). Times are microseconds and bandwidths GB/s (1e9 bytes/s); we convert to SI here.
`# Collective test starting: all_reduce_perf` (newer releases) names the test; `#  Rank  N … device … NAME`
lines list the ranks and their devices.

One file may hold several tests, one after another (`for t in all_reduce all_gather; do ./${t}_perf; done > log`,
or the tables of several ops `narrowpath probe collectives` prints): a test's header line (`# nccl-tests
version`, `# Collective test starting`, `# nThread`, or the column header `#  size  count …`) that comes after data
rows starts the next test, and each test is read on its own (`parse_nccl_tests_logs`); merged, the rows of an
all_reduce and an all_gather were fitted as one op over the ranks of both.
"""
from __future__ import annotations

import gzip
import math
import re
from dataclasses import dataclass
from pathlib import Path

from narrowpath.errors import NarrowpathError
from narrowpath.measure.busbw import NCCL_TEST_BINARIES


@dataclass(frozen=True, slots=True)
class NcclTestsRow:
    """One size of an nccl-tests run, SI units. In-place fields are None when the log has no in-place columns."""

    size_bytes: float
    count: int
    dtype: str
    redop: str
    root: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    num_wrong: int | None
    in_place_time_s: float | None = None
    in_place_algbw_bytes_per_s: float | None = None
    in_place_busbw_bytes_per_s: float | None = None
    in_place_num_wrong: int | None = None


@dataclass(frozen=True, slots=True)
class NcclTestsLog:
    """A whole log: the rows plus what the header and footer say."""

    rows: tuple[NcclTestsRow, ...]
    op: str | None
    """Our op name (`all_reduce`, …) from `Collective test starting`, or None if the log does not say."""
    num_ranks: int | None
    """Number of `#  Rank` lines, or None."""
    devices: tuple[str, ...]
    avg_busbw_bytes_per_s: float | None
    """The `# Avg bus bandwidth` footer, bytes/s."""
    line: int = 1
    """Line of the file where this test starts (a file may hold several)."""


def _wrong(tok: str) -> int | None:
    return None if tok.upper() == "N/A" else int(tok)


def _row(tokens: list[str], line_no: int, source: str) -> NcclTestsRow:
    try:
        size, count, dtype, redop = int(tokens[0]), int(tokens[1]), tokens[2], tokens[3]
        rest = tokens[4:]
        root = -1
        if len(rest) in (5, 9):  # with a root column
            root, rest = int(rest[0]), rest[1:]
        if len(rest) not in (4, 8):
            raise ValueError(f"{len(tokens)} columns")
        t, alg, bus = float(rest[0]) * 1e-6, float(rest[1]) * 1e9, float(rest[2]) * 1e9
        row = dict(size_bytes=float(size), count=count, dtype=dtype, redop=redop, root=root, time_s=t,
                   algbw_bytes_per_s=alg, busbw_bytes_per_s=bus, num_wrong=_wrong(rest[3]))
        if len(rest) == 8:
            row.update(in_place_time_s=float(rest[4]) * 1e-6, in_place_algbw_bytes_per_s=float(rest[5]) * 1e9,
                       in_place_busbw_bytes_per_s=float(rest[6]) * 1e9, in_place_num_wrong=_wrong(rest[7]))
        labels = ("time (us)", "algbw (GB/s)", "busbw (GB/s)")
        for label, tok in [*zip(labels, rest[0:3]), *zip((f"in-place {x}" for x in labels), rest[4:7])]:
            if not (math.isfinite(float(tok)) and float(tok) >= 0):  # not a measurement: +nan% in a compare
                raise ValueError(f"{label} {tok} is not a finite number >= 0")
        if size < 0:
            raise ValueError(f"negative size {size}")
        if size > 0 and t == 0:
            raise ValueError("time (us) 0 for a message of more than 0 bytes")
        return NcclTestsRow(**row)
    except (ValueError, IndexError) as exc:
        raise NarrowpathError(f"{source} line {line_no}: cannot read data row {' '.join(tokens)!r} ({exc})") \
            from None


_TEST_START = re.compile(r"#\s*(nccl-tests version|Collective test starting:|nThread\s+\d|size\s+count\b)")
"""Header lines of an nccl-tests test: after data rows, one of them starts the next test of the file."""


def parse_nccl_tests_logs(text: str, source: str = "nccl-tests log") -> tuple[NcclTestsLog, ...]:
    """Each test of an nccl-tests log (rows, test name, rank count, devices, average busbw), in file order; a test
    without data rows (one nccl-tests skipped) is left out. Errors start with `source`."""
    tests, cur = [], None
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if cur is None or (cur["rows"] and s.startswith("#") and _TEST_START.match(s)):
            cur = {"rows": [], "devices": [], "op": None, "avg": None, "ranks": 0, "line": no}
            tests.append(cur)
        if s.startswith("#"):
            m = re.search(r"Collective test starting:\s*(\S+)", s)
            if m:
                cur["op"] = NCCL_TEST_BINARIES.get(m.group(1), m.group(1))
            m = re.match(r"#\s*Rank\s+\d+\b.*?device\s+\d+\s+\[[^\]]*\]\s+(.+)$", s)
            if m:
                cur["ranks"] += 1
                cur["devices"].append(m.group(1).strip())
            m = re.match(r"#\s*Avg bus bandwidth\s*:\s*([\d.eE+-]+)", s)
            if m:
                cur["avg"] = float(m.group(1)) * 1e9
            continue
        tokens = s.split()
        if not tokens[0].isdigit():
            continue  # e.g. NCCL INFO/WARN lines interleaved in the log
        cur["rows"].append(_row(tokens, no, source))
    logs = tuple(NcclTestsLog(tuple(t["rows"]), t["op"], t["ranks"] or None, tuple(t["devices"]), t["avg"], t["line"])
                 for t in tests if t["rows"])
    if not logs:
        raise NarrowpathError(f"{source}: no data rows found (expected lines like "
                              "'1048576  262144  float  sum  -1  40.1  26.1  45.7  0 ...')")
    return logs


def describe_test(source: str, log: NcclTestsLog, num_tests: int) -> str:
    """How messages name one test of a log: the file alone when it holds one test."""
    if num_tests == 1:
        return source
    return f"{source} (test of line {log.line}: {log.op or 'not named'})"


def op_and_ranks(log: NcclTestsLog, name: str, *, op: str | None = None, num_ranks: int | None = None,
                 op_flag: str = "--op", ranks_flag: str = "--ranks") -> tuple[str | None, int | None]:
    """The collective and rank count of one test: what the log says (its `Collective test starting` line and its
    `# Rank` lines) wins, the flags stand in for what it does not say, and a flag that contradicts the log is
    refused naming the log (an 8-GPU all_reduce log fitted under `--ranks 4` gave bw_efficiency 0.4027 instead of
    its 0.4698). One rank is refused too: a collective over one rank moves no data (bus factor 0), so it has no
    bandwidth to fit or compare (a one-GPU all_reduce log divided by zero in calibrate)."""
    if op and log.op and op != log.op:
        raise NarrowpathError(f"{name}: the log's test is {log.op} (its 'Collective test starting' line), not "
                              f"{op_flag} {op}; {op_flag} names the test of logs that do not say (drop it, or give "
                              "that test's log)")
    if num_ranks and log.num_ranks and num_ranks != log.num_ranks:
        raise NarrowpathError(f"{name}: the log lists {log.num_ranks} ranks (its '# Rank' lines), not {ranks_flag} "
                              f"{num_ranks}; {ranks_flag} gives the ranks of logs that do not list them (drop it, or "
                              "give the log of that run)")
    n = log.num_ranks or num_ranks
    if n is not None and n < 2:
        where = "its one '# Rank' line" if log.num_ranks else f"{ranks_flag} {n}"
        raise NarrowpathError(f"{name}: a test over {n} rank ({where}): a collective over one rank moves no data, "
                              "so there is no bandwidth to fit or compare; give a log of 2 or more ranks")
    return log.op or op, n


def _one(logs: tuple[NcclTestsLog, ...], source: str) -> NcclTestsLog:
    if len(logs) > 1:
        raise NarrowpathError(f"{source}: holds {len(logs)} tests ("
                              + ", ".join(f"{t.op or 'not named'} from line {t.line}" for t in logs)
                              + "); read them with parse_nccl_tests_logs")
    return logs[0]


def parse_nccl_tests_log_full(text: str, source: str = "nccl-tests log") -> NcclTestsLog:
    """The one test of an nccl-tests log (several are an error naming them: `parse_nccl_tests_logs` reads those)."""
    return _one(parse_nccl_tests_logs(text, source), source)


def read_nccl_tests_logs(path: str | Path) -> tuple[NcclTestsLog, ...]:
    """Every test of an nccl-tests log file (plain or gzip-compressed); every error names the file."""
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except OSError as exc:  # includes gzip.BadGzipFile
        raise NarrowpathError(f"{path}: cannot read nccl-tests log ({exc.strerror or exc})") from None
    except EOFError:
        raise NarrowpathError(f"{path}: cannot read nccl-tests log (truncated gzip file)") from None
    # nccl-tests prints ASCII; a stray byte (a host name, an interleaved NCCL line) must not stop the parse
    return parse_nccl_tests_logs(raw.decode("utf-8", errors="replace"), source=f"nccl-tests log {path}")



def parse_nccl_tests_log(text: str) -> list[NcclTestsRow]:
    """The data rows of an nccl-tests log (out-of-place and in-place figures per size), SI units."""
    return list(parse_nccl_tests_log_full(text).rows)
