"""The fidelity table (studies/fidelity.py): published runs, their citations, and the
simulated figures stored in the module, which must not drift."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import distplan
from distplan.studies import fidelity as fid
from distplan.core.errors import DistplanError
from distplan.workloads.zoo.catalog import lookup

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "concepts" / "fidelity.md"
REGENERATE = "python -m distplan.studies.fidelity --markdown docs/concepts/fidelity.md"

#: rows that simulate in about a second here (M1/M2/M4: 5 s); the rest are marked slow
FAST = ("K1", "K2", "N1", "N2", "H1", "M1", "M2", "M3", "M4")
#: drift tolerance: the simulator is deterministic, only float summation order may move
REL = 1e-6


@functools.cache
def _run(key: str) -> fid.Outcome:
    """Row ``key`` simulated once per test session (the drift and the page tests share it)."""
    return fid.simulate_row(fid.BY_KEY[key])


def _line(out: fid.Outcome) -> str:
    return fid.markdown([out]).splitlines()[2]


def test_rows_are_published_configurations_the_presets_can_hold():
    assert len({r.key for r in fid.ROWS}) == len(fid.ROWS)
    assert len({r.source for r in fid.ROWS}) >= 2
    for r in fid.ROWS:
        assert r.url.startswith(("https://arxiv.org/abs/", "https://docs.nvidia.com/")) and r.table
        assert r.published > 0 and r.source
        assert r.gpus <= 1024 and r.gpus % 8 == 0, r.key
        assert r.global_batch % (r.microbatch * r.dp) == 0, r.key
        assert r.metric in fid.UNITS and r.recompute in ("none", "selective", "full")
        cfg = lookup(r.workload)   # the zoo graph has the paper's shape
        assert (cfg.hidden, cfg.layers, cfg.heads) == (r.hidden, r.layers, r.heads), r.key
        if r.model is None:   # the GPT-3-shaped decoders: 4h MLP
            assert cfg.ffn == 4 * r.hidden, r.key
        assert r.check_memory or "memory check off" in r.note, r.key   # the row says why


def test_paper_flops_match_the_zoo_graph_with_one_recomputed_forward():
    """Eq. 3 of Narayanan et al. counts matmuls (the recomputed forward included); the zoo
    graph's forward + backward + one more forward agrees within 2 % (vocabulary 51,200 vs
    50,257 and the non-matmul ops)."""
    r = fid.BY_KEY["N1"]
    g = distplan.problem(r.workload, "a100x8", batch_size=1, seq_len=r.seq_len, mode="training").graph
    zoo = (2 * g.fwd_flops + g.bwd_flops) * r.global_batch
    assert fid.paper_flops(r) == pytest.approx(zoo, rel=0.02)


@pytest.mark.parametrize("key", FAST)
def test_fast_rows_do_not_drift(key):
    row = fid.BY_KEY[key]
    out = _run(key)
    assert not out.skipped
    assert out.simulated == pytest.approx(row.stored, rel=REL)
    assert out.error == pytest.approx(row.stored / row.published - 1, rel=1e-9, abs=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("key", [r.key for r in fid.ROWS if r.key not in FAST and r.stored is not None])
def test_slow_rows_do_not_drift(key):
    row = fid.BY_KEY[key]
    out = _run(key)
    assert not out.skipped, out.skipped
    assert out.simulated == pytest.approx(row.stored, rel=REL)


@pytest.mark.parametrize("key", FAST)
def test_fast_rows_are_the_pages_lines(key):
    """The page's line for a row that simulates in a second is what the study writes now."""
    assert _line(_run(key)) in fid.read_block(DOC).splitlines(), f"{key} moved: run {REGENERATE}"


@pytest.mark.slow
def test_the_pages_block_is_what_the_study_writes_now():
    """docs/concepts/fidelity.md's generated block (table, MAE line, memory line) equals
    what ``--markdown PATH`` would write from a fresh run of every row."""
    outs = [_run(r.key) for r in fid.ROWS]
    assert [o.key for o in outs if o.skipped] == []
    assert fid.read_block(DOC) == fid.markdown(outs), f"the page is stale: run {REGENERATE}"


def test_other_pages_quote_the_stored_summary():
    """Pages that quote the table's MAE quote the stored rows' (``Row.stored``) figures."""
    outs = [fid.Outcome(r.key, r.published, r.stored, r.stored / r.published - 1, 0.0) for r in fid.ROWS]
    mae, worst = fid.summary(outs)
    quote = f"MAE {mae:.1%}, worst {worst:.1%} over {len(outs)}".replace("%", " %")
    for page in (ROOT / "docs" / "HARDWARE.md", ROOT / "bench" / "README.md"):
        assert quote in " ".join(page.read_text(encoding="utf-8").split()), f"{page.name} should quote {quote!r}"


def test_block_is_written_between_the_markers_only(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"intro\n\n{fid.BEGIN}\n\nold table\n\n{fid.END}\n\noutro\n", encoding="utf-8")
    assert fid.read_block(page) == "old table"
    assert fid.write_block(page, "| new |\n\nline") is True
    assert page.read_text(encoding="utf-8") == f"intro\n\n{fid.BEGIN}\n\n| new |\n\nline\n\n{fid.END}\n\noutro\n"
    assert fid.write_block(page, "| new |\n\nline") is False
    (tmp_path / "bare.md").write_text("no markers\n", encoding="utf-8")
    with pytest.raises(DistplanError, match="fidelity-table:begin"):
        fid.read_block(tmp_path / "bare.md")


