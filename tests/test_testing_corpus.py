"""distplan.testing's corpus: every instance loads, its stored plan is feasible, costs
exactly the stored optimum and simulates to it; (slow) every optimum is proved again,
and the planner's default run reaches it."""
from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest

from distplan.core.errors import DistplanError
from distplan.costs.evaluate import plan_cost
from distplan.model import SolveOptions, solve
from distplan.testing.asserts import (assert_feasible, assert_not_better_than_optimum,
                                      assert_simulated_matches_model)
from distplan.testing.corpus import (FORMAT, PROOFS, VERSION, corpus_dir, corpus_names, instance_from_dict,
                                     instance_to_dict, load_corpus, read_instance)
from distplan.testing.proofs import reprove
from distplan.topologies.textformat import dump_json

CORPUS = load_corpus()
IDS = [i.name for i in CORPUS]

# distplan.model.solve's default run (every lane layout considered) must reach each proven
# optimum with a bound at or below it. It once missed 5 of these instances while claiming
# gap 0 (tiny-24, -27, -28 and mlp-xs on hybrid-v100-t4, inference and training): it kept
# one lane layout per replication factor and dropped the others' bounds, and it treated
# layouts whose lane 0 agreed as equal although their other lanes differed (a mixed
# fleet). Both are fixed (model.phase_fast); these instances now guard it.
PLANNER_MISSES_FIXED = {
    "tiny-24-rand5-line4-mixed", "tiny-27-rand4-line3-mixed", "tiny-28-rand5-line3-mixed-train",
    "zoo-mlp-xs-hybrid-v100-t4", "zoo-mlp-xs-hybrid-v100-t4-train",
}


def test_corpus_has_tiny_and_zoo_instances_of_both_proofs():
    assert len(CORPUS) >= 30
    assert {i.proof for i in CORPUS} == set(PROOFS)
    assert min(i.n_ops for i in CORPUS) <= 2 and max(i.n_ops for i in CORPUS) >= 140
    assert {i.graph.mode for i in CORPUS} == {"inference", "training"}
    assert corpus_names() == IDS
    assert not PLANNER_MISSES_FIXED - set(IDS)


@pytest.mark.parametrize("inst", CORPUS, ids=IDS)
def test_stored_plan_is_feasible_optimal_and_simulates_to_the_optimum(inst):
    problem = inst.problem()
    plan = inst.plan()
    assert_feasible(problem, plan)
    period = plan_cost(problem, plan).period_s
    assert abs(period - inst.optimum_s) <= 1e-9 * inst.optimum_s, (period, inst.optimum_s)
    assert inst.bound_s <= inst.optimum_s and inst.gap <= 1e-6
    assert assert_simulated_matches_model(problem, plan, rel=1e-9) == period
    assert assert_not_better_than_optimum(problem, plan, inst) == period
    assert inst.objective == "throughput" and inst.options.schedule in ("stream", "1f1b")


@pytest.mark.parametrize("inst", CORPUS, ids=IDS)
def test_file_is_self_contained_and_round_trips(inst, tmp_path):
    raw = json.loads(inst.path.read_text(), parse_float=Decimal)
    assert raw["format"] == FORMAT and raw["version"] == VERSION
    assert raw["name"] == inst.path.stem == inst.name
    assert raw["graph"]["format"] == "distplan-graph" and raw["plan"]["format"] == "distplan-plan"
    back = instance_from_dict(json.loads(dump_json(instance_to_dict(inst)), parse_float=Decimal))
    assert back.graph == inst.graph and back.topology == inst.topology and back.options == inst.options
    assert (back.optimum_s, back.bound_s, back.proof) == (inst.optimum_s, inst.bound_s, inst.proof)


def test_load_corpus_by_name_and_unknown_name():
    (one,) = load_corpus([IDS[0]])
    assert one.name == IDS[0]
    with pytest.raises(DistplanError, match="no corpus instance 'nope'.*known: tiny-01"):
        load_corpus(["nope"])


def test_a_malformed_file_names_the_file_and_the_key(tmp_path):
    doc = json.loads(CORPUS[0].path.read_text())
    doc["extra"] = 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(DistplanError, match=r"bad\.json.*unknown keys \['extra'\]"):
        read_instance(bad)
    doc.pop("extra")
    doc["proof"] = "trust me"
    bad.write_text(json.dumps(doc))
    with pytest.raises(DistplanError, match="proof 'trust me' unknown"):
        read_instance(bad)


def test_corpus_dir_is_the_package_data_folder():
    assert corpus_dir().name == "corpus" and corpus_dir().parent.name == "testing"


# --- slow: the proofs again ------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("inst", CORPUS, ids=IDS)
def test_optimum_is_proved_again(inst):
    """Brute force over the whole plan space for tiny instances; the MILP at gap 0 on
    every lane layout for the others."""
    proof = reprove(inst, time_limit_s=120)
    assert proof.method == inst.proof
    assert abs(proof.optimum_s - inst.optimum_s) <= 1e-6 * inst.optimum_s, (proof.optimum_s, inst.optimum_s)
    assert proof.bound_s <= inst.optimum_s * (1 + 1e-9)
    assert proof.bound_s >= inst.bound_s * (1 - 1e-6)


@pytest.mark.parametrize("inst", [pytest.param(i, marks=[pytest.mark.slow] if i.n_ops > 20 else [])
                                  for i in CORPUS], ids=IDS)
def test_planner_default_run_reaches_the_optimum(inst):
    """distplan.model.solve with its default layout search and gap 0 must find the proven
    optimum, and its bound must not exceed it."""
    problem = inst.problem()
    r = solve(problem, SolveOptions(top_k=1, rel_gap=0.0, time_limit_s=120, space="pipeline"))
    assert r.bound_s <= inst.optimum_s * (1 + 1e-6), f"bound {r.bound_s!r} above the optimum {inst.optimum_s!r}"
    assert math.isclose(r.objective_s, inst.optimum_s, rel_tol=1e-6), (r.objective_s, inst.optimum_s)
    assert_not_better_than_optimum(problem, r.plans[0], inst)
