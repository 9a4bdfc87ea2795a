"""Incremental reader of one Chrome-trace JSON file: top-level header values, then `traceEvents` in batches.

Memory stays bounded by one text chunk (a few MiB) plus one batch of event dicts, whatever the file size;
the caller reduces each batch to compact arrays before asking for the next.

Fast path (Kineto's own layout): Kineto writes one event per block, separated by exactly `},\\n  {`. That
separator holds a raw newline, which JSON forbids inside strings, so splitting on it never cuts a string.
Pieces the caller does not need (flow arrows, plain CPU ops) are recognised by their head (one `startswith`
with a tuple of Kineto's exact event heads, so another layout is never skipped) and dropped without being
decoded; the rest are decoded together in one `json.loads` call. If the joined text does not
decode (an unusual layout), the chunk is decoded element by element with `JSONDecoder.raw_decode`, which is
also the path for any other layout. A real syntax error or a truncated file becomes one `TraceFormatError`
naming the file, the character offset and what is wrong.
"""
from __future__ import annotations

import codecs
import json
import queue
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from narrowpath.errors import TraceFormatError

CHUNK_CHARS = 2**20
"""Characters read per refill (1 Mi: the text, its pieces and their decoded events stay a few MiB; 4 Mi took
~15 MB more peak memory for no measurable speed)."""
READ_AHEAD_CHUNKS = 2
"""Decompressed pieces (at most CHUNK_CHARS bytes each) a gzip file's read-ahead thread may hold."""
COMPRESSED_BLOCK_BYTES = 2**18
"""Compressed bytes handed to zlib at a time."""
KINETO_SEPARATOR = "},\n  {"

_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True, kw_only=True)
class SkipRule:
    """Kineto blocks that start with one of the `skip` heads and with none of the `unless` heads are not
    decoded. A head is the start of a block as Kineto writes it (`\\n    "ph": "f"`), exact to the indentation
    and key order, so a block of any other layout is decoded: the rule errs towards decoding."""

    skip: tuple[str, ...]
    unless: tuple[str, ...]
_WS = " \t\n\r"


def gunzip(fh) -> Iterator[bytes]:
    """The decompressed bytes of a gzip file, every member, in pieces of at most CHUNK_CHARS bytes.

    zlib itself checks each member's CRC-32 and length (wbits 31), so nothing is checksummed twice as `gzip`
    does. As in `gzip.GzipFile`: zero bytes between or after members are padding; a stream cut short is an
    EOFError, a damaged one a zlib.error, other bytes after a member an OSError."""
    d = zlib.decompressobj(31)
    while True:
        if d.eof:
            rest = d.unused_data.lstrip(b"\0")
            while len(rest) < 2:
                more = fh.read(COMPRESSED_BLOCK_BYTES)
                if not more:
                    if rest:
                        raise OSError("data after the end of the gzip stream is not another gzip member")
                    return
                rest = (rest + more).lstrip(b"\0")
            if rest[:2] != b"\x1f\x8b":
                raise OSError("data after the end of the gzip stream is not another gzip member")
            d = zlib.decompressobj(31)
            pending = rest
        else:
            pending = d.unconsumed_tail or fh.read(COMPRESSED_BLOCK_BYTES)
            if not pending:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
        data = d.decompress(pending, CHUNK_CHARS)
        if data:
            yield data


