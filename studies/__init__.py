"""Optimality studies: sweep workloads x topologies x precision sets x seeds x time
limits; per run record the MILP's status, objective, proven bound, gap, seconds and
simulated throughput and the same for every baseline (CSV, appended as runs finish,
resumable), then plot gap vs time, throughput ratio vs baselines and solve time vs
graph size. Local process pool by default, an existing Dask cluster with
``--scheduler``. CLI: ``python -m distplan.studies --help``.
"""
from distplan.studies.plots import make_plots
from distplan.studies.runner import run_one
from distplan.studies.spec import RunSpec, expand
from distplan.studies.store import FIELDS, read_rows
from distplan.studies.sweep import SweepReport, pending, run_sweep

__all__ = ["RunSpec", "expand", "run_one", "run_sweep", "pending", "SweepReport", "make_plots", "read_rows",
           "FIELDS"]
