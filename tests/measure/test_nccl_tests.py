"""nccl-tests logs parse into SI rows, in the exact column layout nccl-tests prints."""
from __future__ import annotations

import pytest

from narrowpath.errors import NarrowpathError
from narrowpath.measure.nccl_tests import parse_nccl_tests_log, parse_nccl_tests_log_full
from narrowpath.report.measure_tables import format_nccl_table


def test_rows_are_si_with_out_of_place_and_in_place(nccl_log_text):
    """Times µs → s, bandwidths GB/s → bytes/s; both column groups are kept."""
    rows = parse_nccl_tests_log(nccl_log_text)
    assert [r.size_bytes for r in rows] == [8, 1024, 1048576, 16777216, 134217728]
    big = rows[-1]
    assert big.count == 33554432 and big.dtype == "float" and big.redop == "sum" and big.root == -1
    assert big.time_s == pytest.approx(1006.4e-6)
    assert big.algbw_bytes_per_s == pytest.approx(133.36e9)
    assert big.busbw_bytes_per_s == pytest.approx(233.39e9)
    assert big.num_wrong == 0
    assert big.in_place_time_s == pytest.approx(1002.8e-6)
    assert big.in_place_busbw_bytes_per_s == pytest.approx(234.22e9)


def test_header_and_footer(nccl_log_text):
    """The test name, the rank/device lines and the `# Avg bus bandwidth` footer are read."""
    log = parse_nccl_tests_log_full(nccl_log_text)
    assert log.op == "all_reduce"
    assert log.num_ranks == 8
    assert log.devices[0] == "NVIDIA A100-SXM4-80GB"
    assert log.avg_busbw_bytes_per_s == pytest.approx(88.4741e9)


def test_busbw_is_algbw_times_the_all_reduce_factor(nccl_log_text):
    """Consistency with PERFORMANCE.md: busbw = algbw · 2(n−1)/n on 8 ranks (to the log's 2 decimals)."""
    for r in parse_nccl_tests_log(nccl_log_text)[2:]:
        assert r.busbw_bytes_per_s == pytest.approx(r.algbw_bytes_per_s * 2 * 7 / 8, rel=2e-3)


def test_old_layout_without_root_and_unchecked(nccl_log_old_text):
    """Releases without the root column, and `N/A` in #wrong when checking is off."""
    log = parse_nccl_tests_log_full(nccl_log_old_text)
    assert len(log.rows) == 3 and log.op is None and log.num_ranks is None
    assert log.rows[0].num_wrong is None and log.rows[0].root == -1
    assert log.rows[2].time_s == pytest.approx(22e-6)


def test_probe_table_reads_back():
    """The probe's nccl-tests-format table parses back to the same numbers."""
    rows = [{"size_bytes": 4096 * 4 ** i, "count": 1024 * 4 ** i, "dtype": "float", "redop": "sum", "root": -1,
             "time_s": t, "algbw_bytes_per_s": 4096 * 4 ** i / t, "busbw_bytes_per_s": 4096 * 4 ** i / t}
            for i, t in enumerate((5.25e-5, 3.5e-4, 0.0125))]
    log = parse_nccl_tests_log_full(format_nccl_table(rows, op="all_reduce"))
    assert log.op == "all_reduce"
    assert [r.size_bytes for r in log.rows] == [r["size_bytes"] for r in rows]
    for got, want in zip(log.rows, rows):
        assert got.time_s == pytest.approx(want["time_s"], rel=2e-3)


def test_garbage_is_one_clear_error():
    with pytest.raises(NarrowpathError, match="no data rows"):
        parse_nccl_tests_log("hello\n# nothing here\n")
    with pytest.raises(NarrowpathError, match="line 1"):
        parse_nccl_tests_log("1024 256 float sum -1 abc 0.1 0.1 0\n")


def _as_all_gather(text: str) -> str:
    return text.replace("all_reduce_perf", "all_gather_perf").replace("     sum  ", "    none  ")


def test_a_file_of_several_tests_reads_each_on_its_own(nccl_log_text):
    """`for t in all_reduce all_gather; do ./${t}_perf; done > log`: two 8-rank tests of 5 sizes each. Merged, the
    parser gave op all_gather (the last name), 16 ranks (8 + 8 Rank lines) and 10 rows; read per test: all_reduce
    8 ranks 5 rows from line 1, all_gather 8 ranks 5 rows from line 28 (the second test's `# nThread` line: the
    first test's 26 lines, then an empty line 27)."""
    from narrowpath.measure.nccl_tests import parse_nccl_tests_logs
    text = nccl_log_text + "\n" + _as_all_gather(nccl_log_text)
    logs = parse_nccl_tests_logs(text)
    assert [(t.op, t.num_ranks, len(t.rows), t.line) for t in logs] == [("all_reduce", 8, 5, 1),
                                                                       ("all_gather", 8, 5, 28)]
    assert logs[1].rows[0].redop == "none" and logs[0].avg_busbw_bytes_per_s == pytest.approx(88.4741e9)
    with pytest.raises(NarrowpathError, match=r"holds 2 tests \(all_reduce from line 1, all_gather from line 28\)"):
        parse_nccl_tests_log_full(text)


