"""Regression tests for the bugs the fuzz suite (tests/test_fuzz_cli.py) found: each was a
traceback (or a wrong result) where one ``error:`` line belongs. Minimal reproducers."""
from __future__ import annotations

import pytest

import solve
from distplan.core.errors import DistplanError
from distplan.core.units import GIGA, to_si
from distplan.topologies.io import load_topology
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.io import load_graph

KIND = "kinds:\n  c: {peak_TFLOPs: {fp16: 2}, memory_MiB: 64, memory_GBps: 2000}\n"


def _one_error_line(capsys, argv, *needles):
    rc = solve.main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_topology_nested_too_deeply(tmp_path, suffix):
    """Was: RecursionError from the YAML/JSON parser."""
    p = tmp_path / f"t{suffix}"
    p.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(DistplanError, match="nested too deeply"):
        load_topology(p)


def test_topology_yaml_integer_of_5000_digits(tmp_path):
    """Was: ValueError (Python's 4300-digit limit) from PyYAML's int constructor."""
    p = tmp_path / "t.yaml"
    p.write_text(KIND + "devices: [{name: a, kind: c, node: " + "1" * 5000 + "}]\n")
    with pytest.raises(DistplanError, match="not valid YAML"):
        load_topology(p)


def test_graph_json_integer_of_5000_digits(tmp_path, capsys):
    """Was: ValueError from json.loads escaping read_json_file (graph and plan files)."""
    p = tmp_path / "g.json"
    p.write_text('{"format": "distplan-graph", "version": ' + "1" * 5000 + "}")
    with pytest.raises(DistplanError, match="not valid JSON"):
        load_graph(p)
    _one_error_line(capsys, ["--workload", str(p), "--topology", "mcm2x2", "--describe"], "not valid JSON")


def test_unit_conversion_overflow():
    """Was: decimal.Overflow from to_si (a bandwidth of 1e999999999 GB/s)."""
    from decimal import Decimal

    with pytest.raises(DistplanError, match="out of range"):
        to_si(Decimal("1e999999999"), GIGA, "links[0].GBps")


def test_topology_file_with_an_exponent_beyond_any_float(tmp_path, capsys):
    p = tmp_path / "t.yaml"
    p.write_text("kinds:\n  c: {peak_TFLOPs: {fp16: 2}, memory_MiB: 64, memory_GBps: 1e999999999}\n"
                 "devices: [{name: a, kind: c}]\n")
    _one_error_line(capsys, ["--topology", str(p), "--describe"], "memory_GBps is out of range")


K = DeviceKind("c", {"fp16": 1e12}, 1e9, 1e11)


def _both(a, b):
    return (Link(a, b, 1e9), Link(b, a, 1e9))


def test_xy_mesh_with_a_hole_is_refused_up_front():
    """Was: KeyError in the XY route from c0_0 to c1_1 (it passes [0, 1], where no device sits)."""
    devs = (Device("c0_0", "c", pos=(0, 0)), Device("c1_1", "c", pos=(1, 1)), Device("c1_0", "c", pos=(1, 0)))
    with pytest.raises(DistplanError, match=r"none at \[0, 1\]"):
        Topology("t", {"c": K}, devs, _both("c0_0", "c1_0") + _both("c1_0", "c1_1"), routing="xy")


def test_xy_mesh_without_a_neighbour_link_is_refused_up_front():
    devs = tuple(Device(f"c{r}_{c}", "c", pos=(r, c)) for r in range(2) for c in range(2))
    links = _both("c0_0", "c0_1") + _both("c0_0", "c1_0") + _both("c0_1", "c1_1") + (Link("c1_0", "c1_1", 1e9),)
    with pytest.raises(DistplanError, match="no link c1_1->c1_0"):
        Topology("t", {"c": K}, devs, links, routing="xy")


