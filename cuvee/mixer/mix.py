"""``run_mix``: mix config -> per-source token caches -> epoch plan -> blended Megatron shards + manifest.

Determinism: documents are read in sorted file order, each source is shuffled by a seeded LCG bijection per
epoch, sources are interleaved by the greedy token-deficit rule, and shards close at fixed token counts, so the
same config, inputs and tokenizer give byte-identical shards (the manifest records every content hash).

Ownership (the kernel's workdir, :data:`MIX_FOLDER`): the output folder is claimed as a cuvee ``mix`` folder,
locked for the whole mix and bound to the resolved config and the source files' stamps before anything is
tokenized. The mixer deletes only files it writes itself (its manifest, ``<name>_NNNNN.bin/.idx`` shards, the
``.cache`` folder, its plan and the kernel's temporaries) and only inside a folder carrying the ``mix`` marker;
a folder holding another mix is refused (``--fresh`` replaces it), a folder holding files cuvee did not create
is refused outright.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuvee.kernel.atomic import temp_path, write_json
from cuvee.kernel.stamps import stamps
from cuvee.kernel.workdir import PLAN, FolderError, Workdir, bind_check, owned
from cuvee.mixer.blend import greedy_blend
from cuvee.mixer.config import MixConfig, MixConfigError, load_mix_config
from cuvee.mixer.docindex import DOCS_SUFFIX, IDS_SUFFIX, KEY, TABLE_SUFFIX, DocumentTable, MixIndexWriter
from cuvee.mixer.indexed import IndexedDataset, IndexedDatasetWriter, dtype_for_vocab
from cuvee.mixer.rehydrate import source_stream, source_summary
from cuvee.mixer.selections import selection_summary
from cuvee.mixer.sources import estimate_source, resolve_files, tokenize_source
from cuvee.mixer.tokenizers import TokenizerMismatchError, load_tokenizer, sha256_file
from cuvee.mixer.verify import read_manifest, verify_mix  # noqa: F401 - their home is verify.py; callers import here

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


class EpochBudgetError(MixConfigError):
    """A weight cannot be met without repeating a source more than its ``max_epochs``."""


@dataclass
class SourcePlan:
    name: str
    weight: float
    target_tokens: int
    available_tokens: int
    max_epochs: float

    @property
    def epochs(self) -> float:
        return self.target_tokens / self.available_tokens if self.available_tokens else math.inf


def plan_sources(cfg: MixConfig, available: list[int]) -> list[SourcePlan]:
    """Token targets per source; raises :class:`EpochBudgetError` listing every source that is too small."""
    plans = [
        SourcePlan(s.name, w, round(w * cfg.target_tokens), a, s.max_epochs)
        for s, w, a in zip(cfg.sources, cfg.weights, available)
    ]
    short = [p for p in plans if p.epochs > p.max_epochs]
    if short:
        lines = [
            f"  source '{p.name}': weight {p.weight:.4g} x {cfg.target_tokens:,} = {p.target_tokens:,} tokens needs "
            f"{p.epochs:.3g} epochs of its {p.available_tokens:,} available tokens, above max_epochs {p.max_epochs:g} "
            f"(at most {int(p.available_tokens * p.max_epochs):,} tokens)"
            for p in short
        ]
        raise EpochBudgetError(
            f"mix '{cfg.name}': weights cannot be met within max_epochs:\n" + "\n".join(lines)
            + "\nlower the weight or target_tokens, raise max_epochs, or add data"
        )
    return plans


WHAT = "mix output folder"
CACHE = ".cache"
FRESH_HINT = "--fresh"


def _flat(e: BaseException) -> str:
    return " ".join(str(e).split())


def _load_tokenizer(cfg: MixConfig):
    """The config's tokenizer, or a one-line :class:`MixConfigError` naming the mix and the tokenizer."""
    spec = cfg.tokenizer
    desc = spec.name or spec.path
    try:
        return load_tokenizer(spec, num_threads=cfg.threads)
    except TokenizerMismatchError:
        raise
    except (ValueError, OSError) as e:  # unknown tiktoken encoding, missing file
        raise MixConfigError(f"mix '{cfg.name}': cannot load tokenizer {desc!r}: {_flat(e)}") from None
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for an unreadable tokenizer.json
        raise MixConfigError(f"mix '{cfg.name}': cannot load tokenizer {desc!r}: {type(e).__name__}: {_flat(e)}") from None


