"""Search: enumerate the consistent parallel plans for a model on a system and rank them by the step model."""
from narrowpath.search.each import Candidate, describe_plan
from narrowpath.search.rank import OBJECTIVES, SearchResult, search
from narrowpath.search.space import KNOBS, SearchSpace, candidate_plans, count_plans

__all__ = ["KNOBS", "OBJECTIVES", "Candidate", "SearchResult", "SearchSpace", "candidate_plans", "count_plans",
           "describe_plan", "search"]
