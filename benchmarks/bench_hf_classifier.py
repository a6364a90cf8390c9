"""HF sequence-classification scorer (transformer_quality / topic / domain ``model:``) on CPU, and the topic
stage's false-"adult" rate on ordinary web pages.

Throughput: cuvee's ``HFSequenceScorer`` (length-sorted batches, inference_mode) vs. the way the
FineWeb-Edu model card runs its classifier (plain transformers, one document at a time:
``tokenizer(text, return_tensors="pt", padding="longest", truncation=True)``; ``model(**inputs)``), on
real article texts (ScrapingHub ground truth, then WCXB), torch threads = 1 -> documents/s per core.
Models have random weights (nothing downloads) with FineWeb-Edu's shape: BERT-base (hidden 768,
12 layers, 512 tokens; the classifier's snowflake-arctic-embed-m encoder is BERT-base-sized) with a
regression head, and a tiny BERT (hidden 32, 2 layers); tokenizer: the bert-base-uncased WordPiece
vocabulary of the bundled all-MiniLM-L6-v2. Each figure: median (min-max) of ``--runs`` runs in one
invocation; model load (``from_pretrained`` of the saved folder) is timed apart from per-document cost.

Topic adult rate (``--topic-adult``): zero-shot topic tagging (all-MiniLM-L6-v2) of WCXB + ScrapingHub
main-content texts (ordinary pages, none of them adult), plain arg-max vs. the stage's guarded arg-max,
plus recall on a dozen hand-written explicit-adult page snippets.

    python benchmarks/bench_hf_classifier.py [--shared ../shared/data] [--docs 160] [--base-docs 32] [--runs 3]
    python benchmarks/bench_hf_classifier.py --topic-adult

GPU (``--device cuda``): the BERT-base model only, cuvee's scorer (bf16, ``--batch-size`` documents a batch)
against the model card's loop moved to the GPU (``model.to("cuda")``, fp32, one document at a time, as users
of the card run it). Needs no ``../shared``: ``--texts-jsonl`` reads the bundled WCXB articles and
``--tokenizer`` a saved copy of the MiniLM WordPiece tokenizer (``--save-tokenizer DIR`` writes one here).

    python benchmarks/bench_hf_classifier.py --save-tokenizer out/gpu_tok
    python benchmarks/bench_hf_classifier.py --device cuda --tokenizer out/gpu_tok \
        --texts-jsonl data/curated/wcxb_dev_main_content.jsonl.gz --base-docs 1000 --batch-size 128
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def load_texts(shared: Path) -> tuple[list[str], list[str]]:
    texts, src = [], []
    for v in json.loads((shared / "extraction_scrapinghub" / "ground-truth.json").read_text()).values():
        if v.get("articleBody"):
            texts.append(v["articleBody"])
            src.append("scrapinghub")
    for gt in sorted((shared / "extraction_wcxb" / "test" / "ground-truth").glob("*.json")):
        if m := json.loads(gt.read_text())["ground_truth"].get("main_content"):
            texts.append(m)
            src.append("wcxb_test")
    dev = load_texts_jsonl(shared / "extraction_wcxb" / "dev_ground_truth_main_content.jsonl.gz")
    return texts + dev, src + ["wcxb_dev"] * len(dev)


def load_texts_jsonl(path: Path, key: str = "main_content") -> list[str]:
    with gzip.open(path, "rt") as f:
        return [t for line in f if (t := json.loads(line).get(key))]


def make_model(folder: Path, size: str, tokenizer: str | None = None) -> str:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    if tokenizer is None:
        from cuvee.classifiers.embedder import bundled_minilm_path

        tokenizer = bundled_minilm_path()
    tok = AutoTokenizer.from_pretrained(tokenizer)
    tok.model_max_length = 512
    dims = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072) if size == "base" \
        else dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=tok.vocab_size, max_position_embeddings=512, num_labels=1,
                                                     problem_type="regression", **dims))
    out = folder / size
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def fmt(xs: list[float], unit: str = "") -> str:
    return f"{statistics.median(xs):,.1f}{unit} ({min(xs):,.1f}-{max(xs):,.1f})"


def _sync(device: str):
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def bench_cuvee(path: str, texts: list[str], runs: int, window: int = 256, device: str = "cpu", batch_size: int = 32):
    from cuvee.classifiers.hf_sequence import HFSequenceScorer

    loads, rates, scores = [], [], None
    window = max(window, batch_size * 8)
    for _ in range(runs):
        t0 = time.perf_counter()
        sc = HFSequenceScorer(path, device=device, threads=1 if device == "cpu" else None, batch_size=batch_size)
        sc.load()
        _sync(device)
        loads.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        scores = np.concatenate([sc.score_batch(texts[s : s + window]) for s in range(0, len(texts), window)])
        _sync(device)
        rates.append(len(texts) / (time.perf_counter() - t0))
    return loads, rates, scores


def bench_card(path: str, texts: list[str], runs: int, device: str = "cpu"):
    """FineWeb-Edu model card loop, verbatim apart from the loop (no batching, no no_grad); on a GPU the model
    and inputs are moved there, as users of the card do."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    loads, rates, scores = [], [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSequenceClassification.from_pretrained(path).to(device)
        _sync(device)
        loads.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        out = []
        for text in texts:
            inputs = tokenizer(text, return_tensors="pt", padding="longest", truncation=True).to(device)
            outputs = model(**inputs)
            out.append(outputs.logits.squeeze(-1).float().detach().cpu().numpy().item())
        _sync(device)
        rates.append(len(texts) / (time.perf_counter() - t0))
        scores = np.array(out)
    return loads, rates, scores


