"""Reading an engine log file for `logs analyze` and `plan --from-log` (shell): streamed.

A day-long log is gigabytes; reading it whole took twice its size in memory. The file is
read in blocks of whole lines (`BLOCK_BYTES`), each line cut at `MAX_LINE_BYTES` (a line
that never ends is skipped to its end, not accumulated), and only regular files are
opened: a FIFO would block forever, a device (`/dev/zero`) never ends.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from servekit.errors import UsageError

BLOCK_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def log_line_batches(path: Path) -> Iterator[list[str]]:
    """The lines of a log file (without their `\\n`), batch by batch, as UTF-8 with bad
    bytes replaced.

    Raises:
        UsageError: the file cannot be opened or is not a regular file.
    """
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(
            f"cannot read {path}: {exc.strerror or exc}", fix="pass a readable log file"
        ) from None
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise UsageError(
                f"{path} is {kind}, not a log file",
                fix="save the log to a file first (e.g. docker logs NAME > engine.log 2>&1)",
            )
        yield from _batches(file)


def _batches(file: BinaryIO) -> Iterator[list[str]]:
    read = file.read
    carry = b""
    skipping = False  # inside a line longer than MAX_LINE_BYTES: drop bytes to its end
    while block := read(BLOCK_BYTES):
        if skipping:
            end = block.find(b"\n")
            if end < 0:
                continue
            block, skipping = block[end + 1 :], False
        data = carry + block
        cut = data.rfind(b"\n")
        if cut >= 0:
            carry = data[cut + 1 :]
            yield _lines(data[:cut])
        else:
            carry = data
        if len(carry) > MAX_LINE_BYTES:
            yield _lines(carry[:MAX_LINE_BYTES])
            carry, skipping = b"", True
    if carry:
        yield _lines(carry)


def _lines(block: bytes) -> list[str]:
    lines = block.decode("utf-8", errors="replace").split("\n")
    return [line if len(line) <= MAX_LINE_BYTES else line[:MAX_LINE_BYTES] for line in lines]
