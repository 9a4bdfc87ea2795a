"""`narrowpath search` input handling found by the fiftieth session's review: a zero GPU count or batch taken as
"not given", MoE flags on a dense model kept with no effect, --recompute-modules from --model/--system refused
unless --recompute selective came too, and ties marked on a plan short of the --min-free-gb margin (and on the
best plan itself, in the JSON only)."""
from __future__ import annotations

import json

import pytest

from narrowpath.cli.main import main
from tests.cli.one_line import one_line_error


@pytest.mark.parametrize("argv,flag", [(["--gpus", "0", "--gbs", "0"], "--gbs"), (["--gbs", "0"], "--gbs"),
                                       (["--gpus", "0"], "--gpus"), (["--gpus", "-8"], "--gpus")])
def test_a_zero_gpu_count_or_batch_is_refused_as_predict_refuses_it(capsys, argv, flag):
    """`args.gpus or base.num_gpus` read 0 as "not given": `search llama3-8b-h100-8 --gpus 0 --gbs 0` searched 8
    GPUs and a batch of 64 and exited 0, where `predict` says "--gbs: must be >= 1, got 0" (the batch is checked
    first there too)."""
    value = argv[argv.index(flag) + 1]
    one_line_error(capsys, ["search", "llama3-8b-h100-8", "--top", "1", "--json", *argv],
                   f"{flag}: must be >= 1, got {value}")
    one_line_error(capsys, ["predict", "llama3-8b-h100-8", *argv], f"{flag}: must be >= 1, got {value}")
