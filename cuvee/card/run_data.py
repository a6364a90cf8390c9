"""Everything a card needs to know about a run, read from the run directory (and a mixer manifest).

Why a separate loader: a card must be writable for any run that produced *something*: a complete
run, a partial one (``complete: false``, only some stages), one whose ``stats.json`` was never
written because it was killed (then the per-task datatrove stats under ``logs/`` are merged here),
and a SLURM run whose stats were merged across tasks by the runner. Missing pieces become
``None``/empty and the card says so, instead of failing.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuvee.kernel.errors import UserError
from cuvee.pipeline.stats import counter_value
from cuvee.yaml_safe import YamlLoadError, load_yaml

log = logging.getLogger(__name__)


class CardInputError(UserError, ValueError):
    """The run directory (or manifest) cannot describe a dataset; the message says why."""


@dataclass
class StageStats:
    """One row of the filter funnel (one entry of ``stats.json``'s ``stages``)."""

    name: str
    segment: int | None
    params: dict[str, Any]
    docs_in: int | None
    docs_out: int | None
    dropped: dict[str, int]
    time_s: float | None
    chars_out: int | None
    counters: dict[str, Any]

    @property
    def dropped_total(self) -> int:
        if self.dropped:
            return int(sum(self.dropped.values()))
        if self.docs_in is not None and self.docs_out is not None:
            return max(0, self.docs_in - self.docs_out)
        return 0


@dataclass
class RunData:
    run_dir: Path
    stats: dict[str, Any]
    stages: list[StageStats]
    recipe: dict[str, Any]
    recipe_source: str | None  # recipe.yaml as run, verbatim
    output_files: list[Path]
    output_root: Path | None
    manifest: dict[str, Any] | None = None
    manifest_path: Path | None = None
    stats_origin: str = "stats.json"  # or "datatrove logs (stats.json missing)"
    notes: list[str] = field(default_factory=list)  # problems met while loading, shown in the card

    @property
    def complete(self) -> bool:
        return bool(self.stats.get("complete", False))

    @property
    def name(self) -> str:
        return str(self.stats.get("recipe_name") or self.recipe.get("name") or self.run_dir.name)


def _as_int(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _stage_from_json(d: dict[str, Any]) -> StageStats:
    return StageStats(
        name=str(d.get("name", "?")),
        segment=_as_int(d.get("segment")),
        params=dict(d.get("params") or {}),
        docs_in=_as_int(d.get("docs_in")),
        docs_out=_as_int(d.get("docs_out")),
        dropped={str(k): int(v) for k, v in (d.get("dropped") or {}).items()},
        time_s=d.get("time_s"),
        chars_out=_as_int(d.get("chars_out")),
        counters=dict(d.get("counters") or {}),
    )


def _plain_name(name: str) -> str:
    """datatrove step names carry emoji ("🕷 CommonCrawl"); plot fonts lack them, so keep the words only."""
    import unicodedata

    return " ".join("".join(ch for ch in name if unicodedata.category(ch) not in ("So", "Sk", "Cs")).split()) or name


def stats_from_datatrove_logs(logs_dir: Path) -> dict[str, Any] | None:
    """Rebuild a minimal ``stats.json`` from datatrove's per-task files (``logs/segNN/stats/*.json``).

    Used when a run died before its runner wrote ``stats.json``: only the segments whose tasks
    wrote stats appear, which is exactly what a partial card should show.
    """
    seg_dirs = sorted(p for p in logs_dir.glob("seg*") if p.is_dir())
    stages: list[dict[str, Any]] = []
    for seg_dir in seg_dirs:
        m = re.search(r"(\d+)", seg_dir.name)
        seg = int(m.group(1)) if m else None
        task_files = sorted((seg_dir / "stats").glob("*.json"))
        merged: list[dict[str, Any]] = []
        for tf in task_files:
            try:
                steps = json.loads(tf.read_text())
            except (OSError, json.JSONDecodeError) as e:
                log.warning("skipping unreadable datatrove stats file %s: %s", tf, e)
                continue
            for i, step in enumerate(steps):
                if i >= len(merged):
                    merged.append({"name": _plain_name(str(step.get("name", f"step{i}"))), "time_s": 0.0, "counters": {}})
                row = merged[i]
                row["time_s"] += counter_value((step.get("time_stats") or {}).get("total", 0))
                for k, v in (step.get("stats") or {}).items():
                    row["counters"][k] = row["counters"].get(k, 0) + counter_value(v)
        for row in merged:
            c = row["counters"]
            dropped = {k[len("dropped_"):]: int(v) for k, v in c.items() if k.startswith("dropped_")}
            stages.append(
                {
                    "name": row["name"],
                    "segment": seg,
                    "params": {},
                    "docs_in": int(c["total"]) if "total" in c else None,
                    "docs_out": int(c["forwarded"]) if "forwarded" in c else None,
                    "dropped": dropped,
                    "time_s": round(row["time_s"], 3),
                    "chars_out": None,
                    "counters": {k: v for k, v in c.items() if k not in ("total", "forwarded", "dropped") and not k.startswith("dropped_")},
                }
            )
    if not stages:
        return None
    return {"complete": False, "stages": stages}


def _find_output_files(run_dir: Path, stats: dict[str, Any], recipe: dict[str, Any]) -> tuple[list[Path], Path | None]:
    from cuvee.pipeline.io import DOC_SUFFIXES

    out = stats.get("output") or {}
    root_s = out.get("path") or (recipe.get("output") or {}).get("path")
    root = Path(root_s) if root_s else run_dir / "output"
    if not root.is_absolute() and not root.exists() and (run_dir / root).exists():
        root = run_dir / root
    files: list[Path] = []
    for f in out.get("files") or []:
        if not str(f).endswith(DOC_SUFFIXES):  # e.g. this card's own README.md / PNGs after a re-stat
            continue
        p = Path(f)
        cands = [p, root / p, run_dir / p]
        hit = next((c for c in cands if c.exists()), None)
        if hit is not None:
            files.append(hit)
        else:
            log.warning("output file listed in stats.json not found: %s", f)
    if not files and root.is_dir():  # partial runs: whatever the writers finished
        files = sorted(p for p in root.rglob("*") if p.is_file() and str(p).endswith(DOC_SUFFIXES))
    return sorted(set(files)), (root if root.exists() else None)


def load_manifest(path: str | Path) -> dict[str, Any]:
    """A mixer ``manifest.json`` (the file, or the mixer output folder holding it)."""
    p = Path(path)
    if p.is_dir():
        p = p / "manifest.json"
    if not p.exists():
        raise CardInputError(f"{path}: no mixer manifest.json there")
    try:
        m = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise CardInputError(f"{p}: not valid JSON: {e}") from None
    if not isinstance(m, dict) or not isinstance(m.get("sources"), list):
        raise CardInputError(f"{p}: not a cuvee mixer manifest (needs a 'sources' list)")
    return m


def load_run(run_dir: str | Path, manifest: str | Path | None = None) -> RunData:
    """Read ``stats.json`` (or the datatrove logs of a partial run), ``recipe.yaml`` and the outputs."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CardInputError(f"{run_dir}: no such run directory")
    notes: list[str] = []
    stats_path = run_dir / "stats.json"
    origin = "stats.json"
    if stats_path.exists():
        try:
            stats = json.loads(stats_path.read_text())
        except json.JSONDecodeError as e:
            raise CardInputError(f"{stats_path}: not valid JSON ({e}); rerun or delete it to use the datatrove logs") from None
        if not isinstance(stats, dict):
            raise CardInputError(f"{stats_path}: expected a JSON object")
    else:
        stats = stats_from_datatrove_logs(run_dir / "logs")
        if stats is None:
            raise CardInputError(f"{run_dir}: neither stats.json nor datatrove stats under logs/seg*/stats/; is this a cuvee run directory?")
        origin = "datatrove per-task logs (stats.json missing)"
        notes.append("stats.json was missing: the funnel was rebuilt from the per-task datatrove logs of the segments that finished.")

    recipe: dict[str, Any] = dict(stats.get("recipe") or {})
    recipe_source = None
    rp = run_dir / "recipe.yaml"
    if rp.exists():
        recipe_source = rp.read_text()
        if not recipe:
            try:
                loaded = load_yaml(recipe_source, "recipe.yaml")
            except YamlLoadError as e:
                loaded = None
                notes.append(f"recipe.yaml could not be used: {e}")
            recipe = loaded if isinstance(loaded, dict) else {}

    stages = [_stage_from_json(s) for s in stats.get("stages") or [] if isinstance(s, dict)]
    files, root = _find_output_files(run_dir, stats, recipe)
    run = RunData(run_dir, stats, stages, recipe, recipe_source, files, root, stats_origin=origin, notes=notes)
    if manifest is not None:
        run.manifest_path = Path(manifest)
        run.manifest = load_manifest(manifest)
    return run
