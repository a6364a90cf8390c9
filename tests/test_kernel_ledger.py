"""The one resume ledger (cuvee.kernel.ledger): its torn-last-line rule, checked as a property over every byte
offset at which a write can stop, and its refusals of lines cuvee did not write."""

import json

import pytest

from cuvee.kernel.ledger import Ledger, LedgerError, read

RECORDS = [{"id": "a", "text": "plain"}, {"id": "b", "text": "accents é ü and 漢字, emoji 🙂"},
           {"id": "c", "text": "last one: ünïcödé 🙂 and a \"quote\"", "n": [1, 2, {"x": None}]}]


def lines(records) -> bytes:
    return b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in records)


def test_a_write_cut_at_any_byte_resumes_to_exactly_the_complete_records(tmp_path):
    """Truncate the file at every offset of its last record: on resume the ledger holds the records whose JSON is
    whole (the last one only once all of it is there, newline or not), the file ends cleanly, and a record
    appended then reads back after them."""
    head, last = lines(RECORDS[:-1]), lines(RECORDS[-1:])
    whole_json = len(last) - 1  # bytes of the last record's JSON, without its newline
    path = tmp_path / "ledger.jsonl"
    for cut in range(len(last) + 1):
        path.write_bytes(head + last[:cut])
        expected = RECORDS if cut >= whole_json else RECORDS[:-1]
        contents = read(path)
        assert contents.records == expected, cut
        assert contents.torn == (0 < cut < whole_json), cut
        with Ledger(path, contents) as ledger:
            ledger.append({"id": "new"})
        assert read(path).records == [*expected, {"id": "new"}], cut
        assert path.read_bytes() == lines([*expected, {"id": "new"}]), cut


@pytest.mark.parametrize("content, line", [
    (lines(RECORDS[:1]) + b'{"id": "b", "te\n' + lines(RECORDS[2:]), 2),  # a torn line in the middle
    (lines(RECORDS[:1]) + b"\n" + lines(RECORDS[1:]), 2),  # a blank line
    (lines(RECORDS) + b"[1, 2]\n", 4),  # JSON, but not a record
    (lines(RECORDS) + b"hello", 4),  # a last line that is no prefix of a record
    (lines(RECORDS[:1]) + "caf\u00e9".encode("latin-1") + b"\n", 2),  # not UTF-8
])
def test_a_line_cuvee_did_not_write_is_an_error_naming_it_and_nothing_changes(tmp_path, content, line):
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(content)
    with pytest.raises(LedgerError, match=f"line {line} is not a record cuvee wrote; use another file"):
        Ledger(path, advice="; use another file")
    assert path.read_bytes() == content


def test_a_ledger_changed_between_reading_and_opening_is_refused(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(lines(RECORDS[:1]) + b'{"id": "b"')
    contents = read(path)
    path.write_bytes(lines(RECORDS))  # someone else appended: cutting the old torn tail would cut their record
    with pytest.raises(LedgerError, match="changed since it was read"):
        Ledger(path, contents)
    assert path.read_bytes() == lines(RECORDS)


def test_a_missing_file_is_an_empty_ledger_and_a_folder_is_refused(tmp_path):
    with Ledger(tmp_path / "new.jsonl") as ledger:
        assert ledger.records == []
        ledger.append({"id": 1})
    assert read(tmp_path / "new.jsonl").records == [{"id": 1}]
    with pytest.raises(LedgerError, match="not a file"):
        read(tmp_path)
