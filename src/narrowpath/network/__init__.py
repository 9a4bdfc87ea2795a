"""network: tiers and fabrics, placement of parallel groups onto ranks and tiers, flow contention."""
from narrowpath.network.placement import GroupSpan, axis_sizes, axis_strides, group_span

__all__ = ["GroupSpan", "axis_sizes", "axis_strides", "group_span"]
