"""``python -m distplan.sim --workload W --topology T --dp --tp --pp ...``: a named
Megatron-style configuration simulated for one step, without a MILP."""
from __future__ import annotations

import pytest

from distplan.api.configs import megatron_plan, stage_of_ops, whatif
from distplan.cli.replay import main as sim_main
from distplan.core.errors import DistplanError


def test_layout_follows_megatron_order():
    w = whatif("gpt3-125m", "a100x16", dp=2, tp=4, pp=2, global_batch=8, seq_len=256)
    plan = w.plan
    assert [s.devices for s in plan.stages] == [tuple(range(8)), tuple(range(8, 16))]
    assert all(s.tensor_parallel == 4 and s.replicas == 2 for s in plan.stages)
    names = [op.name for op in w.problem.graph.ops]
    st = dict(zip(names, plan.op_stage))
    assert st["embed"] == 0 and st["l5.ffn2"] == 0 and st["l6.qkv"] == 1 and st["head"] == 1   # 12 layers: 6 + 6


def test_shares_add_up_and_a_single_device_has_no_communication():
    w = whatif("gpt3-125m", "dgx-a100", dp=1, tp=1, pp=1, global_batch=2, seq_len=256)
    assert w.exposed_comm_share == pytest.approx(0.0, abs=1e-9)
    assert w.compute_share + w.exposed_comm_share + w.bubble_share == pytest.approx(1.0)
    assert w.iteration_s == pytest.approx(w.sim.makespan_s + w.sim.optimizer_s)
    assert w.samples_per_s == pytest.approx(2 / w.iteration_s)
    flops = (w.problem.graph.fwd_flops + w.problem.graph.bwd_flops) * 2
    assert w.model_tflops_per_device == pytest.approx(flops / w.iteration_s / 1e12)


def test_more_pipeline_stages_add_a_bubble():
    one = whatif("gpt3-125m", "dgx-a100", dp=1, tp=1, pp=1, global_batch=4, seq_len=256)
    four = whatif("gpt3-125m", "dgx-a100", dp=1, tp=1, pp=4, global_batch=4, seq_len=256)
    assert four.bubble_share > one.bubble_share


@pytest.mark.parametrize("argv,needle", [
    (["--workload", "gpt3-125m", "--topology", "a100x16", "--dp", "8", "--tp", "4"], "= 32 devices"),
    (["--workload", "gpt3-125m", "--topology", "dgx-a100", "--dp", "2", "--global-batch", "3"], "not a multiple"),
    (["--workload", "gpt3-125m", "--topology", "a100x16", "--dp", "1", "--pp", "16"], "more stages than the 12"),
    ([], "give a plan file"),
])
def test_bad_configurations_are_one_error_line(capsys, argv, needle):
    assert sim_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]


def test_cli_prints_the_step_figures(capsys):
    assert sim_main(["--workload", "gpt3-125m", "--topology", "dgx-a100", "--dp", "2", "--tp", "2", "--pp", "2",
                     "--seq-len", "256", "--global-batch", "8"]) == 0
    out = capsys.readouterr().out
    for needle in ("dp 2 x tp 2 x pp 2 = 8 devices", "iteration", "model TFLOP/s", "GiB peak per device",
                   "exposed communication"):
        assert needle in out


def test_a_graph_without_layer_names_splits_by_operator_count():
    import distplan
    from conftest import chain_graph, line_topology
    p = distplan.problem(chain_graph(6, "training"), line_topology(2), precisions="fp16", microbatches=2)
    assert stage_of_ops(p, 2) == (0, 0, 0, 1, 1, 1)
    with pytest.raises(DistplanError, match="dp 2 x tp 1 x pp 2 = 4 devices"):
        megatron_plan(p, 2, 1, 2, "fp16")


def test_zero_degrees_are_an_error_in_python_too():
    with pytest.raises(DistplanError, match="--dp must be a positive whole number"):
        whatif("gpt3-125m", "dgx-a100", dp=0, tp=1, pp=1)


