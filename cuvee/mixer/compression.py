"""Compression per language (characters and UTF-8 bytes per token) on held-out text: the number that tells
whether a vocabulary serves a language (more bytes per token = fewer tokens = cheaper training and inference)."""

from __future__ import annotations


def compression_row(tokenizer, language: str, texts: list[str]) -> dict:
    n_tokens = sum(len(ids) for ids in tokenizer.encode_batch_numpy(texts))
    chars = sum(len(t) for t in texts)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return {
        "tokenizer": tokenizer.name,
        "vocab_size": tokenizer.vocab_size,
        "language": language,
        "documents": len(texts),
        "chars": chars,
        "bytes": n_bytes,
        "tokens": n_tokens,
        "chars_per_token": chars / max(1, n_tokens),
        "bytes_per_token": n_bytes / max(1, n_tokens),
    }


def compression_table(specs: list, corpora: dict[str, list[str]], pattern: str = "cl100k") -> list[dict]:
    """One row per (tokenizer, language)."""
    from cuvee.mixer.tokenizers import TokenizerSpec, load_tokenizer

    rows = []
    for spec in specs:
        parsed = TokenizerSpec.parse(spec)
        if parsed.kind == "tiktoken" and parsed.path and "pattern" not in parsed.model_fields_set:
            parsed = parsed.model_copy(update={"pattern": pattern})
        tok = load_tokenizer(parsed)
        for lang, texts in corpora.items():
            rows.append(compression_row(tok, lang, texts))
    return rows


def format_compression(rows: list[dict]) -> str:
    """Markdown table; with several tokenizers, token counts are also given relative to the first one."""
    first = {}
    lines = ["| tokenizer | vocab | language | docs | tokens | chars/token | bytes/token | tokens vs first |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        base = first.setdefault(r["language"], r["tokens"])
        lines.append(
            f"| {r['tokenizer']} | {r['vocab_size']:,} | {r['language']} | {r['documents']:,} | {r['tokens']:,} | "
            f"{r['chars_per_token']:.2f} | {r['bytes_per_token']:.2f} | {r['tokens'] / base:.3f} |"
        )
    return "\n".join(lines)
