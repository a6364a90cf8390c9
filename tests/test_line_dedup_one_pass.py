"""One-pass line dedup (``line_dedup`` with ``one_pass: true``): the streaming rule, checked against a plain
Python reference on real texts, across batch and bucket ends, and through a real recipe run."""

from __future__ import annotations

import gzip
import json
import random

import pytest
from datatrove.data import Document
from datatrove.pipeline.writers import JsonlWriter

from _dedup_helpers import quiet, real_texts
from cuvee.dedup.line_counts import LineCountTable
from cuvee.dedup.line_dedup import OnePassLineDedup
from cuvee.dedup.text import WORD_RE, normalize_line
from cuvee.pipeline.runner import run_recipe

quiet()

BOILER = ["Accept all cookies", "Subscribe to our newsletter!", "Copyright 2024 Example Media", "Share this page",
          "ACCEPT ALL COOKIES.", "Ünïcödé façade menu"]


def _texts(n=120, seed=5):
    """Real page texts with boilerplate lines, lines repeated inside a page, blank lines and pages made only
    of boilerplate (dropped once their lines are gone)."""
    rng = random.Random(seed)
    pages = real_texts()
    out = []
    for _ in range(n):
        lines = rng.choice(pages[:40]).split("\n")[: rng.randint(1, 12)]
        for _ in range(rng.randint(0, 4)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(BOILER))
        if rng.random() < 0.2:
            lines += ["", lines[0]]  # a blank line and a line repeated inside the page
        if rng.random() < 0.05:
            lines = rng.sample(BOILER, 2)
        out.append("\n".join(lines))
    return out


def reference(texts, k, per_document, bucket_size, min_words):
    """The rule written plainly: a line goes once k-1 earlier documents of its bucket held it (per_document) or
    once it occurred k-1 times before (earlier in the same document too); blank lines are never removed."""
    counts: dict[str, int] = {}
    out = []
    for i, text in enumerate(texts):
        if i % bucket_size == 0:
            counts = {}
        lines = text.split("\n")
        norm = [normalize_line(x) for x in lines]
        if per_document:
            hit = [bool(n) and counts.get(n, 0) >= k - 1 for n in norm]
            for n in set(norm):
                counts[n] = counts.get(n, 0) + 1
        else:  # occurrence by occurrence, earlier lines of the same document included
            hit = []
            for n in norm:
                hit.append(bool(n) and counts.get(n, 0) >= k - 1)
                counts[n] = counts.get(n, 0) + 1
        if not any(hit):
            out.append((text, None, 0))
            continue
        kept = "\n".join(x for x, h in zip(lines, hit) if not h).strip()
        reason = None
        if not kept:
            reason = "empty_after_line_dedup"
        elif min_words and len(WORD_RE.findall(kept)) < min_words:
            reason = "too_short_after_line_dedup"
        out.append((kept, reason, sum(hit)))
    return out


def _run(step, texts):
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    kept = {d.id: d.text for d in step.run(iter(docs))}
    return kept, step.stats


@pytest.mark.parametrize("k,per_document,bucket_size,batch", [(2, True, 10**6, 1024), (3, True, 10**6, 7),
                                                               (2, False, 10**6, 13), (2, True, 25, 10),
                                                               (4, False, 17, 5)])
def test_streaming_rule_equals_the_plain_reference(monkeypatch, k, per_document, bucket_size, batch):
    monkeypatch.setattr(OnePassLineDedup, "BATCH", batch)  # batches that end inside and across buckets
    texts = _texts()
    ref = reference(texts, k, per_document, bucket_size, min_words=3)
    step = OnePassLineDedup(bucket_size, k, per_document, min_words=3, memory_budget_mb=16)
    kept, stats = _run(step, texts)
    assert kept == {str(i): t for i, (t, reason, _) in enumerate(ref) if reason is None}
    assert sum(r for _, _, r in ref) == stats["lines_removed"].total > 0
    for reason in ("empty_after_line_dedup", "too_short_after_line_dedup"):
        n = sum(1 for _, r, _ in ref if r == reason)
        assert (stats[f"dropped_{reason}"].total if n else 0) == n
    assert stats["total"].total == len(texts)
    distinct = sum(len({normalize_line(x) for t in texts[lo:lo + bucket_size] for x in t.split("\n")} - {""})
                   for lo in range(0, len(texts), bucket_size))
    assert stats["distinct_lines"].total == distinct


