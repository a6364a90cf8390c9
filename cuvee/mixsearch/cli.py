"""``cuvee mix search SEARCH.yaml``: fit a mixing law from small proxy runs, pick the weights, prove the pick."""

from __future__ import annotations

import click


def _plan_text(p: dict) -> str:
    names = p["sources"]
    width = max(8, *(len(n) for n in names))
    lines = [f"search {p['name']} -> {p['output_dir']} (dry run: nothing tokenized or trained)",
             "sources (available tokens estimated from a sample, as `cuvee mix --dry-run`):"]
    for i, n in enumerate(names):
        lines.append(f"  {n:<{width}} {p['available_tokens'][i]:>14,} tokens  bounds [{p['lo'][i]:.3g}, "
                     f"{p['hi'][i]:.3g}]  natural {p['natural'][i]:.3f}  uniform {p['uniform'][i]:.3f}")
    lines.append(f"{len(p['mixtures'])} mixtures:  " + "  ".join(f"{n[:width]:>{width}}" for n in names))
    for i, (w, k) in enumerate(zip(p["mixtures"], p["kinds"])):
        lines.append(f"  {i:>3} {k:<10}" + "  ".join(f"{x:>{width}.3f}" for x in w))
    lines += [f"per proxy: {p['proxy_tokens']:,} tokens in {p['proxy_steps']} steps, {p['params']:,} parameters",
              f"proof: {p['proof_runs']} runs of {p['proof_tokens']:,} tokens",
              f"estimated cost: {p['total_train_tokens']:,} training tokens, {p['train_flops']:.3g} FLOPs (6 N D)"]
    if p.get("seconds"):
        from cuvee.mixsearch.progress import seconds

        t = p["seconds"]
        lines += [f"estimated time here, one job at a time: ~{seconds(t['total'])} (start-up {seconds(t['startup'])}, "
                  f"proxies {seconds(t['proxies'])}, proof {seconds(t['proof'])}, transfer {seconds(t['transfer'])}, "
                  f"fits and permutation tests {seconds(t['fits'])}, or {seconds(t['fits_law'])} if the losses follow "
                  f"a law rather than noise), from proxy steps timed on this machine "
                  f"({t['per_step_s']:.3g} s per step, {t['fixed_per_run_s']:.3g} s per run to build the model and "
                  f"score the targets) and one refit of each fit family; tokenizing, decontamination and the report "
                  f"come on top"]
    return "\n".join(lines)


def _devices(ctx, param, value):
    if value is None:
        return ()
    parts = [p.strip() for p in value.split(",")]
    if not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts) or len(parts) > 1024:
        raise click.BadParameter(f"{value!r}: give distinct device numbers separated by commas, e.g. 0,1,2,3")
    return tuple(int(p) for p in parts)


SLURM_ONLY = ("partition", "time", "cpus_per_task", "gpus_per_task", "mem_per_cpu_gb", "no_wait")


def _placement(workers, devices, slurm, opts: dict):
    """Where the jobs train; placement is not part of the folder's plan (a search resumes with any)."""
    from cuvee.mixsearch.phases import Placement
    from cuvee.mixsearch.slurm import SlurmOptions

    given = [k for k in SLURM_ONLY if opts[k] not in (None, False)]
    if not slurm and given:
        raise click.UsageError(f"--{given[0].replace('_', '-')} goes with --slurm")
    if slurm and (workers is not None or devices):
        raise click.UsageError("--workers/--devices place local workers; with --slurm each job is an array task "
                               "(use --gpus-per-task / --cpus-per-task)")
    if not slurm:
        return Placement(workers=workers or 1, devices=devices)
    keep = {k: v for k, v in opts.items() if k != "no_wait" and v is not None}
    return Placement(slurm=SlurmOptions(**keep), wait=not opts["no_wait"])


@click.command("search")
@click.argument("config", metavar="SEARCH.yaml", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="search folder (default: the config's output_dir, runs/mix_search/<name>)")
@click.option("--dry-run", is_flag=True, help="print the plan (mixtures, tokens per proxy, cost and time) without "
              "training; the time comes from a few proxy steps and one refit of each fit family timed here")
