"""The bottom layer: the vocabulary every other part shares (errors, precisions,
plans, schedule names, human units). It imports nothing else from distplan."""
from distplan.core.errors import DistplanError, InternalError
from distplan.core.schedules import PLAN_SCHEDULES, SCHEDULES

__all__ = ["DistplanError", "InternalError", "PLAN_SCHEDULES", "SCHEDULES"]
