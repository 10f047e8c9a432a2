"""Malformed trace lines that Python's json lets escape as something other than a syntax error: each is a TraceError
naming the file and line, never a RecursionError, a ValueError about digits, a UnicodeDecodeError or infinity."""

import json
from pathlib import Path

import pytest

from watchdog.trace import TraceError, read_trace

HEADER = {"format": "gpu-watchdog-trace", "version": 1, "node": "node-a", "tick_seconds": 1.0,
          "started": 1_700_000_000.0, "agent_version": "0.1.0"}
GOOD = {"tick": 1, "timestamp": 1.0, "sample": {"gpus": []}, "attribution": {"healthy": True}}


def write(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def line(data: object) -> bytes:
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (b"[" * 100_000 + b"]" * 100_000, r"\(line\): nested deeper than 64 levels"),
        (b'{"tick": 2, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": true}, "x": '
         + b"[" * 70 + b"]" * 70 + b"}", r"\(line\): nested deeper than 64 levels"),
        (b'{"tick": ' + b"9" * 5000 + b', "timestamp": 2.0}', r"tick: an integer of 5000 digits is too large"),
        (b'{"tick": 2, "timestamp": 1e400, "sample": {"gpus": []}, "attribution": {"healthy": true}}',
         r"timestamp: 1e400 is not a finite number"),
        (b'{"tick": 2, "timestamp": 2.0, "node": "n\xff\xfe", "sample": {"gpus": []}}',
         r"\(line\): not UTF-8 text: invalid start byte at byte 40"),
    ],
    ids=["nested-100k", "nested-70-inside-a-tick", "5000-digits", "1e400", "invalid-utf-8"],
)
def test_malformed_tick_line_names_file_and_line(tmp_path: Path, bad: bytes, expected: str) -> None:
    path = write(tmp_path / "bad.jsonl", line(HEADER), line(GOOD), bad)
    records = iter(read_trace(path))
    assert next(records).tick == 1  # the lines before the bad one are still delivered
    with pytest.raises(TraceError, match=f"^{path}:3: {expected}") as caught:
        next(records)
    assert caught.value.line == 3


def test_malformed_header_names_line_one(tmp_path: Path) -> None:
    path = write(tmp_path / "h.jsonl", b'{"format": "gpu-watchdog-trace", "node": "\xc3"}')
    with pytest.raises(TraceError, match=f"^{path}:1: \\(line\\): not UTF-8 text"):
        read_trace(path)
    path = write(tmp_path / "deep.jsonl", b"{" + b'"a":{' * 5000 + b"}" * 5001)
    with pytest.raises(TraceError, match=f"^{path}:1: \\(line\\): nested deeper than 64 levels"):
        read_trace(path)


def test_timestamps_that_go_backwards_name_file_and_line(tmp_path: Path) -> None:
    later = {**GOOD, "tick": 2, "timestamp": 0.5}
    path = write(tmp_path / "back.jsonl", line(HEADER), line(GOOD), line({**GOOD, "tick": 2}),
                 line({**later, "tick": 3}))
    with pytest.raises(TraceError, match=rf"^{path}:4: timestamp: 0.5 goes backwards from the previous tick's 1.0$"):
        list(read_trace(path))
