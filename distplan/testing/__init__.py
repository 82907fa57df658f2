"""distplan.testing: property-based regression tests against distplan, for people who
build planners, compilers or schedulers (pytest + hypothesis; ``pip install distplan[test]``).

Modules (one concept each):

``distplan.testing.asserts``
    ``assert_feasible(problem, plan)``, ``assert_simulated_matches_model(problem, plan,
    rel=1e-9)``, ``assert_not_better_than_optimum(problem, plan, optimum_s | instance)``:
    AssertionErrors that say what is wrong and whom to suspect.
``distplan.testing.corpus``
    ``load_corpus(names=None) -> list[CorpusInstance]``: 37 versioned instances
    (``distplan-corpus-instance`` v1 JSON, graph and topology embedded) with proven
    optima, from 2-op brute-forced ones to BERT-base on a 4x4 chiplet mesh.
    ``inst.problem()``, ``inst.plan()``, ``inst.optimum_s``, ``inst.bound_s``, ``inst.proof``.
``distplan.testing.strategies`` (needs hypothesis)
    ``graphs``, ``dag``, ``device_kinds``, ``topologies``, ``topology``, ``problems``,
    ``feasible_plans(problem)``, ``problem_and_feasible_plan``, ``problem_and_plan``.
``distplan.testing.brute_force``
    the planner's plan space enumerated exactly; ``brute_force_optimum(problem)``.
``distplan.testing.proofs``
    ``prove_brute_force``, ``prove_milp`` (the MILP at gap 0 on every layout), ``reprove``.
``distplan.testing.make_corpus``
    ``python -m distplan.testing.make_corpus --out DIR``: the corpus, deterministically.

Example::

    import pytest
    from distplan.testing import load_corpus, assert_feasible, assert_not_better_than_optimum

    @pytest.mark.parametrize("inst", load_corpus(), ids=lambda i: i.name)
    def test_my_planner(inst):
        plan = my_planner(inst.problem())
        assert_feasible(inst.problem(), plan)
        assert_not_better_than_optimum(inst.problem(), plan, inst)

This package sits in distplan's top layer: it may import any other part.
"""
from distplan.testing.asserts import (assert_feasible, assert_not_better_than_optimum,
                                      assert_simulated_matches_model)
from distplan.testing.corpus import CorpusInstance, corpus_dir, corpus_names, load_corpus

__all__ = ["assert_feasible", "assert_simulated_matches_model", "assert_not_better_than_optimum",
           "CorpusInstance", "load_corpus", "corpus_names", "corpus_dir"]