class _ReadAhead:
    """Decompressed chunks of a gzip file, read ahead by a thread: zlib releases the GIL while it inflates, so
    decompression runs beside the parsing on another core. At most `READ_AHEAD_CHUNKS` chunks wait in memory;
    an error of the decompressor is raised in the reader, at the chunk where it occurred."""

    def __init__(self, fh):
        self._queue: queue.Queue = queue.Queue(maxsize=READ_AHEAD_CHUNKS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fh,), name="narrowpath-gunzip", daemon=True)
        self._thread.start()

    def _run(self, fh) -> None:
        try:
            for data in gunzip(fh):
                if not self._put(data):
                    return
        except Exception as exc:  # noqa: BLE001 — handed to the reader, which names it
            self._put(exc)
            return
        self._put(b"")

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def read(self, _size: int) -> bytes:
        item = self._queue.get()
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class _Text:
    """Characters of a (possibly gzip) file, refilled on demand, with the offset of buf[0] in the file."""

    def __init__(self, path: str):
        self.path = path
        self._fh = open(path, "rb")
        magic = self._fh.read(2)
        self._fh.seek(0)
        self._raw = _ReadAhead(self._fh) if magic == b"\x1f\x8b" else self._fh
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.offset = 0
        self.eof = False

    def close(self) -> None:
        if isinstance(self._raw, _ReadAhead):
            self._raw.close()
        self._fh.close()

    def fail(self, pos: int, what: str) -> TraceFormatError:
        return TraceFormatError(f"{self.path}: {what} (at character {self.offset + pos})")

    def refill(self, pos: int) -> int:
        """Drop buf[:pos], append the next chunk; return the new index of old `pos` (always 0)."""
        if self.eof:
            return pos
        try:
            data = self._raw.read(CHUNK_CHARS)
            text = self._utf8.decode(data, final=not data)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceFormatError(f"{self.path}: compressed data is corrupt or truncated ({exc})") from None
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"{self.path}: not UTF-8 text ({exc.reason})") from None
        if not data:
            self.eof = True
        self.offset += pos
        self.buf = self.buf[pos:] + text
        return 0

    def skip_ws(self, pos: int) -> int:
        """Index of the next non-whitespace character (refilling); len(buf) only at end of file."""
        while True:
            n = len(self.buf)
            while pos < n and self.buf[pos] in _WS:
                pos += 1
            if pos < n or self.eof:
                return pos
            pos = self.refill(pos)

    def decode_value(self, pos: int) -> tuple[Any, int]:
        """Decode one JSON value starting at `pos` (refilling until it is complete)."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, pos)
                if end < len(self.buf) or self.eof:  # a number at the very end may continue in the next chunk
                    return value, end
            except json.JSONDecodeError as exc:
                if self.eof:
                    what = "file ends inside a value (truncated?)" if exc.pos >= len(self.buf) - 1 else exc.msg
                    raise self.fail(exc.pos, f"invalid JSON: {what}") from None
            except ValueError:  # an integer of more than 4300 digits (Python's int-conversion limit)
                raise self.fail(pos, "invalid JSON: a number with more than 4300 digits") from None
            except RecursionError:
                raise self.fail(pos, "invalid JSON: nested too deeply") from None
            pos = self.refill(pos)


def iter_trace(path: str, header: dict[str, Any], skip_for: Callable[[dict[str, Any]], SkipRule | None],
               stats: dict[str, int] | None = None) -> Iterator[list[dict[str, Any]]]:
    """Yield batches of trace events (dicts) of `path`; fill `header` with the other top-level values.

    `skip_for(header)` is called once when `traceEvents` starts, with the header values read so far, and
    returns the SkipRule for undecoded Kineto blocks (None: decode everything); `stats["skipped"]` counts
    the blocks left undecoded. Header values after `traceEvents` arrive once the generator is exhausted.
    A file without `traceEvents`, or whose top level is not an object, is an error.
    """
    src = _Text(path)
    try:
        pos = src.skip_ws(0)
        if pos >= len(src.buf) or src.buf[pos] != "{":
            raise src.fail(pos, "not a Kineto trace: expected a JSON object at the top level"
                           if pos < len(src.buf) else "file is empty")
        pos += 1
        seen_events = False
        while True:
            pos = src.skip_ws(pos)
            if pos >= len(src.buf):
                raise src.fail(pos, "file ends inside the top-level object (truncated?)")
            if src.buf[pos] == "}":
                break
            if src.buf[pos] == ",":
                pos += 1
                continue
            key, pos = src.decode_value(pos)
            pos = src.skip_ws(pos)
            if not isinstance(key, str) or pos >= len(src.buf) or src.buf[pos] != ":":
                raise src.fail(pos, "invalid JSON: expected a key and ':' in the top-level object")
            pos = src.skip_ws(pos + 1)
            if key == "traceEvents":
                seen_events = True
                gen = _iter_events(src, pos, skip_for(header), stats if stats is not None else {})
                while True:
                    try:
                        yield next(gen)
                    except StopIteration as stop:
                        pos = stop.value
                        break
            else:
                header[key], pos = src.decode_value(pos)
        if not seen_events:
            raise src.fail(pos, "not a Kineto trace: no 'traceEvents' array")
        end = src.skip_ws(pos + 1)
        if end < len(src.buf):
            raise src.fail(end, "invalid JSON: content after the end of the top-level object")
    finally:
        src.close()


def _iter_events(src: _Text, pos: int, rule: SkipRule | None, stats: dict[str, int]):
    """Generator over batches of the `traceEvents` array starting at `pos`; returns the index after `]`."""
    if pos >= len(src.buf) or src.buf[pos] != "[":
        raise src.fail(pos, "'traceEvents' is not an array")
    pos += 1
    expect_value = True
    while True:
        if len(src.buf) - pos < CHUNK_CHARS // 2 and not src.eof:
            pos = src.refill(pos)
        pos = src.skip_ws(pos)
        if pos >= len(src.buf):
            raise src.fail(pos, "file ends inside 'traceEvents' (truncated?)")
        c = src.buf[pos]
        if c == "]":
            return pos + 1
        if c == "," and not expect_value:
            pos, expect_value = pos + 1, True
            continue
        if not expect_value:
            raise src.fail(pos, "invalid JSON: expected ',' or ']' between trace events")
        cut = src.buf.rfind(KINETO_SEPARATOR, pos)
        if c == "{" and cut > pos:
            batch = _fast_batch(src.buf[pos + 1:cut], rule, stats)
            if batch is not None:
                yield batch
                pos, expect_value = cut + 1, False
                continue
            stop_abs = src.offset + cut + 1
        else:
            stop_abs = src.offset + min(len(src.buf), pos + 2**20)
        batch = []
        while src.offset + pos < stop_abs or not batch:  # element by element (at least one)
            value, pos = src.decode_value(pos)
            if not isinstance(value, dict):
                raise src.fail(pos, f"trace event is a {type(value).__name__}, not an object")
            batch.append(value)
            pos = src.skip_ws(pos)
            if pos < len(src.buf) and src.buf[pos] == ",":
                pos = src.skip_ws(pos + 1)
            elif pos < len(src.buf) and src.buf[pos] == "]":
                break
            elif pos >= len(src.buf):
                raise src.fail(pos, "file ends inside 'traceEvents' (truncated?)")
            else:
                raise src.fail(pos, "invalid JSON: expected ',' or ']' between trace events")
        yield batch
        expect_value = src.buf[pos] != "]"


def _fast_batch(inner: str, rule: SkipRule | None, stats: dict[str, int]) -> list[dict[str, Any]] | None:
    """Decode the kept Kineto blocks of `inner` (text between the first '{' and the last '}'), or None."""
    pieces = inner.split(KINETO_SEPARATOR)
    num_blocks = len(pieces)
    if rule is not None:
        # a block is skipped when it starts with one of Kineto's own event heads (its exact indentation and key
        # order) and with none of the `unless` heads; any other layout is decoded
        pieces = [p for p in pieces if not p.startswith(rule.skip) or p.startswith(rule.unless)]
    if not pieces:
        stats["skipped"] = stats.get("skipped", 0) + num_blocks
        return []
    try:
        events = json.loads("[{" + "},{".join(pieces) + "}]")
    except (ValueError, RecursionError):  # the element-by-element path names the problem and its position
        return None
    if len(events) != len(pieces):
        return None
    stats["skipped"] = stats.get("skipped", 0) + num_blocks - len(pieces)
    return events
