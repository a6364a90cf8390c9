"""The package keeps its floors: ``cuvee/pipeline`` is the base the stage packages build on, so it imports none
of them (not even inside a function), and no module grows past 600 lines. Read from the source with ``ast``."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "cuvee"
HIGHER = ("cuvee.dedup", "cuvee.filters", "cuvee.classifiers", "cuvee.mixer", "cuvee.train", "cuvee.card")
MAX_LINES = 600


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, at any depth; relative imports resolved against the package."""
    package = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out += [(node.lineno, f"{base}.{a.name}" if base else a.name) for a in node.names]
            out.append((node.lineno, base))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.append((node.lineno, node.args[0].value))
    return out


def _is_higher(module: str) -> bool:
    return any(module == h or module.startswith(h + ".") for h in HIGHER)


def test_the_checker_sees_imports_at_any_depth(tmp_path):
    """The detector itself: a top-level, a function-level, a relative and an importlib import all count."""
    pkg = tmp_path / "cuvee" / "pipeline"
    pkg.mkdir(parents=True)
    src = ("import cuvee.card\n"
           "def f():\n    from cuvee.dedup.steps import DropListed\n    return DropListed\n"
           "def g():\n    from ..filters import url\n    import importlib\n"
           "    return importlib.import_module('cuvee.train.loop')\n")
    probe = pkg / "probe.py"
    probe.write_text(src)
    found = sorted(m for _, m in imported_modules(probe, tmp_path / "cuvee") if _is_higher(m))
    assert "cuvee.card" in found and "cuvee.dedup.steps" in found and "cuvee.train.loop" in found
    assert "cuvee.filters" in found


def test_pipeline_imports_no_higher_package():
    bad = [f"{p.relative_to(ROOT.parent)}:{line} imports {m}"
           for p in sorted((ROOT / "pipeline").rglob("*.py")) for line, m in imported_modules(p) if _is_higher(m)]
    assert not bad, "cuvee/pipeline must not import a higher-level package:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_module_over_600_lines(path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT.parent)} has {n} lines (at most {MAX_LINES}): split it by concern"