def throughput_gpu(args, texts):
    import torch

    dev = args.device
    name = torch.cuda.get_device_name() if dev.startswith("cuda") else dev
    print(f"{name}, torch {torch.__version__}; {args.runs} runs each; median (min-max); load = from_pretrained + "
          "to(device), apart from per-document time\n")
    print("| model | docs | scorer | load s | docs/s | max abs diff vs card |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        path = make_model(Path(tmp), "base", args.tokenizer)
        sub = texts[: args.base_docs]
        bench_cuvee(path, sub[: args.batch_size], 1, device=dev, batch_size=args.batch_size)  # CUDA context, kernels
        cl, cr, cs = bench_cuvee(path, sub, args.runs, device=dev, batch_size=args.batch_size)
        pl, pr, ps = bench_card(path, sub, args.runs, device=dev)
        diff = float(np.abs(cs - ps).max())
        label = "BERT-base 768x12, 512 tok"
        print(f"| {label} | {len(sub)} | cuvee HFSequenceScorer (bf16, token-sorted, {args.batch_size} docs a batch) | "
              f"{fmt(cl)} | {fmt(cr)} | {diff:.1e} |")
        print(f"| {label} | {len(sub)} | model card loop on the GPU (fp32, batch 1) | {fmt(pl)} | {fmt(pr)} | - |")
        print(f"\nratio of medians: {statistics.median(cr) / statistics.median(pr):.1f}x")


def throughput(args, texts):
    import torch

    torch.set_num_threads(1)
    print(f"CPU only (no GPU in this run); torch threads = 1; {args.runs} runs each; median (min-max)\n")
    print("| model | docs | scorer | load s | docs/s per core | max abs diff vs card |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size, n in (("tiny", args.docs), ("base", args.base_docs)):
            path = make_model(Path(tmp), size)
            sub = texts[:n]
            cl, cr, cs = bench_cuvee(path, sub, args.runs)
            pl, pr, ps = bench_card(path, sub, args.runs)
            diff = float(np.abs(cs - ps).max())
            label = "BERT-base 768x12, 512 tok" if size == "base" else "tiny 32x2"
            print(f"| {label} | {n} | cuvee HFSequenceScorer (token-sorted, <=32 docs / <=1024 padded tokens per batch) | {fmt(cl)} | {fmt(cr)} | {diff:.1e} |")
            print(f"| {label} | {n} | model card loop (batch 1) | {fmt(pl)} | {fmt(pr)} | - |")


ADULT_SNIPPETS = [
    "Free porn videos and xxx movies. Watch hot amateur sex clips updated daily. Nude girls, webcam shows and erotic stories for adults only.",
    "Live sex cams with real models. Join now for free and chat with naked cam girls 24/7. 18+ only.",
    "Escort agency in London offering VIP companions and erotic massage. Incall and outcall escorts available tonight.",
    "Best adult site reviews: we rank the top porn sites, premium xxx memberships and nsfw content by price and quality.",
    "Hentai and erotic anime gallery. Thousands of uncensored adult images and videos, updated every day.",
    "Sex toys shop: vibrators, dildos, lingerie and bondage gear with discreet shipping. Adults only store.",
    "Hot milf and teen porn tube. Stream full length hardcore sex videos in HD, no registration needed.",
    "Erotic stories: read thousands of free sex stories submitted by our readers. Categories include romance, fetish and group sex.",
    "Nude celebrity photos and leaked sex tapes. Warning: this site contains explicit adult material.",
    "OnlyFans leaks and nsfw content from top creators. Naked selfies, porn clips and sexy photos.",
    "Adult dating for singles looking for casual sex and hookups tonight. Meet horny locals near you.",
    "Strip club guide: the best gentlemen's clubs, lap dances and exotic dancers in Las Vegas.",
]


def topic_adult(texts, src):
    import torch

    from cuvee.classifiers.topic import DEFAULT_TOPICS, SENSITIVE_MIN_SIMILARITY, _TopicTagger, guarded_argmax

    torch.set_num_threads(max(1, torch.get_num_threads()))
    tagger = _TopicTagger(None, None, "all-MiniLM-L6-v2", 64, "topic", "cpu", 256)
    tagger._setup()
    labels = list(DEFAULT_TOPICS)
    a = labels.index("adult")
    t0 = time.perf_counter()
    sims = tagger._encoder.embed(texts) @ tagger._centroids.T
    asims = tagger._encoder.embed(ADULT_SNIPPETS) @ tagger._centroids.T
    print(f"embedded {len(texts)} pages in {time.perf_counter() - t0:.0f} s\n")
    src = np.array(src)
    print("| rule | all pages | wcxb_dev | wcxb_test | scrapinghub | adult snippets recall |")
    print("|---|---|---|---|---|---|")
    rules = [("plain arg-max (before)", {})] + [(f"adult needs similarity >= {m:.2f}", {"adult": m}) for m in (0.2, 0.25)] \
        + [(f"adult needs similarity >= {SENSITIVE_MIN_SIMILARITY['adult']:.2f} (default, after)", SENSITIVE_MIN_SIMILARITY)]
    for name, guard in rules:
        is_adult = guarded_argmax(sims, labels, guard) == a
        cells = [f"{is_adult.mean():.2%} ({is_adult.sum()}/{len(texts)})"]
        for s in ("wcxb_dev", "wcxb_test", "scrapinghub"):
            m = src == s
            cells.append(f"{is_adult[m].mean():.2%} ({is_adult[m].sum()}/{m.sum()})")
        rec = (guarded_argmax(asims, labels, guard) == a).sum()
        print(f"| {name} | " + " | ".join(cells) + f" | {rec}/{len(ADULT_SNIPPETS)} |")
    plain = sims.argmax(1) == a
    print(f"\nadult similarity of pages plain arg-max calls adult: median {np.median(sims[plain, a]):.3f}, "
          f"95th pct {np.percentile(sims[plain, a], 95):.3f}, max {sims[plain, a].max():.3f}; "
          f"adult snippets: min {asims[:, a].min():.3f}, median {np.median(asims[:, a]):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--docs", type=int, default=160, help="documents for the tiny model")
    ap.add_argument("--base-docs", type=int, default=32, help="documents for the BERT-base model (about 1 s each on one core)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--topic-adult", action="store_true", help="measure the topic stage's false-adult rate instead")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for the GPU throughput (BERT-base only)")
    ap.add_argument("--batch-size", type=int, default=128, help="cuvee's documents per batch on the GPU")
    ap.add_argument("--texts-jsonl", type=Path, help="read texts (main_content) from this JSONL.gz instead of --shared")
    ap.add_argument("--tokenizer", help="tokenizer folder for the random-weight models (default: the bundled MiniLM)")
    ap.add_argument("--save-tokenizer", type=Path, help="save the bundled MiniLM tokenizer to this folder and exit")
    args = ap.parse_args()
    if args.save_tokenizer:
        from transformers import AutoTokenizer

        from cuvee.classifiers.embedder import bundled_minilm_path

        AutoTokenizer.from_pretrained(bundled_minilm_path()).save_pretrained(args.save_tokenizer)
        return
    if args.device != "cpu":
        throughput_gpu(args, load_texts_jsonl(args.texts_jsonl) if args.texts_jsonl else load_texts(args.shared)[0])
        return
    texts, src = load_texts(args.shared)
    if args.topic_adult:
        topic_adult(texts, src)
    else:
        throughput(args, texts)


if __name__ == "__main__":
    main()
