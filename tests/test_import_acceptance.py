"""Issue 12's acceptance: real ``transformers`` models (configs, random weights, nothing
downloaded) imported by ``torch.onnx.export`` (default settings) and by
``distplan.from_module`` plan at least 0.95x as fast as the zoo model of the same
architecture and shape (simulated best plan, 512 tokens, inference and training, neither
side's mode flipped afterwards).

The slow tests keep that ratio for BERT-base and GPT-2 on dgx-a100 (both modes) and on
mcm4x4 (inference; training fits no model there). ViT and an LSTM language model, with
no zoo counterpart, must import exactly (parameters exact, FLOPs within 1 %, no unknown
operator) and plan on mcm4x4 and dgx-a100 in both modes (small configs by default, ViT-base
and the large PTB LSTM when slow). As a script, ``python tests/test_import_acceptance.py
[--quick] [MODEL ...]`` prints docs/IMPORT.md's acceptance table.
"""
from __future__ import annotations

import contextlib
import io
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("onnx", reason="the ONNX extra is not installed (pip install -e .[onnx])")
torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e .[torch])")
pytest.importorskip("transformers", reason="the transformers extra is not installed (pip install -e .[transformers])")
pytest.importorskip("onnxscript", reason="torch.onnx.export's default exporter needs onnxscript "
                                         "(pip install -e .[transformers])")

sys.path.insert(0, str(Path(__file__).parent))
from test_import_transformers import REAL, SMALL, export, randomize  # noqa: E402

import distplan  # noqa: E402
from distplan.core.errors import DistplanError  # noqa: E402
from distplan.workloads.graph import Graph  # noqa: E402
from distplan.workloads.onnx_import import UnknownOperatorWarning, import_onnx  # noqa: E402
from distplan.workloads.zoo import get_workload  # noqa: E402

SEQ = 512
RATIO = 0.95
#: the zoo model of the same architecture (None: the zoo has none)
ZOO = {"bert-base": "bert-base", "gpt2": "gpt2", "t5-small": None, "distilbert": None, "vit-base": None,
       "lstm-large": None}
#: tokens per sample where not SEQ: the LSTM's published sequence length (ViT's 197 tokens
#: follow from its image size, whatever is given here)
SEQS = {"lstm-large": 35}
SOLVE = distplan.SolveOptions(time_limit_s=30, top_k=1)


@dataclass
class Imported:
    """One model imported one way, in one mode."""

    graph: Graph
    nodes: int            # ONNX nodes, or traced torch.export nodes
    torch_params: int
    expected_flops: float
    unknown: int


def build(name: str) -> tuple[Any, dict[str, Any]]:
    """The model (every parameter random, as trained weights) and its example inputs."""
    case = REAL[name]
    torch.manual_seed(0)
    model = randomize(case.build().eval())
    return model, case.inputs(model.config, 1, SEQS.get(name, SEQ))


def import_both(name: str, mode: str, folder: Path) -> dict[str, Imported]:
    """{'onnx': ..., 'module': ...}: the dynamo export (written once into ``folder``) and from_module."""
    import onnx  # noqa: PLC0415

    model, inputs = build(name)
    flops = REAL[name].flops(model, model.config, 1, SEQS.get(name, SEQ))
    n_params = sum(p.numel() for p in model.parameters())
    path = folder / f"{name}.onnx"
    if not path.exists():
        export(model, inputs, path, "dynamo")
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = import_onnx(path, mode=mode)
    out["onnx"] = Imported(g, len(onnx.load(str(path), load_external_data=False).graph.node), n_params, flops,
                           sum(issubclass(w.category, UnknownOperatorWarning) for w in caught))
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        g = distplan.from_module(model, inputs, mode=mode)
    out["module"] = Imported(g, 0, n_params, flops, sum(issubclass(w.category, UnknownOperatorWarning)
                                                        for w in caught))
    return out


def throughput(graph: Graph, topology: str) -> float | str:
    """The best plan's simulated throughput (samples/s), or why there is none."""
    try:
        return distplan.solve(distplan.problem(graph, topology), SOLVE).best.sim.throughput_per_s
    except DistplanError as e:
        return str(e).split(";")[0]