def _tokens_per_byte(tokenizer) -> int | None:
    """An upper bound on tokens per UTF-8 byte of raw text, or None when the tokenizer gives none.

    Byte-level BPE (every tiktoken encoding, and tokenizer.json files compiled onto tiktoken's engine) emits
    tokens that each cover at least one byte of its input, so tokens <= bytes; an NFC normalizer can grow a
    text at most threefold (Unicode's bound for NFC). Other Hugging Face models (Unigram, WordPiece,
    arbitrary normalizers) get no bound.
    """
    if tokenizer.kind == "tiktoken":
        return 1
    if getattr(tokenizer, "engine", None) == "tiktoken-compiled":
        return 1 if getattr(tokenizer.tok, "normalizer", None) is None else 3
    return None


def _utf8_locale() -> bool:
    import locale
    import sys

    return bool(sys.flags.utf8_mode) or locale.getpreferredencoding(False).lower().replace("-", "") == "utf8"


def _byte_bound(files: list[str], per_byte: int | None) -> int | None:
    """Upper bound on a source's tokens (EOS included) from file sizes alone, or None when there is none.

    Only uncompressed JSONL gives one: each document's text is stored in its line (JSON escapes never
    shrink it) next to at least ``{"text":""}`` and a newline, so text bytes + one EOS <= line bytes.
    """
    if per_byte is None or not files or not _utf8_locale():
        return None
    if not all(f.endswith(".jsonl") for f in files):
        return None
    return per_byte * sum(os.path.getsize(f) for f in files)


def _need(cfg: MixConfig, i: int) -> int:
    return round(cfg.weights[i] * cfg.target_tokens)


def _budget_message(cfg: MixConfig, i: int, available: int, what: str, bound: bool = False) -> str:
    """One line: which source, what its weight needs, what it has, and what would fix it.

    ``bound``: ``available`` is an upper bound, not a count, so the fixes are necessary, maybe not sufficient.
    """
    src, w, need = cfg.sources[i], cfg.weights[i], _need(cfg, i)
    allowed = int(available * src.max_epochs)
    epochs = need / available if available else math.inf
    least = "at least " if bound else ""
    if allowed <= 0:
        fixes = ["add data to it or remove it from the mix"]
    else:
        fixes = [f"raise max_epochs to {least}{math.ceil(epochs * 100) / 100:g}",
                 f"lower its weight to at most {allowed / cfg.target_tokens:.4g} (weights are shares of target_tokens)",
                 f"lower target_tokens to at most {int(allowed / w):,}",
                 "or add data"]
    return (f"mix '{cfg.name}': source '{src.name}' cannot meet its weight: weight {w:.4g} x {cfg.target_tokens:,} "
            f"target tokens = {need:,} tokens needed, but {what}, and max_epochs {src.max_epochs:g} allows at most "
            f"{allowed:,} (it needs {least}{epochs:.3g} epochs, above max_epochs {src.max_epochs:g}); " + ", ".join(fixes))


def _precheck_budget(cfg: MixConfig, files: list[list[str]], tokenizer) -> None:
    """Refuse, before tokenizing anything, a weight that even an upper bound on the source's tokens cannot meet."""
    per_byte = _tokens_per_byte(tokenizer)
    for i, fs in enumerate(files):
        bound = _byte_bound(fs, per_byte)
        rehydrate = cfg.sources[i].rehydrate
        if bound is not None and rehydrate is not None:  # a pass repeats a document at most its largest weight
            bound = math.floor(bound * rehydrate.weigher().largest)
        if bound is not None and _need(cfg, i) > bound * cfg.sources[i].max_epochs:
            nbytes = sum(os.path.getsize(f) for f in fs)
            raise EpochBudgetError(_budget_message(
                cfg, i, bound, f"its {len(fs)} file(s) hold at most {nbytes:,} bytes, so at most {bound:,} tokens", bound=True))


def _check_source_budget(cfg: MixConfig, i: int, available: int, documents: int) -> None:
    """Stop right after tokenizing a source whose weight cannot be met (its target does not depend on others)."""
    if _need(cfg, i) > available * cfg.sources[i].max_epochs:
        raise EpochBudgetError(_budget_message(cfg, i, available, f"it has {available:,} tokens ({documents:,} documents)"))


