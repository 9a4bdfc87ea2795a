"""A refusal the seed-22 mutation sample (benchmarks/mutation.py) found unguarded in network/: a directly described
group span with no ranks per domain, or no domains, is not a group."""
from __future__ import annotations

import pytest

from narrowpath.errors import SpecError
from narrowpath.network.placement import span_of


@pytest.mark.parametrize("ranks_per_domain, domains", [(0, 2), (2, 0), (0, 0)])
def test_a_span_needs_ranks_in_each_domain_and_at_least_one_domain(ranks_per_domain, domains):
    """span_of checks each of size, ranks_per_domain and domains on its own: any of them below 1 is refused, even
    when the other two are fine (4 ranks as 0 per domain over 2 domains, or 2 per domain over 0 domains)."""
    with pytest.raises(SpecError, match="must be >= 1"):
        span_of(4, ranks_per_domain=ranks_per_domain, domains=domains)


def test_a_valid_span_is_kept_as_given():
    span = span_of(4, ranks_per_domain=2, domains=2)
    assert (span.size, span.ranks_per_domain, span.domains, span.ranks_per_node, span.nodes) == (4, 2, 2, 2, 2)
