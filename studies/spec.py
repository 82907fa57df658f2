"""What one study run is (RunSpec) and the sweep grid that expands into runs.

A run is one problem (workload x topology x precision set, with mode, batch and
sequence length) solved by the MILP at one time limit and seed, and searched by every
baseline at the same wall-clock budget. ``RunSpec.key()`` identifies it in the CSV: a
sweep resumes by skipping runs whose key already has a row for every method.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from distplan.core.errors import DistplanError
from distplan.core.validate import check_choice, check_float, check_int, check_str

DEFAULT_METHODS = ("random", "sa", "dp", "grid")
KEY_FIELDS = ("workload", "topology", "precisions", "mode", "batch_size", "seq_len", "seed", "time_limit_s",
              "candidate_budget")


def fmt_limit(x: float) -> str:
    """Canonical text of a time limit (10 -> '10', 0.5 -> '0.5')."""
    return format(float(x), "g")


@dataclass(frozen=True)
class RunSpec:
    workload: str
    topology: str
    precisions: str = "fp16,int8"
    seed: int = 0
    time_limit_s: float = 10.0
    mode: str = "inference"
    batch_size: int | None = None
    seq_len: int | None = None
    microbatches: int = 16
    methods: tuple[str, ...] = DEFAULT_METHODS
    threads: int = 1
    top_k: int = 1
    rel_gap: float = 0.01
    candidate_budget: int | None = None  # deterministic baseline budget (plans scored); None: the clock

    def __post_init__(self) -> None:
        """Each field of its type, named by the study's flag (core.validate): a negative
        seed, --top-k 0, --gap 2 or --candidates 0 ran the whole sweep and recorded an
        error row per run instead of refusing the command."""
        from distplan.model.options import check_seed

        check_str("workload", self.workload)
        check_str("topology", self.topology)
        check_str("--precisions", self.precisions)
        object.__setattr__(self, "seed", check_seed("--seeds", self.seed))
        object.__setattr__(self, "time_limit_s", check_float("--time-limits", self.time_limit_s, 0.0, above=True))
        check_choice("--mode", self.mode, ("inference", "training"))
        check_int("--batch-size", self.batch_size, optional=True)
        check_int("--seq-len", self.seq_len, optional=True)
        check_int("--microbatches", self.microbatches)
        check_int("--threads", self.threads)
        check_int("--top-k", self.top_k)
        check_float("--gap", self.rel_gap, 0.0, below=1.0)
        check_int("--candidates", self.candidate_budget, optional=True)
        if not (isinstance(self.methods, tuple) and all(isinstance(m, str) for m in self.methods)):
            raise DistplanError(f"--methods must be a tuple of baseline names, got {self.methods!r}"[:200])

    def key(self) -> tuple[str, ...]:
        """The run's identity as CSV text (what resume matches on)."""
        return (self.workload, self.topology, self.precisions, self.mode,
                "" if self.batch_size is None else str(self.batch_size),
                "" if self.seq_len is None else str(self.seq_len),
                str(self.seed), fmt_limit(self.time_limit_s),
                "" if self.candidate_budget is None else str(self.candidate_budget))

    def label(self) -> str:
        return (f"{self.workload}/{self.topology} [{self.precisions}] seed {self.seed} "
                f"t={fmt_limit(self.time_limit_s)}s")

    @property
    def all_methods(self) -> tuple[str, ...]:
        return ("milp", *self.methods)


def expand(workloads, topologies, precision_sets=("fp16,int8",), seeds=(0,), time_limits=(10.0,),
           **common) -> list[RunSpec]:
    """Every combination, workload-major (cheap-to-expensive order is the caller's)."""
    lists = dict(workloads=list(workloads), topologies=list(topologies), precision_sets=list(precision_sets),
                 seeds=list(seeds), time_limits=list(time_limits))
    for name, vals in lists.items():
        if not vals:
            raise DistplanError(f"study: --{name.replace('_', '-')} is empty; give at least one value")
    for t in lists["time_limits"]:
        if not float(t) > 0:
            raise DistplanError(f"study: time limit {t} must be > 0 seconds")
    return [RunSpec(w, t, p, int(s), float(tl), **common)
            for w, t, p, s, tl in itertools.product(*lists.values())]
