"""Reliability fuzz, round two (issue 26): junk API arguments, flags that do not apply
(by combination and by the plan space the run resolves to), malformed graph / topology /
plan files (figures of 1e30 and more, unknown kinds and names), and output paths that
collide with inputs or each other. Every case runs in-process.

Oracle: the API raises a ``DistplanError`` (naming an argument at fault, where the case
knows it) or returns a correct result (a bool, string, nan or inf accepted as a number
is a wrong acceptance); a CLI exits 2 with one stderr line ``error:`` and no traceback
(a flag that does not apply refused by name, nothing written, no input file changed),
or 0 where the case may succeed. Fixed seeds (``SEEDS``, or
``DISTPLAN_RELIABILITY_SEEDS=5,6,7``): 300 cases by default, 26,400 with ``-m slow``,
which prints the cases per family, the outcomes and the seeds; a failure names its
family, seed and case number.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import hashlib
import io
import json
import math
import os
import random
import shutil
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import yaml

import distplan
from distplan.api.pareto import pareto
from distplan.cli import main as cli_main
from distplan.cli import replay as cli_replay
from distplan.core.errors import DistplanError

SEEDS = tuple(int(s) for s in os.environ.get("DISTPLAN_RELIABILITY_SEEDS", "0,1,2,3").split(",") if s.strip())

#: cases per family and seed: (quick, slow). The slow total over the 4 default seeds is >= 10,000.
SIZES = {"api_args": (30, 3000), "flags": (15, 1000), "files": (20, 2000), "paths": (10, 600)}
assert sum(s for _, s in SIZES.values()) * 4 >= 10_000

#: family -> Counter of outcomes ("ok", "refused", "exit 0", "exit 2")
OUTCOMES: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
SECONDS: dict[str, float] = collections.defaultdict(float)

TINY = {"format": "distplan-graph", "version": 1, "name": "tiny", "mode": "inference", "batch_size": 1, "seq_len": 16,
        "ops": [{"name": f"o{i}", "kind": "matmul", "fwd_flops": 1e9 * (i + 1), "bwd_flops": 2e9 * (i + 1),
                 "param_elems": 1000 * (i + 1), "out_elems": 4096, "touched_elems": 10000} for i in range(3)],
        "tensors": [{"src": f"o{i}", "dst": f"o{i + 1}", "elems": 4096} for i in range(2)]}
PAIR = {"name": "pair", "kinds": {"c": {"peak_TFLOPs": {"fp32": 1, "fp16": 2, "int8": 4}, "memory_MiB": 256,
                                        "memory_GBps": 1000, "launch_overhead_us": 1}},
        "devices": [{"name": "a", "kind": "c"}, {"name": "b", "kind": "c"}],
        "links": [{"src": "a", "dst": "b", "GBps": 50, "latency_ns": 100}]}


from test_fuzz_cli import Hang, watchdog  # noqa: E402  (the CLI fuzz suite's SIGALRM watchdog)


class CaseFailed(Exception):
    pass


def run_cli(entry: Callable[[list[str]], int], argv: list[str]) -> tuple[Any, str, str]:
    """``entry(argv)`` in-process: (exit status, stdout, stderr). An exception escaping it
    is a failed case."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with watchdog(30), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                rc = entry(argv)
            except SystemExit as e:   # argparse exits 2 itself
                rc = e.code
        shown = [w for w in caught if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning,
                                                                   ImportWarning, ResourceWarning))]
        if shown:
            err.write("".join(f"{w.category.__name__}: {w.message}\n" for w in shown[:3]))
    except Hang as e:
        raise CaseFailed(f"{argv!r}: {e}") from None
    except Exception:  # noqa: BLE001 - the property: nothing escapes main()
        raise CaseFailed(f"{argv!r} raised:\n{traceback.format_exc(limit=-6)}") from None
    return rc, out.getvalue(), err.getvalue()