def zoo(name: str, mode: str) -> Graph:
    return get_workload(ZOO[name], seq_len=SEQ, mode=mode)


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_from_module_on_small_configs_is_exact_and_known(name):
    """No unknown operation (GPT-2's export holds an ``aten.__and__`` of two masks), params
    exact, FLOPs within 1 % of the analytic count (fused attention: no score tensor)."""
    case = SMALL[name]
    torch.manual_seed(0)
    model = randomize(case.build().eval())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOperatorWarning)
        g = distplan.from_module(model, case.inputs(model.config, 1, 64))
    assert not g.import_warnings
    assert g.param_elems == sum(p.numel() for p in model.parameters())
    assert abs(g.fwd_flops / case.flops(model, model.config, 1, 64) - 1) < 0.01


# --- a vision and a recurrent model: they plan ---------------------------------------------
TOPOLOGIES = ("mcm4x4", "dgx-a100")
MODES = ("inference", "training")


def solve_cli(path: Path, topology: str, mode: str, time_limit_s: int, out: Path) -> tuple[int, Any]:
    """``python solve.py --workload path --topology T --mode M --time-limit S --top-k 1 --json``:
    (exit status, the JSON document, or stderr when it printed none)."""
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, str(root / "solve.py"), "--workload", str(path), "--topology", topology,
                        "--mode", mode, "--time-limit", str(time_limit_s), "--top-k", "1", "--json",
                        "--plan-out", str(out / f"plan-{topology}-{mode}.json")],
                       capture_output=True, text=True, cwd=root, timeout=10 * time_limit_s + 120)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, (json.loads(r.stdout) if r.returncode == 0 else r.stderr)


def assert_plans(path: Path, graphs: dict[str, Graph], topology: str, mode: str, time_limit_s: int, out: Path,
                 may_not_fit: bool = False) -> None:
    """The ONNX file through ``solve.py`` and the from_module graph through ``distplan.solve``
    give a plan with a positive simulated throughput; ``may_not_fit``: or both stop with
    the one-line error that nothing fits the devices' memory (exit status 2, no traceback)."""
    rc, doc = solve_cli(path, topology, mode, time_limit_s, out)
    if may_not_fit and rc == 2 and ("does not fit" in doc or "no plan fits" in doc):
        with pytest.raises(DistplanError, match="does not fit|no plan fits"):
            distplan.solve(distplan.problem(graphs[mode], topology), distplan.SolveOptions(time_limit_s=time_limit_s,
                                                                                        top_k=1))
        return
    assert rc == 0, doc
    assert doc["plans"] and doc["plans"][0]["throughput_per_s"] > 0 and not doc["warnings"], doc["warnings"]
    best = distplan.solve(distplan.problem(graphs[mode], topology),
                          distplan.SolveOptions(time_limit_s=time_limit_s, top_k=1)).best
    assert best is not None and best.sim.throughput_per_s > 0


def vision_and_recurrent(name: str, cases: dict, seq: int, time_limit_s: int, folder: Path,
                         may_not_fit: tuple[tuple[str, str], ...] = ()) -> None:
    """Export with the default settings and import (params exact, FLOPs within 1 % of the
    analytic count, no unknown operator) both ways, then plan on both topologies, both modes."""
    case = cases[name]
    torch.manual_seed(0)
    model = randomize(case.build().eval())
    inputs = case.inputs(model.config, 1, seq)
    n_params, flops = sum(p.numel() for p in model.parameters()), case.flops(model, model.config, 1, seq)
    path = folder / f"{name}.onnx"
    export(model, inputs, path, "dynamo")
    graphs: dict[str, dict[str, Graph]] = {"onnx": {}, "module": {}}
    for mode in MODES:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("error", UnknownOperatorWarning)
            graphs["onnx"][mode] = import_onnx(path, mode=mode)
            graphs["module"][mode] = distplan.from_module(model, inputs, mode=mode)
    for how, by_mode in graphs.items():
        for g in by_mode.values():
            assert g.param_elems == n_params, (how, g.param_elems, n_params)
            assert abs(g.fwd_flops / flops - 1) < 0.01, (how, g.fwd_flops, flops)
            assert not g.import_warnings, (how, g.import_warnings)
    for topology in TOPOLOGIES:
        for mode in MODES:
            assert_plans(path, graphs["module"], topology, mode, time_limit_s, folder,
                         may_not_fit=(topology, mode) in may_not_fit)


