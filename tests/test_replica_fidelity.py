"""Issue 15, communication where it is not hidden: on ``hybrid-v100-t4`` (4 V100 + 4 T4,
PCIe inside a host, 100 Gb/s between hosts) the analytic iteration
(``costs.iteration.estimate_iteration``) is within 5 % of the simulator on data-parallel
plans with uneven shares and per-group precision, with and without
``overlap_grad_reduce``, ring and hierarchical reduction (bert-base and bert-large
training, batch 8, 16 microbatches, precisions fp16,int8), on named pipelines, and on the
plans the mixed-fleet plan space (``model.fleet.plan_fleet``) ranks best, where the 4
replicas' stage-boundary tensors share the 100 Gb/s link and overlapped reduction steps
share a GPU's PCIe link with them."""
from __future__ import annotations

import functools

import pytest

import distplan
from distplan.core.plan import Plan, Stage, balanced_shares
from distplan.costs.check import check_plan
from distplan.costs.iteration import estimate_iteration, replica_microbatch_s
from distplan.sim import simulate

LOW_KINDS = ("matmul", "attn_score", "attn_context", "head")
TOLERANCE = 0.05


@functools.lru_cache(maxsize=None)
def hybrid(workload: str):
    return distplan.problem(workload, "hybrid-v100-t4", mode="training", batch_size=8, precisions="fp16,int8",
                            microbatches=16)


def data_parallel(pb, shares: str, int8: bool, overlap: bool, reduction: str) -> Plan:
    """One stage over the 8 GPUs; the T4s at int8 on the matrix products when ``int8``;
    shares "balanced" (``balanced_shares`` on each replica's seconds), "skew" (4, 3, 3, 2,
    1, 1, 1, 1), or "even" (2 each)."""
    V = pb.n_ops
    low = {v: "int8" for v, op in enumerate(pb.graph.ops) if op.kind in LOW_KINDS} if int8 else {}
    over = tuple(low if pb.topology.kind_of(d).supports("int8") else {} for d in range(8))
    plan = Plan((0,) * V, ("fp16",) * V, (Stage(tuple(range(8)), shares=(2,) * 8, replica_precision=over),), 16,
                "1f1b", dp_allreduce=reduction, overlap_grad_reduce=overlap)
    n = {"even": (2,) * 8, "skew": (4, 3, 3, 2, 1, 1, 1, 1),
         "balanced": balanced_shares([replica_microbatch_s(pb, plan, 0, i) for i in range(8)], 16)}[shares]
    return Plan(plan.op_stage, plan.op_precision, (Stage(tuple(range(8)), shares=n, replica_precision=over),), 16,
                "1f1b", dp_allreduce=reduction, overlap_grad_reduce=overlap)


VARIANTS = [(s, i8, ov, red) for s in ("balanced", "skew", "even") for i8 in (True, False)
            for ov in (False, True) for red in ("ring", "hierarchical")]


def _error(workload: str, variant) -> float:
    pb = hybrid(workload)
    plan = data_parallel(pb, *variant)
    check_plan(pb, plan, memory_bound=False)
    sim = simulate(pb, plan).iteration_s
    return estimate_iteration(pb, plan).iteration_s / sim - 1


def test_bert_base_predicted_within_5_percent():
    errs = {v: _error("bert-base", v) for v in VARIANTS}
    worst = max(errs, key=lambda v: abs(errs[v]))
    assert abs(errs[worst]) <= TOLERANCE, (worst, errs[worst])


def test_bert_large_predicted_within_5_percent():
    few = [v for v in VARIANTS if v[1] and v[0] != "even"]
    errs = {v: _error("bert-large", v) for v in few}
    worst = max(errs, key=lambda v: abs(errs[v]))
    assert abs(errs[worst]) <= TOLERANCE, (worst, errs[worst])


@pytest.mark.slow
def test_bert_large_every_variant_within_5_percent():
    errs = {v: _error("bert-large", v) for v in VARIANTS}
    worst = max(errs, key=lambda v: abs(errs[v]))
    assert abs(errs[worst]) <= TOLERANCE, (worst, errs[worst])