def one_error_line(argv: list[str], rc: Any, err: str) -> str:
    """Exit 2 with exactly one stderr line, ``error: ...``; returns it."""
    lines = [line for line in err.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in err:
        raise CaseFailed(f"{argv!r}: a traceback on stderr:\n{err[-2000:]}")
    if rc != 2 or len(lines) != 1 or not lines[0].startswith("error:") or lines[0].strip() == "error:":
        raise CaseFailed(f"{argv!r}: expected exit 2 and one 'error:' line, got exit {rc!r} and:\n{err[-2000:]}")
    return lines[0]


def clean_exit(argv: list[str], rc: Any, err: str) -> str:
    if rc == 0:
        if "Traceback (most recent call last)" in err:
            raise CaseFailed(f"{argv!r}: exit 0 with a traceback:\n{err[-2000:]}")
        return "exit 0"
    one_error_line(argv, rc, err)
    return "exit 2"


def api_call(fn: Callable[[], Any], what: str) -> tuple[str, Any]:
    """("ok", result) or ("refused", the DistplanError); anything else fails the case."""
    try:
        with watchdog(30), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", fn()
    except DistplanError as e:
        msg = str(e)
        if not msg.strip() or "\n" in msg.strip():
            raise CaseFailed(f"{what}: a DistplanError that is not one line: {msg!r}") from None
        return "refused", e
    except Hang as e:
        raise CaseFailed(f"{what}: {e}") from None
    except Exception:  # noqa: BLE001
        raise CaseFailed(f"{what} raised instead of a DistplanError:\n{traceback.format_exc(limit=-6)}") from None


def digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


# --------------------------------------------------------------------------- shared inputs
class Ctx:
    """The inputs every family reads: a tiny graph file, a two-device topology file, a
    Problem, a solved report (two plans), its plan file."""

    def __init__(self, root: Path):
        self.root = root
        self.graph = root / "tiny.json"
        self.graph.write_text(json.dumps(TINY))
        self.topo = root / "pair.yaml"
        self.topo.write_text(yaml.safe_dump(PAIR, sort_keys=False))
        self.problem = distplan.problem(str(self.graph), "mcm2x2")
        self.report = distplan.solve(self.problem, distplan.SolveOptions(time_limit_s=10, top_k=2))
        assert len(self.report.plans) >= 2, "the base report needs two plans"
        self.plan_file = root / "plan.json"
        self.report.write_plan(self.plan_file)
        self.plan_doc = json.loads(self.plan_file.read_text())
        self.plan = self.report.best.plan
        self.scratch = root / "scratch"
        self.scratch.mkdir()


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> Ctx:
    return Ctx(tmp_path_factory.mktemp("reliability"))


# --------------------------------------------------------------------------- values
class Weird:
    def __repr__(self):
        return "Weird()"


def junk(rng: random.Random) -> Any:
    """A value of a wrong kind for most arguments (some are right for some)."""
    pool = [True, False, np.True_, np.bool_(False), "16", "2.5", "", "nan", "inf", "no", "fp16", "1e999", " 3 ",
            2.5, math.nan, math.inf, -math.inf, -1.0, 0.0, 1e308, 16.0, -0.0, 5e-324,
            0, -1, -7, 10 ** 30, 2, 16, np.int64(3), np.float64(math.nan), np.float32(2.5),
            None, [], [1, 2], [2.5], ["fp16"], (), {}, {"a": 1}, object(), Weird(), b"16", complex(1, 2),
            Path("x.json"), {1, 2}, lambda *a: None, "x" * 300]
    return rng.choice(pool)


def bad_for(kind: str, value: Any) -> bool:
    """``value`` must be refused for an argument of ``kind`` (a wrong acceptance if not)."""
    is_bool = isinstance(value, (bool, np.bool_))
    if kind in ("count", "int0"):
        if is_bool or isinstance(value, (str, bytes, float, np.floating, complex, list, tuple, dict, set)):
            return True
        if isinstance(value, (int, np.integer)):
            return value < (1 if kind == "count" else 0)
        return value is not None   # None: the default, where the argument has one
    if kind in ("float", "float>0"):
        if is_bool or isinstance(value, (bytes, complex, list, tuple, dict, set, Path)):
            return True
        if isinstance(value, (int, float, np.integer, np.floating)):
            return not math.isfinite(float(value)) or value < 0 or (kind == "float>0" and value == 0)
        return False
    if kind == "bool":
        return not is_bool
    if kind == "choice":   # None: the default
        return value is not None and not isinstance(value, str)
    if kind == "callable":
        return value is not None and not callable(value)
    return False


# --------------------------------------------------------------------------- family: API arguments
PROBLEM_ARGS = {"microbatches": "count", "batch_size": "count", "seq_len": "count", "mode": "choice",
                "precisions": None, "schedule": "choice", "low_bit_ops": "choice", "input_shapes": None,
                "profile": None}
SOLVE_ARGS = {"objective": "choice", "sensitivity_budget": None, "sensitivity_weight": "float",
              "iteration_target": None, "top_k": "count", "time_limit_s": "float>0", "rel_gap": "float",
              "threads": "count", "seed": "int0", "n_stages": "count", "path": None, "replicas": None,
              "verbose": "bool", "progress": "callable", "coarsen_ops": "int0", "extra_constraints": "callable",
              "space": "choice", "microbatch_sizes": None, "virtual_stages": None}
SIM_ARGS = {"ideal": "bool", "link_model": "choice", "trace": "bool", "symmetry": "bool"}
#: api.configs.whatif's arguments (a 2-layer, 4-head decoder: a case that runs takes milliseconds)
WHATIF_ARGS = {"dp": "count", "tp": "count", "pp": "count", "vp": "count", "microbatch_size": "count",
               "global_batch": "count", "seq_len": "count", "sequence_parallel": "bool",
               "overlap_grad_reduce": "bool", "check_memory": "bool", "breakdown": "bool", "recompute": "choice",
               "dp_allreduce": "choice", "order": "choice", "mode": "choice", "precision": "choice",
               "tp_comm_overlap": "bool"}


def _named(msg: str, names: list[str]) -> bool:
    return any(n in msg for n in names)


def case_api_args(rng: random.Random, ctx: Ctx) -> str:
    target = rng.choice(["problem", "problem", "solve_options", "solve_options", "sim_options", "report", "calls",
                         "whatif"])
    if target in ("problem", "solve_options", "sim_options", "whatif"):
        table = {"problem": PROBLEM_ARGS, "solve_options": SOLVE_ARGS, "sim_options": SIM_ARGS,
                 "whatif": WHATIF_ARGS}[target]
        names = rng.sample(sorted(table), rng.choice([1, 1, 1, 2, 3]) if len(table) > 2 else 1)
        kw = {n: junk(rng) for n in names}
        if target == "problem":
            workload = rng.choice([str(ctx.graph), "mlp-xs"])
            outcome, got = api_call(lambda: distplan.problem(workload, "mcm2x2", **kw),
                                    f"problem({workload!r}, **{kw!r})")
            if outcome == "ok" and not isinstance(got, distplan.Problem):
                raise CaseFailed(f"problem(**{kw!r}) returned {type(got).__name__}")
        elif target == "whatif":
            from distplan.api.configs import whatif
            args = {"dp": 1, "tp": 1, "pp": 1, "global_batch": 2, "seq_len": 8, "breakdown": False, **kw}
            outcome, got = api_call(lambda: whatif("gpt3-64x2x4", "a100x8", **args), f"whatif(**{args!r})")
        else:
            cls = distplan.SolveOptions if target == "solve_options" else distplan.SimOptions
            outcome, got = api_call(lambda: cls(**kw), f"{cls.__name__}(**{kw!r})")
        what = f"{target}(**{kw!r})"
        if outcome == "ok":
            wrong = [n for n in names if table[n] and bad_for(table[n], kw[n])]
            if wrong:
                raise CaseFailed(f"{what}: accepted {wrong[0]}={kw[wrong[0]]!r} (a {table[wrong[0]]} argument)")
        elif not _named(str(got), names + ["--" + n.replace("_", "-") for n in names]   # whatif: by its flags
                        + ["workload", "graph file", "precision"]) and \
                not any(isinstance(kw[n], int) and kw[n] > 2 ** 62 for n in names):   # a huge count: the graph it makes
            raise CaseFailed(f"{what}: the error does not name the argument: {got}")
        return outcome
    if target == "report":
        rep = ctx.report
        method = rng.choice(["write_plan", "write_trace", "write_report", "ranked", "write_json"])
        rank = rng.choice([junk(rng), 1, len(rep.plans), len(rep.plans) + 1, 0, -1, 99])
        dest = ctx.scratch / f"out-{rng.randrange(10 ** 9)}"
        path = rng.choice([str(dest) + ".json", dest.with_suffix(".json"), junk(rng), str(ctx.scratch),
                           str(ctx.scratch / "no" / "such" / "dir" / "x.json"), ""])
        if method == "write_report":
            path = rng.choice([str(dest), dest, junk(rng), str(ctx.plan_file)])
        if method == "ranked":
            call, what = (lambda: rep.ranked(rank)), f"report.ranked({rank!r})"
        elif method == "write_json":
            call, what = (lambda: rep.write_json(path)), f"report.write_json({path!r})"
        else:
            call, what = (lambda: getattr(rep, method)(path, rank=rank)), f"report.{method}({path!r}, rank={rank!r})"
        before = digest([ctx.plan_file, ctx.graph, ctx.topo])
        outcome, got = api_call(call, what)
        if digest([ctx.plan_file, ctx.graph, ctx.topo]) != before:
            raise CaseFailed(f"{what}: changed an input file")
        rank_ok = isinstance(rank, (int, np.integer)) and not isinstance(rank, (bool, np.bool_)) \
            and 1 <= rank <= len(rep.plans)
        if outcome == "ok" and method != "write_json" and not rank_ok:
            raise CaseFailed(f"{what}: accepted rank {rank!r}")
        if outcome == "ok" and method == "ranked" and got is not rep.plans[rank - 1]:
            raise CaseFailed(f"{what}: returned another plan than plans[{rank - 1}]")
        if outcome == "ok" and method == "write_plan":
            from distplan.core.plan import plan_from_dict

            written = plan_from_dict(json.loads(Path(path).read_text()), rep.problem)
            if written.op_precision != rep.plans[rank - 1].plan.op_precision or \
                    written.stages != rep.plans[rank - 1].plan.stages:
                raise CaseFailed(f"{what}: the file holds another plan than rank {rank}")
        if outcome == "refused" and not _named(str(got), ["rank", "path", "folder", "plan", "trace", "report",
                                                        str(path)[:40]]):
            raise CaseFailed(f"{what}: the error names no argument: {got}")
        return outcome
    # whole calls given something that is not what they take
    p, plan = ctx.problem, ctx.plan
    j = junk(rng)
    calls = [("solve(junk)", lambda: distplan.solve(j)),
             ("solve(p, junk)", lambda: distplan.solve(p, j) if j is not None else distplan.SolveOptions()),
             ("simulate(junk, plan)", lambda: distplan.simulate(j, plan)),
             ("simulate(p, junk)", lambda: distplan.simulate(p, j)),
             ("simulate(p, plan, junk)", lambda: distplan.simulate(p, plan, j) if j is not None else None),
             ("check(p, junk)", lambda: distplan.check(p, j)),
             ("check(junk, plan)", lambda: distplan.check(j, plan)),
             ("compare(p, 'random', budget_s=junk)", lambda: distplan.compare(p, "random", budget_s=j)
              if bad_for("float>0", j) else None),
             ("load_plan(plan_file, graph=junk)", lambda: distplan.load_plan(str(ctx.plan_file), j)
              if j is not None else None),
             ("problem(junk, 'mcm2x2')", lambda: distplan.problem(j, "mcm2x2")),
             ("problem(graph, junk)", lambda: distplan.problem(str(ctx.graph), j)),
             ("compare(p, junk)", lambda: distplan.compare(p, j, budget_s=1)),   # junk methods: refused first
             ("load_plan(junk)", lambda: distplan.load_plan(j) if not isinstance(j, (str, Path)) else None),
             ("save_plan(junk, p, path)", lambda: distplan.save_plan(j, p, str(ctx.scratch / "never.json"))),
             ("save_plan(plan, junk, path)", lambda: distplan.save_plan(plan, j, str(ctx.scratch / "never.json"))),
             ("save_plan(plan, p, junk)", lambda: distplan.save_plan(plan, p, j) if not isinstance(j, (str, Path))
              else None),
             ("pareto(p, junk)", lambda: pareto(p, j, distplan.SolveOptions(time_limit_s=1))
              if bad_for("count", j) else None),
             ("pareto(p, 2, junk)", lambda: pareto(p, 2, j) if j is not None else None)]
    name, fn = rng.choice(calls)
    outcome, got = api_call(fn, f"{name} with junk={j!r}")
    if outcome == "ok" and name.startswith(("solve(junk)", "simulate(junk", "check(junk", "check(p, junk)",
                                            "simulate(p, junk)", "compare(p, junk)", "load_plan(junk)",
                                            "save_plan(junk", "save_plan(plan, junk", "pareto(p, 2, junk)")) \
            and j is not None and not (name == "load_plan(junk)" and isinstance(j, (str, Path))):
        raise CaseFailed(f"{name} with junk={j!r}: accepted")
    return outcome


# --------------------------------------------------------------------------- family: flags that do not apply
#: (flags that make the run, flags that do not apply to it, the flags the error may name)
SOLVE_RULES: list[tuple[list[str], list[list[str]]]] = [
    ([], [["--batch-size", "4"], ["--seq-len", "64"], ["--batch-size=2"], ["--seq-len=8"]]),
    (["--compare", "random"], [["--pareto", "3"], ["--plan-out", "p.json"], ["--trace", "t.json"],
                               ["--report", "rep"]]),
    ([], [["--candidates", "10"], ["--budget", "5"], ["--budget=0.5"], ["--candidates=2"]]),
    (["--pareto", "3"], [["--plan-out", "p.json"], ["--trace", "t.json"], ["--objective", "latency"],
                         ["--objective=sensitivity"], ["--sensitivity-budget", "5"]]),
    # the auto space sends a training graph on chiplets to the pipeline MILP, which reads neither
    (["--mode", "training"], [["--virtual-stages", "2"], ["--microbatch-sizes", "1,2"], ["--virtual-stages=3,4"]]),
    ([], [["--iteration-target", "5%"], ["--microbatch-sizes", "1,2"], ["--virtual-stages", "2"]]),
    (["--mode", "training"], [["--iteration-target", "5%"], ["--iteration-target", "0.01"]]),
    (["--mode", "training", "--space", "pipeline"], [["--microbatch-sizes", "1,2"], ["--virtual-stages", "2"]]),
    # --describe and --list stop before solving (test_describe_and_list_refuse_solve_and_output_flags)
    (["--describe"], [["--compare", "random"], ["--pareto", "3"], ["--plan-out", "p.json"], ["--trace=t.json"],
                      ["--report", "rep"], ["--budget", "5"], ["--candidates", "3"]]),
    (["--list"], [["--compare", "random"], ["--plan-out=p.json"], ["--trace", "t.json"], ["--budget", "5"]]),
]
NEUTRAL = [["--time-limit", "1"], ["--seed", "3"], ["--top-k", "1"], ["--gap", "0.5"], ["--threads", "1"],
           ["--quiet"], ["--precisions", "fp16,int8"], ["--stages", "2"], ["--coarsen", "0"]]
REPLAY_PLAN_FLAGS = [["--seq-len", "64"], ["--dp", "2"], ["--tp", "1"], ["--pp", "1"], ["--vp", "2"],
                     ["--mode", "training"], ["--json"], ["--recompute", "full"], ["--zero", "1"],
                     ["--sequence-parallel"], ["--overlap-grad-reduce"], ["--microbatch-size", "1"],
                     ["--global-batch", "8"], ["--precision", "bf16"], ["--schedule", "1f1b"],
                     ["--dp-allreduce", "ring"], ["--order", "tp-pp-dp"]]
REPLAY_NAMED_FLAGS = [["--ideal"], ["--link-model", "fair"], ["--link-model=free"]]


def _flag_name(group: list[str]) -> str:
    return group[0].split("=")[0]


def case_flags(rng: random.Random, ctx: Ctx) -> str:
    d = ctx.scratch / f"flags-{rng.randrange(10 ** 9)}"
    d.mkdir()
    try:
        kind = rng.choice(["solve"] * 4 + ["replay_plan", "replay_named"])
        if kind == "solve":
            base, bad_pool = rng.choice(SOLVE_RULES)
            bad = rng.sample(bad_pool, rng.choice([1, 1, 2]) if len(bad_pool) > 1 else 1)
            groups = [["--workload", str(ctx.graph)], ["--topology", "mcm2x2"], base] + bad + \
                rng.sample(NEUTRAL, rng.randrange(0, 3))
            entry = cli_main.main
        elif kind == "replay_plan":
            bad = rng.sample(REPLAY_PLAN_FLAGS, rng.choice([1, 1, 2]))
            groups = [[str(ctx.plan_file)]] + bad + rng.sample([[], ["--ideal"], ["--link-model", "fair"]], 1)
            entry = cli_replay.main
        else:
            bad = rng.sample(REPLAY_NAMED_FLAGS, 1)
            groups = [["--workload", "mlp-xs"], ["--topology", "dgx-a100"], ["--dp", "2"]] + bad
            entry = cli_replay.main
        fixed, rest = groups[:1], groups[1:]
        rng.shuffle(rest)
        argv = [a for g in fixed + rest for a in g]
        cwd = os.getcwd()
        os.chdir(d)
        try:
            rc, _, err = run_cli(entry, argv)
        finally:
            os.chdir(cwd)
        line = one_error_line(argv, rc, err)
        names = [_flag_name(g) for g in bad]
        if not any(f"{n} does not apply" in line for n in names):
            raise CaseFailed(f"{argv!r}: the error does not name a flag that does not apply ({names}): {line}")
        if list(d.iterdir()):
            raise CaseFailed(f"{argv!r}: refused, yet wrote {[p.name for p in d.iterdir()]}")
        return "exit 2"
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- family: malformed files
#: raw text put where a number was (what json.dumps cannot write)
RAW = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 5000, "1e-999", "123456789012345678901234567890"]
WRONG = [None, True, "x", "", [], {}, [1], {"a": 1}, -1, 0, 2.5, 10 ** 30, 1e300, -1e300, "fp16", "matmul"]


