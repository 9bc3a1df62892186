"""Bounded reads of the files in a run directory (shell): regular files only, limited size.

summary.json, validate.json, run.json and records.jsonl are read back by compare, report,
sim fit and `bench --resummarize`. A FIFO, /dev/zero or a directory passed in their place
is refused before anything is read (a FIFO is opened non-blocking, so opening it never
waits for a writer); a document is read up to `MAX_DOCUMENT_BYTES` and a record line up
to `MAX_LINE_BYTES`, so no input grows memory without bound. Every failure is one
ServekitError line naming the file, what is wrong and the fix.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from servekit.errors import ServekitError

MAX_DOCUMENT_BYTES = 64 * 2**20  # summary.json with per-point samples stays far below
MAX_LINE_BYTES = 16 * 2**20  # one request record (chunk times of a 100k-token answer: ~2 MB)
MAX_RECORDS_BYTES = 16 * 2**30


def open_regular(path: Path, *, fix: str, max_bytes: int) -> BinaryIO:
    """Open a regular file of at most `max_bytes` for reading, in binary.

    Raises:
        ServekitError: missing, unreadable, not a regular file, or too large.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ServekitError(f"cannot read {path}: {exc.strerror}", fix=fix) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ServekitError(f"{path} is {_kind(info.st_mode)}, not a regular file", fix=fix)
        if info.st_size > max_bytes:
            raise ServekitError(
                f"{path} is {info.st_size:,} bytes, over the {max_bytes:,} this servekit reads",
                fix=fix,
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_json_document(path: Path, *, fix: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> object:
    """Read and parse one JSON document (UTF-8, no NaN or Infinity) of bounded size.

    Raises:
        ServekitError: not a readable regular file, too large, not UTF-8 or not JSON.
    """
    with open_regular(path, fix=fix, max_bytes=max_bytes) as file:
        raw = file.read(max_bytes + 1)
    if len(raw) > max_bytes:  # it grew after the size check
        raise ServekitError(f"{path} is over the {max_bytes:,} bytes this servekit reads", fix=fix)
    return parse_json(raw, where=str(path), fix=fix)


def parse_json(raw: bytes, *, where: str, fix: str) -> object:
    """Parse UTF-8 JSON bytes; every failure is one ServekitError naming `where`.

    Raises:
        ServekitError: not UTF-8, not JSON, nested too deep, or holding NaN or Infinity.
    """
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ServekitError(
            f"{where} is not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x})", fix=fix
        ) from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ServekitError(
            f"{where} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", fix=fix
        ) from None
    except _NotFinite as exc:
        raise ServekitError(f"{where} holds {exc}, which is not a JSON number", fix=fix) from None
    except ValueError as exc:  # e.g. an integer past the interpreter's digit limit
        raise ServekitError(f"{where} is not JSON servekit reads ({exc})", fix=fix) from None
    except RecursionError:
        raise ServekitError(f"{where} is nested too deep to be a servekit file", fix=fix) from None


def iter_lines(
    path: Path,
    *,
    fix: str,
    max_line: int = MAX_LINE_BYTES,
    max_bytes: int = MAX_RECORDS_BYTES,
) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (line number, line without its newline, whether it ended with a newline).

    Raises:
        ServekitError: not a readable regular file, too large, or a line over `max_line`.
    """
    with open_regular(path, fix=fix, max_bytes=max_bytes) as file:
        number = 0
        while line := file.readline(max_line + 1):
            number += 1
            ended = line.endswith(b"\n")
            if len(line) > max_line and not (ended and len(line) == max_line + 1):
                raise ServekitError(
                    f"{path}:{number}: line is longer than {max_line:,} bytes", fix=fix
                )
            yield number, line.rstrip(b"\r\n") if ended else line, ended


class _NotFinite(ValueError):
    """NaN or Infinity in a JSON document."""


def _no_constant(name: str) -> object:
    raise _NotFinite(name)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"
