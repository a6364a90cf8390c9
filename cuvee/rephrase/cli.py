"""``cuvee rephrase``: the command line of :mod:`cuvee.rephrase.run`; every setting is checked before a model loads."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cuvee.kernel.config import did_you_mean

STYLES = ("wikipedia", "diverse_qa", "distill", "extract_knowledge", "knowledge_list")


def load_style(name: str):
    """A shipped style (``wikipedia`` or ``rephrase_wikipedia``) or a template file with ``{text}``."""
    from cuvee.llm.prompt import load_prompt
    from cuvee.rephrase.records import RephraseError

    if not Path(name).is_file() and name in STYLES:
        name = f"rephrase_{name}"
    if not Path(name).is_file() and not name.startswith("rephrase_") and "/" not in name and not name.endswith(".txt"):
        raise RephraseError(f"--prompt {name}: not a template file and not a shipped style"
                            f"{did_you_mean(name, STYLES)}; styles: {', '.join(STYLES)}")
    return load_prompt(name)


def _tokenizer(tokenizer: str | None, model: str, max_input_tokens: int):
    """The tokenizer that cuts documents for an endpoint: ``--tokenizer``, else the model's if it is local."""
    from cuvee.hf_loading import (
        ModelLoadError,
        load_tokenizer_offline,
        pretrained,
    )
    from cuvee.rephrase.records import RephraseError

    if not max_input_tokens:
        return None, None
    if tokenizer:
        from transformers import AutoTokenizer

        try:
            return pretrained(AutoTokenizer, tokenizer), tokenizer
        except ModelLoadError as e:
            raise RephraseError(f"--tokenizer: {e}") from None
    tok = load_tokenizer_offline(model)
    if tok is None:
        raise RephraseError(f"documents are cut by tokens (--max-input-tokens {max_input_tokens}) and {model!r} has no "
                            "local tokenizer: give --tokenizer (a tokenizer folder) or --max-input-tokens 0 to send "
                            "documents whole")
    return tok, model


def parse_where(text: str | None) -> dict | None:
    """``--where`` as a YAML / JSON mapping in the mixer's where syntax, loaded with cuvee's bounded YAML loader."""
    from cuvee.rephrase.records import RephraseError
    from cuvee.rephrase.run import check_rephrase_where
    from cuvee.yaml_safe import YamlLoadError, load_yaml

    if text is None:
        return None
    try:
        value = load_yaml(text, "--where")
    except YamlLoadError as e:
        raise RephraseError(" ".join(str(e).split())) from None
    return check_rephrase_where(value)


@click.command("rephrase")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", "-o", required=True, help="output folder (claimed, locked and bound; rerun to resume)")
@click.option("--prompt", "-p", required=True, help=f"a shipped style ({', '.join(STYLES)}) or a template file with {{text}}")
@click.option("--model", "-m", required=True, help="local HF causal LM folder / name, or the served model name with --endpoint")
@click.option("--endpoint", default=None, help="OpenAI-compatible base URL, e.g. http://host:8000/v1 (vLLM)")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True)
@click.option("--api-key-env", default=None, help="environment variable holding the endpoint's API key")
@click.option("--tokenizer", default=None, help="tokenizer that cuts documents (default: the model's, if local)")
@click.option("--max-input-tokens", type=int, default=512, show_default=True, help="longer documents are cut into pieces (0: never)")
@click.option("--max-new-tokens", type=int, default=1024, show_default=True, help="per piece; an answer cut by it is dropped")
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--top-p", type=float, default=None)
@click.option("--seed", type=int, default=None, help="sampling seed (sent to the endpoint; local: seeds torch once)")
@click.option("--max-input-similarity", type=float, default=0.9, show_default=True,
              help="drop a rewrite whose word 5-gram Jaccard with its input reaches this (1: off)")
@click.option("--max-prompt-copy", type=float, default=0.5, show_default=True,
              help="drop a rewrite holding this share of the instructions' 5-grams (1: off)")
@click.option("--concurrency", type=int, default=8, show_default=True, help="requests in flight (endpoint)")
@click.option("--batch-size", type=int, default=8, show_default=True, help="prompts per generate call (local model)")
@click.option("--retries", type=int, default=5, show_default=True, help="per request, on 429/5xx/timeouts")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="seconds per request, in all")
@click.option("--max-response-bytes", type=int, default=8 << 20, show_default=True)
@click.option("--where", "where", default=None,
              help="rewrite only documents whose metadata matches, in a mix's where syntax, e.g. "
                   "'{quality_bucket: {lte: 9}}'; the others are counted as skipped_by_where")
@click.option("--limit", type=int, default=None, help="rewrite at most this many new documents in this run")
@click.option("--price-per-mtok", nargs=2, type=float, default=None, help="IN OUT prices per million tokens, for the cost figures")
@click.option("--device", default="auto", show_default=True, help="local model: auto, cpu or cuda")
@click.option("--fresh", is_flag=True, help="empty the (cuvee-owned) output folder first and start over")
def rephrase_cmd(inputs, out, prompt, model, endpoint, api, api_key_env, tokenizer, max_input_tokens, max_new_tokens,
                 temperature, top_p, seed, max_input_similarity, max_prompt_copy, concurrency, batch_size, retries,
                 timeout, max_response_bytes, where, limit, price_per_mtok, device, fresh):
    """Rewrite a run's documents with an LLM (Nemotron-CC styles) into a folder the mixer reads as a source."""
    from cuvee.llm.endpoint import HttpLM, api_key_from_env
    from cuvee.llm.local import LocalLM
    from cuvee.rephrase.checks import Checks
    from cuvee.rephrase.records import RephraseError
    from cuvee.rephrase.run import Settings, rephrase

    for name, v, lo in (("--concurrency", concurrency, 1), ("--batch-size", batch_size, 1), ("--retries", retries, 0),
                        ("--limit", limit, 0), ("--max-response-bytes", max_response_bytes, 1)):
        if v is not None and v < lo:
            raise RephraseError(f"{name} must be >= {lo}, got {v}")
    if price_per_mtok and min(price_per_mtok) < 0:
        raise RephraseError("--price-per-mtok: prices must be >= 0")
    settings = Settings(max_input_tokens, max_new_tokens, temperature, top_p, seed,
                        Checks(max_input_similarity, max_prompt_copy))
    template = load_style(prompt)
    where = parse_where(where)
    if endpoint:
        backend = HttpLM(endpoint, model, api=api, api_key=api_key_from_env(api_key_env), max_new_tokens=max_new_tokens,
                         timeout=timeout, retries=retries, concurrency=concurrency, tokenizer=tokenizer,
                         max_bytes=max_response_bytes, temperature=temperature, top_p=top_p, seed=seed)
        tok, tok_name = _tokenizer(tokenizer, model, max_input_tokens)
    else:
        backend = LocalLM(model, max_new_tokens, batch_size, device, temperature, top_p, seed)
        tok, tok_name = (backend.tokenizer, model) if max_input_tokens else (None, None)
    summary = rephrase(inputs, out, backend, template, settings, tokenizer=tok, tokenizer_name=tok_name,
                       limit=limit, fresh=fresh, price_per_mtok=tuple(price_per_mtok) if price_per_mtok else None, where=where)
    click.echo(json.dumps(summary, indent=2))
