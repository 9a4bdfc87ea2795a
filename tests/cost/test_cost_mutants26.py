"""Cost values the seed-26 mutation sample (benchmarks/mutation.py) found unguarded: the field a refused collective
message size is reported under (SpecError names the offending field's dotted path)."""
from __future__ import annotations

import math

import pytest

from narrowpath.catalog import calibration_for, system
from narrowpath.cost.collectives import collective_time
from narrowpath.errors import SpecError
from narrowpath.network.placement import contiguous_span


@pytest.mark.parametrize("size", [-1.0, math.nan, math.inf])
def test_a_bad_message_size_is_refused_under_the_message_bytes_field(size):
    """A collective of a negative, NaN or infinite number of bytes is refused as a SpecError whose field is the
    dotted path of what is wrong, `collective.message_bytes` (errors.SpecError: "`field` is the dotted path of the
    offending field"; callers that re-raise a SpecError under their own names read it: cli.collective_cmd,
    cli.analyze_cmd, search.grid), and whose message leads with it."""
    sys_ = system("dgx-h100")
    with pytest.raises(SpecError) as exc:
        collective_time("all_reduce", size, contiguous_span(8, sys_), sys_, calibration_for(sys_.device.name))
    assert exc.value.field == "collective.message_bytes"
    assert str(exc.value).startswith("collective.message_bytes: must be a finite number >= 0")
