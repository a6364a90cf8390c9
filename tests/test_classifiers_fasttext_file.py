"""A fastText model file is checked before fastText loads it (issue #25): a truncated one used to make
``fasttext_quality`` validation climb to 8.6 GB and die in ``std::bad_alloc``. Real files: the shipped
quantized demo model, a dense model trained here, and truncated / corrupted copies of both.

The cut copies are never given to ``fasttext.load_model`` here (that is the bug); each is refused first.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cuvee.classifiers.fasttext_check import FastTextFileError, check_model_file
from cuvee.classifiers.quality_stages import DEMO_FASTTEXT

WORDS = ["the", "committee", "reviewed", "evidence", "published", "detailed", "report", "click", "here", "buy", "cheap", "deals", "free", "shipping"]


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft")
    lines = [f"__label__{'hq' if i % 2 else 'lq'} " + " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(10))
             for i in range(300)]
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    code = ("import sys, fasttext; m = fasttext.train_supervised(input=sys.argv[1], epoch=5, lr=0.1, dim=8, minCount=1, "
            "wordNgrams=2, bucket=5000, thread=1, verbose=0, seed=int(sys.argv[3])); m.save_model(sys.argv[2])")
    for seed in range(10):  # fastText 0.9 sometimes raises "Encountered NaN." on tiny files: a fresh process per try
        r = subprocess.run([sys.executable, "-c", code, str(root / "train.txt"), str(root / "m.bin"), str(seed)],
                           capture_output=True, text=True, check=False)
        if r.returncode == 0:
            return root / "m.bin"
    raise RuntimeError(r.stderr[-300:])


def _cut(src: Path, dst: Path, n: int) -> Path:
    dst.write_bytes(src.read_bytes()[:n])
    return dst


def test_complete_models_pass(dense):
    check_model_file(DEMO_FASTTEXT)  # quantized (.ftz)
    check_model_file(dense)  # dense (.bin)


@pytest.mark.parametrize("model", ["demo", "dense"])
def test_every_cut_is_refused_in_one_line(model, dense, tmp_path):
    src = Path(DEMO_FASTTEXT) if model == "demo" else dense
    size = src.stat().st_size
    for n in sorted({0, 3, 8, 40, 70, 100, 300, size // 3, size // 2, size - 100, size - 1}):
        p = _cut(src, tmp_path / f"cut{n}.bin", n)
        with pytest.raises(FastTextFileError) as e:
            check_model_file(p)
        assert str(p) in str(e.value) and "\n" not in str(e.value)
    bad = bytearray(src.read_bytes())
    bad[0:4] = b"\x00\x01\x02\x03"
    (tmp_path / "magic.bin").write_bytes(bytes(bad))
    with pytest.raises(FastTextFileError, match="magic"):
        check_model_file(tmp_path / "magic.bin")
    (tmp_path / "longer.bin").write_bytes(src.read_bytes() + b"junk")
    with pytest.raises(FastTextFileError, match="unexpected bytes"):
        check_model_file(tmp_path / "longer.bin")


def test_fasttext_quality_refuses_a_cut_model_before_loading_it(dense, tmp_path):
    from cuvee.pipeline.registry import BuildContext, get_stage

    cut = _cut(dense, tmp_path / "cut.bin", dense.stat().st_size // 2)
    spec = get_stage("fasttext_quality")
    ctx = BuildContext(run_dir=tmp_path, work_dir=tmp_path / "w", tasks=1, stage_index=0, stage_name="fq")
    with pytest.raises(FastTextFileError, match="not a complete fastText model"):
        spec.build(spec.params(model=str(cut), threshold=0.5), ctx)


def test_classify_apply_with_a_cut_model_is_one_line(dense, tmp_path):
    from cuvee.cli import main

    cut = _cut(dense, tmp_path / "cut.bin", dense.stat().st_size - 10)
    docs = tmp_path / "d.jsonl"
    docs.write_text(json.dumps({"id": "a", "text": "the committee reviewed"}) + "\n")
    res = CliRunner().invoke(main, ["classify", "apply", "-m", str(cut), "-i", str(docs), "-o", str(tmp_path / "o.jsonl")])
    err = res.output.strip()
    assert res.exit_code == 1 and err.startswith("Error: ") and "\n" not in err and "not a complete fastText model" in err