def test_cli_writes_only_the_whole_table(tmp_path, capsys):
    """--markdown PATH refuses a subset of rows and a page without markers before it runs."""
    page = tmp_path / "page.md"
    page.write_text(f"{fid.BEGIN}\n{fid.END}\n", encoding="utf-8")
    assert fid.main(["--rows", "K1", "--markdown", str(page)]) == 2
    assert "whole table" in capsys.readouterr().err
    (tmp_path / "bare.md").write_text("x\n", encoding="utf-8")
    assert fid.main(["--markdown", str(tmp_path / "bare.md")]) == 2
    assert "no fidelity table block" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") == f"{fid.BEGIN}\n{fid.END}\n"


def test_moved_names_the_stored_value_to_paste():
    r = fid.BY_KEY["K1"]
    same = fid.Outcome("K1", r.published, r.stored, 0.0, 0.0)
    other = fid.Outcome("K1", r.published, r.stored * 1.01, 0.0, 0.0)
    assert fid.moved([same]) == [] and fid.moved([other]) == [f"K1: stored={r.stored * 1.01!r} (was {r.stored!r})"]


def test_stored_table_meets_the_issue_target():
    """The recorded A100 rows: mean absolute error <= 10 %, worst <= 20 % (issue 11). The
    H100 rows (issue 22) are reported, not held to it: H1 misses by more (the page says why)."""
    errs = [abs(r.stored / r.published - 1) for r in fid.ROWS if r.stored is not None and r.kind == "a100"]
    assert len(errs) >= 6
    assert sum(errs) / len(errs) <= 0.10 and max(errs) <= 0.20


@given(st.lists(st.one_of(st.none(), st.floats(-0.9, 5.0)), min_size=1, max_size=20))
def test_summary_is_mean_and_max_of_rows_that_ran(errors):
    outs = [fid.Outcome(str(i), 1.0, None if e is None else 1 + e, e, 0.0) for i, e in enumerate(errors)]
    mae, worst = fid.summary(outs)
    ran = [abs(e) for e in errors if e is not None]
    if not ran:
        assert mae != mae and worst != worst   # NaN
    else:
        assert worst == max(ran) and 0 <= mae <= worst * (1 + 1e-12)


def test_cli_json_and_errors(capsys):
    assert fid.main(["--rows", "K1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["key"] for r in doc["rows"]] == ["K1"] and doc["rows"][0]["source"].startswith("Korthikanti")
    assert doc["mae"] == pytest.approx(abs(doc["rows"][0]["error"]))
    assert fid.main(["--rows", "K1,Z9"]) == 2
    assert "unknown row" in capsys.readouterr().err


def test_a_row_over_its_cap_is_skipped_with_a_reason():
    out = fid.simulate_row(fid.BY_KEY["N2"], cap_s=1e-3)
    assert out.simulated is None and "wall-time cap" in out.skipped


def test_whatif_memory_bound_and_breakdown_switches():
    """The 22B node that really trains passes the memory check (the old static bound
    refused it: 'needs 112,224 MiB'), the checker's bound within 1 % above the simulated
    peak; check_memory=False gives the same step; breakdown=False gives the same step
    without the free-link rerun."""
    from distplan.api.configs import whatif
    r = fid.BY_KEY["K1"]
    kw = dict(dp=r.dp, tp=r.tp, pp=r.pp, microbatch_size=r.microbatch, global_batch=r.global_batch,
              seq_len=r.seq_len, recompute=r.recompute, sequence_parallel=r.sequence_parallel)
    checked = whatif(r.workload, r.topology, **kw)
    assert checked.peak_memory_bytes <= checked.bound_memory_bytes <= 1.01 * checked.peak_memory_bytes
    full = whatif(r.workload, r.topology, check_memory=False, **kw)
    assert full.iteration_s == checked.iteration_s
    quick = whatif(r.workload, r.topology, check_memory=False, breakdown=False, **kw)
    assert quick.iteration_s == full.iteration_s
    assert quick.exposed_comm_share != quick.exposed_comm_share   # NaN: not split
    assert full.peak_memory_bytes <= float(full.problem.device_mem_bytes.min())


def test_cli_writes_the_block_from_the_run(tmp_path, monkeypatch, capsys):
    """--markdown PATH writes exactly ``markdown`` of the outcomes it ran (here stand-ins,
    one of them moved from its stored figure) and names the moved row's ``stored=``."""
    def fake(row, cap_s=None, vp=None):   # noqa: ARG001
        sim = row.stored * (1.02 if row.key == "N3" else 1.0)
        return fid.Outcome(row.key, row.published, sim, sim / row.published - 1, 0.0, 1.0, 10.0, 10.1, True)
    monkeypatch.setattr(fid, "simulate_row", fake)
    page = tmp_path / "page.md"
    page.write_text(f"text\n\n{fid.BEGIN}\n\n{fid.END}\n", encoding="utf-8")
    assert fid.main(["--markdown", str(page)]) == 0
    assert fid.read_block(page) == fid.markdown([fake(r) for r in fid.ROWS])
    err = capsys.readouterr().err
    assert "wrote" in err and "moved: N3: stored=" in err and "K1: stored" not in err
    assert fid.main(["--markdown", str(page)]) == 0 and "unchanged:" in capsys.readouterr().err
