"""HiGHS behind a Pyomo model: the persistent pyomo.contrib.solver interface translates
the model (and later cuts) into highspy; we drive highspy for options, warm starts,
the dual bound and progress."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np
from pyomo.contrib.solver.solvers.highs import Highs as PyomoHighs

_STATUS = {
    "kOptimal": "optimal", "kTimeLimit": "time_limit", "kInfeasible": "infeasible",
    "kUnboundedOrInfeasible": "infeasible", "kInterrupt": "interrupted", "kUnbounded": "unbounded",
    "kSolutionLimit": "solution_limit", "kIterationLimit": "iteration_limit",
}


@dataclass(frozen=True)
class HighsOutcome:
    """One HiGHS run: model status, objective and dual bound in seconds (model units /
    tscale), wall seconds, and the column values of its solution (None: no solution)."""

    status: str
    objective_s: float
    bound_s: float
    seconds: float
    values: np.ndarray | None


class HighsRun:
    """One HiGHS instance holding one Pyomo model."""

    def __init__(self, m, threads: int = 2, seed: int = 0, verbose: bool = False,
                 progress: Callable[[str], None] | None = None):
        self.m = m
        self.opt = PyomoHighs()
        self.opt.set_instance(m)
        self.h: highspy.Highs = self.opt._solver_model
        self.col = self.opt._pyomo_var_to_solver_var_map
        h = self.h
        h.setOptionValue("output_flag", bool(verbose))
        h.setOptionValue("log_to_console", bool(verbose))
        h.setOptionValue("threads", int(threads))
        h.setOptionValue("random_seed", int(seed))
        # HiGHS presolve spends ~25 s on the 16-stage BERT model and removes little
        h.setOptionValue("presolve", "off")
        self.progress = progress
        self._last_report = 0.0
        if progress is not None:
            h.cbMipImprovingSolution.subscribe(self._on_improve)
            h.cbMipInterrupt.subscribe(self._on_tick)

    # --- progress ----------------------------------------------------------------
    def _report(self, what: str, d) -> None:
        obj, bound = d.mip_primal_bound / self.m.tscale, d.mip_dual_bound / self.m.tscale
        gap = (obj - bound) / abs(obj) if obj and math.isfinite(obj) else math.inf
        self.progress(f"  HiGHS {what}: t={d.running_time:.1f}s incumbent={obj:.4g} bound={bound:.4g} gap={gap:.1%}")

    def _on_improve(self, e) -> None:
        self._report("incumbent", e.data_out)

    def _on_tick(self, e) -> None:
        now = time.monotonic()
        if now - self._last_report >= 5.0:
            self._last_report = now
            self._report("progress", e.data_out)

    # --- sizes -------------------------------------------------------------------
    @property
    def n_constraints(self) -> int:
        return int(self.h.getNumRow())

    @property
    def n_binaries(self) -> int:
        lp = self.h.getLp()
        return int(sum(1 for t in lp.integrality_ if t == highspy.HighsVarType.kInteger))

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

    def run(self, time_limit_s: float, rel_gap: float) -> HighsOutcome:
        h = self.h
        h.setOptionValue("time_limit", float(max(time_limit_s, 0.1)))
        h.setOptionValue("mip_rel_gap", float(rel_gap))
        h.setOptionValue("mip_abs_gap", 0.0 if rel_gap == 0 else 1e-9)
        t0 = time.perf_counter()
        h.run()
        secs = time.perf_counter() - t0
        st = h.getModelStatus()
        name = _STATUS.get(st.name, st.name)
        info = h.getInfo()
        sol = h.getSolution()
        has = bool(sol.value_valid) and info.primal_solution_status >= 2
        obj = float(info.objective_function_value) if has else math.inf
        bound = float(info.mip_dual_bound)
        if name == "optimal" and not math.isfinite(bound):
            bound = obj
        scale = float(self.m.tscale)
        return HighsOutcome(name, obj / scale, bound / scale, secs, np.array(sol.col_value) if has else None)

    def value_fn(self, values: np.ndarray):
        col = self.col
        return lambda var: float(values[col[id(var)]])
