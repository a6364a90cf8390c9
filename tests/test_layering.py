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


# ---- import circles ------------------------------------------------------------------------------------------
# Packages whose modules must sit in no import circle (module-level and function-level imports both count):
# the whole of cuvee.
ACYCLIC = ("cuvee",)


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at any depth. ``from a.b import c`` counts as importing
    ``a.b.c`` when that is a module, else ``a.b``; a module's import of its own parent packages is left out
    (Python runs them before any of their modules anyway)."""
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for _, target in imported_modules(path, root):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                deps.add(target)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_sees_function_level_and_three_module_circles(tmp_path):
    pkg = tmp_path / "cuvee" / "p"
    pkg.mkdir(parents=True)
    for name, src in {"__init__": "from cuvee.p.a import x\n", "a": "from cuvee.p import b\nx = 1\n",
                      "b": "def f():\n    from cuvee.p.c import y\n    return y\n", "c": "import cuvee.p.a\ny = 2\n",
                      "d": "from cuvee.p.e import z\n", "e": "z = 3\n"}.items():
        (pkg / f"{name}.py").write_text(src)
    assert circles(import_graph(tmp_path / "cuvee")) == [["cuvee.p.a", "cuvee.p.b", "cuvee.p.c"]]


@pytest.mark.parametrize("package", ACYCLIC)
def test_no_import_circles(package):
    inside = [c for c in circles(import_graph()) if any(m == package or m.startswith(package + ".") for m in c)]
    assert not inside, "import circles (move the shared piece where both sides can import it):\n" + "\n".join(
        " <-> ".join(c) for c in inside)
