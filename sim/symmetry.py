"""The exact symmetry reduction lives in ``costs.symmetry`` (the analytic iteration's
overlapped gradient buckets use it too); re-exported here for the simulator."""
from distplan.costs.symmetry import Symmetry, find_symmetry, reduction_groups  # noqa: F401
