"""distplan: an exact planner for placing, pipelining and quantising neural networks
on many devices.

A notebook needs only this module::

    import distplan
    p = distplan.problem("bert-base", "mcm4x4")
    report = distplan.solve(p, distplan.SolveOptions(time_limit_s=30))
    print(report.table())

The public API (``problem``, ``solve``, ``simulate``, ``check``, ``compare``,
``from_module`` and their option/report types) lives in ``distplan.api`` and is
loaded on first use, so ``import distplan.core`` stays light.

Layers, bottom to top (an import only ever points down; ``tests/test_layers.py``
enforces it)::

    distplan.core                       errors, precisions, Plan, schedules, units
    distplan.workloads, .topologies     graphs; devices, links, routes, paths
    distplan.costs                      Problem, evaluate, check
    distplan.model, .sim, .baselines    MILP planner; event simulator; searches
    distplan.api                        problem/solve/simulate/check/compare
    distplan.cli, .studies, .testing    command lines, sweeps, test helpers

In a source checkout the middle parts are the top-level folders ``model/``,
``costs/``, ``topologies/``, ``sim/`` ... (the project's specified layout); an
installed wheel has them inside this package (``pyproject.toml`` maps them).
"""
from __future__ import annotations

from pathlib import Path as _Path

from distplan.core.errors import DistplanError, InternalError

# A source checkout keeps model/, sim/, costs/ ... beside this folder; let them import
# as distplan.model, distplan.sim ... (an installed wheel has them inside the package).
_ROOT = _Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "model" / "__init__.py").is_file() \
        and not (_Path(__file__).resolve().parent / "model").is_dir():
    __path__.append(str(_ROOT))  # noqa: F821 (a package's __path__)

_API = ("problem", "solve", "simulate", "check", "compare", "from_module", "load_plan", "save_plan",
        "ProblemOptions", "SolveOptions", "SolveReport", "RankedPlan", "SimOptions", "SimResult",
        "Comparison", "Problem", "Plan")


_PARTS = ("core", "workloads", "topologies", "costs", "model", "sim", "baselines", "api", "cli", "studies",
          "testing")


def __getattr__(name: str):
    if name in _API:
        from distplan import api

        return getattr(api, name)
    if name in _PARTS:
        import importlib

        return importlib.import_module(f"distplan.{name}")
    raise AttributeError(f"module 'distplan' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))


__all__ = ["DistplanError", "InternalError", *_API]