@click.option("--no-estimate", is_flag=True, help="with --dry-run: skip timing the proxy and the fits (no seconds)")
@click.option("--fresh", is_flag=True, help="empty the search folder first (only a folder cuvee created)")
@click.option("--json", "as_json", is_flag=True, help="print the plan or the report as JSON")
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="train the jobs in K local worker processes (default 1: in this process)")
@click.option("--devices", callback=_devices, default=None, metavar="0,1,..",
              help="pin local workers to these devices (CUDA_VISIBLE_DEVICES), one worker per device by default")
@click.option("--slurm", is_flag=True, help="train each phase's jobs as one SLURM job array")
@click.option("--partition", default=None, help="SLURM partition (default: the cluster's default)")
@click.option("--time", "time_", default=None, metavar="HH:MM:SS", help="SLURM time limit per task (04:00:00)")
@click.option("--cpus-per-task", type=click.IntRange(1, 4096), default=None, help="SLURM CPUs per task (1)")
@click.option("--gpus-per-task", type=click.IntRange(0, 4096), default=None, help="SLURM GPUs per task (0)")
@click.option("--mem-per-cpu-gb", type=click.IntRange(1, 4096), default=None, help="SLURM memory per CPU, GB (2)")
@click.option("--no-wait", is_flag=True, help="with --slurm: submit and exit; rerun the command to go on")
def mix_search(config, out_dir, dry_run, no_estimate, fresh, as_json, workers, devices, slurm, partition, time_,
               cpus_per_task, gpus_per_task, mem_per_cpu_gb, no_wait):
    """Choose mix weights by experiment: N small proxies over the bounded simplex of source weights,
    per-target fits (mixing law, RegMix-style ridge) chosen by leave-one-out Spearman, the pick written as a
    mix YAML, and a paired-seed proof of the pick against the natural and uniform mixes.

    A rerun resumes: finished proxies are never trained again; a changed search file is refused. Jobs train
    here, in --workers K local processes (--devices 0,1,..), or as SLURM arrays (--slurm)."""
    import json

    from cuvee.mixsearch.config import load_search_config

    load_search_config(config)  # a bad search file is one line before torch and scipy load (seconds)
    from cuvee.mixsearch.report import pick_line
    from cuvee.mixsearch.search import Submitted, run_search
    from cuvee.mixsearch.search import dry_run as plan

    try:
        placement = _placement(workers, devices, slurm, {
            "partition": partition, "time": time_, "cpus_per_task": cpus_per_task, "gpus_per_task": gpus_per_task,
            "mem_per_cpu_gb": mem_per_cpu_gb, "no_wait": no_wait})
        if no_estimate and not dry_run:
            raise click.UsageError("--no-estimate goes with --dry-run")
        if dry_run:
            p = plan(config, estimate=not no_estimate)
            if out_dir:
                p["output_dir"] = out_dir
            click.echo(json.dumps(p, indent=2) if as_json else _plan_text(p))
            return
        report = run_search(config, out_dir=out_dir, fresh=fresh, placement=placement,
                            say=(lambda m: None) if as_json else (lambda m: click.echo(m)))
    except Submitted as e:
        click.echo(str(e))
        return
    if as_json:
        from cuvee.train.strict_json import dumps

        click.echo(dumps(report, indent=2, default=str))
        return
    for target, per in report["verdicts"].items():
        for arm, v in per.items():
            click.echo(f"[search] {target}: pick vs {arm}: {v['verdict']} (effect {v['effect']:+.4f} {v['metric']}, "
                       f"95 % CI [{v['ci95'][0]:+.4f}, {v['ci95'][1]:+.4f}]): {v.get('reason', '')}")
    click.echo(f"[search] report: {report['pick']['mix_yaml'].rsplit('/', 1)[0]}/report.md")
    click.echo(pick_line(report))