def _risk_order(cfg: MixConfig, files: list[list[str]]) -> list[int]:
    """Sources by needed tokens per stored byte, highest first: the likeliest infeasible source is tokenized
    (and refused) before the others. The order changes nothing in the output (caches are per source)."""
    def risk(i: int) -> float:
        nbytes = sum(os.path.getsize(f) for f in files[i]) or 1
        return _need(cfg, i) / (cfg.sources[i].max_epochs * nbytes)

    return sorted(range(len(cfg.sources)), key=lambda i: -risk(i))


def _binding(cfg: MixConfig, tokenizer, files: list[list[str]]) -> dict:
    """Everything that decides the folder's content but the source files' bytes: resolved config and the source
    files' paths (their stamps are the kernel's changed-input check, :func:`_inputs`)."""
    return {
        "name": cfg.name,
        "seed": cfg.seed,
        "target_tokens": cfg.target_tokens,
        "shard_tokens": cfg.shard_tokens,
        "tokenizer": tokenizer.describe(),
        "sources": [
            {
                "name": s.name,
                "weight": w,
                "max_epochs": s.max_epochs,
                "paths": list(s.paths),
                "where": s.where,
                "text_key": s.text_key,
                "min_chars": s.min_chars,
                "files": [os.path.abspath(f) for f in fs],
                **({"rehydrate": s.rehydrate.model_dump()} if s.rehydrate else {}),
            }
            for s, w, fs in zip(cfg.sources, cfg.weights, files)
        ],
    }


def _inputs(files: list[list[str]]) -> dict[str, dict]:
    return stamps(f for fs in files for f in fs)


def _read_json(path: Path):
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _files_re(name_pattern: str) -> re.Pattern:
    """The files a mix writes: its shards (``.bin``/``.idx`` and their ``.docs`` index), document table and ids."""
    tables = "|".join(re.escape(x) for x in (TABLE_SUFFIX, IDS_SUFFIX))
    return re.compile(rf"{name_pattern}(_[0-9]{{5}}\.(bin|idx|{DOCS_SUFFIX[1:]})|{tables})")


def _shard_re(name: str) -> re.Pattern:
    return _files_re(re.escape(name))


def _remove_cache(cache_dir: Path) -> None:
    """Delete the mixer's own cache folder; a symlink put in its place is unlinked, never followed."""
    if cache_dir.is_symlink() or cache_dir.is_file():
        cache_dir.unlink()
    elif cache_dir.is_dir():
        shutil.rmtree(cache_dir)


def _remove_mix_files(out: Path, names: set[str], plan: bool = False, cache: bool = True) -> int:
    """Delete what the mixer writes, and nothing else: the manifest first (so no manifest can point at
    missing shards), the ``<name>_NNNNN.bin/.idx`` shards of the given mix names, the cache, the plan."""
    n = 0
    if (out / MANIFEST).exists():
        (out / MANIFEST).unlink()
        n += 1
    pats = [_shard_re(x) for x in sorted(names) if isinstance(x, str) and x]
    for p in sorted(out.iterdir()):
        if any(r.fullmatch(p.name) for r in pats) and (p.is_file() or p.is_symlink()):
            p.unlink()
            n += 1
    if cache and ((out / CACHE).exists() or (out / CACHE).is_symlink()):
        _remove_cache(out / CACHE)
        n += 1
    if plan and (out / PLAN).exists():
        (out / PLAN).unlink()
        n += 1
    return n


def _probe_writable(out: Path) -> None:
    probe = temp_path(out / ".cuvee-write-probe")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise FolderError(f"{WHAT} {out} is not writable: {e.strerror or e}") from None


def _mix_files(entry: Path) -> bool:
    """What ``--fresh`` may delete in a mix folder: the mixer's own manifest, shards and cache (notes stay)."""
    return entry.name in (MANIFEST, CACHE) or _ANY_SHARD.fullmatch(entry.name) is not None


_ANY_SHARD = _files_re("[A-Za-z0-9_.-]+")
MIX_FOLDER = Workdir("mix", WHAT, FRESH_HINT, owns=_mix_files)


