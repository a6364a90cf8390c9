"""`cuvee dedup ...`: run one dedup stage on existing JSONL/Parquet outputs, and inspect LSH settings."""

from __future__ import annotations

import click


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


@dedup_cli.command("run")
@click.argument("stage", type=click.Choice(["url_dedup", "exact_dedup", "line_dedup", "minhash_dedup"]))
@click.argument("inputs", nargs=-1, required=True)
@click.option("--work-dir", "-w", required=True, help="work folder; dedup output lands in <work-dir>/output")
@click.option("--tasks", default=1, show_default=True)
@click.option("--workers", default=1, show_default=True)
@click.option("--param", "-p", multiple=True, help="stage parameter key=value (YAML value), e.g. -p num_bands=20")
def run(stage: str, inputs: tuple[str], work_dir: str, tasks: int, workers: int, param: tuple[str]):
    """Dedup datatrove-format JSONL/Parquet files (INPUTS: files, folders or globs) with one stage."""
    from pathlib import Path

    import yaml

    from cuvee.dedup.local_run import build, executors, merged_counters
    from cuvee.pipeline.io import expand_paths

    params = {}
    for kv in param:
        if "=" not in kv:
            raise click.BadParameter(f"{kv!r}: expected key=value", param_hint="--param")
        k, v = kv.split("=", 1)
        params[k] = yaml.safe_load(v)
    files = expand_paths(list(inputs))
    by_fmt = {"parquet": [f for f in files if f.endswith(".parquet")]}
    by_fmt["jsonl"] = [f for f in files if f not in by_fmt["parquet"]]
    from datatrove.pipeline.readers import JsonlReader, ParquetReader

    readers = []
    for fmt, fs in by_fmt.items():
        for f in fs:
            p = Path(f)
            readers.append((ParquetReader if fmt == "parquet" else JsonlReader)(str(p.parent), glob_pattern=p.name))
    try:
        barrier = build(stage, params, Path(work_dir), tasks)
    except Exception as e:  # pydantic / index errors: say which parameter
        raise click.ClickException(str(e)) from None
    executors(barrier, readers, Path(work_dir), tasks, workers)[-1].run()
    for job, steps in merged_counters(Path(work_dir)).items():
        for name, counters in steps.items():
            click.echo(f"{job:>18} {name}: {counters}")
