"""Search: enumerate the consistent parallel plans for a model on a system and rank them by the step model."""
from narrowpath.search.rank import OBJECTIVES, Candidate, SearchResult, describe_plan, search
from narrowpath.search.space import KNOBS, SearchSpace, candidate_plans

__all__ = ["KNOBS", "OBJECTIVES", "Candidate", "SearchResult", "SearchSpace", "candidate_plans", "describe_plan",
           "search"]
