"""A run's plan: what a run folder is bound to, recorded before any work starts.

datatrove resumes a run by skipping ranks that left a completion marker; it cannot tell whether the
rerun is the *same* run. A changed task count re-shards the input (``files[rank::tasks]``), so completed
ranks would stand for files they never read; an edited recipe would label old output with new settings.
The plan pins down everything that decides a run's output: the resolved recipe (less the settings
that only change speed), the task count and, per input path, the files each task owns with their
sizes and stamps (local: modification time and a hash of the first and last 64 KiB; remote: the
store's ETag / modification time), so a file rewritten in place at the same size is noticed too.
``cuvee run`` refuses to resume a folder whose recorded plan differs (``cuvee.kernel.workdir.bind``), and names
a changed input file in one line first (:func:`refuse_changed_inputs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cuvee.kernel.stamps import remote_stamp, stamp
from cuvee.pipeline.recipe import Recipe, RecipeError

# executor settings that change how fast a run goes, never what it writes
_SPEED_ONLY = ("workers", "time", "partition", "cpus_per_task", "mem_per_cpu_gb", "job_name", "qos",
               "sbatch_args", "env_command", "address", "num_cpus")


def _file_entry(path: str, timeout_s: float | None = None) -> tuple[int | None, dict[str, Any] | None]:
    """(size, stamp) of one input file (:mod:`cuvee.kernel.stamps`); either is None when it cannot be read
    (recorded as unknown, not guessed)."""
    if "://" not in path:
        try:
            st = stamp(path)
        except OSError:
            return None, None
        return st.pop("bytes"), st
    try:
        from fsspec.core import url_to_fs

        from cuvee.pipeline.remote import timeout_options

        fs, p = url_to_fs(path, **timeout_options(path, timeout_s))
        st = remote_stamp(fs.info(p)) or {}
    except Exception:  # noqa: BLE001 - any remote failure: unknown, the reader reports the file itself
        return None, None
    size = st.pop("bytes", None)
    return size, (st or None)


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


def split_stamps(plan: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict]]:
    """The plan without its input stamps (what the folder is bound to) and ``{file: stamp}`` (what the kernel's
    changed-input check compares), so a file rewritten in place is named in one line before any work."""
    binding = {**plan, "inputs": [{k: v for k, v in inp.items() if k != "stamps"} for inp in plan["inputs"]]}
    stamped = {}
    for inp in plan["inputs"]:
        for (f, size), st in zip(inp["files"], inp.get("stamps") or [None] * len(inp["files"])):
            if st is not None or size is not None:
                stamped[f] = {**(st or {}), **({"bytes": size} if size is not None else {})}
    return binding, stamped


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
    """The resolved recipe as it decides output: speed-only executor settings removed; ``run_dir`` left out (the
    folder being bound is the run folder, however it was named: ``cuvee demo``'s ``runs/demo`` and ``cuvee run
    recipes/demo.yaml``'s default are one folder); the input's ``text_key``/``id_key`` only when not the defaults
    (folders bound before those keys existed still resume)."""
    d = recipe.to_dict()
    d.pop("run_dir", None)
    d["executor"] = {k: v for k, v in d["executor"].items() if k not in _SPEED_ONLY}
    d["input"] = {k: v for k, v in d["input"].items() if k not in ("retries", "backoff_s", "timeout_s")
                  and (k, v) not in (("text_key", "text"), ("id_key", "id"))}
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
