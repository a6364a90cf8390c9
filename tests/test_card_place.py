"""Where ``cuvee card`` writes: the kernel's folder contract (claim, lock) and never a file cuvee did not write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuvee.card import write_card
from cuvee.kernel.workdir import FolderError, claim, locked, owner


def small_run(tmp_path: Path) -> Path:
    """A run folder as cuvee run leaves it (marker, stats.json, one output file), without running a pipeline."""
    run = tmp_path / "run"
    claim(run, "run")
    out = run / "output"
    out.mkdir()
    docs = [{"text": f"document number {i} about crops and rivers", "id": str(i),
             "metadata": {"url": f"https://example.com/{i}", "cc_snapshot": "CC-MAIN-2024-22"}} for i in range(3)]
    (out / "000_00000.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    stats = {"complete": True, "recipe_name": "small", "stages": [
        {"name": "reader", "docs_in": 3, "docs_out": 3, "dropped": {}}],
        "output": {"path": str(out), "files": [str(out / "000_00000.jsonl")], "documents": 3}}
    (run / "stats.json").write_text(json.dumps(stats))
    return run


def test_card_into_the_output_folder_and_rerun(tmp_path):
    run = small_run(tmp_path)
    first = write_card(run, max_token_docs=0)
    assert first.readme == run / "output" / "README.md"
    again = write_card(run, max_token_docs=0)  # its own files are replaced
    assert again.readme.read_text() == first.readme.read_text()


def test_users_own_readme_is_never_overwritten(tmp_path):
    run = small_run(tmp_path)
    mine = run / "output" / "README.md"
    mine.write_text("my own notes\n")
    with pytest.raises(FolderError, match="was not written by cuvee"):
        write_card(run, max_token_docs=0)
    assert mine.read_text() == "my own notes\n"
    assert not (run / "output" / "card.html").exists()  # refused before anything was written


def test_a_card_edited_since_is_not_overwritten(tmp_path):
    run = small_run(tmp_path)
    files = write_card(run, max_token_docs=0)
    files.readme.write_text(files.readme.read_text() + "\nhand-written addition\n")
    with pytest.raises(FolderError, match="edited since"):
        write_card(run, max_token_docs=0)
    assert "hand-written addition" in files.readme.read_text()


def test_card_waits_for_no_one_while_the_run_folder_is_in_use(tmp_path):
    run = small_run(tmp_path)
    with locked(run, "run folder"), pytest.raises(FolderError, match="in use by another cuvee process"):
        write_card(run, max_token_docs=0)


def test_out_folder_is_claimed_as_a_card_folder(tmp_path):
    run = small_run(tmp_path)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    with pytest.raises(FolderError, match="cuvee did not create"):
        write_card(run, out_dir=foreign, max_token_docs=0)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    files = write_card(run, out_dir=tmp_path / "card", max_token_docs=0)
    assert files.readme.parent == tmp_path / "card" and owner(tmp_path / "card")["kind"] == "card"


def test_symlinked_card_file_is_refused(tmp_path):
    run = small_run(tmp_path)
    target = tmp_path / "elsewhere.html"
    target.write_text("keep")
    (run / "output" / "card.html").symlink_to(target)
    with pytest.raises(FolderError, match="not a plain file"):
        write_card(run, max_token_docs=0)
    assert target.read_text() == "keep"


def test_a_crafted_card_record_cannot_make_cuvee_delete_other_files(tmp_path):
    import hashlib

    run = small_run(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    sha = hashlib.sha256(victim.read_bytes()).hexdigest()
    (run / "output" / ".cuvee-card.json").write_text(json.dumps({"files": {"../../victim.txt": [sha]}}))
    with pytest.raises(FolderError, match="unreadable"):
        write_card(run, max_token_docs=0)
    assert victim.read_text() == "precious"


def test_cli_refusal_is_one_line(tmp_path):
    from click.testing import CliRunner

    from cuvee.cli import main

    run = small_run(tmp_path)
    (run / "output" / "README.md").write_text("mine")
    res = CliRunner().invoke(main, ["card", str(run), "--max-token-docs", "0"])
    assert res.exit_code != 0 and "was not written by cuvee" in res.output and "Traceback" not in res.output
