"""A writer killed by SIGKILL leaves a temporary that the rerun's stale-file sweep removes (issue #33).

Each temporary is made by the real writer in a real child process that kills itself mid-write, so nothing in
its name is assumed by the test; the rerun (or the kernel's sweep, the one every rerun calls) must remove it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

from cuvee.cli import main
from cuvee.kernel.workdir import sweep


def killed_mid_write(code: str) -> None:
    """Run ``code`` in a child that kills itself (SIGKILL) where the code says ``die()``."""
    prog = "import os, signal\ndef die():\n    os.kill(os.getpid(), signal.SIGKILL)\n" + textwrap.dedent(code)
    res = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == -9, res.stderr


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_a_killed_dedup_writers_temporary_is_swept_on_the_rerun(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": str(i), "text": f"document {i % 4} " * 5}) + "\n" for i in range(12)))
    work = tmp_path / "work"
    args = ["dedup", "run", "exact_dedup", str(src), "-w", str(work)]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    before = files(work)
    output = (work / "output" / "00000.jsonl").read_bytes()
    target = work / "work" / "00_exact_dedup" / "keys" / "00000" / "00000.bin"
    assert target.is_file()
    killed_mid_write(f"""
        import numpy as np
        from cuvee.dedup.files import AtomicWriter
        w = AtomicWriter({str(target)!r})
        w.write(np.arange(1000, dtype=np.uint64))
        w._f.flush()
        die()
    """)
    left = files(work) - before
    assert len(left) == 1, left  # the killed writer's temporary, beside the file it was writing
    rerun = CliRunner().invoke(main, args)
    assert rerun.exit_code == 0, rerun.output
    assert not files(work) - before, files(work) - before
    assert (work / "output" / "00000.jsonl").read_bytes() == output


def test_a_killed_spill_leaves_only_files_the_sweep_removes(tmp_path):
    """The external sort of the dedup phases spills partitions to disk: killed half-way, every spilled byte is
    in a file the rerun's sweep removes (it used to stay in a spill-* folder no sweep looked into)."""
    killed_mid_write(f"""
        import numpy as np
        from cuvee.dedup.spill import key_partitions
        dtype = np.dtype([("k", np.uint64), ("v", np.uint32)])
        recs = np.zeros(4096, dtype=dtype)
        recs["k"] = np.random.default_rng(0).integers(0, 2**63, 4096, dtype=np.uint64) * 2
        parts = key_partitions(lambda: [recs[:2048], recs[2048:]], dtype, "k", len(recs), 4096, {str(tmp_path)!r})
        next(parts)
        die()
    """)
    assert files(tmp_path), "nothing was spilled"
    sweep(tmp_path)
    assert not files(tmp_path), files(tmp_path)


def small_run(tmp_path: Path) -> Path:
    """A run folder as cuvee run leaves it (marker, stats.json, one output file), without running a pipeline."""
    from cuvee.kernel.workdir import claim

    run = claim(tmp_path / "run", "run")
    out = run / "output"
    out.mkdir()
    docs = [{"text": f"document number {i} about crops and rivers", "id": str(i)} for i in range(3)]
    (out / "000_00000.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (run / "stats.json").write_text(json.dumps({
        "complete": True, "recipe_name": "small", "stages": [{"name": "reader", "docs_in": 3, "docs_out": 3, "dropped": {}}],
        "output": {"path": str(out), "files": [str(out / "000_00000.jsonl")], "documents": 3}}))
    return run


def test_a_killed_card_writers_temporary_is_swept_by_the_next_card(tmp_path):
    from cuvee.card import write_card

    run = small_run(tmp_path)
    card = tmp_path / "card"
    first = write_card(run, out_dir=card, max_token_docs=0)
    before = files(card)
    killed_mid_write(f"""
        from cuvee.kernel.atomic import replacing
        with replacing({str(first.readme)!r}) as tmp, open(tmp, "w") as f:
            f.write("half a card")
            f.flush()
            die()
    """)
    assert len(files(card) - before) == 1
    again = write_card(run, out_dir=card, max_token_docs=0)
    assert again.readme.read_text() == first.readme.read_text()
    assert files(card) - before <= {".cuvee-plan.json"}, files(card) - before
    assert not [p for p in card.rglob("*") if p.name.startswith(".README")]


def test_every_temporary_name_a_writer_here_uses_is_one_the_sweep_knows(tmp_path):
    """The writers hold their temporaries under the kernel's one name (AtomicWriter, spill, save_rank_file):
    a second naming scheme is what left the dedup temporaries unswept."""
    import numpy as np

    from cuvee.classifiers.scoring import save_rank_file
    from cuvee.dedup.files import AtomicWriter
    from cuvee.kernel.atomic import is_temp

    w = AtomicWriter(tmp_path / "a" / "00000.u64")
    seen = []
    save_rank_file(str(tmp_path / "b"), "00000.npy", lambda f: (seen.append(Path(f.name)), np.save(f, np.zeros(3))))
    assert is_temp(w.tmp) and is_temp(seen[0]) and os.path.dirname(seen[0]) == str(tmp_path / "b")
    w.abort()
