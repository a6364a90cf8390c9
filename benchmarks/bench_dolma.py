"""Per-document cost of dedup and C4 rules: cuvee's stages next to AI2's Dolma toolkit (Rust), same documents.

Corpus: 3,000 documents (``--docs``; 10,000, about the most the real passages give, resolves Dolma's small
per-document costs better) from real text: 150-300-word passages of WCXB dev pages' main content, each with 0-6
real boilerplate lines (WCXB "without" snippets, a pool of 300) inserted, plus 10 % exact copies of earlier
documents shuffled in, so exact and paragraph/line dedup both have real work. Written once as Dolma's layout
(``documents/*.jsonl.gz`` with id/text/source/added) and read by both tools. Above 10,000 further documents
join the first half of one real passage's lines to the second half of another's, which lifts the per-document
signal above this VM's process-to-process CPU noise; their lines repeat, so there only exact dedup, the C4 rules
and the one-pass line rule (Dolma's own) are compared.

Dolma runs as its users run it, from its own venv, one process: ``dolma dedupe`` (Bloom filter, documents by
``$.text``; paragraphs), ``dolma tag --taggers c4_v2``. cuvee runs ``cuvee run`` on a recipe with one stage
(``exact_dedup`` and ``line_dedup``, each as the default barrier and with ``one_pass: true``, ``c4_quality``),
tasks=1, workers=1; both variants of a dedup stage are compared with the same Dolma runs.

Each (tool, operation, corpus) is a fresh process; CPU = user + system of the child (getrusage). Runs are
interleaved round-robin, ``--runs`` times; medians reported with [min-max]. Start-up is set apart by also
running every command on a 30-document corpus: per-document cost = (CPU(N) - CPU(30)) / (N - 30). For
cuvee the stage's cost is *marginal*: a baseline recipe that reads the same input and writes exactly the stage's
output (the benchmark-only ``bench_keep_ids`` stage of ``_keep_ids.py`` keeps the documents the stage kept, with
the texts it wrote, about 1 us a document, which this credits to the stage) is subtracted, so reading and writing, which Dolma's dedupe also does (documents in,
attribute files out), are not charged to cuvee's stage, and neither is the writing a stage saves by dropping or
shortening documents. (Until 2026-11-26 the baseline read the stage's output instead of its input, which charged
a stage for reading every document it dropped: slight at 10 % drops, most of the figure where a stage drops 80 %.)
The stage's figure still includes re-reading the input (copy-free dedup reads it twice), its whole-corpus phase
jobs, the filter and its intermediate files. The whole run's cost is printed too. What each removes is printed next to it: the rules differ (Dolma drops every repeat after the first paragraph; cuvee's default line dedup removes
every copy of a line seen in >= k documents of a bucket, ccNet / Llama 3; its ``one_pass`` with k = 2 is Dolma's
rule on ccNet-normalised lines), so decisions are compared, not assumed.

Two comparisons, both printed in CPU and in wall time:

* **kernel against kernel** (the rows above): Dolma's ``dedupe`` or ``tag`` process against the marginal cost of
  cuvee's stage. Not like for like on its own: Dolma's figure includes its reading and writing, cuvee's does not.
* **whole job against whole job** (``--whole-job``, for the dedup operations): Dolma's ``dedupe`` *plus* the
  ``dolma mix`` that writes the kept documents (duplicate documents excluded, duplicate paragraph spans
  replaced by nothing), against the whole ``cuvee run`` of a recipe reading the same files and writing its kept
  documents as gzip JSONL, start-up set apart the same way on both sides. Documents and characters written by
  each side are printed beside it.

Every command first runs once on the small corpus, untimed (numba compiles cuvee's kernels on a machine's first
run; Dolma's files reach the page cache), then the rounds are interleaved. Dolma's venv (boto3 pinned to the
release that matches the botocore of dolma's ``s3fs==2023.6.0`` pin; without it pip backtracks through boto3
releases for many minutes):

    python -m venv /tmp/dolma-venv && /tmp/dolma-venv/bin/pip install dolma==1.2.1 boto3==1.26.161
    python benchmarks/bench_dolma.py --dolma /tmp/dolma-venv/bin/dolma --runs 3 --docs 10000 [--whole-job]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
from _child import run_child

CUVEE_STAGES = {
    "exact": {"stage": "exact_dedup"},
    "exact one_pass": {"stage": "exact_dedup", "one_pass": True},
    "paragraph/line": {"stage": "line_dedup", "bucket_size": 1_000_000, "min_occurrences": 2, "min_words": 0},
    # Dolma's own rule (a repeat is removed, its first copy stays), decided while reading
    "line one_pass": {"stage": "line_dedup", "one_pass": True, "bucket_size": 1_000_000, "min_occurrences": 2,
                      "count_per_document": False, "min_words": 0},
    "c4 rules": {"stage": "c4_quality"},
}


def build_corpus(folder: Path, n: int, seed: int = 0) -> dict:
    from benchmarks._neardup_eval import boilerplate_pool, passages, real_page_texts

    rng = random.Random(seed)
    pool = rng.sample(boilerplate_pool(), 300)
    base = [p for t in real_page_texts() for p in passages(t, rng)]
    n_orig = n - n // 10
    real = len(base)
    for _ in range(real, n_orig):  # past the real passages: the first half of one's lines, the second half of another's
        a, b = (base[rng.randrange(real)].split("\n") for _ in range(2))
        base.append("\n".join(a[:len(a) // 2] + b[len(b) // 2:]))
    docs, inserted = [], 0
    for text in base[:n_orig]:
        lines = text.split("\n")
        for _ in range(rng.randint(0, 6)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(pool))
            inserted += 1
        docs.append("\n".join(lines))
    copies = [rng.choice(docs) for _ in range(n - n_orig)]
    for c in copies:
        docs.insert(rng.randrange(len(docs) + 1), c)
    (folder / "documents").mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "documents" / "part-0000.jsonl.gz", "wt") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"id": f"d{i}", "text": text, "source": "bench", "added": "2026-01-01T00:00:00.000Z",
                                "created": "2026-01-01T00:00:00.000Z", "metadata": {}}) + "\n")
    return {"documents": len(docs), "exact_copies": n - n_orig, "boilerplate_lines": inserted,
            "chars": sum(len(d) for d in docs)}


def docs_runs_args(description: str, docs: int, runs: int) -> argparse.Namespace:
    """``--docs`` and ``--runs``, the options of the in-process benchmarks built on :func:`build_corpus`."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=docs)
    ap.add_argument("--runs", type=int, default=runs)
    return ap.parse_args()


