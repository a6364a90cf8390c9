"""What ``cuvee card FOLDER`` describes: a pipeline run folder, a mix folder, or a training run folder.

Why one resolver: a card is always written from a run's statistics, and a mix or training folder leads to its
run through provenance (the mix index names its input files, a file lies in the run folder that wrote it; a
training run names its mix in ``config.json``). A mix or training folder's card goes into that folder (a Hugging
Face dataset repository of tokens, or the model's run folder), written under its lock as a run's card is written
under the run's; ``--out DIR`` still gives a card folder of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cuvee.card.run_data import CardInputError

TRAIN_SHARES_MAX_ROWS = 200_000  # rows the loader replays to count what the model read per source


@dataclass(frozen=True)
class CardTarget:
    run_dir: Path
    mix: Path | None  # the mix folder (or manifest) described with the run
    folder: Path | None = None  # a mix or training folder the card is written into (None: the run's placement)
    what: str = "run folder"
    training: Path | None = None


def _mix_folder(mix: str | Path | None) -> Path | None:
    if mix is None:
        return None
    p = Path(mix)
    return p if p.is_dir() else p.parent


def resolve(folder: str | Path, mix: str | Path | None = None) -> CardTarget:
    """The run, mix and folder a card of ``folder`` describes (see the module docstring)."""
    from cuvee.trace.training import is_training_folder

    folder = Path(folder)
    training = None
    if is_training_folder(folder):
        training = folder
        paths = ((json.loads((folder / "config.json").read_text()).get("data") or {}).get("paths")) or []
        mixes = [Path(p) for p in paths if (Path(p) / "manifest.json").is_file()]
        if not mixes:
            raise CardInputError(f"training run {folder} read no cuvee mix folder (data.paths: {paths}); a card "
                                 f"describes a mix built by cuvee mix")
        mix = mixes[0]
    elif (folder / "manifest.json").is_file():
        mix = folder
    else:
        return CardTarget(folder, Path(mix) if mix is not None else None)
    from cuvee.card.mix_provenance import runs_of

    runs = runs_of(mix)
    if not runs:
        raise CardInputError(f"mix folder {mix}: none of its input files lies in a cuvee run folder, so there are no "
                             f"run statistics to describe; give the run: cuvee card RUN_DIR --mix {mix}")
    return CardTarget(runs[0], Path(mix), folder, "training folder" if training else "mix folder", training)


def training_info(folder: Path) -> dict:
    """A training folder's settings, progress and what it read of its mix per source (the loader replayed)."""
    from cuvee.kernel.workdir import recorded_plan
    from cuvee.trace.training import training_config

    cfg = training_config(folder)
    world = int(((recorded_plan(folder) or {}).get("binding") or {}).get("world_size") or 1)
    last = {}
    log = folder / "log.jsonl"
    if log.is_file():
        for line in log.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "train":
                last = rec
    step = int(last.get("step") or 0)
    info = {"run folder": str(folder), "data": ", ".join(cfg.data.paths), "order": cfg.data.order,
            "seed": cfg.data.seed, "sequence length": cfg.data.seq_len,
            "rows per step": cfg.micro_batch * cfg.grad_accum * world, "steps (configured)": cfg.steps,
            "last logged step": step, "tokens read": last.get("tokens", 0)}
    rows = step * cfg.micro_batch * cfg.grad_accum * world
    if step and rows <= TRAIN_SHARES_MAX_ROWS:
        from cuvee.train.loader import realised_shares
        from cuvee.train.shards import open_shards

        shares = realised_shares(open_shards(cfg.data.paths), step, seq_len=cfg.data.seq_len,
                                 batch_size=cfg.micro_batch, grad_accum=cfg.grad_accum, world_size=world,
                                 order=cfg.data.order, seed=cfg.data.seed, window=cfg.data.window,
                                 add_eos=cfg.data.add_eos)
        if shares:
            info.update({f"tokens read from {k} (share)": f"{v:,} ({shares[-1]['shares'][k]:.1%})"
                         for k, v in shares[-1]["source_tokens"].items()})
    elif step:
        info["tokens read per source"] = f"not counted (more than {TRAIN_SHARES_MAX_ROWS:,} rows to replay)"
    return info
