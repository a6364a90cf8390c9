"""The YAML front matter of a Hugging Face dataset card, built with huggingface_hub's own model.

Why ``DatasetCardData``: the Hub parses this block to index the dataset (languages, size, licence,
the Parquet ``configs`` the viewer loads); building it with huggingface_hub's class means it is
written the way the Hub reads it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

SIZE_BUCKETS = [  # (upper bound exclusive, Hub label)
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
    (10_000_000_000, "1B<n<10B"),
    (100_000_000_000, "10B<n<100B"),
    (1_000_000_000_000, "100B<n<1T"),
]

_ISO = re.compile(r"^[a-z]{2,3}$")
NOT_A_LANGUAGE = {"unknown", "und", "none", "null", "zxx", "mul", ""}


def size_category(n_docs: int) -> str:
    """The Hub's ``size_categories`` label for a document count."""
    for bound, label in SIZE_BUCKETS:
        if n_docs < bound:
            return label
    return "n>1T"


def iso_language(label: str) -> str | None:
    """``en`` / ``__label__en`` / ``eng_Latn`` -> an ISO 639 code, or None for 'unknown' and oddities."""
    s = str(label).strip().lower().removeprefix("__label__")
    s = re.split(r"[_\-]", s)[0]
    if s in NOT_A_LANGUAGE or not _ISO.match(s):
        return None
    return s


def _rel(path: Path, card_dir: Path) -> str:
    return Path(os.path.relpath(path.resolve(), card_dir.resolve())).as_posix()


def data_configs(files: list[Path], output_root: Path | None, card_dir: Path, route_by: str | None) -> list[dict[str, Any]]:
    """``configs`` entries for the Hub viewer: one ``default`` config, plus one per routed folder.

    Paths are relative to the card's folder (the dataset repo root when the card is written into the
    output folder, which is the default).
    """
    parquet = [f for f in files if f.suffix == ".parquet"] or list(files)
    if not parquet:
        return []
    suffix = "".join(parquet[0].suffixes[-2:]) if parquet[0].name.endswith(".gz") else parquet[0].suffix
    configs: list[dict[str, Any]] = []
    groups: dict[str, list[Path]] = {}
    if output_root is not None and route_by:
        for f in parquet:
            try:
                rel = f.resolve().relative_to(output_root.resolve())
            except ValueError:
                continue
            if len(rel.parts) > 1:
                groups.setdefault(rel.parts[0], []).append(f)
    if output_root is not None:
        base = _rel(output_root, card_dir)
        base = "" if base == "." else base + "/"
        configs.append({"config_name": "default", "default": True, "data_files": [{"split": "train", "path": f"{base}**/*{suffix}"}]})
        for name in sorted(groups):
            configs.append({"config_name": name, "data_files": [{"split": "train", "path": f"{base}{name}/*{suffix}"}]})
    else:
        configs.append({"config_name": "default", "data_files": [{"split": "train", "path": [_rel(f, card_dir) for f in parquet]}]})
    return configs


def build_front_matter(
    *,
    pretty_name: str,
    languages: list[str],
    n_docs: int,
    configs: list[dict[str, Any]],
    license: str = "odc-by",
    tags: list[str] | None = None,
):
    """A ``huggingface_hub.DatasetCardData`` (its ``to_yaml()`` is the front matter body)."""
    from huggingface_hub import DatasetCardData

    codes: list[str] = []
    for lab in languages:
        c = iso_language(lab)
        if c and c not in codes:
            codes.append(c)
    kwargs: dict[str, Any] = {
        "license": license,
        "size_categories": [size_category(n_docs)],
        "task_categories": ["text-generation"],
        "pretty_name": pretty_name,
        "source_datasets": ["original"],
        "tags": tags or ["common-crawl", "pretraining", "cuvee"],
    }
    if codes:
        kwargs["language"] = codes
        kwargs["multilinguality"] = ["multilingual" if len(codes) > 1 else "monolingual"]
    if configs:
        kwargs["configs"] = configs
    return DatasetCardData(**kwargs)
