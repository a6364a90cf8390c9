"""A user-named output file cuvee owns (``classify apply -o``, a fastText model, an annotations file): a writer
SIGKILLed while its temporary is written leaves ``.<name>.<pid>.cuvee-tmp`` beside the file, and the rerun removes
it under the file's lock, as a workdir's sweep does; temporaries of other files in the same folder (another
process may be writing them) stay. Found by benchmarks/fault_injection_commands.py (classify train, classify apply:
kill while the temporary is written, rerun: the temporary was left for ever)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cuvee.cli import main
from test_killed_writers_swept import killed_mid_write


def _docs(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": str(i), "text": f"the committee reviewed the report {i} " * 5}) + "\n"
                            for i in range(20)))
    return path


def test_a_killed_writers_temporaries_of_the_file_are_swept_others_stay(tmp_path):
    out = tmp_path / "kept.jsonl"
    for target in (out, Path(f"{out}.json")):  # the file and its marker, each killed mid-write by the real writer
        killed_mid_write(f"""
            from cuvee.kernel.atomic import replacing
            with replacing({str(target)!r}) as tmp:
                tmp.write_bytes(b"half a file")
                die()
        """)
    killed_mid_write(f"""
        from cuvee.kernel.atomic import replacing
        with replacing({str(tmp_path / 'kept.jsonl.gz')!r}) as tmp:
            tmp.write_bytes(b"another output's half")
            die()
    """)
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".cuvee-tmp"))
    assert len(left) == 3, left
    res = CliRunner().invoke(main, ["classify", "apply", "-m", "demo", "-i", str(_docs(tmp_path / "in.jsonl")),
                                    "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(Path(f"{out}.json").read_text())["complete"] is True
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".cuvee-tmp")] == [
        n for n in left if n.startswith(".kept.jsonl.gz.")]


def test_a_fasttext_training_killed_between_its_model_and_its_marker_is_rerun(tmp_path):
    """The model was renamed into place before its marker was written: killed in between, the rerun (even with
    --fresh) refused the model cuvee had just trained as "not written by cuvee". The kill here comes right after
    the model's rename, in the real CLI."""
    rows = [{"text": " ".join([w] * 12), "label": lab} for _ in range(60) for w, lab in (("report", "hq"), ("click", "lq"))]
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tmp_path / "model.bin"
    args = ["classify", "train", "--data", str(data), "-o", str(model), "--epoch", "2", "--dim", "8", "--bucket",
            "10000", "--threads", "1"]
    killed_mid_write(f"""
        real = os.replace
        def replace(src, dst):
            real(src, dst)
            if str(dst) == {str(model)!r}:
                die()
        os.replace = replace
        from cuvee.cli import main
        main({args!r})
    """)
    assert model.exists()
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert json.loads(Path(f"{model}.json").read_text())["kind"] == "fasttext"
