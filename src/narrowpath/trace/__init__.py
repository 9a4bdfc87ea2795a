"""trace stage — see DESIGN.md and docs/trace.md.

Reads PyTorch profiler (Kineto) traces, streaming, into per-rank tables (`read_trace`), and measures the
accounts narrowpath predicts on them (`analyze`): temporal breakdown and overlap (HTA's definitions),
collective inventory with busbw, kernel categories, idle-gap causes, critical path, stragglers.
"""
from narrowpath.trace.analyze import TraceReport, analyze, report_to_dict
from narrowpath.trace.reader import read_rank, read_trace

__all__ = ["TraceReport", "analyze", "read_rank", "read_trace", "report_to_dict"]
