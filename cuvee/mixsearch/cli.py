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
    return "\n".join(lines)


@click.command("search")
@click.argument("config", metavar="SEARCH.yaml", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="search folder (default: the config's output_dir, runs/mix_search/<name>)")
@click.option("--dry-run", is_flag=True, help="print the plan (mixtures, tokens per proxy, cost) without training")
@click.option("--fresh", is_flag=True, help="empty the search folder first (only a folder cuvee created)")
@click.option("--json", "as_json", is_flag=True, help="print the plan or the report as JSON")
def mix_search(config, out_dir, dry_run, fresh, as_json):
    """Choose mix weights by experiment: N small proxies over the bounded simplex of source weights,
    per-target fits (mixing law, RegMix-style ridge) chosen by leave-one-out Spearman, the pick written as a
    mix YAML, and a paired-seed proof of the pick against the natural and uniform mixes.

    A rerun resumes: finished proxies are never trained again; a changed search file is refused."""
    import json

    from cuvee.folders import FolderError
    from cuvee.mixer.config import MixConfigError
    from cuvee.mixsearch.caches import EmptyTargetError
    from cuvee.mixsearch.config import SearchConfigError
    from cuvee.mixsearch.search import SearchError, run_search
    from cuvee.mixsearch.search import dry_run as plan

    try:
        if dry_run:
            p = plan(config)
            if out_dir:
                p["output_dir"] = out_dir
            click.echo(json.dumps(p, indent=2) if as_json else _plan_text(p))
            return
        report = run_search(config, out_dir=out_dir, fresh=fresh,
                            say=(lambda m: None) if as_json else (lambda m: click.echo(m)))
    except (SearchConfigError, SearchError, MixConfigError, FolderError, EmptyTargetError) as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        from cuvee.train.strict_json import dumps

        click.echo(dumps(report, indent=2, default=str))
        return
    for target, per in report["verdicts"].items():
        for arm, v in per.items():
            click.echo(f"[search] {target}: pick vs {arm}: {v['verdict']} (effect {v['effect']:+.4f} {v['metric']}, "
                       f"95 % CI [{v['ci95'][0]:+.4f}, {v['ci95'][1]:+.4f}])")
    click.echo(f"[search] report: {report['pick']['mix_yaml'].rsplit('/', 1)[0]}/report.md")