def _other_plan(cfg: MixConfig, tokenizer) -> Callable[[Path, dict], bool]:
    """The kernel's ``on_other_plan`` hook: a finished mix of another plan is refused (by name, tokenizer or the
    kernel's own message); an attempt that stopped before its manifest holds nothing finished and is replaced."""
    def hook(out: Path, recorded: dict) -> bool:
        manifest = _read_json(out / MANIFEST)
        if not manifest:
            names = {cfg.name, (recorded.get("binding") or {}).get("name")}
            n = _remove_mix_files(out, names)
            log.info("%s: replacing an unfinished attempt of another plan (%d file(s) removed)", out, n)
            return True
        old_name = manifest.get("name")
        if old_name != cfg.name:
            raise FolderError(
                f"{WHAT} {out} holds mix '{old_name}' ({len(manifest.get('shards', []))} shards, "
                f"{manifest.get('total_tokens', 0):,} tokens), not '{cfg.name}'; use {FRESH_HINT} to replace it, "
                f"or choose another output folder (--out)")
        old_tok = manifest.get("tokenizer", {})
        if old_tok.get("fingerprint") != tokenizer.fingerprint:
            raise TokenizerMismatchError(
                f"{out} already holds mix '{old_name}' tokenized with {old_tok.get('name')} "
                f"(vocab {old_tok.get('vocab_size')}), not {tokenizer.name} (vocab {tokenizer.vocab_size}); "
                f"use another output folder or {FRESH_HINT}")
        return False  # the kernel names the changed input or the differing keys
    return hook


def check_manifest_tokenizer(manifest: dict, tokenizer) -> None:
    """For consumers (trainer, cards): fail when shards were written with a different vocabulary."""
    tok = manifest.get("tokenizer", {})
    if tok.get("fingerprint") and tok["fingerprint"] != tokenizer.fingerprint:
        raise TokenizerMismatchError(
            f"shards of mix '{manifest.get('name')}' were tokenized with {tok.get('name')} "
            f"(fingerprint {tok['fingerprint'][:12]}), not {tokenizer.name} ({tokenizer.fingerprint[:12]})"
        )
    if tok.get("vocab_size") is not None and tok["vocab_size"] != tokenizer.vocab_size:
        raise TokenizerMismatchError(
            f"shards of mix '{manifest.get('name')}' have vocab_size {tok['vocab_size']}, tokenizer has {tokenizer.vocab_size}"
        )


class _ShardWriter:
    """Closes a shard once it holds ``shard_tokens`` tokens; documents never straddle shards. Each document's
    source, epoch and table entry go to the shard's ``.docs`` index (cuvee.mixer.docindex)."""

    def __init__(self, out: Path, name: str, dtype, shard_tokens: int, n_sources: int, index: MixIndexWriter):
        self.out, self.name, self.dtype, self.shard_tokens, self.n_sources = out, name, dtype, shard_tokens, n_sources
        self.index = index
        self.shards: list[dict] = []
        self._w: IndexedDatasetWriter | None = None
        self._source_tokens = [0] * n_sources

    def add(self, source: int, tokens: np.ndarray, epoch: int, entry: int) -> None:
        if self._w is None:
            prefix = self.out / f"{self.name}_{len(self.shards):05d}"
            self._w = IndexedDatasetWriter(prefix, dtype=self.dtype)
            self._source_tokens = [0] * self.n_sources
            self._src, self._epoch, self._entry = array("H"), array("I"), array("Q")
        self._w.add_document(tokens)
        self._source_tokens[source] += int(tokens.size)
        self._src.append(source)
        self._epoch.append(epoch)
        self._entry.append(entry)
        if self._w.tokens >= self.shard_tokens:
            self._close()

    def _close(self) -> None:
        w, self._w = self._w, None
        w.close()
        self.shards.append(
            {
                "prefix": w.prefix.name,
                "documents": w.documents,
                "tokens": w.tokens,
                "source_tokens": list(self._source_tokens),
                "sha256_bin": sha256_file(Path(f"{w.prefix}.bin")),
                "sha256_idx": sha256_file(Path(f"{w.prefix}.idx")),
                **self.index.write_shard(w.prefix, self._src, self._epoch, self._entry),
            }
        )

    def finish(self) -> list[dict]:
        if self._w is not None:
            self._close()
        return self.shards


