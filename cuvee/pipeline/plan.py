"""A run's plan: what a run folder is bound to, recorded before any work starts.

datatrove resumes a run by skipping ranks that left a completion marker; it cannot tell whether the
rerun is the *same* run. A changed task count re-shards the input (``files[rank::tasks]``), so completed
ranks would stand for files they never read; an edited recipe would label old output with new settings.
The plan pins down everything that decides a run's output: the resolved recipe (less the settings
that only change speed), the task count and, per input path, the files each task owns with their
sizes and stamps (local: modification time and a hash of the first and last 64 KiB; remote: the
store's ETag / modification time), so a file rewritten in place at the same size is noticed too.
``cuvee run`` refuses to resume a folder whose recorded plan differs (``cuvee.folders.bind``), and names
a changed input file in one line first (:func:`refuse_changed_inputs`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cuvee.pipeline.recipe import Recipe, RecipeError

# executor settings that change how fast a run goes, never what it writes
_SPEED_ONLY = ("workers", "time", "partition", "cpus_per_task", "mem_per_cpu_gb", "job_name", "qos",
               "sbatch_args", "env_command", "address", "num_cpus")


_EDGE = 64 * 1024  # bytes hashed at each end of a local file
_REMOTE_STAMP_KEYS = ("ETag", "etag", "LastModified", "last_modified", "mtime", "VersionId", "generation")


def _file_entry(path: str, timeout_s: float | None = None) -> tuple[int | None, dict[str, Any] | None]:
    """(size, stamp) of one input file; either is None when it cannot be read (recorded as unknown, not guessed)."""
    if "://" not in path:
        try:
            return local_file_stamp(path)
        except OSError:
            return None, None
    try:
        from fsspec.core import url_to_fs

        from cuvee.pipeline.remote import timeout_options

        fs, p = url_to_fs(path, **timeout_options(path, timeout_s))
        info = fs.info(p)
    except Exception:  # noqa: BLE001 - any remote failure: unknown, the reader reports the file itself
        return None, None
    size = info.get("size")
    stamp = {k: str(info[k]) for k in _REMOTE_STAMP_KEYS if info.get(k) is not None}
    return (int(size) if size is not None else None), (stamp or None)


def local_file_stamp(path: str) -> tuple[int, dict[str, Any]]:
    """Size, modification time and a SHA-256 of the first and last 64 KiB: a rewrite in place at the same size
    changes the time, and a copy that keeps the time but not the bytes changes the hash in most cases.
    Public: every command that binds a folder to its input files stamps them this way."""
    import hashlib

    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        h = hashlib.sha256(f.read(_EDGE))
        if st.st_size > _EDGE:
            f.seek(max(_EDGE, st.st_size - _EDGE))
            h.update(f.read(_EDGE))
    return st.st_size, {"mtime_ns": st.st_mtime_ns, "head_tail_sha256": h.hexdigest()}


def input_files(recipe: Recipe) -> list[dict[str, Any]]:
    """Per recipe input path: the files its reader will shard, in reader order, with sizes.

    A ``common_crawl`` input is one entry: the sampled URLs (sizes not fetched: Common Crawl objects are
    immutable and a HEAD per file would cost more than it proves), with the listing and its hash.
    """
    from cuvee.pipeline.readers.listing import plan_input_files

    cc = recipe.input.common_crawl
    if cc is not None:
        sample = snapshot_sample(recipe)
        return [{"path": f"common_crawl:{cc.snapshot}/{cc.kind}", "listing": sample.listing,
                 "listing_sha256": sample.listing_sha256, "listing_files": sample.total,
                 "files": [[u, None] for u in sample.urls]}]
    out = []
    for p in recipe.input.paths:
        try:
            files = plan_input_files(p, recipe.input.format, recipe.input.timeout_s)
        except (OSError, RuntimeError, ValueError) as e:
            raise RecipeError(f"input.paths: {p!r}: cannot list its files: {e}") from None
        entries = [_file_entry(f, recipe.input.timeout_s) for f in files]
        out.append({"path": p, "files": [[f, size] for f, (size, _) in zip(files, entries)],
                    "stamps": [stamp for _, stamp in entries]})
    return out


def refuse_changed_inputs(folder: Path, plan: dict[str, Any]) -> None:
    """One line naming the first input file that changed since ``folder``'s recorded plan (same path, other size
    or stamp), before ``bind`` lists every difference; nothing when no plan is recorded or the files are the same.

    Resuming would mix results of the old bytes (finished tasks) with the new (the rest)."""
    from cuvee.folders import PLAN, FolderError

    try:
        recorded = json.loads((Path(folder) / PLAN).read_text())["binding"]["inputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # no plan yet, or one bind will report
    before = {}
    for inp in recorded if isinstance(recorded, list) else ():
        files, stamps = inp.get("files") or [], inp.get("stamps") or []
        for i, entry in enumerate(files):
            if isinstance(entry, list) and len(entry) == 2:
                before[entry[0]] = (entry[1], stamps[i] if i < len(stamps) else None)
    for inp in plan["inputs"]:
        for (f, size), stamp in zip(inp["files"], inp.get("stamps") or [None] * len(inp["files"])):
            if f not in before:
                continue
            old_size, old_stamp = before[f]
            what = _change(old_size, old_stamp, size, stamp)
            if what:
                raise FolderError(f"run folder {folder}: its inputs changed since it started: {f} ({what}); resuming "
                                  f"would mix results of old and new content, so restore the file or rerun with --fresh")


def _change(old_size, old_stamp, size, stamp) -> str | None:
    if old_size != size:
        return f"size {old_size} -> {size} bytes"
    if old_stamp is None or stamp is None or old_stamp == stamp:
        return None
    if old_stamp.get("head_tail_sha256") != stamp.get("head_tail_sha256"):
        return "same size, other content"
    if old_stamp.get("mtime_ns") != stamp.get("mtime_ns"):
        return "same size, rewritten (modification time differs)"
    return "same size, another version on the store (" + ", ".join(
        f"{k} {old_stamp.get(k)} -> {stamp.get(k)}" for k in sorted(set(old_stamp) | set(stamp))
        if old_stamp.get(k) != stamp.get(k)) + ")"


def snapshot_sample(recipe: Recipe):
    """The recipe's ``common_crawl`` sample (listing read once per process), or a RecipeError saying why not."""
    from cuvee.pipeline.crawl import ListingError, expand
    from cuvee.pipeline.remote import RetryPolicy

    try:
        return expand(recipe.input.common_crawl, RetryPolicy(recipe.input.retries, recipe.input.backoff_s),
                      recipe.input.timeout_s)
    except ListingError as e:
        raise RecipeError(f"input.{e}") from None


