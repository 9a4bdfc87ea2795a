"""`narrowpath collective`: what is not a measurement is refused naming the flag or line (negative or zero times
gave `+nan%`, a busbw of 477,600 GB/s passed without a word), `--algorithm ring` for send_recv is refused (it
printed p2p rows under a "ring" header), and `-e 1P` is accepted as its help says."""
from __future__ import annotations

import pytest

from narrowpath.cli.main import main
from tests.cli.one_line import one_line_error

ROW = "     1048576        262144     float     sum      -1    {t}   16.70   {bus}      0    61.42   17.07   29.88      0\n"
HEAD = "# Collective test starting: all_reduce_perf\n"
CASE = ("schema: collective-corpus/1\ncases:\n  - {{hardware: {{gpu: H100-SXM5-80GB, num_gpus: 8}}, "
        "collective: all_reduce, message_bytes: 1e8, measured: {{busbw_GBps: {bw}}}}}\n")


@pytest.mark.parametrize("t, bus, fragment", [
    ("-62.78", "29.23", "time (us) -62.78 is not a finite number >= 0"),
    ("nan", "29.23", "time (us) nan is not a finite number >= 0"),
    ("0.00", "29.23", "time (us) 0 for a message of more than 0 bytes"),
    ("62.78", "-5", "busbw (GB/s) -5 is not a finite number >= 0"),
])
def test_compare_refuses_rows_that_are_not_measurements(tmp_path, capsys, t, bus, fragment):
    log = tmp_path / "x.log"
    log.write_text(HEAD + ROW.format(t=t, bus=bus))
    one_line_error(capsys, ["collective", "--system", "dgx-h100", "--gpus", "8", "--compare", str(log)],
                   f"{log} line 2", fragment)


def test_compare_refuses_a_busbw_no_link_of_the_system_carries(tmp_path, capsys):
    log = tmp_path / "x.log"
    log.write_text(HEAD + ROW.format(t="62.78", bus="477600"))
    one_line_error(capsys, ["collective", "--system", "dgx-h100", "--gpus", "8", "--compare", str(log)],
                   "--compare", "477,600.0 GB/s is 1,061x the fastest link of dgx-h100 (450 GB/s per GPU)")


def test_corpus_refuses_an_absurd_busbw(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text(CASE.format(bw=477600))
    one_line_error(capsys, ["collective", "--corpus", str(f)], "corpus.cases[0].measured.busbw_GBps",
                   "fastest link of")
    f.write_text(CASE.format(bw=400))
    assert main(["collective", "--corpus", str(f)]) == 0


def test_a_plausible_log_still_compares(tmp_path, capsys):
    log = tmp_path / "x.log"
    log.write_text(HEAD + ROW.format(t="62.78", bus="29.23"))
    assert main(["collective", "--system", "dgx-h100", "--gpus", "8", "--compare", str(log)]) == 0
    assert "nan" not in capsys.readouterr().out


@pytest.mark.parametrize("op, alg, only", [("send_recv", "ring", "p2p"), ("all_to_all", "tree", "direct")])
def test_an_algorithm_the_op_does_not_run_is_refused(capsys, op, alg, only):
    one_line_error(capsys, ["collective", "--system", "dgx-h100", "--op", op, "--algorithm", alg],
                   "--algorithm", f"{alg} does not apply to {op}", f"runs it as {only} only")
    assert main(["collective", "--system", "dgx-h100", "--op", op, "--algorithm", only, "-e", "1M"]) == 0
    out = capsys.readouterr().out
    assert f"{only}/" in out and f"algorithm {only}" in out


def test_max_bytes_takes_1p_as_its_help_says(capsys):
    assert main(["collective", "--system", "dgx-h100", "-b", "1T", "-e", "1P", "-f", "1024"]) == 0
    out = capsys.readouterr().out
    assert "1125899906842624" in out
    one_line_error(capsys, ["collective", "--system", "dgx-h100", "-e", "2P"], "collective.size", "from 0 to 1P")


def test_compare_puts_each_test_of_a_log_beside_the_model(tmp_path, capsys):
    """An all_reduce test then an all_gather test in one file: one table each, titled with its op and where it
    starts (lines 1 and 3); merged they were one all_gather table with every size twice."""
    log = tmp_path / "x.log"
    log.write_text(HEAD + ROW.format(t="62.78", bus="29.23") + HEAD.replace("all_reduce", "all_gather")
                   + ROW.format(t="62.78", bus="14.61"))
    assert main(["collective", "--system", "dgx-h100", "--gpus", "8", "--compare", str(log)]) == 0
    titles = [line for line in capsys.readouterr().out.splitlines() if "vs model" in line]
    assert len(titles) == 2
    assert titles[0].startswith(f"# all_reduce on 8 GPUs of dgx-h100: nccl-tests log {log} (test of line 1: "
                                "all_reduce)")
    assert titles[1].startswith(f"# all_gather on 8 GPUs of dgx-h100: nccl-tests log {log} (test of line 3: "
                                "all_gather)")


def test_compare_refuses_a_one_rank_log_and_a_contradicting_gpus(tmp_path, capsys):
    """A one-GPU log priced as a 1-GPU collective printed predicted 0.00 us and -100 % on every row; --gpus 4
    against a log of 2 Rank lines silently compared a 4-GPU model with a 2-GPU measurement."""
    rank = "#  Rank  {i} Group  0 Pid  28307 on      gpu59 device  {i} [0x18] NVIDIA H100 80GB HBM3\n"
    log = tmp_path / "x.log"
    log.write_text(HEAD + rank.format(i=0) + ROW.format(t="62.78", bus="29.23"))
    one_line_error(capsys, ["collective", "--system", "dgx-h100", "--compare", str(log)],
                   f"{log}: a test over 1 rank", "no bandwidth to fit or compare")
    log.write_text(HEAD + rank.format(i=0) + rank.format(i=1) + ROW.format(t="62.78", bus="16.70"))
    one_line_error(capsys, ["collective", "--system", "dgx-h100", "--gpus", "4", "--compare", str(log)],
                   f"{log}: the log lists 2 ranks (its '# Rank' lines), not --gpus 4")
    assert main(["collective", "--system", "dgx-h100", "--compare", str(log)]) == 0
    assert "all_reduce on 2 GPUs" in capsys.readouterr().out


def test_compare_refuses_a_test_the_model_does_not_price(tmp_path, capsys):
    """A gather_perf log: the model has no gather; the error names the log (it named only the op)."""
    log = tmp_path / "g.log"
    log.write_text(HEAD.replace("all_reduce", "gather") + ROW.format(t="62.78", bus="14.61"))
    one_line_error(capsys, ["collective", "--system", "dgx-h100", "--gpus", "8", "--compare", str(log)],
                   f"{log}: a gather test; the model prices all_reduce")
