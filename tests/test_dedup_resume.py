"""A dedup stage killed mid-way and rerun neither loses nor duplicates documents; order is checked."""

import pytest
from datatrove.pipeline.base import PipelineStep

from cuvee.dedup.files import OrderError
from cuvee.dedup.local_run import ListReader, build, executors, read_output
from tests._dedup_helpers import doc, kept_ids, quiet, real_texts

quiet()


class CrashOnce(PipelineStep):
    """Raises inside rank 1 after a few documents, the first time only (a killed task)."""

    name = "💥 crash once"
    type = "🧪 - TEST"

    def __init__(self, flag_path, after: int):
        super().__init__()
        self.flag_path = flag_path
        self.after = after

    def run(self, data, rank: int = 0, world_size: int = 1):
        for i, d in enumerate(data):
            if rank == 1 and i == self.after and not self.flag_path.exists():
                self.flag_path.write_text("crashed")
                raise RuntimeError("simulated kill")
            yield d


def _corpus():
    t = real_texts()
    docs = [doc(t[i], f"o{i}", url=f"http://s.com/{i % 9}") for i in range(24)]
    docs += [doc(t[i] + "\nextra line", f"n{i}", url=f"http://s.com/{i}") for i in range(6)]
    return [docs[0::2], docs[1::2]]


@pytest.mark.parametrize("stage", ["minhash_dedup", "line_dedup", "url_dedup"])
def test_killed_task_resumes_to_the_clean_result(tmp_path, stage):
    params = {"min_occurrences": 3} if stage == "line_dedup" else {}
    ranks = _corpus()

    clean_dir = tmp_path / "clean"
    chain = executors(build(stage, params, clean_dir, 2), [ListReader(ranks)], clean_dir, 2)
    chain[-1].run()
    clean = read_output(clean_dir, 2)

    work = tmp_path / "killed"
    flag = tmp_path / "flag"
    chain = executors(build(stage, params, work, 2), [ListReader(ranks), CrashOnce(flag, after=5)], work, 2)
    with pytest.raises(RuntimeError):
        chain[-1].run()
    assert flag.exists()
    # nothing half-written under a final name: rank 1's recording files do not exist yet
    assert not [p for p in (work / "work").rglob("00001.*") if not p.name.startswith(".")]
    chain = executors(build(stage, params, work, 2), [ListReader(ranks), CrashOnce(flag, after=5)], work, 2)
    chain[-1].run()  # rerun: rank 0 is skipped as completed, rank 1 redone
    resumed = read_output(work, 2)
    assert kept_ids(resumed) == kept_ids(clean)
    assert [[d.text for d in r] for r in resumed] == [[d.text for d in r] for r in clean]
    # something was actually removed (documents or lines)
    assert sum(len(d.text) for r in clean for d in r) < sum(len(d.text) for r in ranks for d in r)


def test_reordered_reread_is_refused(tmp_path):
    t = real_texts()
    ranks = [[doc(t[i], f"o{i}") for i in range(6)]]
    chain = executors(build("exact_dedup", {}, tmp_path, 1), [ListReader(ranks)], tmp_path, 1)
    chain[-2].run()  # recording + phase only
    from cuvee.dedup.steps import DropListed

    f = DropListed(tmp_path / "work" / "00_exact_dedup", "drops/*/{rank}.u64", "exact_duplicate")
    with pytest.raises(OrderError, match="not the document recorded"):
        list(f.run(iter(reversed(ranks[0])), rank=0))


def test_batch_position_check_names_the_first_wrong_document(tmp_path):
    """PositionTracker.take checks a batch in one comparison and, on a mismatch, fails at the first document
    that differs (as the per-document check does); more documents than recorded fail too."""
    import numpy as np

    from cuvee.dedup.files import PositionTracker, id_check, rank_file, save_array

    ids = [f"d{i}" for i in range(10)]
    save_array(rank_file(tmp_path / "ids", 0, "ids.u32"), np.array([id_check(i) for i in ids], dtype=np.uint32))
    t = PositionTracker(tmp_path / "ids", 0, "check")
    assert t.take([doc("x", i) for i in ids[:4]]) == 0 and t.take([doc("x", i) for i in ids[4:6]]) == 4
    with pytest.raises(OrderError, match=r"document #8 \(id 'zz'\)"):
        t.take([doc("x", "d6"), doc("x", "d7"), doc("x", "zz"), doc("x", "d9")])
    t = PositionTracker(tmp_path / "ids", 0, "check")
    assert t.take([doc("x", i) for i in ids]) == 0
    with pytest.raises(OrderError, match=r"document #10 .* \(10 recorded\)"):
        t.take([doc("x", "d10")])
