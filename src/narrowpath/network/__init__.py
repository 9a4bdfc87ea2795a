"""network: tiers and fabrics, placement of parallel groups onto ranks and tiers, flow contention."""
from narrowpath.network.placement import (GroupSpan, all_groups, axis_sizes, axis_strides, contiguous_span,
                                          group_ranks, group_span, span_of)

__all__ = ["GroupSpan", "all_groups", "axis_sizes", "axis_strides", "contiguous_span", "group_ranks", "group_span",
           "span_of"]
