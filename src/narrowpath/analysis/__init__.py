"""analysis stage — the five accounts, three budgets, verdict with what-if gains, scaling and energy (DESIGN.md).

Entry point: `analyze(scenario, options) -> Analysis`.
"""
from narrowpath.analysis.analyze import Analysis, analyze, analyze_prediction
from narrowpath.analysis.options import AnalysisOptions

__all__ = ["Analysis", "AnalysisOptions", "analyze", "analyze_prediction"]
