"""distplan.testing: property-based regression tests against distplan, for people who
build planners, compilers or schedulers (pytest + hypothesis; ``pip install distplan[test]``).

Modules (one concept each): ``asserts`` (``assert_feasible``,
``assert_simulated_matches_model``, ``assert_not_better_than_optimum``: AssertionErrors
that say what is wrong and whom to suspect); ``corpus`` (``load_corpus()``: versioned
instances with proven optima, graph and topology embedded); ``strategies`` (hypothesis
strategies for graphs, topologies, problems and feasible plans); ``brute_force`` (the
planner's plan space enumerated exactly); ``proofs`` (``prove_brute_force``,
``prove_milp``, ``reprove``); ``make_corpus`` (``python -m distplan.testing.make_corpus
--out DIR``: the corpus, deterministically).

This package sits in distplan's top layer: it may import any other part.
Guide, example test and formats: docs/guides/testing.md.
"""
from distplan.testing.asserts import (assert_feasible, assert_not_better_than_optimum,
                                      assert_simulated_matches_model)
from distplan.testing.corpus import CorpusInstance, corpus_dir, corpus_names, load_corpus

__all__ = ["assert_feasible", "assert_simulated_matches_model", "assert_not_better_than_optimum",
           "CorpusInstance", "load_corpus", "corpus_names", "corpus_dir"]
