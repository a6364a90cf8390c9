"""Train a byte-level BPE tokenizer on a mix: each source contributes text in proportion to its weight, so the
vocabulary reflects the data the model will actually see (Hugging Face's Rust BPE trainer does the work).
The result is a GPT-2-style ``tokenizer.json`` that ``load_tokenizer`` runs on the compiled tiktoken engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from cuvee.kernel.atomic import replacing
from cuvee.mixer.config import load_mix_config
from cuvee.mixer.sources import SourceScan, resolve_files, select_texts

TOKENIZER_JSON = "tokenizer.json"  # the file `cuvee tokenizer train` writes into its output folder


def mix_training_texts(config, max_chars: int = 50_000_000, max_docs: int | None = None) -> tuple[list[Iterator[str]], dict]:
    """Per-source text iterators capped at ``weight * max_chars`` characters (and ``max_docs`` documents)."""
    cfg = load_mix_config(config)
    files = [resolve_files(s) for s in cfg.sources]
    budget = {s.name: int(w * max_chars) for s, w in zip(cfg.sources, cfg.weights)}
    used: dict[str, dict] = {}

    def capped(src, fs) -> Iterator[str]:
        scan = SourceScan(src.name)
        chars = docs = 0
        for text in select_texts(src, fs, scan):
            if chars >= budget[src.name] or (max_docs is not None and docs >= max_docs):
                break
            text = text[: budget[src.name] - chars]
            chars += len(text)
            docs += 1
            yield text
        used[src.name] = {"documents": docs, "chars": chars, "budget_chars": budget[src.name]}

    return [capped(s, f) for s, f in zip(cfg.sources, files)], used


def train_bpe(texts, vocab_size: int, special_tokens: list[str] | None = None):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` (GPT-2 regex, no normalizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = special_tokens or ["<|endoftext|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def train_bpe_on_mix(config, vocab_size: int, out_path: str | Path, max_docs: int | None = None,
                     max_chars: int = 50_000_000) -> dict:
    import itertools

    iters, used = mix_training_texts(config, max_chars=max_chars, max_docs=max_docs)
    tok = train_bpe(itertools.chain(*iters), vocab_size)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(out_path) as tmp:  # a kill never leaves half a tokenizer.json
        tok.save(str(tmp))
    return {"path": str(out_path), "vocab_size": tok.get_vocab_size(), "sources": used}