def test_first_copy_stays_with_k_2_like_dolma():
    texts = ["intro one\nAccept all cookies\nAccept all cookies", "intro two\naccept   ALL cookies!", "Accept all cookies"]
    kept, stats = _run(OnePassLineDedup(10**6, 2, False, min_words=0, memory_budget_mb=4), texts)
    assert kept == {"0": "intro one\nAccept all cookies", "1": "intro two"}  # Dolma's rule: every repeat goes
    assert stats["dropped_empty_after_line_dedup"].total == 1 and stats["lines_removed"].total == 3
    kept, _ = _run(OnePassLineDedup(10**6, 2, True, min_words=0, memory_budget_mb=4), texts)
    assert kept["0"] == texts[0]  # counted per document: a repeat inside the first page is not yet boilerplate


def test_exclusion_writer_path_gives_the_same_documents(tmp_path):
    texts = _texts(60)
    lean, _ = _run(OnePassLineDedup(10**6, 2, True, 3, 16), texts)
    step = OnePassLineDedup(10**6, 2, True, 3, 16, exclusion_writer=JsonlWriter(str(tmp_path / "excluded")))
    slow, stats = _run(step, texts)
    assert slow == lean
    excluded = [json.loads(x) for f in (tmp_path / "excluded").glob("*.jsonl.gz") for x in gzip.open(f, "rt")]
    assert len(excluded) == len(texts) - len(lean) == stats["dropped"].total > 0


def test_table_grows_and_stops_past_its_budget():
    from cuvee.dedup.native_lines import line_hashes_of

    def word(i):  # letters: digits normalise to 0
        return "".join(chr(97 + i // 26**p % 26) for p in range(4))

    texts = [f"unique line {word(i)}" for i in range(40_000)]
    h, n = line_hashes_of(texts)
    table = LineCountTable(1, True, max_bytes=64 << 20, initial_slots=16)
    remove, removed = table.decide(h, n, 0, 64)
    assert not remove.any() and table.used == len(set(h.tolist())) and len(table.keys) >= 2 * table.used
    remove, removed = table.decide(h, n, len(texts), 64)  # the same lines again: every one is a repeat
    assert remove.all() and removed.tolist() == [1] * len(texts)
    small = LineCountTable(1, True, max_bytes=256 << 10, initial_slots=16)
    with pytest.raises(MemoryError, match="distinct lines fill memory_budget_mb=1"):
        small.decide(h, n, 0, 1)


def _corpus(folder, texts, files=2):
    folder.mkdir(parents=True)
    for f in range(files):
        with gzip.open(folder / f"part{f}.jsonl.gz", "wt") as out:
            for i in range(f, len(texts), files):
                out.write(json.dumps({"text": texts[i], "id": f"d{i}"}) + "\n")


def _recipe(tmp_path, name, stages, tasks=1):
    return {"name": name, "run_dir": str(tmp_path / name),
            "input": {"paths": [str(tmp_path / "in" / "*.jsonl.gz")], "format": "jsonl"},
            "stages": stages, "output": {"format": "jsonl"},
            "executor": {"kind": "local", "tasks": tasks, "workers": 1}}


def test_recipe_run_one_pass_then_a_barrier_is_replayed_not_copied(tmp_path):
    texts = _texts(150, seed=9)
    _corpus(tmp_path / "in", texts)
    stages = [{"stage": "line_dedup", "one_pass": True, "min_occurrences": 2, "min_words": 3},
              {"stage": "minhash_dedup", "write_index": False}]
    stats = run_recipe(_recipe(tmp_path, "run", stages))
    acc = stats["accounting"]
    assert acc["balanced"] and acc["inputs"]["balanced"]
    assert acc["by_reason"].get("line_dedup/empty_after_line_dedup", 0) > 0
    out = [json.loads(x) for f in stats["output"]["files"] for x in gzip.open(f, "rt")]
    # the same rule as the reference on the order the single task reads (file by file)
    order = [texts[i] for f in range(2) for i in range(f, len(texts), 2)]
    survivors = [t for t, reason, _ in reference(order, 2, True, 10**9, 3) if reason is None]
    minhash_drops = acc["by_reason"].get("minhash_dedup/minhash_duplicate", 0)
    assert len(out) == len(survivors) - minhash_drops
    assert {d["text"] for d in out} <= set(survivors)
    assert list((tmp_path / "run" / "work").glob("seg*/*.jsonl")) == []  # the barrier re-ran it, no copy
    assert not (tmp_path / "run" / "work" / "00_line_dedup").exists()  # no line-hash files

