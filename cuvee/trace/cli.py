"""``cuvee trace FOLDER ...``: a token of a mix, a row of a training step, or a run's document, back to its page.

Read-only: it opens the folders it is given and the run folders their documents came from, and writes nothing.
"""

from __future__ import annotations

import random as _random
import sys
from pathlib import Path

import click


def _kind(folder: Path) -> str:
    from cuvee.trace.training import is_training_folder

    if (folder / "manifest.json").is_file():
        return "mix"
    if is_training_folder(folder):
        return "training"
    if (folder / "recipe.resolved.json").is_file():
        return "run"
    from cuvee.trace.mixfolder import TraceError

    raise TraceError(f"{folder}: neither a mix folder (manifest.json), a training run folder (config.json) nor a "
                     f"cuvee run folder (recipe.resolved.json)")


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise click.UsageError(message)


@click.command("trace")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--token", "tokens", type=click.IntRange(min=0), multiple=True,
              help="mix folder: a global token offset (shards in manifest order, EOS tokens counted); repeatable")
@click.option("--shard", default=None, help="mix folder: a shard, by prefix or number (with --offset)")
@click.option("--offset", type=click.IntRange(min=0), default=None, help="mix folder: a token offset in --shard")
@click.option("--random", "n_random", type=click.IntRange(min=1), default=None,
              help="mix folder: N token positions drawn uniformly with --seed")
@click.option("--seed", default=0, show_default=True, help="seed of --random")
@click.option("--step", type=click.IntRange(min=1), default=None, help="training run folder: the step (from 1, as log.jsonl)")
@click.option("--row", type=click.IntRange(min=0), default=0, show_default=True,
              help="training run folder: the row of the step (rank by rank, micro-batch by micro-batch)")
@click.option("--at", type=click.IntRange(min=0), default=0, show_default=True, help="training run folder: the token of the row")
@click.option("--id", "doc_ids", multiple=True, help="run folder: a document id, kept or dropped; repeatable")
@click.option("--verify", is_flag=True, help="re-read the record's bytes, replay the recorded stages and compare "
              "the text and the shard's tokens (cuvee/trace/verify.py says what matches means)")
@click.option("--json", "as_json", is_flag=True, help="print the traces as JSON (a list)")
def trace(folder, tokens, shard, offset, n_random, seed, step, row, at, doc_ids, verify, as_json):
    """Trace FOLDER's token, training row or document to its page: document id, source, epoch, archive and byte
    range, every stage's score and decision, dedup cluster. FOLDER is a mix folder (--token N, --shard S
    --offset N, --random N), a training run folder (--step K --row R --at T) or a pipeline run folder (--id ID:
    which stage dropped it, and why)."""
    from cuvee.trace.mixfolder import MixFolder, TraceError
    from cuvee.trace.render import render
    from cuvee.trace.trace import Tracer, dumps

    kind = _kind(folder)
    mix_opts = bool(tokens) or shard is not None or offset is not None or n_random is not None
    _need(not (kind != "mix" and mix_opts), f"--token/--shard/--offset/--random need a mix folder; {folder} is a {kind} folder")
    _need(not (kind != "training" and step is not None), f"--step needs a training run folder; {folder} is a {kind} folder")
    _need(not (kind != "run" and doc_ids), f"--id needs a pipeline run folder; {folder} is a {kind} folder")
    tracer = Tracer(verify=verify)
    try:
        if kind == "mix":
            _need(mix_opts, "give --token N, --shard S --offset N or --random N")
            _need((shard is None) == (offset is None), "--shard and --offset go together")
            mix = tracer.mix = MixFolder(folder)
            positions = [mix.at_token(t) for t in tokens]
            if shard is not None:
                positions.append(mix.in_shard(shard, offset))
            if n_random:
                rng = _random.Random(seed)
                positions += [mix.at_token(rng.randrange(mix.total_tokens)) for _ in range(n_random)]
            traces = [tracer.position(p) for p in positions]
        elif kind == "training":
            _need(step is not None, "give --step K (and --row R, --at T)")
            traces = [tracer.training(folder, step, row, at)]
        else:
            _need(bool(doc_ids), "give --id ID (a document of the run, kept or dropped)")
            traces = [tracer.document_id(folder, d) for d in doc_ids]
    finally:
        tracer.close()
    click.echo(dumps(traces) if as_json else "\n\n".join(render(t) for t in traces))
    bad = [t for t in traces if "verify" in t and not t["verify"]["ok"]]
    if bad:
        sys.stdout.flush()
        raise TraceError(f"--verify: {len(bad)} of {len(traces)} trace(s) do not match their sources (see above)")
