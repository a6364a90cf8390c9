"""Decontamination sweep, 13-grams vs by meaning vs both (issue #35): the decontaminate stage (annotate) with
``by_meaning`` after an ``embed`` stage, in real recipe runs.

Eval items: the first sentence of MRPC's human-judged paraphrase pairs (label 1; dev split for the threshold, test
split for the figures; MRPC is not bundled, see benchmarks/data/mrpc/SOURCE.txt). Documents, one per item and kind:
``verbatim`` (the item), ``paraphrase`` (the pair's other sentence: a human-judged paraphrase), ``edited20`` /
``edited40`` (20 % / 40 % of the item's words replaced by words of other items, seeded), ``in_page`` (the item in the
middle of a clean page). False positives: ``not_paraphrase`` (the second sentence of a pair judged NOT a
paraphrase, whose first sentence is an item too: the same news story, another meaning) and clean pages (WCXB main
content, data/curated, disjoint between dev and test). A document counts as found when its annotation names its own
item (n-gram: with spans; meaning: with a cosine >= the threshold); a clean page when anything is found in it.

The run keeps every cosine >= 0.5, so thresholds are swept from one run. Two meaning thresholds are fixed on dev
(step 0.01): the lowest with no clean page flagged, and the lowest flagging at most 10 % of the not-paraphrases;
both are reported on test.

    python benchmarks/bench_decontaminate_meaning.py --mrpc /path/to/mrpc
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import tempfile
from pathlib import Path

from bench_semdedup import read_mrpc
from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import run_recipe

REPO = Path(__file__).resolve().parents[1]
WCXB = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
KINDS = ("verbatim", "paraphrase", "edited20", "edited40", "in_page", "not_paraphrase")
FLOOR = 0.5


def edited(text: str, share: float, vocab: list[str], rng: random.Random) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), round(share * len(words))):
        words[i] = rng.choice(vocab)
    return " ".join(words)


def corpus(pairs, pages: list[str], seed: int) -> tuple[list[dict], list[dict]]:
    """(eval items, documents) for one split."""
    rng = random.Random(seed)
    items = [{"id": f"i{n}", "text": a} for n, (a, _, _) in enumerate(pairs)]
    vocab = [w for a, _, y in pairs if y for w in a.split()]
    docs = [{"id": f"clean{n}", "text": p} for n, p in enumerate(pages)]
    for n, (a, b, y) in enumerate(pairs):
        if not y:
            docs.append({"id": f"not_paraphrase.i{n}", "text": b})
            continue
        page = pages[n % len(pages)]
        cut = page.find("\n", len(page) // 2)
        cut = cut if cut > 0 else len(page)
        docs += [{"id": f"verbatim.i{n}", "text": a}, {"id": f"paraphrase.i{n}", "text": b},
                 {"id": f"edited20.i{n}", "text": edited(a, 0.2, vocab, rng)},
                 {"id": f"edited40.i{n}", "text": edited(a, 0.4, vocab, rng)},
                 {"id": f"in_page.i{n}", "text": page[:cut] + "\n" + a + "\n" + page[cut:]}]
    return items, docs


def run(work: Path, items: list[dict], docs: list[dict]) -> dict[str, list[dict]]:
    """One run; the annotation of every document by id."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "in").mkdir(parents=True)
    (work / "in" / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (work / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    stats = run_recipe({
        "name": "decont_meaning", "run_dir": str(work / "run"), "input": {"paths": [str(work / "in")],
                                                                          "format": "jsonl"},
        "stages": [{"stage": "embed", "threads": 1},
                   {"stage": "decontaminate", "action": "annotate", "by_meaning": {"threshold": FLOOR},
                    "eval_sets": [{"name": "mrpc", "path": str(work / "items.jsonl"), "fields": ["text"]}]}],
        "executor": {"kind": "local", "tasks": 1, "workers": 1}, "output": {"format": "jsonl"}})
    assert stats["accounting"]["balanced"]
    return {d.id: json.loads(d.metadata.get("contamination") or "[]") for d in iter_documents(stats["output"]["files"])}


def found(entries: list[dict], item: str | None, how: str, t: float) -> bool:
    def hit(e):
        return ("spans" in e) if how == "ngram" else (e.get("cosine", -1) >= t)

    return any(hit(e) and (item is None or e["item"] == item) for e in entries)


def table(notes: dict[str, list[dict]], t: float) -> dict[str, dict[str, float]]:
    out = {}
    for kind in (*KINDS, "clean"):
        ids = [i for i in notes if i.startswith(kind)]
        item = (lambda i: None) if kind == "clean" else (lambda i: i.split(".", 1)[1])
        ngram = [found(notes[i], item(i), "ngram", t) for i in ids]
        meaning = [found(notes[i], item(i), "meaning", t) for i in ids]
        out[kind] = {"n": len(ids), "ngram": sum(ngram), "meaning": sum(meaning),
                     "both": sum(a or b for a, b in zip(ngram, meaning))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mrpc", type=Path, required=True)
    ap.add_argument("--pages", type=int, default=300, help="clean pages per split")
    ap.add_argument("--items", type=int, default=200, help="test pairs of each label (dev: all its pairs)")
    args = ap.parse_args()
    from datatrove.utils.logging import logger

    from cuvee.train.demo_data import split_heldout

    logger.remove()
    with gzip.open(WCXB, "rt") as f:
        pages = [r["main_content"] for r in split_heldout([json.loads(x) for x in f])[0] if r["main_content"]]
    work = Path(tempfile.mkdtemp(prefix="bench_decont_meaning_"))
    dev_s, dev_p = read_mrpc(args.mrpc / "msr_paraphrase_dev.txt")
    dev_pairs = [(dev_s[a], dev_s[b], y) for a, b, y in dev_p]
    dev = run(work / "dev", *corpus(dev_pairs, pages[:args.pages], 1))
    grid = [round(FLOOR + 0.01 * k, 2) for k in range(50)]
    fixed = {"no clean page": next(t for t in grid if table(dev, t)["clean"]["meaning"] == 0),
             "<= 10 % not-paraphrases": next(t for t in grid if (r := table(dev, t)["not_paraphrase"])["meaning"]
                                             <= 0.10 * r["n"])}
    print(f"dev: {len(dev_pairs)} pairs, {args.pages} clean pages; thresholds fixed: {fixed}")
    for t in fixed.values():
        print(f"  dev at {t:.2f}", json.dumps(table(dev, t)))
    test_s, test_p = read_mrpc(args.mrpc / "msr_paraphrase_test.txt")
    pos = [(test_s[a], test_s[b], y) for a, b, y in test_p if y == 1][:args.items]
    neg = [(test_s[a], test_s[b], y) for a, b, y in test_p if y == 0][:args.items]
    test = run(work / "test", *corpus(pos + neg, pages[args.pages:2 * args.pages], 2))
    for name, t in fixed.items():
        print(f"test at {t:.2f} ({name} on dev): {len(pos)} + {len(neg)} pairs, {args.pages} clean pages")
        print("  kind            docs  13-gram  meaning  both")
        for kind, r in table(test, t).items():
            print(f"  {kind:<15} {r['n']:>4}  {r['ngram']:>7}  {r['meaning']:>7}  {r['both']:>4}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
