"""HiGHS behind a Pyomo model: the persistent pyomo.contrib.solver interface translates
the model (and later cuts) into highspy; we drive highspy for options, warm starts,
the dual bound and progress.

Ctrl-C (distplan.core.interrupt): inside a ``stop_on_interrupt`` block HiGHS runs in a
worker thread while the main thread waits, so that a SIGINT is seen at once. A requested
stop interrupts HiGHS at its next interrupt callback (it then returns its incumbent and
dual bound, status "interrupted"); HiGHS calls none during its root LP, which can last
many seconds, so after ``ABANDON_AFTER_S`` the run is left to finish on its own (it
stops at its next callback or its time limit) and the outcome is the last incumbent and
dual bound its callbacks reported. An abandoned run's instance is never used again
(``HighsRun.busy``); ``abandoned_alive()`` tells a command line whether to leave with
``os._exit`` rather than wait for it.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np
from pyomo.contrib.solver.solvers.highs import Highs as PyomoHighs

from distplan.core.errors import InternalError
from distplan.core.gap import gap
from distplan.core.interrupt import Stop
from distplan.model.highs_watch import ABANDON_AFTER_S, abandoned_alive, run_watched  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class HighsOutcome:
    """One HiGHS run: model status, objective and dual bound in seconds (model units /
    tscale), wall seconds, and the column values of its solution (None: no solution)."""

    status: str
    objective_s: float
    bound_s: float
    seconds: float
    values: np.ndarray | None


_STATUS = {
    "kOptimal": "optimal", "kTimeLimit": "time_limit", "kInfeasible": "infeasible",
    "kUnboundedOrInfeasible": "infeasible", "kInterrupt": "interrupted", "kUnbounded": "unbounded",
    "kSolutionLimit": "solution_limit", "kIterationLimit": "iteration_limit",
}


def _set_option(h: "highspy.Highs", name: str, value: object) -> None:
    """Set a HiGHS option; one HiGHS refuses is an InternalError (it returned kError and
    kept the old value without a word: random_seed -1 or 2**31 was dropped so)."""
    if h.setOptionValue(name, value) == highspy.HighsStatus.kError:
        raise InternalError(f"HiGHS refused option {name}={value!r}; distplan passed a value it does not take")


class HighsRun:
    """One HiGHS instance holding one Pyomo model."""

    def __init__(self, m, threads: int = 2, seed: int = 0, verbose: bool = False,
                 progress: Callable[[str], None] | None = None, stop: Stop | None = None):
        self.m = m
        self.stop = stop
        self.opt = PyomoHighs()
        self.opt.set_instance(m)
        self.h: highspy.Highs = self.opt._solver_model
        self.col = self.opt._pyomo_var_to_solver_var_map
        h = self.h
        _set_option(h, "output_flag", bool(verbose))
        _set_option(h, "log_to_console", bool(verbose))
        _set_option(h, "threads", int(threads))
        _set_option(h, "random_seed", int(seed))
        # HiGHS presolve spends ~25 s on the 16-stage BERT model and removes little
        _set_option(h, "presolve", "off")
        self.progress = progress
        self._last_report = 0.0
        self._thread: threading.Thread | None = None
        self._incumbent: tuple[np.ndarray, float] | None = None   # the current run's, from its callbacks
        self._dual = -math.inf
        h.cbMipImprovingSolution.subscribe(self._on_improve)
        h.cbMipInterrupt.subscribe(self._on_interrupt)
        lp = h.getLp()
        self.n_constraints = int(h.getNumRow())
        self.n_binaries = int(sum(1 for t in lp.integrality_ if t == highspy.HighsVarType.kInteger))

    # --- callbacks (in the thread running HiGHS) -----------------------------------
    def _report(self, what: str, d) -> None:
        obj, bound = d.mip_primal_bound / self.m.tscale, d.mip_dual_bound / self.m.tscale
        self.progress(f"  HiGHS {what}: t={d.running_time:.1f}s incumbent={obj:.4g} bound={bound:.4g} "
                      f"gap={gap(obj, bound):.1%}")

    def _on_improve(self, e) -> None:
        d = e.data_out
        self._incumbent = (np.array(d.mip_solution, dtype=np.float64), float(d.objective_function_value))
        self._dual = max(self._dual, float(d.mip_dual_bound))
        if self.stop is not None:
            self.stop.arm()   # a plan exists: a Ctrl-C now keeps it
        if self.progress is not None:
            self._report("incumbent", d)

    def _on_interrupt(self, e) -> None:
        if self.stop is not None and (self.stop.requested or self.stop.aborted):
            e.interrupt()
        self._dual = max(self._dual, float(e.data_out.mip_dual_bound))
        now = time.monotonic()
        if self.progress is not None and now - self._last_report >= 5.0:
            self._last_report = now
            self._report("progress", e.data_out)

    @property
    def busy(self) -> bool:
        """An abandoned run of this instance is still going: it cannot be used again."""
        return self._thread is not None and self._thread.is_alive()

    # --- solving -----------------------------------------------------------------
    def set_start(self) -> None:
        """Hand the current values of every model variable to HiGHS as a start."""
        idx, val = [], []
        for v in self.m.component_data_objects(ctype=__import__("pyomo.environ").environ.Var):
            c = self.col.get(id(v))
            if c is not None and v.value is not None:
                idx.append(c)
                val.append(float(v.value))
        self.h.setSolution(len(idx), np.array(idx, dtype=np.int32), np.array(val, dtype=np.float64))

    def add_constraint(self, con) -> None:
        self.opt.add_constraints([con])

    def _run_watched(self) -> bool:
        """h.run() in a worker thread while this (main) thread waits and sees Ctrl-C; False
        when a requested stop left it running (module docstring)."""
        finished, self._thread = run_watched(self.h, self.stop)
        return finished

    def run(self, time_limit_s: float, rel_gap: float) -> HighsOutcome:
        h = self.h
        if self.busy:
            raise RuntimeError("this HiGHS instance still runs a solve left after a Ctrl-C")
        _set_option(h, "time_limit", float(max(time_limit_s, 0.1)))
        _set_option(h, "mip_rel_gap", float(rel_gap))
        _set_option(h, "mip_abs_gap", 0.0 if rel_gap == 0 else 1e-9)
        self._incumbent, self._dual = None, -math.inf
        t0 = time.perf_counter()
        if self.stop is not None and self.stop.handled:
            finished = self._run_watched()
        else:
            h.run()
            finished = True
        secs = time.perf_counter() - t0
        if self.stop is not None:
            self.stop.check_abort()   # a second Ctrl-C inside a callback (HiGHS swallowed it)
        scale = float(self.m.tscale)
        if not finished:   # left running: what its callbacks reported
            inc = self._incumbent
            return HighsOutcome("interrupted", inc[1] / scale if inc else math.inf, self._dual / scale, secs,
                                inc[0] if inc else None)
        st = h.getModelStatus()
        name = _STATUS.get(st.name, st.name)
        info = h.getInfo()
        sol = h.getSolution()
        has = bool(sol.value_valid) and info.primal_solution_status >= 2
        obj = float(info.objective_function_value) if has else math.inf
        bound = float(info.mip_dual_bound)
        if name == "optimal" and not math.isfinite(bound):
            bound = obj
        return HighsOutcome(name, obj / scale, bound / scale, secs, np.array(sol.col_value) if has else None)

    def value_fn(self, values: np.ndarray):
        col = self.col
        return lambda var: float(values[col[id(var)]])