def test_xy_mesh_anywhere_on_the_grid_is_fine():
    devs = (Device("a", "c", pos=(3, 5)), Device("b", "c", pos=(3, 6)))
    t = Topology("t", {"c": K}, devs, _both("a", "b"), routing="xy")
    assert t.route(0, 1) == (0,) and t.route(1, 0) == (1,)


def test_xy_mesh_with_a_hole_from_a_file(tmp_path, capsys):
    p = tmp_path / "t.yaml"
    p.write_text("routing: xy\n" + KIND + "devices:\n  - {name: a, kind: c, pos: [0, 0]}\n"
                 "  - {name: b, kind: c, pos: [1, 1]}\n  - {name: d, kind: c, pos: [1, 0]}\n"
                 "links:\n  - {src: a, dst: d, GBps: 100}\n  - {src: d, dst: b, GBps: 100}\n")
    _one_error_line(capsys, ["--topology", str(p), "--describe"], "XY routing needs a device at every mesh position")


# --- plan files --------------------------------------------------------------------------------
def _plan_doc(tmp_path):
    import json

    from conftest import chain_graph
    from distplan.workloads.io import save_graph

    save_graph(chain_graph(3), tmp_path / "g.json")
    rc = solve.main(["--workload", str(tmp_path / "g.json"), "--topology", "mcm2x2", "--time-limit", "5", "--quiet",
                     "--top-k", "1", "--plan-out", str(tmp_path / "plan.json")])
    assert rc == 0
    return json.loads((tmp_path / "plan.json").read_text())


@pytest.mark.parametrize("where", ["plan", "problem"])
@pytest.mark.parametrize("value,needle", [(float("inf"), "Infinity is not a JSON number"),   # strict JSON on read
                                          (2.5, "must be a whole number"),
                                          ("16", "must be a whole number"), (0, ">= 1")])