def _source_entry(src, plan: SourcePlan, scan, realised: int | None, docs_used: int | None, estimated: bool,
                  rehydration: dict | None = None) -> dict:
    avail = plan.available_tokens
    entry = {
        "name": src.name,
        "paths": list(src.paths),
        "where": src.where,
        "text_key": src.text_key,
        "weight": plan.weight,
        "target_tokens": plan.target_tokens,
        "realised_tokens": realised,
        "documents": scan.kept,
        "documents_used": docs_used,
        "available_tokens": avail,
        "available_tokens_estimated": estimated,
        "epochs": round((realised if realised is not None else plan.target_tokens) / avail, 6) if avail else None,
        "max_epochs": src.max_epochs,
        "counters": scan.as_dict(),
        "files": scan.files,
    }
    if src.rehydrate is not None:  # a dry run: only the estimate of one rehydrated pass
        entry["rehydration"] = rehydration or {"key": src.rehydrate.key, "rule": src.rehydrate.rule or "table",
                                               "tokens_before": scan.tokens, "tokens_after": scan.available_tokens}
    return entry


def check_built(config_path, out_dir: str | Path) -> None:
    """Raise ``FolderError`` unless ``out_dir`` holds a mix built from this very config and these source files.

    For consumers that reuse a mix YAML materialised earlier (the trainer): an edited YAML or a changed source
    file must stop the run, not silently train on the shards of the old plan."""
    cfg = load_mix_config(config_path).blend_config()
    tokenizer = _load_tokenizer(cfg)
    files = [resolve_files(s) for s in cfg.sources]
    bind_check(out_dir, _binding(cfg, tokenizer, files), what=WHAT, inputs=_inputs(files),
               fresh_hint=f"`cuvee mix {config_path} --fresh` (rebuild it)")