REAL_PASSAGES = 10_000  # about what the real pages give; beyond, build_corpus joins halves of two passages

# the Dolma command each cuvee operation is compared with (one Dolma run per command and round)
DOLMA_OP = {"exact": "exact", "exact one_pass": "exact", "paragraph/line": "paragraph/line",
            "line one_pass": "paragraph/line", "c4 rules": "c4 rules"}
LINE_OPS = ("paragraph/line", "line one_pass")


def _child_cost(cmd: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """(CPU s of the child and its descendants, wall s) of one command."""
    t = time.perf_counter()
    cpu = run_child(cmd, cwd=cwd).cpu_s
    return cpu, time.perf_counter() - t


# ------------------------------------------------------------------------------------------ cuvee
def _slug(op: str | None) -> str:
    return (op or "baseline").replace("/", "_").replace(" ", "_")


def cuvee_run(docs: Path, op: str | None, work: Path, kept_ids: Path | None = None) -> tuple[tuple[float, float], dict]:
    """``cuvee run`` of read JSONL (folder ``docs``) -> [stage] -> write JSONL, in a fresh interpreter; (CPU s,
    wall s) and the funnel with the documents and characters written. ``kept_ids``: with an op, write the
    documents it kept there (id, text); without one, the run keeps only those, with those texts (the op's baseline: the same input read, the same output written, no stage work)."""
    run_dir = work / f"cuvee_{_slug(op)}"
    shutil.rmtree(run_dir, ignore_errors=True)
    stages = [CUVEE_STAGES[op]] if op else [{"stage": "bench_keep_ids", "ids_file": str(kept_ids)}] if kept_ids else []
    recipe = {"name": "bench_dolma", "run_dir": str(run_dir),
              "input": {"paths": [str(docs)], "format": "jsonl"}, "stages": stages,
              "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1, "workers": 1}}
    rf = work / "recipe.json"
    rf.write_text(json.dumps(recipe))
    code = ("import json,sys; import benchmarks._keep_ids; from cuvee.pipeline.runner import run_recipe; "
            f"run_recipe(json.load(open({str(rf)!r})))")
    cost = _child_cost([sys.executable, "-c", code], cwd=REPO)
    stats = json.loads((run_dir / "stats.json").read_text())
    st = [s for s in stats["stages"] if s["name"] not in ("reader",)]
    info = {"kept": stats["accounting"]["kept"], "dropped": dict(stats["accounting"]["by_reason"])}
    if op in LINE_OPS:
        c = next(s for s in st if s["name"] == "line_dedup")["counters"]
        info["lines_removed"] = c.get("lines_removed", 0)
    if op:
        rows = []
        for f in sorted((run_dir / "output").rglob("*.jsonl*")):
            with gzip.open(f, "rt") if f.suffix == ".gz" else open(f) as fh:
                rows += [json.loads(line) for line in fh]
        info["written"] = {"documents": len(rows), "chars": sum(len(r["text"]) for r in rows)}
        if kept_ids is not None:
            from _keep_ids import write_kept

            write_kept(kept_ids, rows)
    return cost, info


# ------------------------------------------------------------------------------------------ Dolma
# what ``dolma mix`` does with each dedupe's attributes: drop the duplicate documents / cut the duplicate paragraphs
MIX_RULES = {
    "exact": ("exact", {"filter": {"exclude": [
        "$.attributes[?(@.bff_duplicate_doc && @.bff_duplicate_doc[0] && @.bff_duplicate_doc[0][2] >= 1)]"]}}),
    "paragraph/line": ("para", {"span_replacement": [
        {"span": "$.attributes.bff_duplicate_paragraph_spans", "min_score": 0.5, "replacement": ""}]}),
}


def dolma_mix(dolma: str, root: Path, op: str) -> tuple[tuple[float, float], dict]:
    """``dolma mix`` of ``root/documents`` with the attributes a ``dolma dedupe`` left in ``root/attributes``: the
    step that writes the kept documents (gzip JSONL), as Dolma's users run it after ``dedupe``."""
    attr, rule = MIX_RULES[op]
    out = root / "mixed"
    config = {"streams": [{"name": "bench", "documents": [str(root / "documents" / "*.jsonl.gz")],
                           "attributes": [attr], "output": {"path": str(out), "max_size_in_bytes": 10 ** 12},
                           **rule}],
              "work_dir": {"input": str(root / "mix_in"), "output": str(root / "mix_out")}, "processes": 1}
    cfg = root / "mix.json"
    cfg.write_text(json.dumps(config))
    cost = _child_cost([dolma, "-c", str(cfg), "mix"], cwd=root)
    docs = chars = 0
    for f in sorted(out.rglob("*.gz")):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                text = json.loads(line).get("text") or ""
                docs += bool(text)
                chars += len(text)
    return cost, {"documents": docs, "chars": chars}


def dolma_run(dolma: str, corpus: Path, op: str, work: Path, mix: bool = False) -> tuple[tuple[float, float], dict]:
    """Dolma on a private copy of the corpus (it skips outputs that exist, so every run starts clean); with
    ``mix``, the ``dolma mix`` that writes the kept documents runs after it, timed apart (``info["mix"]``)."""
    root = work / f"dolma_{op.replace('/', '_').replace(' ', '_')}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(corpus / "documents", root / "documents")
    docs = str(root / "documents" / "*.jsonl.gz")
    bloom = ["--bloom_filter.file", str(root / "bloom.bin"), "--no-bloom_filter.read_only",
             "--bloom_filter.estimated_doc_count", "1000000", "--bloom_filter.desired_false_positive_rate", "0.0001"]
    if op == "exact":
        cmd = [dolma, "dedupe", "--documents", docs, "--dedupe.name", "exact", "--dedupe.documents.key", "$.text",
               "--dedupe.documents.attribute_name", "bff_duplicate_doc", *bloom, "--processes", "1"]
    elif op == "paragraph/line":
        cmd = [dolma, "dedupe", "--documents", docs, "--dedupe.name", "para",
               "--dedupe.paragraphs.attribute_name", "bff_duplicate_paragraph_spans", *bloom, "--processes", "1"]
    else:
        cmd = [dolma, "tag", "--documents", docs, "--experiment", "bench", "--taggers", "c4_v2", "--processes", "1"]
    cost = _child_cost(cmd, cwd=root)
    spans, docs_flagged, attrs, rows = 0, 0, {}, 0
    for f in (root / "attributes").rglob("*.jsonl.gz"):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                row = json.loads(line)
                rows += 1
                flagged = False
                for k, v in row.get("attributes", {}).items():
                    n = len(v) if isinstance(v, list) else 0
                    attrs[k.rsplit("__", 1)[-1]] = attrs.get(k.rsplit("__", 1)[-1], 0) + n
                    spans += n
                    flagged |= n > 0
                docs_flagged += flagged
    info = {"docs_with_spans": docs_flagged, "spans": spans, "by_attribute": attrs}
    if mix:
        info["mix_cost"], info["written"] = dolma_mix(dolma, root, op)
        if op == "exact" and info["written"]["documents"] != rows - docs_flagged:
            # the mixer's filter is a JSONPath over the attributes: one that matches nothing would make Dolma's
            # whole job look cheap while keeping every duplicate
            sys.exit(f"dolma mix kept {info['written']['documents']} documents, dedupe flagged {docs_flagged} of "
                     f"{rows}: the mix filter does not match dedupe's attributes")
    return cost, info


WHOLE_OPS = ("exact", "paragraph/line")  # the Dolma commands whose kept documents a ``dolma mix`` writes


def _load() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def _fmt(runs: list[float]) -> str:
    return f"{statistics.median(runs):.3f} [{min(runs):.3f}-{max(runs):.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dolma", default="/tmp/dolma-venv/bin/dolma")
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--tiny", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ops", default="exact,exact one_pass,paragraph/line,line one_pass,c4 rules")
    ap.add_argument("--whole-job", action="store_true", help="also run `dolma mix` after each dedupe and compare "
                    "Dolma's dedupe + mix with the whole cuvee run (dedup operations only)")
    args = ap.parse_args()
    if not Path(args.dolma).exists():
        sys.exit(f"no {args.dolma}: python -m venv /tmp/dolma-venv && "
                 "/tmp/dolma-venv/bin/pip install dolma==1.2.1 boto3==1.26.161")
    work = Path(tempfile.mkdtemp(prefix="cuvee_bench_dolma_"))
    big, tiny = work / "big", work / "tiny"
    info = build_corpus(big, args.docs)
    build_corpus(tiny, args.tiny, seed=1)
    ops = args.ops.split(",")
    if args.docs > REAL_PASSAGES and "paragraph/line" in ops:
        # the joined halves repeat real lines, so nearly every line reaches k = 2 and the barrier's rule (remove
        # every copy) empties the documents; "line one_pass" applies Dolma's own rule (the first copy stays), so
        # both tools still do the same work there
        sys.exit(f"--docs above {REAL_PASSAGES:,} joins halves of real passages: their lines repeat, so the "
                 "barrier's paragraph/line rule would empty the documents; use 'line one_pass', exact or c4 there")
    version = subprocess.run([str(Path(args.dolma).parent / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('dolma'))"], check=False, capture_output=True,
                             text=True).stdout.strip()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} dolma {version}; corpus {info}; runs={args.runs}; "
          f"load {_load()}")
    mix_ops = {DOLMA_OP[op] for op in ops if DOLMA_OP[op] in WHOLE_OPS} if args.whole_job else set()

    def dolma(corpus, dop):
        return dolma_run(args.dolma, corpus, dop, work, mix=dop in mix_ops)

    # untimed warm-up of every command on the small corpus: numba compiles cuvee's kernels on a machine's first
    # run, and the first run of each invocation paid it inside the timings before
    t = time.perf_counter()
    cuvee_run(tiny / "documents", None, work)
    for op in ops:
        kept = work / f"kept_{_slug(op)}_warmup.json"
        cuvee_run(tiny / "documents", op, work, kept_ids=kept)
        cuvee_run(tiny / "documents", None, work, kept_ids=kept)
    for dop in dict.fromkeys(DOLMA_OP[op] for op in ops):
        dolma(tiny, dop)
    print(f"  warm-up (untimed): {time.perf_counter() - t:.1f} s wall", flush=True)

    cost: dict[tuple, list[tuple[float, float]]] = {}  # (tool, op, corpus) -> [(CPU s, wall s) per round]
    decisions: dict[tuple, dict] = {}
    for r in range(args.runs):
        for corpus_name, corpus in (("big", big), ("tiny", tiny)):
            c, i = cuvee_run(corpus / "documents", None, work)
            cost.setdefault(("cuvee", "baseline", corpus_name), []).append(c)
            for op in ops:
                kept = work / f"kept_{_slug(op)}_{corpus_name}.json"
                c, i = cuvee_run(corpus / "documents", op, work, kept_ids=kept)
                cost.setdefault(("cuvee", op, corpus_name), []).append(c)
                decisions[("cuvee", op, corpus_name)] = i
                # the op's baseline: the same input read, the documents the op kept written, nothing else
                c, _ = cuvee_run(corpus / "documents", None, work, kept_ids=kept)
                cost.setdefault(("cuvee", "baseline " + op, corpus_name), []).append(c)
                dop = DOLMA_OP[op]
                if len(cost.get(("dolma", dop, corpus_name), [])) <= r:
                    c, i = dolma(corpus, dop)
                    cost.setdefault(("dolma", dop, corpus_name), []).append(c)
                    if "mix_cost" in i:
                        cost.setdefault(("dolma", "mix " + dop, corpus_name), []).append(i["mix_cost"])
                    decisions[("dolma", dop, corpus_name)] = i
        print(f"  run {r + 1} done: " + ", ".join(f"{k[0]}/{k[1]}/{k[2]} {v[-1][0]:.2f}s CPU {v[-1][1]:.2f}s wall"
                                                  for k, v in cost.items()), flush=True)
    n = info["documents"] - args.tiny

    def val(key, m, i):
        return cost[key][i][m]

    def per_k(tool, op, m, i):
        """Kernel row: CPU (m=0) or wall (m=1) s per 1,000 documents in round i, start-up excluded; cuvee: the
        stage's marginal cost over its baseline."""
        if tool == "cuvee":
            m_big = val(("cuvee", op, "big"), m, i) - val(("cuvee", "baseline " + op, "big"), m, i)
            m_tiny = val(("cuvee", op, "tiny"), m, i) - val(("cuvee", "baseline " + op, "tiny"), m, i)
            return (m_big - m_tiny) / n * 1000
        return (val(("dolma", DOLMA_OP[op], "big"), m, i) - val(("dolma", DOLMA_OP[op], "tiny"), m, i)) / n * 1000

    def whole_k(tool, op, m, i):
        """Whole-job row: the whole cuvee run, or Dolma's dedupe + mix, per 1,000 documents, start-up excluded."""
        if tool == "cuvee":
            keys = [("cuvee", op)]
        else:
            keys = [("dolma", DOLMA_OP[op]), ("dolma", "mix " + DOLMA_OP[op])]
        return sum(val((*k, "big"), m, i) - val((*k, "tiny"), m, i) for k in keys) / n * 1000

    def med(key, m):
        return statistics.median(x[m] for x in cost[key])

    rounds = range(args.runs)
    print("\nKernel against kernel: Dolma's whole dedupe/tag process against cuvee's stage alone (its reading and "
          "writing subtracted). s per 1k docs, start-up excluded, median of runs [min-max]")
    print("| operation | tool | CPU s per 1k docs | wall s per 1k docs | start-up CPU s | what it removes |")
    print("|---|---|---|---|---|---|")
    shown = set()
    for op in ops:
        for tool in ("dolma", "cuvee"):
            if tool == "dolma":
                if DOLMA_OP[op] in shown:
                    continue  # one Dolma row per Dolma command
                shown.add(DOLMA_OP[op])
            key = op if tool == "cuvee" else DOLMA_OP[op]
            start = med((tool, key, "tiny"), 0) - (med(("cuvee", "baseline " + op, "tiny"), 0) if tool == "cuvee" else 0)
            d = decisions[(tool, key, "big")]
            if tool == "cuvee":
                what = f"kept {d['kept']}, dropped {d['dropped']}" + (f", lines removed {d['lines_removed']}" if "lines_removed" in d else "")
            else:
                what = f"{d['docs_with_spans']} docs with spans, {d['by_attribute']}"
            print(f"| {op} | {tool} | {_fmt([per_k(tool, op, 0, i) for i in rounds])} | "
                  f"{_fmt([per_k(tool, op, 1, i) for i in rounds])} | {start:.2f} | {what} |")
    if mix_ops:
        print("\nWhole job against whole job: Dolma's dedupe + mix (writes the kept documents) against the whole "
              "cuvee run (reads the same files, writes its kept documents). s per 1k docs, start-up excluded, "
              "median of runs [min-max]; ratio = cuvee / Dolma per round (above 1x: cuvee costs more)")
        print("| operation | Dolma dedupe + mix CPU | cuvee whole run CPU | cuvee / Dolma CPU | Dolma wall | cuvee wall "
              "| cuvee / Dolma wall | written: Dolma docs (chars) | cuvee docs (chars) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for op in ops:
            if DOLMA_OP[op] not in mix_ops:
                continue
            dw, cw = decisions[("dolma", DOLMA_OP[op], "big")]["written"], decisions[("cuvee", op, "big")]["written"]
            cells = []
            for m in (0, 1):
                d_runs = [whole_k("dolma", op, m, i) for i in rounds]
                c_runs = [whole_k("cuvee", op, m, i) for i in rounds]
                if min(d_runs) > 0 and min(c_runs) > 0:
                    ratio = [c / d for c, d in zip(c_runs, d_runs)]
                    cells += [_fmt(d_runs), _fmt(c_runs), f"{statistics.median(ratio):.2f}x [{min(ratio):.2f}-{max(ratio):.2f}]"]
                else:  # a start-up-corrected cost at or below zero: the corpus is too small for this machine's noise
                    cells += [_fmt(d_runs), _fmt(c_runs), "n/a (below resolution: use more --docs)"]
            print(f"| {op} | " + " | ".join(cells) + f" | {dw['documents']} ({dw['chars']:,}) | "
                  f"{cw['documents']} ({cw['chars']:,}) |")
        print("  (the rules differ for paragraph/line: Dolma removes every repeat after the first paragraph; cuvee's "
              "barrier removes every copy of a line in >= k documents, its one_pass k = 2 keeps the first copy)")
    print(f"\ncuvee read JSONL -> write JSONL of the input (not charged to the stages): "
          f"{(med(('cuvee', 'baseline', 'big'), 0) - med(('cuvee', 'baseline', 'tiny'), 0)) / n * 1000:.3f} s CPU per 1k docs; "
          f"start-up {med(('cuvee', 'baseline', 'tiny'), 0):.2f} s")
    print("cuvee whole run (read, stage, write) CPU s per 1k docs, start-up excluded: " + ", ".join(
        f"{op} {_fmt([whole_k('cuvee', op, 0, i) for i in rounds])}" for op in ops))
    print(f"load after: {_load()}")


if __name__ == "__main__":
    main()
