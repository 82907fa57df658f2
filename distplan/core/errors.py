"""The project's error types.

``DistplanError``: bad input or an infeasible request a user can cause; its message
names the culprit and the fix, and the CLI prints it as one ``error:`` line.
``InternalError``: distplan broke one of its own promises (the MILP returned a plan
the independent checker rejects, a simulation disagrees with its own bound). It is
*not* a ``DistplanError``: a test that expects user errors never swallows it.
``TimeUp``: a computation handed a deadline ran past it; whoever passed the deadline
catches it (never the user's concern).
"""


class DistplanError(Exception):
    """Bad input or an infeasible request; ``solve.py`` prints it as one line."""


class InternalError(RuntimeError):
    """A bug in distplan (never the user's input); always fails a test."""


class TimeUp(Exception):
    """A computation given a deadline (``time.perf_counter`` seconds) ran past it."""
