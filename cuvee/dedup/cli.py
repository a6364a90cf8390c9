"""`cuvee dedup ...`: run one dedup stage on existing JSONL/Parquet outputs, and inspect LSH settings."""

from __future__ import annotations

from pathlib import Path

import click
from pydantic import ValidationError

from cuvee.kernel.config import join_problems, problems
from cuvee.pipeline.registry import get_stage


@click.group("dedup")
def dedup_cli():
    """Deduplication: URL, exact, line (ccNet) and MinHash LSH."""


@dedup_cli.command("scurve")
@click.option("--bands", "-b", default=14, show_default=True)
@click.option("--rows", "-r", default=8, show_default=True)
def scurve(bands: int, rows: int):
    """Probability that a pair at Jaccard s becomes an LSH candidate: 1-(1-s^r)^b."""
    from cuvee.dedup.minhash import MinHashConfig

    cfg = MinHashConfig(num_bands=bands, rows_per_band=rows)
    click.echo(f"{bands} bands x {rows} rows = {cfg.num_perm} hashes; threshold ~ {cfg.threshold():.3f}")
    for s in (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95):
        click.echo(f"  s={s:.2f}  P(candidate)={float(cfg.detection_probability(s)):.4f}")


def _input_files(inputs: tuple[str, ...]) -> list[str]:
    """The files INPUTS name (files, folders, globs), sorted, or a one-line error."""
    from cuvee.pipeline.io import expand_paths

    try:
        return expand_paths(list(inputs))
    except (OSError, ValueError) as e:
        raise click.ClickException(str(e)) from None


def _param_errors(stage: str, err: ValidationError) -> str:
    """The kernel's one config-error line for bad ``-p`` parameters (did-you-mean for a misspelt name)."""
    return join_problems(problems(err, get_stage(stage).params), stage)


def dedup_binding(stage: str, params: dict, files: list[str], tasks: int) -> dict:
    """What decides a dedup work folder's output: stage, validated parameters, task count, input files.

    Input files are bound by path, size, modification time and a hash of their first and last 64 KiB (the
    run plan's stamp), so a rerun on other or changed input, even rewritten in place at the same size and
    time, is refused instead of returning the first input's finished output.
    """
    return {"stage": stage, "params": params, "tasks": tasks, "inputs": [str(Path(f).resolve()) for f in files]}


def _parse_params(param: tuple[str, ...]) -> dict:
    """``-p key=value`` pairs, each value YAML; a malformed one is one line naming the parameter."""
    from cuvee.yaml_safe import YamlLoadError, load_yaml

    params = {}
    for kv in param:
        if "=" not in kv:
            raise click.BadParameter(f"{kv!r}: expected key=value", param_hint="--param")
        k, v = kv.split("=", 1)
        try:
            params[k] = load_yaml(v, f"--param {k}")
        except YamlLoadError as e:  # its message starts with "--param KEY: "
            raise click.BadParameter(str(e).removeprefix(f"--param {k}: "), param_hint=f"'--param {k}'") from None
    return params


def _readers(files: list[str], work: Path) -> list:
    """One reader per format over all of its files, so the ranks share them (rank r of N reads files[r::N]).

    A reader per file would give every file to rank 0 (datatrove shards each reader's files across ranks).
    The list goes to datatrove as a ``paths_file`` in the work folder, relative to the files' common folder."""
    import os

    from datatrove.pipeline.readers import JsonlReader, ParquetReader

    readers = []
    for ext, cls in (("jsonl", JsonlReader), ("parquet", ParquetReader)):
        paths = [os.path.abspath(f) for f in files if f.endswith(".parquet") == (ext == "parquet")]
        if not paths:
            continue
        root = os.path.commonpath([os.path.dirname(f) for f in paths])
        listing = work / f"input_files.{ext}.txt"
        listing.write_text("".join(os.path.relpath(f, root) + "\n" for f in paths), encoding="utf-8")
        readers.append(cls(root, paths_file=str(listing)))
    return readers


@dedup_cli.command("run")
@click.argument("stage", type=click.Choice(["url_dedup", "exact_dedup", "line_dedup", "minhash_dedup"]))
@click.argument("inputs", nargs=-1, required=True)
@click.option("--work-dir", "-w", required=True, help="work folder; dedup output lands in <work-dir>/output")
@click.option("--tasks", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--param", "-p", multiple=True, help="stage parameter key=value (YAML value), e.g. -p num_bands=20")
@click.option("--fresh", is_flag=True, help="empty the work folder first instead of resuming (only a folder cuvee created)")
def run(stage: str, inputs: tuple[str], work_dir: str, tasks: int, workers: int, param: tuple[str], fresh: bool):
    """Dedup datatrove-format JSONL/Parquet files (INPUTS: files, folders or globs) with one stage.

    The work folder is cuvee's own: claimed (marker), locked while the stage runs and bound to the stage,
    its parameters, the task count and the input files (paths, sizes, mtimes, head/tail hashes). A rerun
    with the same plan resumes; another plan is refused before any work (use --fresh or another -w). A
    folder holding files cuvee did not create is never written into.
    """
    from cuvee.dedup.local_run import build, executors, merged_counters
    from cuvee.kernel.stamps import stamps
    from cuvee.kernel.workdir import Workdir, owned
    params = _parse_params(param)
    files = _input_files(inputs)
    odd = next((f for f in files if any(c != c.strip() or "\n" in c or "\r" in c for c in Path(f).parts)), None)
    if odd is not None:  # the readers' file list holds one path a line, each stripped
        raise click.ClickException(f"input file {odd!r}: a line break, or a space at either end of a name, is not "
                                   f"supported in its path; rename it")
    work = Path(work_dir)
    try:
        resolved = get_stage(stage).params.model_validate(params).model_dump(mode="json")
        barrier = build(stage, params, work, tasks)
    except ValidationError as e:
        raise click.ClickException(_param_errors(stage, e)) from None
    except (ValueError, TypeError, LookupError) as e:  # a builder refusing its settings
        raise click.ClickException(" ".join(str(e).split())) from None
    binding = dedup_binding(stage, resolved, files, tasks)
    with owned(work, Workdir("dedup", "dedup work folder"), binding, fresh=fresh,
               inputs=stamps(str(Path(f).resolve()) for f in files)):
        executors(barrier, _readers(files, work), work, tasks, workers)[-1].run()
    for job, steps in merged_counters(work).items():
        for name, counters in steps.items():
            click.echo(f"{job:>18} {name}: {counters}")
