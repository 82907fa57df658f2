"""What a simulation run may vary: ideal mode, the link model, trace recording, symmetry."""
from __future__ import annotations

from dataclasses import dataclass

from distplan.core.errors import DistplanError
from distplan.core.validate import check_bool

LINK_MODELS = ("fifo", "fair", "free")


@dataclass(frozen=True)
class SimOptions:
    """Options of :func:`sim.simulate`; each field's meaning is in its docstring below."""

    ideal: bool = False
    """Link latencies are zero and, with ``"fifo"``, every link serves its transfers in the
    schedule's static cyclic order (a statically scheduled interconnect) instead of arrival
    order, and the schedule offsets every dependency that crosses servers by one round, so
    compute and communication overlap fully. Then the steady-state period of a plan with
    single-device stages equals ``costs.evaluate.plan_cost``'s period. Launch overheads are
    kept (they are part of each operator's time)."""
    link_model: str = "fifo"
    """``"fifo"``: a link serves one transfer at a time, in order of arrival (ties: the
    schedule's order), busy ``bytes / bw``, the data at the far end ``latency_s`` after it
    has been serialised (an isolated transfer takes ``latency_s + bytes / bw`` per hop,
    store and forward). ``"fair"``: all transfers present on a link share its bandwidth
    equally (processor sharing); latency as above. ``"free"``: no contention; every
    transfer gets the full bandwidth at once."""
    trace: bool = False
    """Keep the per-task spans for :func:`sim.trace.write_chrome_trace`."""
    symmetry: bool = True
    """Simulate identical data-parallel replicas and tensor-parallel ranks once when the
    run is provably symmetric (``sim.symmetry``; exact, same figures); False simulates
    every copy."""
    merge_chains: bool = True
    """Run each ZeRO-3 ring chain whose links carry only its device's chains as one node
    (``sim.stream_runs``; exact, same figures; not with a trace or ``"fair"`` links);
    False keeps every transfer."""

    def __post_init__(self) -> None:
        """Every field checked by core.validate: bools are bools (``ideal="no"`` is an error)."""
        if not isinstance(self.link_model, str) or self.link_model not in LINK_MODELS:
            raise DistplanError(f"SimOptions.link_model {self.link_model!r} unknown; use one of {', '.join(LINK_MODELS)}")
        for k in ("ideal", "trace", "symmetry", "merge_chains"):
            object.__setattr__(self, k, check_bool(f"SimOptions.{k}", getattr(self, k)))
