"""`narrowpath trace`: tables, --json, --plots, --timeline and --against on a real trace."""
from __future__ import annotations

import json

import pytest

from narrowpath.cli.main import main


def test_json_has_ranks_with_breakdown_and_overlap(ddp_path, capsys):
    assert main(["trace", str(ddp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    r = out["ranks"][0]
    assert r["rank"] == 0
    assert set(r["breakdown_pct"]) >= {"compute", "exposed_comm", "memcpy", "idle"}
    assert abs(r["overlap_pct"] - 14.31) <= 1.0  # HTA 0.5.0 on this file
    for key in ("steps", "kernels", "collectives", "idle_causes_s", "critical_path"):
        assert r[key]


def test_tables(ddp_path, capsys):
    assert main(["trace", str(ddp_path)]) == 0
    text = capsys.readouterr().out
    assert "Temporal breakdown" in text and "all_reduce" in text and "critical path of step" in text


def test_kernel_category_shares_sum_to_100(ddp_path, capsys):
    """a100-ddp has 10 kernel categories: the table shows 8 and one '+2 more categories' row (memset 76 kernels and
    reduction 10, 0.359 ms), so its share column sums to 100 (it stopped at 99.651 % with two rows dropped)."""
    assert main(["trace", str(ddp_path)]) == 0
    text = capsys.readouterr().out
    table = [ln for ln in text.split("kernel category")[1].split("idle gaps")[0].splitlines()[2:] if ln.strip()]
    assert len(table) == 9 and table[-1].split()[:4] == ["+2", "more", "categories", "86"]
    assert sum(float(row[:50].split()[-1]) for row in table) == pytest.approx(100.0, abs=0.01)


def test_plots_and_timeline(ddp_path, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    tl = tmp_path / "tl.json"
    assert main(["trace", str(ddp_path), "--plots", str(tmp_path / "p"), "--timeline", str(tl)]) == 0
    for name in ("trace_breakdown.png", "trace_busbw.png", "trace_stragglers.png"):
        data = (tmp_path / "p" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    events = json.loads(tl.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") in ("computation", "communication", "memory", "other")]
    assert len(kernels) == 3774
    ar = [e for e in kernels if e["args"].get("collective") == "all_reduce"]
    assert len(ar) == 15 and all(e["args"]["busbw_GB_per_s"] > 0 for e in ar)


def _a_catalog_scenario() -> str:
    pytest.importorskip("narrowpath.schedule.step")
    from narrowpath.catalog import scenario_ids
    ids = scenario_ids()
    return "llama3-8b-h100-8" if "llama3-8b-h100-8" in ids else ids[0]


def test_against_a_catalog_scenario_names_differences(ddp_path, capsys):
    assert main(["trace", str(ddp_path), "--against", _a_catalog_scenario()]) == 0
    text = capsys.readouterr().out
    assert "Observed vs predicted" in text and "Differences that matter:" in text
    assert "idle (predicted: pipeline bubble): observed 77." in text


def test_against_json(ddp_path, capsys):
    assert main(["trace", str(ddp_path), "--against", _a_catalog_scenario(), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    against = out["against"]
    assert against["predicted_step_s"] > 0 and against["differences"]
    assert set(against["predicted_pct"]) == {"compute", "exposed_comm", "memcpy", "idle"}


def test_unknown_step_and_scenario_are_one_line_errors(ddp_path, capsys):
    assert main(["trace", str(ddp_path), "--step", "99"]) == 2
    assert "ProfilerStep#99" in capsys.readouterr().err
    assert main(["trace", str(ddp_path), "--against", "no-such-scenario"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


RANK_KEYS = {"rank", "path", "host_mode", "device_name", "span_s", "overlap_pct", "breakdown_pct", "breakdown_s",
             "sync_other_s", "comm_s", "overlap_s", "steps", "kernels", "collectives", "idle_causes_s",
             "idle_causes_pct", "critical_path"}
STEP_KEYS = {"step", "cpu_dur_s", "complete", "span_s", "overlap_pct", "breakdown_pct", "breakdown_s",
             "sync_other_s", "comm_s", "overlap_s", "collectives"}
COLLECTIVE_KEYS = {"kind", "group_size", "count", "total_s", "min_message_bytes", "max_message_bytes",
                   "total_bytes", "median_busbw_bytes_per_s", "max_busbw_bytes_per_s", "median_algbw_bytes_per_s"}
PARTS = {"compute", "exposed_comm", "memcpy", "idle"}


def test_json_schema_is_stable(ddp_path, pp_paths, capsys):
    """The --json layout is pinned: renaming or dropping a key fails here (bump JSON_SCHEMA_VERSION and these
    sets together). breakdown_pct holds exactly the four parts, summing to 100 for every rank and step."""
    from narrowpath.trace.analyze import JSON_SCHEMA_VERSION
    assert main(["trace", *map(str, pp_paths), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"schema_version", "ranks", "stragglers", "files_written"}
    assert out["schema_version"] == JSON_SCHEMA_VERSION == 1
    assert set(out["stragglers"]) == {"ranks", "num_matched", "unmatched_kinds", "last_arrival_count",
                                      "mean_lateness_s", "max_lateness_s", "worst", "mean_step_s", "num_dropped",
                                      "groups_known"}
    for r in out["ranks"]:
        assert set(r) == RANK_KEYS
        assert set(r["breakdown_pct"]) == PARTS == set(r["breakdown_s"])
        assert sum(r["breakdown_pct"].values()) == pytest.approx(100.0)
        assert sum(r["breakdown_s"].values()) == pytest.approx(r["span_s"])
        assert set(r["critical_path"]) == {"step", "span_s", "by_category_s", "by_category_pct", "num_nodes",
                                           "top_kernels"}
        for c in r["collectives"]:
            assert set(c) == COLLECTIVE_KEYS
        for st in r["steps"]:
            assert set(st) == STEP_KEYS and set(st["breakdown_pct"]) == PARTS
            assert sum(st["breakdown_pct"].values()) == pytest.approx(100.0)
        assert [st["complete"] for st in r["steps"]] == [True] * (len(r["steps"]) - 1) + [False]


def test_timeline_is_valid_chrome_trace_in_microseconds(ddp_path, ddp_json, tmp_path, capsys):
    """Loadable JSON; integer pid/tid with thread names; ts/dur in µs: the first kernel keeps its duration and
    its distance to the first ProfilerStep exactly as in the source file."""
    tl = tmp_path / "tl.json"
    assert main(["trace", str(ddp_path), "--timeline", str(tl)]) == 0
    data = json.loads(tl.read_text())
    events = data["traceEvents"]
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in events)
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"ProfilerStep", "stream 7"} <= set(names.values())
    src = ddp_json["traceEvents"]
    k_src = min((e for e in src if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    s_src = min((e for e in src if str(e.get("name", "")).startswith("ProfilerStep")), key=lambda e: e["ts"])
    k = min((e for e in events if e.get("cat") in ("computation", "communication", "other")), key=lambda e: e["ts"])
    st = min((e for e in events if e.get("cat") == "step"), key=lambda e: e["ts"])
    assert k["name"] == k_src["name"] and k["dur"] == pytest.approx(k_src["dur"], abs=1e-3)
    assert k["ts"] - st["ts"] == pytest.approx(k_src["ts"] - s_src["ts"], abs=1e-3)
    assert st["dur"] == pytest.approx(s_src["dur"], abs=1e-3)
    assert k["args"]["class"] == "computation" and k["args"]["step"] == 4


def test_against_a_yaml_scenario(r16_path, tmp_path, capsys):
    """A scenario file works like a catalog id; the observed step is the iteration (~215 ms), not the
    ~375 ms span of one step's kernels, and the differences are stated in percentage points."""
    _a_catalog_scenario()
    scen = tmp_path / "job.yaml"
    scen.write_text("id: a100-16\nsystem: dgx-a100\nmodel: gpt-1.7b\nnum_gpus: 16\n"
                    "plan: {tp: 1, pp: 4, dp: 4, mbs: 1, gbs: 64, precision: bf16}\n")
    assert main(["trace", str(r16_path), "--against", str(scen), "--json"]) == 0
    against = json.loads(capsys.readouterr().out)["against"]
    assert 0.205 < against["observed_step_s"] < 0.225
    assert against["differences"] and all("percentage points" in d or d.startswith("step time")
                                          or "largest message" in d for d in against["differences"])
