"""Rephrase throughput: what cuvee's side costs per generated token (client overhead), and a local model on CPU.

``--endpoint``-mode figures run ``cuvee rephrase``'s own code path (reading the run, cutting documents by
tokens with a real tokenizer, filling the prompt, HTTP with K requests in flight, checks, atomic appends)
against ``cuvee.classifiers.llm_server`` on 127.0.0.1 serving an instant scripted rewriter (the words of the
piece in reverse order; usage = whitespace words), so the tokens/s is the ceiling cuvee's client puts on a
real server, not a model speed. ``--local DIR`` adds a local Hugging Face causal LM run (batched, CPU unless
``--device cuda``); with the tiny random model made here by ``--tiny`` it measures framework overhead only.

    python benchmarks/bench_rephrase.py [--docs 400] [--concurrency 1 8] [--tiny] [--local DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOKENIZER_JSON = ROOT / "cuvee" / "assets" / "tokenizers" / "dolma_gpt-neo-test-tokenizer.json"
WORDS = ("river valley harbour mountain village farmer market winter summer bridge castle forest library teacher "
         "student garden engine station railway museum painter sailor doctor lantern orchard meadow").split()


def make_run(root: Path, n: int, words_per_doc: int) -> Path:
    run = root / "run"
    (run / "output").mkdir(parents=True)
    (run / "stats.json").write_text("{}")
    with open(run / "output" / "00000.jsonl", "w") as f:
        for i in range(n):
            body = " ".join(f"{WORDS[(i * 7 + k * 3) % len(WORDS)]}{(i + k) % 97}" + ("." if k % 12 == 11 else "")
                            for k in range(words_per_doc))
            f.write(json.dumps({"id": f"d{i}", "text": body}) + "\n")
    return run


def tokenizer_dir(root: Path) -> str:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_JSON), eos_token="<|endoftext|>")
    tok.save_pretrained(root / "tok")
    return str(root / "tok")


def tiny_model(root: Path, tok_dir: str) -> str:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)).save_pretrained(root / "tiny")
    tok.save_pretrained(root / "tiny")
    return str(root / "tiny")


def rewriter(template):
    def respond(prompt: str, max_tokens: int, chat: bool = True):
        doc = template.extract(prompt) or ""
        text = " ".join(reversed(doc.split()))
        return text, len(prompt.split()), min(len(text.split()), max_tokens)

    return respond


def run_cli(args: list[str]) -> dict:
    from click.testing import CliRunner

    from cuvee.cli import main

    res = CliRunner().invoke(main, ["rephrase", *map(str, args)])
    if res.exit_code != 0:
        raise SystemExit(res.output)
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--words", type=int, default=300, help="words per document")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--local", default=None, help="a local HF causal LM folder to time as well")
    ap.add_argument("--tiny", action="store_true", help="time a tiny random Llama made here (framework overhead only)")
    ap.add_argument("--local-docs", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (more than free cores makes CPU torch crawl)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)

    from cuvee.classifiers.llm_server import serve
    from cuvee.rephrase.cli import load_style

    root = Path(tempfile.mkdtemp(prefix="cuvee_bench_rephrase_"))
    run = make_run(root, a.docs, a.words)
    tok = tokenizer_dir(root)
    template = load_style("wikipedia")
    rows = []
    with serve(responder=rewriter(template), model_name="scripted") as srv:
        for k in a.concurrency:
            t = time.perf_counter()
            s = run_cli([run, "--out", root / f"http{k}", "--prompt", "wikipedia", "--model", "scripted", "--endpoint", srv.url,
                         "--tokenizer", tok, "--max-input-tokens", 512, "--max-new-tokens", 2048, "--concurrency", k])["this_run"]
            rows.append((f"loopback endpoint, concurrency {k}", s, time.perf_counter() - t))
    local = a.local or (tiny_model(root, tok) if a.tiny else None)
    if local:
        small = make_run(root / "small", a.local_docs, 120)
        for b in (1, 8):
            t = time.perf_counter()
            s = run_cli([small, "--out", root / f"local{b}", "--prompt", "distill", "--model", local, "--device", a.device,
                         "--batch-size", b, "--max-input-tokens", 256, "--max-new-tokens", 64,
                         "--max-input-similarity", 1.0, "--max-prompt-copy", 1.0])["this_run"]
            rows.append((f"local {'tiny random Llama' if not a.local else Path(local).name} ({a.device}), batch {b}", s,
                         time.perf_counter() - t))
    print(f"\n{'system':<46} {'docs':>5} {'gens':>5} {'prompt tok':>10} {'compl tok':>9} {'gen s':>7} {'tok/s':>9} {'compl tok/s':>11}")
    for name, s, _wall in rows:
        print(f"{name:<46} {s['kept'] + s['dropped']:5d} {s['generations']:5d} {s['prompt_tokens']:10d} {s['completion_tokens']:9d} "
              f"{s['generate_s']:7.2f} {s['tokens_per_s'] or 0:9.0f} {s['completion_tokens_per_s'] or 0:11.0f}")
    print("\nToken counts are the server's usage (whitespace words for the scripted rewriter; model tokens for a local model).")


if __name__ == "__main__":
    main()
