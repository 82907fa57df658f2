"""The layer contract (``.importlinter``) holds, and it does fail on a forbidden import.

import-linter reads a package from disk, so the check runs on the layout a wheel
installs (``pyproject.toml``'s package map: ``model/`` -> ``distplan/model`` ...),
staged into a temporary folder, in a subprocess that sees only that copy."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("importlinter", reason="import-linter is in the 'test' extra: pip install -e '.[test]'")


def stage_installed_layout(dest: Path) -> Path:
    """Copy every package's .py files to where ``pip install .`` puts them; returns dest."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = cfg["package-dir"]
    for pkg in cfg["packages"]:
        src = ROOT / pkg.replace(".", "/")
        for prefix, folder in mapped.items():
            if pkg == prefix or pkg.startswith(prefix + "."):
                src = ROOT / folder / pkg[len(prefix) + 1:].replace(".", "/")
                break
        out = dest / pkg.replace(".", "/")
        out.mkdir(parents=True, exist_ok=True)
        for f in src.glob("*.py"):
            shutil.copy(f, out / f.name)
    shutil.copy(ROOT / ".importlinter", dest / ".importlinter")
    return dest


def lint(folder: Path) -> subprocess.CompletedProcess:
    code = ("import sys; sys.path.insert(0, '.'); from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='.importlinter', no_cache=True, no_logo=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)


def test_every_package_is_mapped():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    inits = {p.parent for p in ROOT.glob("*/**/__init__.py") if ".git" not in p.parts}
    staged = set()
    for pkg in cfg["packages"]:
        src = ROOT / pkg.replace(".", "/")
        for prefix, folder in cfg["package-dir"].items():
            if pkg == prefix or pkg.startswith(prefix + "."):
                src = ROOT / folder / pkg[len(prefix) + 1:].replace(".", "/")
                break
        assert (src / "__init__.py").is_file(), f"{pkg} maps to {src}, which is not a package"
        staged.add(src)
    code = {p for p in inits if p.relative_to(ROOT).parts[0] not in ("tests", "bench", "examples", "build")}
    assert code <= staged, f"packages not installed by pyproject.toml: {sorted(map(str, code - staged))}"


def test_layer_contract_is_kept(tmp_path):
    r = lint(stage_installed_layout(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 2 kept, 0 broken" in r.stdout


def test_a_forbidden_import_breaks_the_contract(tmp_path):
    stage_installed_layout(tmp_path)
    victim = tmp_path / "distplan" / "costs" / "evaluate.py"
    victim.write_text(victim.read_text() + "\nimport distplan.api  # deliberately upward\n")
    r = lint(tmp_path)
    assert r.returncode != 0
    assert "BROKEN" in r.stdout and "distplan.costs.evaluate -> distplan.api" in r.stdout, r.stdout


def test_the_checkout_finder_maps_exactly_the_installed_folders():
    import distplan
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {k.split(".", 1)[1] for k in cfg["package-dir"]} == set(distplan.MAPPED_FOLDERS)
    assert all(v == k.split(".", 1)[1] for k, v in cfg["package-dir"].items())
    with pytest.raises(ImportError):
        __import__("distplan.tests")   # only the mapped folders join the namespace
