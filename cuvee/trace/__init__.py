"""``cuvee trace``: any token of a mix, or any row of a training step, back to the page it was cut from.

The chain is read, never rebuilt: the mix's per-document index (cuvee/mixer/docindex.py) names the input file and
row of every shard document; that row, written by a cuvee run, carries its identity at the source (archive, byte
range, record id, payload digest) and every stage's decision (docs/ARCHITECTURE.md, "Provenance"); the run folder
holds the recipe that made it. ``--verify`` re-reads the bytes and re-runs the recorded stages (verify.py).

One module per concern:

- :mod:`.mixfolder`  a mix folder opened for reading: shards, index, token positions, tokenizer
- :mod:`.training`   a training step's row -> the documents and offsets the trainer's loader packed into it
- :mod:`.rows`       one record of a mix input file, and the cuvee run folder that wrote it
- :mod:`.decisions`  a row's metadata as each recipe stage's decision, the dedup clusters
- :mod:`.archive`    a recorded byte range read again (local or remote) and parsed back into its record
- :mod:`.verify`     the re-read record through the recorded stages, compared with the row and the tokens
- :mod:`.trace`      the trace of a position, of a training row, of a document id (kept or dropped)
- :mod:`.render`     the trace as text
"""