@pytest.mark.parametrize("workload,tp,needle", [
    ("llama-7b", 3, "--tp 3 does not divide the 32 attention heads of 'llama-7b'"),
    ("gpt3-125m", 5, "--tp 5 does not divide the 12 attention heads"),
    ("llama3-8b", 16, "32 attention heads and 8 key/value heads"),
])
def test_tp_must_divide_the_heads(workload, tp, needle):
    """Issue 26: the what-if accepted tp 3 on a 32-head model and simulated it as an even
    split; checked before the problem is built (milliseconds)."""
    with pytest.raises(DistplanError, match=needle):
        whatif(workload, "a100x16", dp=1, tp=tp, pp=1)


def test_tp_check_leaves_graph_files_and_dividing_degrees_alone():
    from distplan.api.configs import check_tp_divides_heads
    check_tp_divides_heads("gpt3-125m", 4)
    check_tp_divides_heads("llama3-8b", 8)
    check_tp_divides_heads("model.json", 3)    # a graph file carries no head count
    check_tp_divides_heads("mlp-xs", 3)        # an MLP has no heads


@pytest.mark.parametrize("kw,needle", [
    (dict(dp=True), r"^--dp must be a positive whole number, got True"),
    (dict(sequence_parallel="no"), r"^--sequence-parallel must be True or False, got 'no'"),
    (dict(overlap_grad_reduce=1), r"^--overlap-grad-reduce must be True or False"),
    (dict(check_memory="no"), r"^check_memory must be True or False"),
    (dict(breakdown="yes"), r"^breakdown must be True or False"),
    (dict(global_batch="8"), r"^--global-batch must be a positive whole number or None, got '8'"),
    (dict(global_batch=2.5), r"^--global-batch must be a positive whole number"),
    (dict(microbatch_size=2.5), r"^--microbatch-size must be a positive whole number, got 2.5"),
    (dict(microbatch_size=True), r"^--microbatch-size must be a positive whole number, got True"),
    (dict(precision=5), r"^--precision must be a string"),
    (dict(recompute="x"), r"^--recompute must be one of 'none', 'selective', 'full'"),
    (dict(dp_allreduce="x"), r"^--dp-allreduce must be one of 'ring', 'hierarchical'"),
    (dict(mode="x"), r"^--mode must be one of 'inference', 'training'"),
    (dict(vp=True), r"^--vp must be a positive whole number"),
])
def test_whatif_arguments_are_checked_at_the_edge(kw, needle):
    """Issue 26: whatif(dp=True), sequence_parallel='no' and the like were taken
    (bools as counts, any value as a switch), global_batch='8' was a TypeError; checked
    before the problem is built (milliseconds)."""
    args = dict(dp=1, tp=1, pp=1, global_batch=2, breakdown=False)
    args.update(kw)
    with pytest.raises(DistplanError, match=needle):
        whatif("gpt3-125m", "a100x8", **args)


def test_a_huge_vp_is_refused_before_any_stage_is_built():
    """whatif(pp=2, vp=10**30) built 2e30 stages before checking the layers (the
    reliability fuzz: still running after 30 s); now one error at once."""
    with pytest.raises(DistplanError, match=r"chunks is more than the layers of 'gpt3-64x2x4'"):
        whatif("gpt3-64x2x4", "a100x8", dp=1, tp=1, pp=2, vp=10**30, global_batch=2, seq_len=8, breakdown=False)


def test_more_stages_than_operators_is_refused_on_a_graph_without_layers():
    from distplan.costs.problem import build_problem
    from distplan.topologies.presets import get_topology
    from distplan.workloads.graph import Graph, Operator, Tensor
    g = Graph("chain", (Operator("a", "matmul", 1e9, 2e9), Operator("b", "matmul", 1e9, 2e9)), (Tensor("a", "b", 4),),
              mode="training")
    p = build_problem(g, get_topology("a100x8"))
    with pytest.raises(DistplanError, match=r"--pp 3 is more stages than the 2 operators of 'chain'"):
        stage_of_ops(p, 3)


def test_numpy_degrees_with_a_huge_vp_are_one_error():
    """np.int64(3) x 10**30 overflowed to an OverflowError traceback ('Python int too large
    to convert to C long'; the reliability fuzz, seed 13)."""
    import numpy as np
    with pytest.raises(DistplanError, match=r"chunks is more than the layers"):
        whatif("gpt3-64x2x4", "a100x8", dp=1, tp=1, pp=np.int64(3), vp=10**30, global_batch=2, seq_len=8,
               breakdown=False)