def binding_recipe(recipe: Recipe) -> dict[str, Any]:
    """The resolved recipe as it decides output: speed-only executor settings removed."""
    d = recipe.to_dict()
    d["executor"] = {k: v for k, v in d["executor"].items() if k not in _SPEED_ONLY}
    d["input"] = {k: v for k, v in d["input"].items() if k not in ("retries", "backoff_s", "timeout_s")}
    return d


def build_plan(recipe: Recipe) -> dict[str, Any]:
    """The binding of a run folder (see module docstring). Rank r of N reads ``files[r::N]`` of every input."""
    inputs = input_files(recipe)
    return {
        "recipe": binding_recipe(recipe),
        "tasks": recipe.executor.tasks,
        "sharding": "rank r of tasks reads files[r::tasks] of every input path",
        "inputs": inputs,
    }


def files_planned(plan: dict[str, Any]) -> int:
    return sum(len(i["files"]) for i in plan.get("inputs", []))


def files_of_rank(plan: dict[str, Any], rank: int) -> list[str]:
    """The input files rank ``rank`` owns under this plan."""
    tasks = plan["tasks"]
    return [f for i in plan["inputs"] for f, _size in i["files"][rank::tasks]]


def run_folders(recipe: Recipe) -> list[tuple[Path, str]]:
    """Every folder a run writes whole products into: the run folder, and output / logging folders
    that live outside it. Each is claimed, locked and bound, so none can be shared by two plans."""
    run_dir = recipe.resolved_run_dir()
    folders = [(run_dir, "run folder")]
    for path, what in ((recipe.output.path, "output folder"), (recipe.logging_dir, "logging folder")):
        if path and "://" not in path:
            p = Path(path)
            try:
                inside = p.resolve().is_relative_to(run_dir.resolve())
            except OSError:
                inside = False
            if not inside:
                folders.append((p, what))
    return folders
