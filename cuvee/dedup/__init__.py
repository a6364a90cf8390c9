"""Deduplication stages: URL, exact content, ccNet line dedup and MinHash LSH.

Every method is a ``Barrier`` stage (see ``cuvee.pipeline.registry``): a pass-through step records
compact per-rank files (keys, line hashes, signatures), whole-corpus phases decide with memory bounded
by ``memory_budget_mb`` (partitioned spill to disk), and a filter step drops what was decided, each
removal counted under a ``dropped_<reason>`` key.
"""