def test_the_probe_tables_of_two_ops_read_back_as_two_tests():
    """`probe collectives` prints one table per op, each under its own `# Collective test starting`: they were one
    op with every size twice."""
    from narrowpath.measure.nccl_tests import parse_nccl_tests_logs
    rows = [{"size_bytes": 4096 * 4 ** i, "count": 1024 * 4 ** i, "dtype": "float", "redop": "sum", "root": -1,
             "time_s": t, "algbw_bytes_per_s": 4096 * 4 ** i / t, "busbw_bytes_per_s": 4096 * 4 ** i / t}
            for i, t in enumerate((5.25e-5, 3.5e-4, 0.0125))]
    text = format_nccl_table(rows, op="all_reduce") + "\n" + format_nccl_table(rows, op="all_to_all")
    logs = parse_nccl_tests_logs(text)
    assert [t.op for t in logs] == ["all_reduce", "all_to_all"]
    assert all([r.size_bytes for r in t.rows] == [4096, 16384, 65536] for t in logs)


def test_header_lines_before_any_row_stay_one_test(nccl_log_text):
    """A test's own header lines (version, `Collective test starting`, `# nThread`, Rank lines, column header), in
    either order, start no new test until rows have been read."""
    from narrowpath.measure.nccl_tests import parse_nccl_tests_logs
    moved = nccl_log_text.replace("# Collective test starting: all_reduce_perf\n", "")
    text = "# nccl-tests version 2.17.6 nccl-headers=22501\n# Collective test starting: all_reduce_perf\n" + moved
    assert [(t.op, t.num_ranks, len(t.rows)) for t in parse_nccl_tests_logs(text)] == [("all_reduce", 8, 5)]


# nccl-tests' own busbw, as each test's *GetBw in src/*.cu computes it from `count` (paramcount: the elements
# per rank for the gathering/scattering tests) and prints it beside `size` = max(send, recv bytes):
# (printed size in elements, nccl-tests busbw in elements/s) for count c, n ranks, time t.
_NCCL_TESTS_GETBW = {
    "all_reduce": lambda c, n, t: (c, c / t * 2 * (n - 1) / n),
    "all_gather": lambda c, n, t: (c * n, c * n / t * (n - 1) / n),
    "reduce_scatter": lambda c, n, t: (c * n, c * n / t * (n - 1) / n),
    "all_to_all": lambda c, n, t: (c * n, c * n / t * (n - 1) / n),
    "broadcast": lambda c, n, t: (c, c / t),
    "reduce": lambda c, n, t: (c, c / t),
    "send_recv": lambda c, n, t: (c, c / t),
    "gather": lambda c, n, t: (c * n, c * n / t * (n - 1) / n),
    "scatter": lambda c, n, t: (c * n, c * n / t * (n - 1) / n),
    "hypercube": lambda c, n, t: (c * n, c * (n - 1) / t),  # algBw = count·(n−1)/t, busBw = algBw
}


@pytest.mark.parametrize("op", sorted(set(_NCCL_TESTS_GETBW)))
@pytest.mark.parametrize("n", [2, 8])
def test_busbw_from_size_and_time_is_the_one_nccl_tests_prints(op, n):
    """Every test a log can name (busbw.NCCL_TEST_BINARIES): size/time × bus_factor(op, n) equals nccl-tests' busbw
    column. gather and scatter had factor 1: an 8-rank gather log calibrated 8/7 high (55.92 GB/s where its
    busbw column said 48.93 = 55.92 × 7/8)."""
    from narrowpath.measure.busbw import NCCL_TEST_BINARIES, bus_factor
    assert set(NCCL_TEST_BINARIES.values()) == set(_NCCL_TESTS_GETBW)
    size, busbw = _NCCL_TESTS_GETBW[op](1 << 20, n, 1e-3)
    assert size / 1e-3 * bus_factor(op, n) == pytest.approx(busbw, rel=1e-12)


def test_calibrate_reads_a_gather_log_at_its_own_busbw(tmp_path, capsys, nccl_log_text):
    """An 8-rank gather_perf log whose busbw column is algbw × 7/8 (GatherGetBw): the large-message busbw calibrate
    reports is the median of that column over the sizes >= 1/8 of the largest, 16 MiB and 128 MiB: algbw
    16777216 B / 163.9 us = 102.36 and 134217728 B / 1006.4 us = 133.36 GB/s, busbw × 7/8 = 89.57 and 116.69,
    median 103.13 GB/s (with factor 1 it read the algbw median, 117.86)."""
    import json
    import statistics
    from narrowpath.cli.main import main
    rows = [(1048576, 62.78), (16777216, 163.9), (134217728, 1006.4)]
    lines = ["# Collective test starting: gather_perf"]
    lines += [f"#  Rank  {i} Group  0 Pid  1 on h device  {i} [0x07] NVIDIA A100-SXM4-80GB" for i in range(8)]
    for size, us in rows:
        alg = size / us / 1e3
        lines.append(f"{size:12d}  {size // 32:12d}  float  none  0  {us:7.2f}  {alg:6.2f}  {alg * 7 / 8:6.2f}  0")
    (tmp_path / "g.log").write_text("\n".join(lines) + "\n")
    assert main(["calibrate", "--nccl-log", str(tmp_path / "g.log"), "--line-rate", "scale_up=300e9",
                 "-o", str(tmp_path / "p.yaml"), "--json"]) == 0
    source = json.loads(capsys.readouterr().out)["profile"]["sources"]["tiers.scale_up"]
    column = statistics.median(round(s / us / 1e3 * 7 / 8, 2) for s, us in rows if s >= rows[-1][0] / 8)
    assert f"large-message busbw {column:.2f} GB/s" in source
