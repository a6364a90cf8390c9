"""Pipeline steps used by the tests through the generic `datatrove` stage (importable by path)."""

import time

from datatrove.pipeline.base import PipelineStep


class SlowPassThrough(PipelineStep):
    """Yields every document after a delay, so a test can kill a run mid-way."""

    name = "slow"

    def __init__(self, delay_s: float = 0.05):
        super().__init__()
        self.delay_s = delay_s

    def run(self, data, rank=0, world_size=1):
        for doc in data:
            time.sleep(self.delay_s)
            yield doc


class SilentDropper(PipelineStep):
    """A buggy step that loses every third document without counting it."""

    name = "silent dropper"

    def run(self, data, rank=0, world_size=1):
        for i, doc in enumerate(data):
            if i % 3:
                yield doc
