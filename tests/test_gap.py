"""One gap formula (distplan.core.gap) for every space and the solver's log."""
import math

from distplan.core.gap import gap, within_gap


def test_gap_by_hand():
    assert gap(2.0, 1.5) == 0.25
    assert gap(2.0, 2.0) == 0.0 and gap(0.0, 0.0) == 0.0
    assert gap(1.0, 1.2) == 0.0                  # a bound above the objective: proven
    assert gap(1.0, -math.inf) == math.inf and gap(math.inf, 1.0) == math.inf
    assert gap(0.0, -1.0) == math.inf
    assert gap(-2.0, -3.0) == 0.5                # a negative objective: relative to its size
    assert within_gap(1.0, 0.995, 0.01) and not within_gap(1.0, 0.98, 0.01)
    assert not within_gap(math.inf, 1.0, 0.5) and not within_gap(0.0, 0.0, 0.5)
