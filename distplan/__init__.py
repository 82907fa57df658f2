"""distplan: an exact planner for placing, pipelining and quantising neural networks
on many devices.

A notebook needs only this module::

    import distplan
    p = distplan.problem("bert-base", "mcm4x4")
    report = distplan.solve(p, distplan.SolveOptions(time_limit_s=30))
    print(report.table())

The public API (``problem``, ``solve``, ``simulate``, ``check``, ``compare``,
``from_module`` and their option/report types) lives in ``distplan.api`` and is loaded on
first use, so ``import distplan.core`` stays light. Imports only point down the layers
(``tests/test_layers.py``). API: docs/reference/api.md; layers: docs/DESIGN.md.
"""
from __future__ import annotations

import importlib.util as _ilu
import sys as _sys
from pathlib import Path as _Path

from distplan.core.errors import DistplanError, InternalError

#: the project's top-level folders that install as distplan.<name> (pyproject's package-dir)
MAPPED_FOLDERS = ("model", "sim", "costs", "workloads", "topologies", "baselines", "studies")


class _CheckoutFinder:
    """In a source checkout, find ``distplan.model`` ... in the top-level folders beside
    this package (an installed wheel has them inside it). Only the mapped names."""

    root = _Path(__file__).resolve().parent.parent

    @classmethod
    def find_spec(cls, fullname: str, path=None, target=None):
        head, _, part = fullname.partition(".")
        if head != "distplan" or part not in MAPPED_FOLDERS:
            return None
        folder = cls.root / part
        if (_Path(__file__).resolve().parent / part).is_dir() or not (folder / "__init__.py").is_file():
            return None
        return _ilu.spec_from_file_location(fullname, folder / "__init__.py",
                                            submodule_search_locations=[str(folder)])


if (_CheckoutFinder.root / "pyproject.toml").is_file() and not any(
        isinstance(f, type) and f.__name__ == "_CheckoutFinder" for f in _sys.meta_path):
    _sys.meta_path.insert(0, _CheckoutFinder)

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