def _leaves(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for k, v in items:
        out.append(prefix + (k,))
        out.extend(_leaves(v, prefix + (k,)))
    return out


def _at(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def mutate(rng: random.Random, doc: dict, kind: str) -> tuple[str, str, bool]:
    """One mutation of ``doc`` (a copy): (file text, what it did, must it be refused?)."""
    doc = copy.deepcopy(doc)
    paths = [p for p in _leaves(doc)]
    how = rng.choice(["duplicate", "nonfinite", "wrong_type", "missing", "huge", "unknown", "cycle", "extra_key"])
    if how == "duplicate":
        dicts = [p for p in paths if isinstance(_at(doc, p), dict) and _at(doc, p)] + [()]
        where = rng.choice(dicts)
        target = _at(doc, where)
        key = rng.choice(list(target))
        marker = "__DUP__"
        target[marker] = 0
        text = json.dumps(doc)
        dup = json.dumps(target[key])
        text = text.replace(f'"{marker}": 0', f'{json.dumps(key)}: {dup}', 1)
        return text, f"duplicate key {key!r} at {where!r}", True
    if how == "nonfinite":
        nums = [p for p in paths if isinstance(_at(doc, p), (int, float)) and not isinstance(_at(doc, p), bool)]
        if nums:
            where = rng.choice(nums)
            raw = rng.choice(RAW)
            _at(doc, where[:-1])[where[-1]] = "__RAW__"
            text = json.dumps(doc).replace('"__RAW__"', raw, 1)
            # NaN/Infinity are not JSON; 1e999 overflows: all refused. 5000 digits / 1e-999 may be fine or refused
            return text, f"{raw[:20]} at {where!r}", raw in ("NaN", "Infinity", "-Infinity", "1e999", "-1e999")
        how = "wrong_type"
    if how == "wrong_type":
        where = rng.choice(paths)
        value = rng.choice(WRONG)
        _at(doc, where[:-1])[where[-1]] = value
        return json.dumps(doc), f"{value!r} at {where!r}", False
    if how == "missing":
        dict_paths = [p for p in paths if isinstance(_at(doc, p[:-1]), dict)]
        where = rng.choice(dict_paths)
        del _at(doc, where[:-1])[where[-1]]
        return json.dumps(doc), f"no {where!r}", False
    if how == "huge":
        nums = [p for p in paths if isinstance(_at(doc, p), (int, float)) and not isinstance(_at(doc, p), bool)]
        where = rng.choice(nums)
        value = rng.choice([10 ** 18, 10 ** 30, 2 ** 63, 2 ** 64 + 1, 1e300, 1.7e308, 10 ** 9])
        _at(doc, where[:-1])[where[-1]] = value
        # issue 26: no graph or topology figure reaches 1e30 (out_elems 1.7e308 overflowed to inf,
        # latency_ns 1e30 was taken as 1e21 s)
        return json.dumps(doc), f"{value!r} at {where!r}", kind in ("graph", "topology") and value >= 1e30
    if how == "unknown":
        strs = [p for p in paths if isinstance(_at(doc, p), str) and p[-1] not in ("format", "description", "name")]
        if strs:
            where = rng.choice(strs)
            _at(doc, where[:-1])[where[-1]] = rng.choice(["zz", "o9", "nosuch", "FP16", "c9_9", "Matmul"])
            # an unknown op kind, mode, op or device name in a graph or topology: refused (kind 'Matmul' was not)
            return json.dumps(doc), f"unknown name at {where!r}", kind in ("graph", "topology")
        how = "extra_key"
    if how == "cycle" and kind == "graph":
        n = len(doc["ops"])
        src, dst = rng.choice([(n - 1, 0), (1, 0), (0, 0), (2, 1)])
        doc["tensors"].append({"src": f"o{src}", "dst": f"o{dst}", "elems": 16})
        return json.dumps(doc), f"cycle o{src} -> o{dst}", True
    if how == "cycle" and kind == "topology":
        doc["links"].append({"src": "a", "dst": "a", "GBps": 1, "latency_ns": 1})
        return json.dumps(doc), "a self link", False
    dicts = [p for p in paths if isinstance(_at(doc, p), dict)] + [()]
    where = rng.choice(dicts)
    _at(doc, where)[rng.choice(["extra", "GBps", "stage", "kind", "Name", "memory_GiB"])] = rng.choice(WRONG)
    return json.dumps(doc), f"an extra key at {where!r}", False


def case_files(rng: random.Random, ctx: Ctx) -> str:
    kind = rng.choice(["graph", "graph", "topology", "topology", "plan", "plan"])
    base = {"graph": TINY, "topology": PAIR, "plan": ctx.plan_doc}[kind]
    text, what, must_refuse = mutate(rng, base, kind)
    f = ctx.scratch / f"{kind}-{rng.randrange(10 ** 9)}.json"
    f.write_text(text)
    try:
        if kind == "plan":
            argv = [str(f)] + rng.choice([[], ["--ideal"], ["--link-model", "fair"]])
            rc, _, err = run_cli(cli_replay.main, argv)
            try:
                outcome = clean_exit(argv, rc, err)
            except CaseFailed as e:
                raise CaseFailed(f"plan file with {what}: {e}") from None
            if must_refuse and outcome == "exit 0":
                raise CaseFailed(f"plan file with {what}: replayed (exit 0), should be refused")
            return outcome
        if kind == "graph":
            call, name = (lambda: distplan.problem(str(f), "mcm2x2")), "graph file"
        else:
            call, name = (lambda: distplan.problem(str(ctx.graph), str(f))), "topology file"
        if rng.random() < 0.3:   # the same file through the command line, stopping before the solve
            argv = ["--workload", str(f if kind == "graph" else ctx.graph), "--topology",
                    str(f if kind == "topology" else "mcm2x2"), "--describe"]
            rc, _, err = run_cli(cli_main.main, argv)
            try:
                outcome = clean_exit(argv, rc, err)
            except CaseFailed as e:
                raise CaseFailed(f"{name} with {what}: {e}") from None
            if must_refuse and outcome == "exit 0":
                raise CaseFailed(f"{name} with {what}: accepted by --describe, should be refused")
            return outcome
        outcome, got = api_call(call, f"{name} with {what}")
        if must_refuse and outcome == "ok":
            raise CaseFailed(f"{name} with {what}: accepted, should be refused")
        return outcome
    finally:
        f.unlink(missing_ok=True)


# --------------------------------------------------------------------------- family: colliding output paths
def case_paths(rng: random.Random, ctx: Ctx) -> str:
    d = ctx.scratch / f"paths-{rng.randrange(10 ** 9)}"
    (d / "sub").mkdir(parents=True)
    try:
        graph, topo, plan = d / "g.json", d / "t.yaml", d / "plan.json"
        shutil.copy(ctx.graph, graph)
        shutil.copy(ctx.topo, topo)
        shutil.copy(ctx.plan_file, plan)
        inputs = [graph, topo, plan]

        def alias(p: Path) -> str:
            how = rng.choice(["same", "dot", "updown", "abs", "hard", "sym", "symrel"])
            if how == "same":
                return p.name
            if how == "dot":
                return f"./{p.name}"
            if how == "updown":
                return f"sub/../{p.name}"
            if how == "abs":
                return str(p)
            link = d / f"{how}-{rng.randrange(10 ** 9)}{p.suffix}"
            if how == "hard":
                os.link(p, link)
            elif how == "sym":
                link.symlink_to(p)
            else:
                link.symlink_to(p.name)
            return link.name

        kind = rng.choice(["solve", "solve", "solve", "replay", "replay_named"])
        if kind == "solve":
            ins = {"--workload": graph, "--topology": topo}
            outs = rng.sample(["--plan-out", "--trace", "--report"], rng.choice([1, 2, 3]))
            chosen: dict[str, str] = {}
            collide = rng.randrange(len(outs))   # at least one output collides
            for i, flag in enumerate(outs):
                if flag == "--report":
                    # the report folder holds an input under a report file's name, or a fresh folder
                    if i == collide:
                        shutil.copy(ctx.graph, d / "sub" / "trace.json")
                        inputs.append(d / "sub" / "trace.json")
                        ins["--workload"] = d / "sub" / "trace.json"
                        chosen[flag] = rng.choice(["sub", "./sub", str(d / "sub"), "sub/"])
                    else:
                        chosen[flag] = "rep"
                    continue
                if i == collide or rng.random() < 0.3:
                    if chosen and rng.random() < 0.4:
                        other = rng.choice([v for k, v in chosen.items() if k != "--report"] or [None])
                        if other is not None:
                            chosen[flag] = rng.choice([other, f"./{other}"]) if not other.startswith("/") else other
                            continue
                    chosen[flag] = alias(rng.choice(list(ins.values())))
                else:
                    chosen[flag] = f"out-{flag.strip('-')}.json"
            collided = True
            argv = ["--workload", os.path.relpath(ins["--workload"], d), "--topology", os.path.relpath(topo, d),
                    "--quiet", "--time-limit", "1"]
            for flag, path in chosen.items():
                argv += [flag, path] if rng.random() < 0.7 else [f"{flag}={path}"]
            entry = cli_main.main
        elif kind == "replay":
            trace = alias(plan) if rng.random() < 0.85 else "trace.json"   # a fresh name: it replays
            argv = [rng.choice([plan.name, f"./{plan.name}", str(plan)]), "--trace", trace]
            collided = Path(d / trace).resolve() == plan.resolve() or os.path.samefile(d / trace, plan) \
                if (d / trace).exists() else False
            entry = cli_replay.main
        else:
            argv = ["--workload", "mlp-xs", "--topology", topo.name, "--dp", "1", "--trace", alias(topo)]
            collided = True
            entry = cli_replay.main
        before = digest(inputs + [p for p in d.iterdir() if p.is_file()])
        cwd = os.getcwd()
        os.chdir(d)
        try:
            rc, _, err = run_cli(entry, argv)
        finally:
            os.chdir(cwd)
        after = digest([Path(p) for p in before])
        changed = [Path(p).name for p in before if after.get(p) != before[p]]
        if changed:
            raise CaseFailed(f"{argv!r} (exit {rc}): changed or destroyed {changed}")
        if not collided:
            return clean_exit(argv, rc, err)
        line = one_error_line(argv, rc, err)
        if "same file" not in line:
            raise CaseFailed(f"{argv!r}: refused, but not for the collision: {line}")
        return "exit 2"
    finally:
        shutil.rmtree(d, ignore_errors=True)


FAMILIES: dict[str, Callable[[random.Random, Ctx], str]] = {
    "api_args": case_api_args, "flags": case_flags, "files": case_files, "paths": case_paths}


# --------------------------------------------------------------------------- the runs
def run_family(family: str, ctx: Ctx, slow: bool) -> None:
    n = SIZES[family][1 if slow else 0]
    failures: list[str] = []
    t0 = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(ctx.scratch)   # junk paths ("16", "x.json") given to the API are relative: keep them out of the tree
    try:
        for s in SEEDS:
            for i in range(n):
                rng = random.Random(f"{family}:{s}:{i}")
                try:
                    OUTCOMES[family][FAMILIES[family](rng, ctx)] += 1
                except CaseFailed as e:
                    OUTCOMES[family]["FAILED"] += 1
                    failures.append(f"[{family} seed {s} case {i}] {e}")
    finally:
        os.chdir(cwd)
    SECONDS[family] += time.perf_counter() - t0
    if failures:
        shown = "\n\n".join(failures[:8])
        pytest.fail(f"{len(failures)} of {n * len(SEEDS)} {family} cases failed; the first:\n{shown}")


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    if not OUTCOMES:
        return
    lines = ["", f"reliability fuzz (seeds {','.join(map(str, SEEDS))}): cases per family"]
    total = 0
    for fam in FAMILIES:
        c = OUTCOMES.get(fam)
        if not c:
            continue
        total += sum(c.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
        lines.append(f"  {fam:9s} {sum(c.values()):6d}  ({parts})  {SECONDS[fam]:6.1f} s")
    lines.append(f"  {'all':9s} {total:6d}  {sum(SECONDS.values()):6.1f} s")
    text = "\n".join(lines)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    (reporter.write_line if reporter is not None else print)(text)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_reliability_quick(ctx, family):
    run_family(family, ctx, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_reliability_slow(ctx, family):
    run_family(family, ctx, slow=True)
