"""Append-only JSONL: a torn last line (no newline) is dropped and cut; a damaged complete line is refused."""

import logging
from dataclasses import dataclass

import pytest

from blockpilot_hf.jsonfile import from_dict
from blockpilot_hf.jsonl import JsonlWriter, read_rows


@dataclass
class Row:
    id: str
    n: int = 0


def parse_row(row: dict) -> Row:
    return from_dict(Row, row)


def test_rows_round_trip_and_a_missing_file_is_empty(tmp_path):
    path = tmp_path / "sub" / "rows.jsonl"
    assert read_rows(path) == []
    writer = JsonlWriter(path)
    writer.append({"id": "a"}, Row("b", 2))  # dicts and dataclasses
    writer.append(Row("c"))
    assert read_rows(path) == [{"id": "a"}, {"id": "b", "n": 2}, {"id": "c", "n": 0}]
    assert read_rows(path, parse_row)[1:] == [Row("b", 2), Row("c")]
    assert path.read_bytes().count(b"\n") == 3


def test_a_torn_tail_is_dropped_on_read_and_cut_before_appending(tmp_path, caplog):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "a"}\n\n{"id": "b"}\n{"id": "c", "n": 1')  # a blank line is allowed
    with caplog.at_level(logging.WARNING):
        assert read_rows(path) == [{"id": "a"}, {"id": "b"}]
    assert "torn last line" in caplog.text
    # A final line without its newline is torn even when it happens to parse: the newline is the commit mark.
    path.write_text('{"id": "a"}\n{"id": "b"}')
    assert read_rows(path) == [{"id": "a"}]
    JsonlWriter(path).append({"id": "c"})
    assert path.read_text() == '{"id": "a"}\n{"id":"c"}\n'
    # A file that is nothing but a torn line.
    path.write_bytes(b'{"id": "\xc3')  # cut inside a multi-byte character
    assert read_rows(path) == []
    JsonlWriter(path).append({"id": "d"})
    assert read_rows(path) == [{"id": "d"}]


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"id": "x", "n\n', "line 2 is not valid JSON"),
        ("[1, 2]\n", "line 2 is not a JSON object"),
        (b"\xff\xfe\n", "line 2 is not valid JSON"),
        ('{"id": "x", "extra": 1}\n', r"line 2 is not a valid row: unknown Row keys \['extra'\]"),
        ('{"n": 1}\n', r"line 2 is not a valid row: not a complete Row: missing keys \['id'\]"),
    ],
    ids=["torn-json", "not-an-object", "not-utf8", "unknown-key", "missing-key"],
)
@pytest.mark.parametrize("position", ["last", "middle"])
def test_a_damaged_complete_line_is_refused_on_read_and_append(tmp_path, bad_line, message, position):
    path = tmp_path / "rows.jsonl"
    bad = bad_line if isinstance(bad_line, bytes) else bad_line.encode()
    after = b'{"id": "z"}\n' if position == "middle" else b""
    path.write_bytes(b'{"id": "a"}\n' + bad + after)
    before = path.read_bytes()
    pattern = rf"rows.jsonl: {message}"
    with pytest.raises(ValueError, match=pattern):
        read_rows(path, parse_row)
    with pytest.raises(ValueError, match=pattern):
        JsonlWriter(path, parse_row).append(Row("b"))
    assert path.read_bytes() == before