def test_plan_file_microbatches_must_be_whole(tmp_path, capsys, where, value, needle):
    """Was: OverflowError (int(inf)) from problem_from_document; 2.5 was read as 2."""
    import json

    from distplan.cli import replay

    d = _plan_doc(tmp_path)
    (d if where == "plan" else d["problem"])["microbatches"] = value
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(d))
    capsys.readouterr()
    rc = replay.main([str(p)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


@pytest.mark.parametrize("tp", [0, -2])
def test_plan_file_tensor_parallel_below_one_is_one_error(tmp_path, capsys, tp):
    """Was: ZeroDivisionError from the expert-parallel check reading the stage's replicas
    (found by test_fuzz_cli's slow plan fuzzer after d455cf6)."""
    import json

    from distplan.cli import replay

    d = _plan_doc(tmp_path)
    d["stages"][0]["tensor_parallel"] = tp
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(d))
    capsys.readouterr()
    rc = replay.main([str(p), "--ideal"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "tensor_parallel" in lines[0], err


def test_plan_file_device_order_microbatch_must_be_whole(tmp_path):
    from distplan.core.plan import plan_from_dict
    from distplan.costs.plan_file import problem_from_document

    d = _plan_doc(tmp_path)
    problem = problem_from_document(d)
    dev = d["stages"][0]["devices"][0]
    d["schedule"], d["device_order"] = "explicit", {dev: [[float("inf"), "o0", "F"]]}
    with pytest.raises(DistplanError, match="device_order must be a whole number"):
        plan_from_dict(d, problem)


# --- bugs the fuzz suite found in distplan/cli/main.py and the microbatch count: fixed --------
# Each asserts the fuzz suite's property on one minimal case (they were strict xfails until fixed; the
# owner fixes it, the XPASS fails the run and the mark (and the fuzz generator's exclusion
# of that case, see tests/test_fuzz_cli.py) should go.
def _property(argv, tmp_path, limit_s=None):
    """Exit 0 with a plan file the checker accepts, or exit 2 with one error line; within
    the time limit."""
    import contextlib
    import io
    import time

    from distplan.costs.check import plan_violations
    from distplan.costs.plan_file import load_plan_file

    from conftest import chain_graph
    from distplan.workloads.io import save_graph

    save_graph(chain_graph(3), tmp_path / "g.json")
    err = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.chdir(tmp_path), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = solve.main(argv)
        wall = time.perf_counter() - t0
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        assert rc in (0, 2)
        if rc == 2:
            assert len(lines) == 1 and lines[0].startswith("error: ")
        else:
            plan, problem = load_plan_file("plan.json")
            assert plan_violations(problem, plan) == []
    if limit_s is not None:
        assert wall <= limit_s * 1.1 + 3


TINY = ["--workload", "g.json", "--topology", "mcm2x2", "--time-limit", "3", "--quiet", "--top-k", "1"]


def test_known_trace_and_plan_out_on_one_file(tmp_path):
    _property(TINY + ["--trace", "plan.json"], tmp_path)


def test_known_report_and_plan_out_on_one_path(tmp_path):
    _property(TINY + ["--report", "plan.json"], tmp_path)


def test_known_huge_microbatch_count(tmp_path):
    _property(TINY + ["--microbatches", str(10**12)], tmp_path)


@pytest.mark.slow
def test_known_simulation_outlasts_the_time_limit(tmp_path):
    _property(["--workload", "g.json", "--topology", "mcm2x2", "--time-limit", "1", "--quiet", "--top-k", "1",
               "--microbatches", "1000000"], tmp_path, limit_s=1)


def test_graph_file_negative_out_elems_of_an_op_that_sends_nothing(tmp_path, capsys):
    """Was: KeyError in graph_from_dict (an op with out_elems < 0 and no outgoing tensor)."""
    import json

    p = tmp_path / "g.json"
    p.write_text(json.dumps({"format": "distplan-graph", "version": 1, "name": "g", "tensors": [],
                             "ops": [{"name": "a", "kind": "matmul", "fwd_flops": 1e6, "out_elems": -1}]}))
    _one_error_line(capsys, ["--workload", str(p), "--topology", "mcm2x2", "--describe"], "out_elems")


@pytest.mark.parametrize("figures,needle", [
    ("peak_TFLOPs: {fp16: 5e-324}, memory_MiB: 64, memory_GBps: 2000", "peak for fp16 x efficiency"),
    ("peak_TFLOPs: {fp16: 2}, memory_MiB: 64, memory_GBps: 1e-320", "mem_bw_bytes_per_s"),
])
def test_device_rates_that_overflow_task_times(tmp_path, capsys, figures, needle):
    """Was: task times of inf; the downset bound warned (numpy overflow) on stderr and the
    run ended with a misleading 'no plan fits the devices' memory'."""
    p = tmp_path / "t.yaml"
    p.write_text("kinds:\n  c: {" + figures + "}\ndevices: [{name: a, kind: c}]\n")
    _one_error_line(capsys, ["--topology", str(p), "--describe"], needle)


def test_link_bandwidth_that_overflows_transfer_times():
    with pytest.raises(DistplanError, match="bandwidth is 5e-320 byte/s"):
        Topology("t", {"c": K}, (Device("a", "c"), Device("b", "c")), (Link("a", "b", 5e-320), Link("b", "a", 1e9)))


# --- messages -----------------------------------------------------------------------------------
@pytest.mark.parametrize("flag,what", [("--workload", "a graph file ends in .json"),
                                       ("--topology", "a topology file ends in .yaml")])
def test_a_file_without_a_known_suffix_is_named_as_a_file(tmp_path, capsys, flag, what):
    """Was: 'unknown workload/topology' and the whole list of preset names."""
    (tmp_path / "model.txt").write_text("{}")
    _one_error_line(capsys, [flag, str(tmp_path / "model.txt"), "--describe"], "is a file, not a", what)
    _one_error_line(capsys, [flag, str(tmp_path), "--describe"], "is a folder, not a")


def test_a_zoo_name_wins_over_a_folder_of_that_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlp-xs").mkdir()
    assert solve.main(["--workload", "mlp-xs", "--topology", "mcm2x2", "--describe"]) == 0


def test_huge_numbers_are_brief_in_messages(tmp_path, capsys):
    """Was: every digit of a 31-digit number inside the error line."""
    p = tmp_path / "t.yaml"
    p.write_text(KIND + "devices: [{name: a, kind: c, node: " + str(-10**30) + "}]\n")
    _one_error_line(capsys, ["--topology", str(p), "--describe"], "node must be an integer >= 0, got -1.00000e+30")
    g = tmp_path / "g.json"
    g.write_text('{"format": "distplan-graph", "version": ' + str(10**30) + ', "name": "g", "ops": [], "tensors": []}')
    _one_error_line(capsys, ["--workload", str(g), "--describe"], "v1.00000e+30 unsupported")


# --- found by exploring other seeds (DISTPLAN_FUZZ_SEED=1, 2) ------------------------------------
@pytest.mark.parametrize("kind", [{"a": 1}, ["matmul"], 7, None])
def test_graph_file_op_kind_must_be_a_string(tmp_path, capsys, kind):
    """Was: TypeError (unhashable type) while costing the sensitivity of a dict/list kind."""
    import json

    p = tmp_path / "g.json"
    p.write_text(json.dumps({"format": "distplan-graph", "version": 1, "name": "g", "tensors": [],
                             "ops": [{"name": "a", "kind": kind, "fwd_flops": 1e6}]}))
    _one_error_line(capsys, ["--workload", str(p), "--topology", "mcm2x2", "--describe"], "'kind' must be a string")


def test_yaml_reader_errors_are_one_line(tmp_path, capsys):
    """Was: PyYAML's ReaderError text over two lines (an error line and '  in "<unicode string>"')."""
    p = tmp_path / "t.yaml"
    p.write_text("\x00\x01")
    _one_error_line(capsys, ["--topology", str(p), "--describe"], "not valid YAML", "position 0")


@pytest.mark.parametrize("order", [None, [], "x"])
def test_plan_file_device_order_must_be_a_mapping(tmp_path, order):
    """Was: AttributeError ('NoneType' object has no attribute 'items')."""
    from distplan.core.plan import plan_from_dict
    from distplan.costs.plan_file import problem_from_document

    d = _plan_doc(tmp_path)
    d["device_order"] = order
    with pytest.raises(DistplanError, match="device_order must map device names"):
        plan_from_dict(d, problem_from_document(d))


@pytest.mark.parametrize("flag", ["--dp", "--tp", "--pp", "--global-batch"])
def test_whatif_counts_must_be_positive(capsys, flag):
    """Was: ZeroDivisionError in api.configs.whatif for --dp 0 (and 'microbatches must be >= 1,
    got -8' for --dp -1)."""
    from distplan.cli import replay

    argv = ["--workload", "gpt3-64x1x2", "--topology", "mcm2x2", "--dp", "1", "--seq-len", "16"]
    for value in ("0", "-1"):
        rc = replay.main(argv + [flag, value])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert rc == 2 and lines == [f"error: {flag} must be >= 1, got {value}"], err


def test_whatif_checks_the_trace_path_before_simulating(capsys, tmp_path):
    from distplan.cli import replay

    rc = replay.main(["--workload", "gpt3-64x1x2", "--topology", "mcm2x2", "--dp", "1", "--seq-len", "16",
                      "--trace", str(tmp_path / "no" / "t.json")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.startswith("error: --trace"), (out, err)


def test_studies_out_that_is_a_file(tmp_path, capsys, monkeypatch):
    """Was: FileExistsError traceback after the whole sweep had run."""
    from distplan.cli import studies

    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing.json").write_text("{}")
    rc = studies.main(["--workloads", "mlp-xs", "--topologies", "mcm1x2", "--out", "existing.json", "--workers", "1"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "--out 'existing.json' is a file" in lines[0], err


# --- found by tests/test_fuzz_reliability.py (issue 26) ------------------------------------------
@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    """A solved two-plan report of a 3-op chain on mcm2x2."""
    import distplan
    from conftest import chain_graph

    p = distplan.problem(chain_graph(3), "mcm2x2")
    return p, distplan.solve(p, distplan.SolveOptions(time_limit_s=10, top_k=2))


def test_write_report_to_an_existing_file(tiny_report, tmp_path):
    """report.write_report(folder) where a file of that name exists: was a FileExistsError
    traceback from mkdir; now one DistplanError naming the folder, and the file is kept."""
    _, rep = tiny_report
    f = tmp_path / "plan.json"
    f.write_text("keep")
    with pytest.raises(DistplanError, match=r"folder .*plan.json' is a file, not a folder"):
        rep.write_report(f)
    assert f.read_text() == "keep"
    with pytest.raises(DistplanError, match=r"folder '.*xxx' cannot be made: File name too long"):
        rep.write_report(tmp_path / ("x" * 300))   # was an OSError traceback (ENAMETOOLONG) from stat/mkdir


@pytest.mark.parametrize("call", ["check", "simulate"])
def test_check_and_simulate_need_a_plan(tiny_report, call):
    """distplan.check(p, None) / distplan.simulate(p, None): were AttributeError tracebacks
    ('NoneType' has no 'op_stage'); a plan is required, so None is refused by name."""
    import distplan

    p, _ = tiny_report
    with pytest.raises(DistplanError, match=r"^plan must be a Plan, got None"):
        getattr(distplan, call)(p, None)


@pytest.mark.parametrize("stop", ["--describe", "--list"])
@pytest.mark.parametrize("flags,name", [(["--compare", "random"], "--compare"), (["--budget", "5"], "--budget"),
                                        (["--plan-out", "p.json"], "--plan-out"), (["--trace=t.json"], "--trace"),
                                        (["--pareto", "3"], "--pareto"), (["--candidates", "4"], "--candidates"),
                                        (["--report", "rep"], "--report")])
def test_describe_and_list_refuse_solve_and_output_flags(tmp_path, capsys, monkeypatch, stop, flags, name):
    """--describe and --list stop before solving: --budget, --plan-out, --compare... were
    silently ignored beside them (exit 0, nothing written); now one error naming the flag."""
    monkeypatch.chdir(tmp_path)
    _one_error_line(capsys, ["--workload", "mlp-xs", "--topology", "mcm2x2", stop, *flags],
                    f"{name} does not apply with {stop}", "leave it out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stage", [2.5, None, "s0", [["c0_0"]], 7])
def test_plan_file_stage_must_be_a_mapping(tmp_path, capsys, stage):
    """A plan file whose stage is not a mapping (``"stages": [2.5]``): was an AttributeError
    traceback ('float' has no 'get') in the replay; now one error naming the stage."""
    import json

    from distplan.cli import replay

    doc = _plan_doc(tmp_path)
    doc["stages"][0] = stage
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    rc = replay.main([str(tmp_path / "bad.json")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "stage 0 must be a mapping" in lines[0]


@pytest.mark.parametrize("key,value", [("seq_len", "x"), ("seq_len", -1), ("seq_len", 10**30),
                                       ("batch_size", True), ("batch_size", 10**30)])
def test_graph_file_batch_and_sequence_are_checked(tmp_path, key, value):
    # a graph file's batch_size and seq_len were read unchecked (seq_len not at all) and
    # written into plan.json's problem block: the reliability fuzz found it
    import json

    import distplan
    from conftest import chain_graph
    from distplan.workloads.io import save_graph

    save_graph(chain_graph(3), tmp_path / "g.json")
    doc = json.loads((tmp_path / "g.json").read_text())
    doc[key] = value
    (tmp_path / "g.json").write_text(json.dumps(doc))
    with pytest.raises(DistplanError, match=key):
        distplan.problem(str(tmp_path / "g.json"), "mcm2x2")
