"""The README's and the docs' examples run, and the figures they state are what the code prints.

Markers in the Markdown (HTML comments, invisible on the rendered page):

- every ```python block runs as a script (in a scratch folder, this checkout on the path);
  ``<!-- snippet: skip (why) -->`` on the line before a block only compiles it (it needs
  the reader's own files), ``<!-- snippet: slow -->`` runs it with ``-m slow``;
- ``<!-- expect: A | B -->`` right after a block: its output contains A and B;
- ``<!-- check: COMMAND | A | B -->`` (``check-slow:`` for a slow one): COMMAND runs with
  bash in a scratch folder that has ``solve.py``, ``examples/``, ``topologies/`` and ``bench/``, and its
  output contains A and B. Put it just above the ```bash block that shows the command.

docs/concepts/fidelity.md's generated block (``studies.fidelity.BEGIN`` / ``END``) must start
with ``studies.fidelity.markdown`` of the stored figures, which tests/test_fidelity.py keeps
equal to what the simulator gives (and, in its slow test, the whole block to a fresh run).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TIMEOUT_S = 600

_DIRECTIVE = re.compile(r"^<!--\s*snippet:\s*(skip|slow)\b.*-->\s*$")
_EXPECT = re.compile(r"^<!--\s*expect:\s*(.*?)\s*-->\s*$")
_CHECK = re.compile(r"^<!--\s*(check|check-slow):\s*(.*?)\s*-->\s*$")


@dataclass
class Snippet:
    where: str
    code: str
    mode: str = "run"            # run | slow | skip
    expect: list[str] = field(default_factory=list)


@dataclass
class Check:
    where: str
    command: str
    expect: list[str]
    slow: bool


def _split(text: str) -> list[str]:
    return [s.strip() for s in text.split("|") if s.strip()]


def parse(path: Path) -> tuple[list[Snippet], list[Check]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(ROOT).as_posix()
    snippets: list[Snippet] = []
    checks: list[Check] = []
    pending = "run"
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := _DIRECTIVE.match(line.strip()):
            pending = m.group(1)
        elif m := _CHECK.match(line.strip()):
            command, *expect = _split(m.group(2))
            checks.append(Check(f"{rel}:{i + 1}", command, expect, m.group(1) == "check-slow"))
        elif line.startswith("```"):
            lang = line[3:].strip().split()[0] if line[3:].strip() else ""
            start = i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if lang == "python":
                s = Snippet(f"{rel}:{start + 1}", "\n".join(body) + "\n", pending)
                j = i + 1
                while j < len(lines) and not lines[j].strip():
                    j += 1
                if j < len(lines) and (m := _EXPECT.match(lines[j].strip())):
                    s.expect = _split(m.group(1))
                snippets.append(s)
            pending = "run"
        i += 1
    return snippets, checks


SNIPPETS: list[Snippet] = []
CHECKS: list[Check] = []
for _doc in DOCS:
    _s, _c = parse(_doc)
    SNIPPETS += _s
    CHECKS += _c


def _param(x, slow: bool):
    return pytest.param(x, id=x.where, marks=[pytest.mark.slow] if slow else [])


def _env() -> dict[str, str]:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _scratch(tmp_path: Path) -> Path:
    for name in ("solve.py", "examples", "topologies", "bench"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _assert_output(where: str, proc: subprocess.CompletedProcess, expect: list[str]) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{where}: exit {proc.returncode}\n{out[-4000:]}"
    missing = [e for e in expect if e not in out]
    assert not missing, f"{where}: the output lacks {missing} (the doc states them)\n{out[-4000:]}"


def test_the_docs_have_snippets_and_checks():
    assert sum(s.mode == "run" for s in SNIPPETS) >= 8, [s.where for s in SNIPPETS]
    assert any(s.where.startswith("README.md") for s in SNIPPETS)
    assert CHECKS


@pytest.mark.parametrize("snippet", [_param(s, s.mode == "slow") for s in SNIPPETS if s.mode != "skip"])
def test_python_snippet_runs(snippet: Snippet, tmp_path):
    script = _scratch(tmp_path) / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    _assert_output(snippet.where, proc, snippet.expect)


@pytest.mark.parametrize("snippet", [pytest.param(s, id=s.where) for s in SNIPPETS if s.mode == "skip"])
def test_skipped_snippet_compiles(snippet: Snippet):
    compile(snippet.code, snippet.where, "exec")


@pytest.mark.parametrize("check", [_param(c, c.slow) for c in CHECKS])
def test_documented_command_prints_its_figures(check: Check, tmp_path):
    proc = subprocess.run(["bash", "-c", check.command], cwd=_scratch(tmp_path), env=_env(),
                          capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    _assert_output(check.where, proc, check.expect)


def test_checked_commands_are_the_ones_shown():
    """A check's command is the one in the ```bash block just below it (line breaks and
    trailing comments aside), so the doc cannot show one command and check another."""
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if not (m := _CHECK.match(line.strip())):
                continue
            command = _split(m.group(2))[0]
            assert i + 1 < len(lines) and lines[i + 1].startswith("```bash"), \
                f"{doc.name}:{i + 1}: a check must sit just above the ```bash block it checks"
            block, j = [], i + 2
            while not lines[j].startswith("```"):
                block.append(lines[j])
                j += 1
            shown = " ".join(" ".join(block).replace("\\", " ").split())
            assert " ".join(command.split()) in shown, f"{doc.name}:{i + 1}: checks {command!r}, shows {shown!r}"


def test_fidelity_table_is_the_generated_one():
    """The page's generated block starts with the table and MAE line of the stored figures
    (the memory line after them needs a run: tests/test_fidelity.py's slow test)."""
    from distplan.studies import fidelity

    outcomes = [fidelity.Outcome(r.key, r.published, r.stored, r.stored / r.published - 1, 0.0)
                for r in fidelity.ROWS]
    table = fidelity.markdown(outcomes)
    block = fidelity.read_block(ROOT / "docs" / "concepts" / "fidelity.md")
    assert block == table or block.startswith(table + "\n"), \
        "docs/concepts/fidelity.md's table differs from studies.fidelity.markdown of the stored figures: run " \
        "`python -m distplan.studies.fidelity --markdown docs/concepts/fidelity.md`"


def test_bench_readme_cluster_plan_table_is_the_stored_run():
    """bench/README.md's cluster-space table states what bench/results/cluster_plan_bench.json holds."""
    import json

    rows = json.loads((ROOT / "bench" / "results" / "cluster_plan_bench.json").read_text())["rows"]
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")

    def fmt(x: float) -> str:
        return f"{x:,.0f}" if x >= 500 else f"{x:.1f}"

    for r in rows:
        name, m, topo = r["case"].split()
        cells = [fmt(r[k]) for k in ("cluster", "bound_step_rate", "pipeline_milp", "grid", "random", "hand")]
        line = next((ln for ln in text.splitlines() if ln.startswith(f"| {name}, {m[1:]}, {topo} |")), None)
        assert line is not None, f"bench/README.md has no row for {r['case']}"
        got = [c.strip().strip("*").split(" (")[0] for c in line.strip("|").split("|")[1:7]]
        assert got == cells, f"{r['case']}: bench/README.md says {got}, the results file {cells}"
        assert f"{r['cluster_wall_s']:.1f} s" in line or f"{r['cluster_wall_s']:.0f} s" in line, line


def test_hardware_calibration_figures_are_the_stored_run():
    """docs/HARDWARE.md's H200 calibration figures are what bench/results/calibration-h200.json holds."""
    import json

    cal = json.loads((ROOT / "bench" / "results" / "calibration-h200.json").read_text())
    text = " ".join((ROOT / "docs" / "HARDWARE.md").read_text(encoding="utf-8").split())
    best = cal["best_fraction_of_peak"]
    quoted = ", ".join(f"{p} {best[p]:.2f}" for p in ("fp32", "tf32", "bf16", "fp16", "fp8"))
    assert f"Best fraction of dense peak reached: {quoted}" in text, quoted
    assert f"only {best['int8']:.2f}" in text
    assert f"launch overhead measured {cal['launch_overhead_s'] * 1e6:.0f} us" in text


def test_bench_readme_llama3_rows_are_the_stored_runs():
    """bench/README.md's Llama 3 405B rows state what bench/results/llama3_405b*_bench.json hold."""
    import json

    text = " ".join((ROOT / "bench" / "README.md").read_text(encoding="utf-8").split())
    res = ROOT / "bench" / "results"
    head = json.loads((res / "llama3_405b_bench.json").read_text())["headline"]
    assert f"{head['wall_s']:.1f} s wall, {head['cpu_s']:.1f} s CPU in Llama 3's order" in text
    assert f"iteration {head['iteration_s']:.3f} s both, {head['model_tflops_per_gpu']} TFLOP/s per GPU" in text
    p1, v2, v4, ag = json.loads((res / "llama3_405b_cp_bench.json").read_text())["runs"]
    assert (p1["vp"], v2["vp"], v4["vp"], ag["cp_comm"]) == (1, 2, 4, "all_gather")
    want = [f"{p1['cpu_s']:.1f} s CPU, {p1['wall_s']:.1f} s wall",
            f"iteration {p1['iteration_s']:.3f} s, {p1['model_tflops_per_gpu']} model TFLOP/s per GPU",
            f"`--vp 2` {v2['model_tflops_per_gpu']} ({v2['cpu_s']:.1f} s CPU)",
            f"`--vp 4` {v4['model_tflops_per_gpu']} ({v4['model_vs_published'] * 100:.0f} %, {v4['cpu_s']:.1f} s CPU)",
            "peak " + " / ".join(f"{r['peak_gib']:.2f}" for r in (p1, v2, v4)) + " GiB under the checker's "
            + " / ".join(f"{r['checker_bound_gib']:.2f}" for r in (p1, v2, v4)) + " GiB",
            f"{ag['ring_exposed_ms'][0]} / {ag['ring_exposed_ms'][1]} ms exposed",
            f"iteration {ag['iteration_s']:.3f} s, {ag['model_tflops_per_gpu']} TFLOP/s ({ag['cpu_s']:.1f} s CPU)"]
    missing = [w for w in want if w not in text]
    assert not missing, f"bench/README.md lacks {missing} (the results files hold them)"


def test_bench_readme_planner_h100_table_is_the_stored_run():
    """bench/README.md's planner-vs-published H100 table states what
    bench/results/planner_h100_bench.json holds, and every planner plan there reaches its
    reference in the simulator (issue 22's planner cases)."""
    import json

    rows = json.loads((ROOT / "bench" / "results" / "planner_h100_bench.json").read_text())["rows"]
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert len(rows) == 4
    for r in rows:
        line = next((ln for ln in text.splitlines() if ln.startswith(f"| {r['case']} |")), None)
        assert line is not None, f"bench/README.md has no row for {r['case']}"
        want = [r["planner_plan"], f"{r['planner_model_s']:.3f} / {r['planner_sim_s']:.3f}",
                f"{r['planner_gap'] * 100:.2f} %",
                ("-" if r["reference_model_s"] is None else f"{r['reference_model_s']:.3f}") + f" / {r['reference_sim_s']:.3f}",
                f"{r['planner_sim_tokens_per_gpu_s']:,.0f} / {r['reference_sim_tokens_per_gpu_s']:,.0f}"]
        assert all(w in line for w in want), (line, want)
        assert r["reached_in_sim"] and r["planner_sim_s"] <= r["reference_sim_s"]


def test_bench_readme_heterogeneity_row_is_the_stored_run():
    """bench/README.md's heterogeneity row states what bench/results/heterogeneity_bench.json
    holds: per case the best uniform and the stage space's samples per step, the margin, and
    the best 1F1B uniform plan's; the mixed fleet's two rates and margin."""
    import json

    res = json.loads((ROOT / "bench" / "results" / "heterogeneity_bench.json").read_text())
    text = " ".join((ROOT / "bench" / "README.md").read_text(encoding="utf-8").split())
    want = [f"`--limit {res['limit_s']:.0f}`"]
    for r in res["rows"]:
        st, cl = r["stage"]["per_step_per_s"], r["cluster"]["per_step_per_s"]
        want.append(f"{r['case']} {r['best_uniform_per_step_per_s']:.3f} / {st:.3f} ({r['margin'] * 100:+.2f} %; "
                    f"1F1B {cl:.3f}: {(st / cl - 1) * 100:+.2f} %)")
    f = res["fleet"]
    want.append(f"per-op precision per kind {f['per_op_per_kind']['per_step_per_s']:,}/s against one policy per kind "
                f"{f['one_policy_per_kind']['per_step_per_s']:,}/s ({f['margin'] * 100:+.2f} %)")
    missing = [w for w in want if w not in text]
    assert not missing, f"bench/README.md lacks {missing} (the results file holds them)"