def _pipelines(pb):
    """Named pipelines on the mixed fleet: V100 host then T4 host at int8, V100/T4 pairs
    round-robin and with shares, 4 pairs with uneven shares and overlap, 8 stages T4
    host first."""
    import dataclasses
    V = pb.n_ops

    def split(K, first=None):
        if first is not None:
            return tuple(0 if v < int(V * first) else 1 for v in range(V))
        return tuple(min(v * K // V, K - 1) for v in range(V))

    s2 = split(2, 0.6)
    low1 = {v: "int8" for v in range(V) if s2[v] == 1 and pb.graph.ops[v].kind in LOW_KINDS}
    pairs = Plan(split(2), ("fp16",) * V, (Stage((0, 4, 1, 5)), Stage((2, 6, 3, 7))), 16, "1f1b")
    return [
        Plan(s2, ("fp16",) * V, (Stage((0, 1, 2, 3)), Stage((4, 5, 6, 7), replica_precision=(low1,) * 4)), 16, "1f1b"),
        pairs,
        dataclasses.replace(pairs, stages=tuple(dataclasses.replace(s, shares=(5, 3, 5, 3)) for s in pairs.stages)),
        Plan(split(4), ("fp16",) * V, tuple(Stage((d, d + 4), shares=(9, 7)) for d in range(4)), 16, "1f1b",
             overlap_grad_reduce=True),
        Plan(split(8), ("fp16",) * V, tuple(Stage((d,)) for d in (4, 5, 6, 7, 0, 1, 2, 3)), 16, "1f1b"),
    ]


def test_mixed_fleet_pipelines_predicted_within_5_percent():
    pb = hybrid("bert-base")
    for plan in _pipelines(pb):
        check_plan(pb, plan, memory_bound=False)
        err = estimate_iteration(pb, plan).iteration_s / simulate(pb, plan).iteration_s - 1
        assert abs(err) <= TOLERANCE, (plan.stages, err)


def _fleet_errors(workload: str, top_k: int = 10) -> dict[str, float]:
    """Predicted / simulated - 1 of the fleet space's ``top_k`` plans (by its own
    estimate), keyed by point, reduction and overlap."""
    from distplan.model.fleet import plan_fleet
    pb = hybrid(workload)
    out = {}
    for n, f in enumerate(plan_fleet(pb, top_k=top_k).plans):
        sim = simulate(pb, f.plan).iteration_s
        key = f"#{n} {f.point.label(pb)} {f.plan.dp_allreduce} overlap={f.plan.overlap_grad_reduce}"
        out[key] = estimate_iteration(pb, f.plan).iteration_s / sim - 1
    return out


def test_fleet_space_top_plans_predicted_within_5_percent_bert_base():
    # the best was pp 2 x dp 4, T4 stage first at int8, 4+4 shares, ring overlapped:
    # estimated 38.3 ms vs 41.1 ms simulated (-6.8 %) before the boundary tensors of
    # all microbatches and the reductions' steps queued together on the links
    errs = _fleet_errors("bert-base")
    worst = max(errs, key=lambda k: abs(errs[k]))
    assert abs(errs[worst]) <= TOLERANCE, (worst, errs[worst])


@pytest.mark.slow
def test_fleet_space_top_plans_predicted_within_5_percent_bert_large():
    # pp 4 x dp 2 plans were -8.1 % before
    errs = _fleet_errors("bert-large")
    worst = max(errs, key=lambda k: abs(errs[k]))
    assert abs(errs[worst]) <= TOLERANCE, (worst, errs[worst])


def _random_pipelines(pb, n: int, seed: int) -> list[Plan]:
    """``n`` valid random pipelines on the mixed fleet: 2, 4 or 8 stages cut at random
    ops (boundaries inside layers, several tensors crossing), devices in order or
    shuffled, random shares, T4s at int8 on the matrix products on some stages, ring or
    hierarchical, overlapped or not."""
    import random
    rng = random.Random(seed)
    V = pb.n_ops
    out: list[Plan] = []
    while len(out) < n:
        K = rng.choice([2, 4, 8])
        r = 8 // K
        devs = list(range(8))
        if rng.random() < 0.5:
            rng.shuffle(devs)
        cuts = sorted(rng.sample(range(1, V), K - 1))
        st_of = tuple(sum(v >= c for c in cuts) for v in range(V))
        stages = []
        for k in range(K):
            g = tuple(devs[k * r:(k + 1) * r])
            over = None
            if rng.random() < 0.6:
                low = {v: "int8" for v in range(V) if st_of[v] == k and pb.graph.ops[v].kind in LOW_KINDS}
                over = tuple(low if pb.topology.kind_of(d).supports("int8") else {} for d in g)
            shares = None
            if r > 1 and rng.random() < 0.6:
                x = sorted(rng.sample(range(1, 16), r - 1))
                shares = tuple(b - a for a, b in zip([0] + x, x + [16]))
            stages.append(Stage(g, shares=shares, replica_precision=over))
        plan = Plan(st_of, ("fp16",) * V, tuple(stages), 16, "1f1b",
                    dp_allreduce=rng.choice(["ring", "hierarchical"]), overlap_grad_reduce=rng.random() < 0.5)
        try:
            check_plan(pb, plan, memory_bound=False)
        except distplan.DistplanError:
            continue
        out.append(plan)
    return out


def test_random_mixed_fleet_pipelines_predicted_within_5_percent():
    # the joint run of pipeline and reductions equals the simulator on these (to 1e-14
    # when measured); the replay it replaced was off by up to -6.7 %
    pb = hybrid("bert-base")
    errs = [estimate_iteration(pb, p).iteration_s / simulate(pb, p).iteration_s - 1
            for p in _random_pipelines(pb, 12, seed=1)]
    worst = max(range(len(errs)), key=lambda i: abs(errs[i]))
    assert abs(errs[worst]) <= TOLERANCE, (worst, errs[worst])
