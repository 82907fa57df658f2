"""The one error type a user can cause; its message names the culprit and the fix."""


class DistplanError(Exception):
    """Bad input or an infeasible request; ``solve.py`` prints it as one line."""
