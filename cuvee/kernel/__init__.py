"""The kernel every writing command goes through: user errors, folders (claim, lock, fresh, bind, sweep),
atomic writes, input stamps, resume ledgers, job records and SLURM liveness, each written once.

It is the ground under ``cuvee.pipeline``: it imports nothing from cuvee but ``cuvee.yaml_safe`` and itself."""
