"""cuvee/llm sits at the level of cuvee/pipeline: the commands that use it (annotate, rephrase) import it, it
imports none of them, so the annotate <-> endpoint client circle cannot come back. The resume ledger is kernel:
it imports nothing from cuvee but the kernel."""

from pathlib import Path

from test_layering import imported_modules

ROOT = Path(__file__).resolve().parents[1] / "cuvee"
ALLOWED_FOR_LLM = ("cuvee.llm", "cuvee.kernel", "cuvee.pipeline", "cuvee.hf_loading", "cuvee.yaml_safe")


def _outside(path: Path, allowed: tuple[str, ...]) -> list[str]:
    return [f"{path.relative_to(ROOT.parent)}:{line} imports {m}" for line, m in imported_modules(path)
            if (m == "cuvee" or m.startswith("cuvee.")) and not any(m == a or m.startswith(a + ".") for a in allowed)]


def test_llm_imports_no_command_package():
    bad = [x for p in sorted((ROOT / "llm").glob("*.py")) for x in _outside(p, ALLOWED_FOR_LLM)]
    assert not bad, "cuvee/llm must not import a command package:\n" + "\n".join(bad)


def test_the_ledger_is_kernel():
    assert _outside(ROOT / "kernel" / "ledger.py", ("cuvee.kernel",)) == []
