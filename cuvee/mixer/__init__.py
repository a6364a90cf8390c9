"""mixer: mix configs -> tokenized, weighted, deterministic Megatron shards with a manifest.

Public API: ``run_mix(config_path_or_obj, out_dir=None, dry_run=False) -> manifest dict`` and
``cuvee.mixer.tokenizers.load_tokenizer(spec)``. Imports are lazy so the package stays cheap to import.
"""

from __future__ import annotations


def run_mix(config_path_or_obj, out_dir=None, dry_run: bool = False, **kwargs) -> dict:
    from cuvee.mixer.mix import run_mix as _run_mix

    return _run_mix(config_path_or_obj, out_dir=out_dir, dry_run=dry_run, **kwargs)


def load_tokenizer(spec, num_threads=None):
    from cuvee.mixer.tokenizers import load_tokenizer as _load

    return _load(spec, num_threads=num_threads)


__all__ = ["run_mix", "load_tokenizer"]
