"""The kernel's folder preamble (cuvee/kernel/workdir.py): its fixed order and its hooks, on real folders.

Each property is what a command relies on when it declares a Workdir instead of writing the sequence itself."""

import json
import os
from contextlib import ExitStack

import pytest

from cuvee.kernel.atomic import is_temp, temp_path, write_text
from cuvee.kernel.stamps import stamps
from cuvee.kernel.workdir import (
    LOCK,
    MARKER,
    PLAN,
    FolderBusy,
    FolderError,
    Workdir,
    fingerprint,
    open_workdir,
    open_workdirs,
    owned,
)

RUN = Workdir("run", "run folder")


def test_a_new_folder_gets_marker_plan_and_input_stamps(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("hello")
    with owned(tmp_path / "out", RUN, {"a": 1}, inputs=stamps([src])) as opened:
        assert opened.folder == tmp_path / "out"
    rec = json.loads((tmp_path / "out" / PLAN).read_text())
    assert json.loads((tmp_path / "out" / MARKER).read_text())["kind"] == "run"
    assert rec["fingerprint"] == fingerprint({"a": 1}) and rec["binding"] == {"a": 1}
    assert rec["inputs"][str(src)]["bytes"] == 5


def test_a_changed_input_is_named_before_the_plan_keys(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("hello")
    with owned(tmp_path / "out", RUN, {"a": 1}, inputs=stamps([src])):
        pass
    st = src.stat()
    src.write_text("HELLO")  # same size, other bytes, same time
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(FolderError) as e, owned(tmp_path / "out", RUN, {"a": 2}, inputs=stamps([src])):
        pass
    msg = str(e.value)
    assert f"input {src} changed since" in msg and "same size, other content" in msg and "\n" not in msg


def test_another_plan_is_refused_with_its_keys_unless_the_hook_replaces_it(tmp_path):
    out = tmp_path / "out"
    with owned(out, RUN, {"a": 1, "b": [1, 2]}):
        pass
    with pytest.raises(FolderError, match=r"b: recorded \[1, 2\], now \[1, 3\]"), owned(out, RUN, {"a": 1, "b": [1, 3]}):
        pass
    seen = []
    with owned(out, RUN, {"a": 9}, on_other_plan=lambda f, rec: seen.append(rec["binding"]) or True):
        pass
    assert seen == [{"a": 1, "b": [1, 2]}]
    assert json.loads((out / PLAN).read_text())["binding"] == {"a": 9}
    with pytest.raises(FolderError, match="different plan"), \
            owned(out, RUN, {"a": 10}, on_other_plan=lambda f, rec: False):
        pass


def test_fresh_deletes_only_what_the_folder_declares_its_own(tmp_path):
    out = tmp_path / "out"
    with owned(out, Workdir("mix", "mix folder", owns=lambda p: p.suffix == ".bin"), {"a": 1}):
        (out / "m_00000.bin").write_bytes(b"x")
        (out / "notes.txt").write_text("mine")
    with owned(out, Workdir("mix", "mix folder", owns=lambda p: p.suffix == ".bin"), {"a": 2}, fresh=True):
        names = sorted(p.name for p in out.iterdir())
    assert names == sorted([MARKER, LOCK, PLAN, "notes.txt"])


def test_the_sweep_runs_after_the_before_sweep_hook_and_removes_only_temporaries(tmp_path):
    out = tmp_path / "out"
    with owned(out, RUN, {"a": 1}):
        pass
    (out / "sub").mkdir()
    left = [temp_path(out / "sub" / "part.bin"), out / "sub" / "old-style.tmp"]
    for p in left:
        p.write_bytes(b"half")
    keep = out / "sub" / "done.bin"
    keep.write_bytes(b"whole")
    order = []
    with owned(out, RUN, {"a": 1}, before_sweep=lambda f: order.append([p.exists() for p in left])) as opened:
        assert opened.swept == 2
    assert order == [[True, True]] and not any(p.exists() for p in left) and keep.exists()
    assert all(is_temp(p) for p in left) and not is_temp(keep)


def test_every_folder_is_locked_before_any_is_emptied(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for f in (a, b):
        with owned(f, RUN, {"x": 1}):
            (f / "result").write_text("done")
    with ExitStack() as other:  # another process holds b
        open_workdir(b, RUN, {"x": 1}, other)
        with pytest.raises(FolderBusy), ExitStack() as held:
            open_workdirs([(a, RUN), (b, RUN)], {"x": 1}, held, fresh=True)
    assert (a / "result").read_text() == "done"  # a was not emptied: b's refusal came first


def test_a_foreign_folder_and_another_kind_are_refused_untouched(tmp_path):
    foreign = tmp_path / "theirs"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    for fresh in (False, True):
        with pytest.raises(FolderError, match="did not create"), owned(foreign, RUN, {}, fresh=fresh):
            pass
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    with owned(tmp_path / "mix", Workdir("mix"), {}):
        pass
    with pytest.raises(FolderError, match="cuvee mix folder, not a run folder"), \
            owned(tmp_path / "mix", RUN, {}, fresh=True):
        pass


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "f.json"
    write_text(path, "old")

    class Boom(Exception):
        pass

    from cuvee.kernel.atomic import replacing

    with pytest.raises(Boom), replacing(path) as tmp:
        tmp.write_text("half")
        raise Boom
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]