def run_mix(
    config_path_or_obj,
    out_dir: str | Path | None = None,
    dry_run: bool = False,
    overwrite: bool = False,
    keep_cache: bool = False,
    fresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Build the mix; returns the manifest (for ``dry_run``, the plan with estimated tokens, nothing written).

    ``progress`` gets one line per finished phase (each source tokenized, the blend written), for the console.

    Every error that can be known up front (config, tokenizer, source paths, an output folder that is not
    writable, foreign, busy or bound to another mix, a weight above even an upper bound of its source) is
    raised before anything is tokenized. ``fresh`` (``overwrite`` is its older name) first removes the files a
    previous mix wrote into this folder; it never touches a folder cuvee did not create.
    """
    t0 = time.time()
    user_cfg = load_mix_config(config_path_or_obj)
    cfg = user_cfg.blend_config()  # each selection a source of the blend (config.py)
    origins = user_cfg.selection_origins()
    tokenizer = _load_tokenizer(cfg)
    files = [resolve_files(s) for s in cfg.sources]  # all missing sources fail before any work
    out = Path(out_dir or cfg.output_dir or f"out/mix/{cfg.name}")
    dtype = dtype_for_vocab(tokenizer.vocab_size)
    base = {
        "name": cfg.name,
        "seed": cfg.seed,
        "target_tokens": cfg.target_tokens,
        "shard_tokens": cfg.shard_tokens,
        "dtype": np.dtype(dtype).name,
        "tokenizer": tokenizer.describe(),
        "blend": "greedy token deficit argmax(w_i*T - c_i) (Megatron rule, in tokens)",
        "shuffle": "per-source, per-epoch LCG bijection over document indices",
        "config_sha256": user_cfg.sha256(),
        "config": user_cfg.model_dump(mode="json"),
    }

    if dry_run:
        scans, ratios = zip(*(estimate_source(s, f, tokenizer) for s, f in zip(cfg.sources, files)))
        plans = plan_sources(cfg, [sc.available_tokens for sc in scans])
        sources = [_source_entry(s, p, sc, None, None, True) for s, p, sc in zip(cfg.sources, plans, scans)]
        for entry, r in zip(sources, ratios):
            entry["chars_per_token"] = round(r, 4)
        return {**base, "dry_run": True, "output_dir": str(out), "sources": sources,
                **selection_summary(sources, origins, None)}

    _precheck_budget(cfg, files, tokenizer)
    with owned(out, MIX_FOLDER, _binding(cfg, tokenizer, files), fresh=fresh or overwrite, inputs=_inputs(files),
               on_other_plan=_other_plan(cfg, tokenizer)):
        _probe_writable(out)
        _remove_mix_files(out, {cfg.name})  # the previous build of this very mix: rebuilt byte for byte
        try:
            manifest = _build(cfg, tokenizer, files, out, dtype, base, keep_cache, t0, origins,
                              progress or (lambda line: None))
        except BaseException:
            # no half-built mix is left behind for a consumer that globs *.idx; the plan stays, so a rerun
            # of the same config rebuilds here and a fixed config replaces this unfinished attempt
            try:
                _remove_mix_files(out, {cfg.name}, cache=not keep_cache)
            except OSError:
                pass
            raise
    log.info("mix %s: %d tokens in %d shards -> %s", cfg.name, manifest["total_tokens"], len(manifest["shards"]), out)
    return manifest


def _epoch_bound(cfg: MixConfig) -> int:
    """The largest epoch the blend can draw: a source is cut within one document past ``max_epochs`` passes, and a
    rehydrated class makes ``weight`` passes per pass of its source (cuvee/mixer/rehydrate.py)."""
    return max(math.ceil((s.max_epochs + 1) * (s.rehydrate.weigher().largest if s.rehydrate else 1)) + 2
               for s in cfg.sources)


def _build(cfg: MixConfig, tokenizer, files, out: Path, dtype, base: dict, keep_cache: bool, t0: float,
           origins: list, progress: Callable[[str], None]) -> dict:
    cache_dir = out / CACHE
    cache_dir.mkdir()
    scans: list = [None] * len(cfg.sources)
    n_src = len(cfg.sources)
    for k, i in enumerate(_risk_order(cfg, files), 1):
        src, t_src = cfg.sources[i], time.time()
        scans[i] = tokenize_source(src, files[i], tokenizer, cache_dir / src.name, dtype, cfg.batch_size)
        _check_source_budget(cfg, i, scans[i].available_tokens, scans[i].kept)
        progress(f"tokenize [{k}/{n_src}] {src.name}: {scans[i].kept:,} of {scans[i].read:,} documents, "
                 f"{scans[i].tokens:,} tokens ({time.time() - t_src:.1f} s)")
    plans = plan_sources(cfg, [sc.available_tokens for sc in scans])
    t_tok = time.time() - t0

    prefixes = [cache_dir / s.name for s in cfg.sources]
    caches = [IndexedDataset(p) for p in prefixes]
    streams = [source_stream(c, p, s, cfg.seed) for c, p, s in zip(caches, prefixes, cfg.sources)]
    docs_used = [0] * len(cfg.sources)
    realised = [0] * len(cfg.sources)
    index = MixIndexWriter(out, cfg.name, [[f["path"] for f in sc.files] for sc in scans],
                           [DocumentTable(p, []) for p in prefixes], _epoch_bound(cfg))
    writer = _ShardWriter(out, cfg.name, dtype, cfg.shard_tokens, len(cfg.sources), index)

    def next_document(i: int) -> int | None:
        epoch, doc = next(streams[i])
        tokens = caches[i][doc]
        writer.add(i, tokens, epoch, index.entry(i, doc))
        docs_used[i] += 1
        return int(tokens.size)

    for i, n in greedy_blend(cfg.weights, cfg.target_tokens, next_document):
        realised[i] += n
    shards = writer.finish()
    index.finish()
    progress(f"blend: {sum(realised):,} tokens from {n_src} source(s) into {len(shards)} shard(s) "
             f"({time.time() - t0 - t_tok:.1f} s)")
    rehydration = [source_summary(s, p, c, st) for s, p, c, st in zip(cfg.sources, prefixes, caches, streams)]
    caches.clear()  # drop the memory maps before the cache folder goes
    if not keep_cache:
        _remove_cache(cache_dir)

    sources = [_source_entry(s, p, sc, r, d, False, rh)
               for s, p, sc, r, d, rh in zip(cfg.sources, plans, scans, realised, docs_used, rehydration)]
    mix_hash = hashlib.sha256("".join(s["sha256_bin"] + s["sha256_idx"] for s in shards).encode()).hexdigest()
    manifest = {
        **base,
        "total_tokens": int(sum(realised)),
        "documents": int(sum(docs_used)),
        "sources": sources,
        **selection_summary(sources, origins, int(sum(realised))),
        "shards": shards,
        "mix_sha256": mix_hash,
        KEY: index.block(),
    }
    # no timestamps: reruns give the same file; written last and atomically, so it never names missing shards
    write_json(out / MANIFEST, manifest)
    manifest["timing_s"] = {"tokenize": round(t_tok, 3), "total": round(time.time() - t0, 3)}
    return manifest
