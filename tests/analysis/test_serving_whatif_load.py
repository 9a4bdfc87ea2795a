"""The what-ifs of a serving run are measured on a load of the same regime as the headline (fifty-sixth session's
review): a closed loop's what-ifs keep WHATIF_CONCURRENCY_MULTIPLE times its concurrency, a fixed batch stays
whole, and the console says when the what-ifs ran on fewer requests than the run."""
import json

from narrowpath.analysis.serving_whatif import WHATIF_CONCURRENCY_MULTIPLE, WHATIF_REQUESTS, whatif_requests
from narrowpath.cli.main import main
from narrowpath.spec.serving import Load


def _load(**kw) -> Load:
    return Load(input_tokens=128, output_tokens=64, **kw)


def test_closed_loop_keeps_five_times_its_concurrency():
    # DeepSeek-R1 c7168 over 114,688 requests: 5 x 7,168 = 35,840, not 1,000 (a batch that never fills)
    assert whatif_requests(_load(concurrency=7168, num_requests=114_688)) == 35_840
    assert WHATIF_CONCURRENCY_MULTIPLE * 7168 == 35_840


def test_small_concurrency_keeps_the_floor_and_small_loads_run_whole():
    assert whatif_requests(_load(concurrency=64, num_requests=20_000)) == WHATIF_REQUESTS
    assert whatif_requests(_load(concurrency=64, num_requests=300)) == 300
    assert whatif_requests(_load(concurrency=7168, num_requests=10_000)) == 10_000


def test_fixed_batch_runs_whole_batches():
    assert whatif_requests(_load(arrival="fixed-batch", batch_size=2048, num_requests=8192)) == 2048
    assert whatif_requests(_load(arrival="fixed-batch", batch_size=96)) == 96
    assert whatif_requests(_load(arrival="fixed-batch", batch_size=600, num_requests=1500)) == 1200  # not 600 + 400


def test_an_open_load_keeps_five_times_the_batch_the_deployment_holds():
    """An offline or Poisson load that saturates the server fills its slots (lanes × max batch): 1,000 requests
    under a max batch of 2,048 never made the run KV-bound, and the FP8 KV cache read +11 % for +31 % (fifty-sixth
    session's review of its own change)."""
    assert whatif_requests(_load(num_requests=6000), slots=2048) == 6000
    assert whatif_requests(_load(num_requests=60_000), slots=2048) == 10_240
    assert whatif_requests(_load(arrival="poisson", rate_per_s=1e6, num_requests=60_000), slots=512) == 2560
    assert whatif_requests(_load(num_requests=60_000), slots=100) == WHATIF_REQUESTS


def test_trace_runs_whole():
    trace = tuple((0.01 * i, 100, 10) for i in range(3000))
    assert whatif_requests(Load(arrival="trace", requests=trace)) == 3000


def test_verdict_records_the_whatif_load_and_the_console_says_so(capsys):
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "1", "--offline",
            "--concurrency", "400", "--num-requests", "4000", "--input-len", "128", "--output-len", "64"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 GPU's baseline on the first 2,000 of the 4,000 requests" in out
    # a load the what-ifs run whole: no such words, and the baseline row is the headline
    assert main(args[:-6] + ["--num-requests", "1500", "--input-len", "128", "--output-len", "64"]) == 0
    out = capsys.readouterr().out
    assert "on the first" not in out
    head = next(l for l in out.splitlines() if "output tokens/s per GPU" in l)
    per_gpu = head.split("(")[1].split(" output")[0]
    base = next(l for l in out.splitlines() if l.strip().startswith("baseline"))
    assert per_gpu in base, (head, base)
    assert main(args + ["--json"]) == 0
    v = json.loads(capsys.readouterr().out)["verdict"]
    assert (v["requests"], v["of_requests"]) == (2000, 4000)