@pytest.mark.parametrize("name,seq", [("vit", 0), pytest.param("lstm", 32, marks=pytest.mark.slow)])
def test_small_vision_and_recurrent_models_plan(name, seq, tmp_path):
    """ViT (transformers.ViTModel) and an LSTM language model, small configs."""
    vision_and_recurrent(name, SMALL, seq, 5, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit-base", "lstm-large"])
def test_real_vision_and_recurrent_models_plan(name, tmp_path):
    """ViT-base (224x224, patches of 16) and Zaremba's large PTB LSTM (35 tokens), as the
    acceptance asks: ``solve.py --time-limit 30 --top-k 1`` on mcm4x4 and dgx-a100,
    inference and training. Training on mcm4x4 fits neither (as for every model in
    docs/IMPORT.md's table): ViT-base's parameters and optimiser state exceed the 16
    chiplets' 1 GiB, the LSTM's embedding table alone a chiplet's 64 MiB."""
    vision_and_recurrent(name, REAL, SEQS.get(name, SEQ), 30, tmp_path, may_not_fit=(("mcm4x4", "training"),))


# --- the slow tests -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("acceptance")


@pytest.mark.slow
@pytest.mark.parametrize("topology,mode", [("dgx-a100", "inference"), ("dgx-a100", "training"),
                                           ("mcm4x4", "inference")])   # mcm4x4 training fits no model
@pytest.mark.parametrize("name", ["bert-base", "gpt2"])
def test_real_models_plan_as_fast_as_the_zoo(name, topology, mode, folder):
    z = zoo(name, mode)
    zoo_thr = throughput(z, topology)
    assert isinstance(zoo_thr, float), zoo_thr
    for how, imp in import_both(name, mode, folder).items():
        g = imp.graph
        assert g.mode == mode and g.param_elems == imp.torch_params, (how, g.param_elems, imp.torch_params)
        assert abs(g.fwd_flops / imp.expected_flops - 1) < 0.01, (how, g.fwd_flops, imp.expected_flops)
        assert imp.unknown == 0, how
        assert len(g.ops) <= len(z.ops) + 4, (how, len(g.ops), len(z.ops))
        thr = throughput(g, topology)
        assert isinstance(thr, float) and thr >= RATIO * zoo_thr, (how, thr, zoo_thr)


# --- the table ----------------------------------------------------------------------------
def _cell(thr: float | str, ref: float | str | None) -> str:
    if not isinstance(thr, float):
        return f"none ({thr})"
    if isinstance(ref, float):
        return f"{thr:,.0f}/s ({thr / ref:.3f}x)"
    return f"{thr:,.0f}/s"


def table(names: list[str], topologies: list[str], folder: Path) -> str:
    """The acceptance table (markdown) and the seconds it took, one row per model, path and mode."""
    rows = ["| model | path | mode | nodes | ops (zoo) | params torch / distplan | FLOPs / expected | unknown | "
            + " | ".join(f"{t}: import (vs zoo)" for t in topologies) + " |",
            "|---|---|---|---|---|---|---|---|" + "---|" * len(topologies)]
    for name in names:
        for mode in ("inference", "training"):
            z = zoo(name, mode) if ZOO[name] else None
            ref = {t: throughput(z, t) if z else None for t in topologies}
            for how, imp in import_both(name, mode, folder).items():
                g = imp.graph
                cells = [_cell(throughput(g, t), ref[t]) for t in topologies]
                rows.append(f"| {name} | {'ONNX (dynamo)' if how == 'onnx' else 'from_module'} | {mode} | "
                            f"{imp.nodes or '-'} | {len(g.ops)} ({len(z.ops) if z else '-'}) | "
                            f"{imp.torch_params:,} / {g.param_elems:,} | {g.fwd_flops / imp.expected_flops:.4f} | "
                            f"{imp.unknown} | " + " | ".join(cells) + " |")
                print(rows[-1], flush=True)
            if z:
                rows.append(f"| {name} | zoo | {mode} | - | {len(z.ops)} | - / {z.param_elems:,} | - | - | "
                            + " | ".join(_cell(ref[t], None) for t in topologies) + " |")
                print(rows[-1], flush=True)
    return "\n".join(rows)


if __name__ == "__main__":
    import tempfile

    quick = "--quick" in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("--")]   # e.g. vit-base lstm-large
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        out = table(names or (["bert-base", "gpt2"] if quick else list(ZOO)), ["mcm4x4", "dgx-a100"], Path(d))
    print(out)
    print(f"({time.perf_counter() - t0:.0f} s)")
