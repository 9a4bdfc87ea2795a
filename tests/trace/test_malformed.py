"""A file that cannot be read is one TraceFormatError naming the file and what is wrong — never a traceback,
and in the CLI one line on stderr with exit code 2."""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass

import pytest

from narrowpath.cli.main import main
from narrowpath.errors import TraceFormatError
from narrowpath.trace.reader import read_rank, read_trace


@dataclass(frozen=True)
class TC:
    name: str
    content: bytes
    message: str


GOOD = json.dumps({"deviceProperties": [{"name": "X"}], "traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
     "args": {"stream": 7, "correlation": 1}}]}, indent=2).encode()

CASES = [
    TC("empty.json", b"", "file is empty"),
    TC("not_json.json", b"hello world", "expected a JSON object"),
    TC("array.json", b"[1, 2, 3]", "expected a JSON object"),
    TC("no_events.json", b'{"schemaVersion": 1}', "no 'traceEvents'"),
    TC("events_not_array.json", b'{"traceEvents": {"a": 1}}', "'traceEvents' is not an array"),
    TC("truncated.json", GOOD[: len(GOOD) // 2], "truncated"),
    TC("cut_after_bracket.json", b'{"traceEvents": [', "truncated"),
    TC("bad_syntax.json", b'{"traceEvents": [{"ph": "X",, "ts": 1}]}', "invalid JSON"),
    TC("missing_comma.json", b'{"traceEvents": [{"ph": "M"} {"ph": "M"}]}', "expected ',' or ']'"),
    TC("event_not_object.json", b'{"traceEvents": [1, 2]}', "not an object"),
    TC("no_ts.json", b'{"deviceProperties": [{}], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k"}]}',
       "no numeric 'ts'"),
    TC("ts_is_a_list.json", b'{"deviceProperties": [{}], "traceEvents": [{"ph": "X", "cat": "kernel", '
       b'"name": "k", "ts": [1], "dur": 1}]}', "no numeric 'ts'"),
    TC("latin1.json", b'{"traceEvents": [{"ph": "M", "name": "\xe9t\xe9"}]}', "not UTF-8"),
    TC("empty_object.json", b"{}", "no 'traceEvents'"),
    TC("empty_array.json", b"[]", "expected a JSON object"),
    TC("events_is_a_number.json", b'{"traceEvents": 5}', "'traceEvents' is not an array"),
    TC("no_dur.json", b'{"deviceProperties": [{}], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", '
       b'"ts": 1, "args": {"stream": 7}}]}', "no numeric 'ts'/'dur' (missing"),
    # `dur` NaN / Infinity (JSON readers take them) said only "cannot convert float NaN to integer"
    TC("dur_nan.json", b'{"deviceProperties": [{}], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", '
       b'"ts": 1, "dur": NaN, "args": {"stream": 7}}]}',
       "complete event 'k' (cat 'kernel') has no numeric 'ts'/'dur' (not a finite number: ts=1, dur=nan)"),
    TC("dur_infinite_host_op.json", b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", '
       b'"ts": 1, "dur": Infinity}]}', "complete event 'aten::add' (cat 'cpu_op') has no numeric 'ts'/'dur' "
       "(not a finite number: ts=1, dur=inf)"),
    TC("ts_nan.json", b'{"deviceProperties": [{}], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", '
       b'"ts": NaN, "dur": 1, "args": {"stream": 7}}]}', "(not a finite number: ts=nan, dur=1)"),
    TC("negative_dur.json", b'{"deviceProperties": [{}], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", '
       b'"ts": 1, "dur": -5, "args": {"stream": 7}}]}', "negative duration (-5 us)"),
    TC("trailing_text.json", GOOD + b" garbage", "content after the end of the top-level object"),
    TC("no_events.json.gz", b'{"traceEvents": []}', "nothing to measure"),
    TC("only_metadata.json", b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}',
       "nothing to measure"),
    # accepted before, and wrong: a kernel's args that are not an object lose its stream and launch (every share
    # became 0 %); a rank that is not a number was ignored for the file name's
    TC("args_a_string.json", b'{"deviceProperties": [{}], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", '
       b'"ts": 1, "dur": 1, "args": "x"}]}', "trace event 'k' (cat 'kernel', ts 1): 'args' must be an object, got 'x'"),
    TC("args_a_list_on_a_launch.json", b'{"deviceProperties": [{}], "traceEvents": [{"ph": "X", "cat": '
       b'"cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1, "args": [1]}]}',
       "'args' must be an object, got [1]"),
    TC("args_a_number_on_a_step.json", b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": '
       b'"ProfilerStep#1", "ts": 1, "dur": 1, "args": 0}]}', "'args' must be an object, got 0"),
    TC("rank_a_word.json", b'{"distributedInfo": {"rank": "zero", "world_size": 2}, ' + GOOD[1:],
       "distributedInfo.rank must be an integer >= 0, got 'zero'"),
    TC("rank_negative.json", b'{"distributedInfo": {"rank": -1}, ' + GOOD[1:],
       "distributedInfo.rank must be an integer >= 0, got -1"),
    TC("rank_a_bool.json", b'{"distributedInfo": {"rank": true}, ' + GOOD[1:],
       "distributedInfo.rank must be an integer >= 0, got True"),
    TC("world_a_string.json", b'{"distributedInfo": {"rank": 0, "world_size": "2"}, ' + GOOD[1:],
       "distributedInfo.world_size must be an integer >= 0, got '2'"),
    TC("rank_beyond_world.json", b'{"distributedInfo": {"rank": 2, "world_size": 2}, ' + GOOD[1:],
       "distributedInfo.rank 2 is not below distributedInfo.world_size 2"),
    TC("info_a_list.json", b'{"distributedInfo": [0], ' + GOOD[1:], "distributedInfo must be an object, got [0]"),
    TC("base_time_infinite.json", b'{"baseTimeNanoseconds": Infinity, ' + GOOD[1:],
       "baseTimeNanoseconds must be a number of nanoseconds, got inf"),  # found by test_fuzz.py
    TC("group_ranks_words.json", b'{"distributedInfo": {"rank": 0, "pg_config": [{"ranks": ["a"]}]}, ' + GOOD[1:],
       "distributedInfo.pg_config[0].ranks must be a list of ranks"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_malformed_file_is_one_clear_error(case, tmp_path):
    path = tmp_path / case.name
    path.write_bytes(case.content)
    with pytest.raises(TraceFormatError) as err:
        read_rank(path)
    assert str(path) in str(err.value)
    assert case.message in str(err.value)


def test_good_control_case_reads(tmp_path):
    """The fixture the truncated cases are cut from is itself valid (so those cases test truncation)."""
    path = tmp_path / "good.json"
    path.write_bytes(GOOD)
    assert read_rank(path).num_activities == 1


def test_odd_field_types_are_tolerated(tmp_path):
    """Non-numeric ids are read as unknown (-1), numeric strings as numbers, and `args: null` or no args as empty
    (the stream then comes from `tid`), not as an error."""
    path = tmp_path / "odd.json"
    path.write_bytes(b'{"deviceProperties": [{}], "traceEvents": ['
                     b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"stream": "7", '
                     b'"correlation": [1]}}, {"ph": "X", "cat": "kernel", "name": "k2", "ts": 3, "dur": 1, '
                     b'"args": null, "tid": 9}, {"ph": "X", "cat": "kernel", "name": "k3", "ts": 5, "dur": 1, '
                     b'"tid": 11}]}')
    r = read_rank(path)
    assert list(r.act_lane) == [7, 9, 11] and list(r.act_corr) == [-1, -1, -1]


def test_truncated_gzip(ddp_path, tmp_path):
    data = ddp_path.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(TraceFormatError, match="compressed data is corrupt or truncated"):
        read_rank(path)


def test_gzip_of_truncated_json(ddp_path, tmp_path):
    """A complete gzip stream of JSON cut in the middle of traceEvents."""
    text = gzip.decompress(ddp_path.read_bytes())
    path = tmp_path / "half.json.gz"
    path.write_bytes(gzip.compress(text[: len(text) // 2]))
    with pytest.raises(TraceFormatError, match="truncated"):
        read_rank(path)


@pytest.mark.parametrize("tail, message", [(b"", None), (b"\0" * 700, None), (b"garbage", "is not another gzip member")])
def test_gzip_members_and_padding(tail, message, tmp_path):
    """A gzip file of two members reads as their concatenation (as `gzip` does); zero padding after the last is
    allowed, other bytes are an error."""
    text = GOOD.decode()
    cut = text.index('"traceEvents"')
    path = tmp_path / "two_members.json.gz"
    path.write_bytes(gzip.compress(text[:cut].encode()) + gzip.compress(text[cut:].encode()) + tail)
    if message is None:
        assert read_rank(path).num_activities == 1
    else:
        with pytest.raises(TraceFormatError, match=message):
            read_rank(path)


def test_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(TraceFormatError, match="no such trace file"):
        read_trace(tmp_path / "nope.json")
    with pytest.raises(TraceFormatError, match="holds no .json"):
        read_trace(tmp_path)


def test_duplicate_rank_is_an_error(ddp_path, tmp_path):
    for name in ("a.json.gz", "b.json.gz"):
        (tmp_path / name).write_bytes(ddp_path.read_bytes())
    with pytest.raises(TraceFormatError, match="rank 0 .* already read"):
        read_trace(tmp_path)


def test_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_bytes(GOOD[:40])
    assert main(["trace", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("narrowpath: error:") and str(path) in err
    assert len(err.splitlines()) == 1


def test_events_the_reader_ignores_are_not_held_against_the_file(tmp_path):
    """A python_function event without `dur` is never looked at, so it is no error (tolerance), while the same
    defect on a kernel is."""
    path = tmp_path / "py.json"
    path.write_bytes(GOOD.replace(b'"traceEvents": [', b'"traceEvents": [{"ph": "X", "cat": "python_function", '
                                                    b'"name": "f", "ts": 1}, '))
    assert read_rank(path).num_activities == 1


def test_compression_is_recognised_by_content_not_name(ddp_path, tmp_path):
    """A gzip file named .json and a plain file named .json.gz read the same as correctly named ones."""
    gz_named_json = tmp_path / "really_gzip.json"
    gz_named_json.write_bytes(ddp_path.read_bytes())
    plain_named_gz = tmp_path / "really_plain.json.gz"
    plain_named_gz.write_bytes(gzip.decompress(ddp_path.read_bytes()))
    a, b = read_rank(gz_named_json), read_rank(plain_named_gz)
    assert a.num_activities == b.num_activities == 3774


def test_directory_mixing_ranks_with_a_duplicate(ddp_path, pp_paths, tmp_path):
    """Two pipeline ranks plus a second file claiming rank 1: one error naming both files."""
    for p in pp_paths:
        (tmp_path / p.name).write_bytes(p.read_bytes())
    dup = tmp_path / "zz-copy.json.gz"
    dup.write_bytes(pp_paths[1].read_bytes())
    with pytest.raises(TraceFormatError) as err:
        read_trace(tmp_path)
    assert "rank 1" in str(err.value) and "zz-copy" in str(err.value) and pp_paths[1].name in str(err.value)


@pytest.mark.parametrize("name, content, message", [
    ("bigint.json", b'{"traceEvents": [{"ph": "X", "ts": ' + b"9" * 5000 + b"}]}", "more than 4300 digits"),
    ("deep.json", b'{"traceEvents": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "nested too deeply"),
    ("deep_args.json", b'{"traceEvents": [{"ph": "X", "args": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}]}",
     "nested too deeply"),
])
def test_pathological_json_is_one_clear_error(name, content, message, tmp_path):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as err:
        read_rank(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_same_file_twice_is_an_error_not_two_ranks(tmp_path):
    path = tmp_path / "good.json"
    path.write_bytes(GOOD)
    with pytest.raises(TraceFormatError, match="given more than once"):
        read_trace([path, tmp_path])


@pytest.mark.parametrize("flag, target, message", [
    ("--plots", "file", "--plots {}: exists and is not a directory"),
    ("--plots", "under_file", "is not a writable directory"),
    ("--timeline", "dir", "--timeline {}: is a directory"),
    ("--timeline", "under_file", "is not a writable directory"),
])
def test_bad_output_paths_fail_before_reading(flag, target, message, tmp_path, capsys):
    path = tmp_path / "good.json"
    path.write_bytes(GOOD)
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    out = {"file": a_file, "dir": tmp_path, "under_file": a_file / "sub"}[target]
    assert main(["trace", str(path), flag, str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert message.format(out) in err


def test_timeline_parent_directory_is_created(tmp_path, capsys):
    path = tmp_path / "good.json"
    path.write_bytes(GOOD)
    out = tmp_path / "new" / "t.json"
    assert main(["trace", str(path), "--timeline", str(out)]) == 0
    assert json.loads(out.read_text())["traceEvents"]
