"""Reading crawl dumps for the batch CLI: JSON lines and WARC files, streamed one document at a time.

* JSONL: one object per line with ``url`` and either ``html`` or ``text``, and optionally ``canonical`` (the
  URL the document declares canonical, for documents without their HTML); ``.jsonl.gz`` is read too.
* WARC / WARC.gz: ``response`` records with an HTML content type (read with warcio); the record's
  ``WARC-Target-URI`` is the document's URL, a ``Link: <...>; rel="canonical"`` header of its HTTP response
  its declaration (the page's own ``<link rel="canonical">`` is read with its HTML).

Lines or records that cannot be read are counted in :attr:`DocumentReader.errors` and passed over; one bad
line never ends a run (a line nested too deeply for the JSON parser included). A line or record larger than
``max_size`` bytes is counted in :attr:`DocumentReader.too_large` and passed over without being held in
memory whole. A file that cannot be read at all, or stops being readable part-way (a truncated
``.gz``, a cut WARC), raises :class:`InputError`, one line naming the file, the cause and how far it got:
a run over incomplete input is not a result.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..engine.canonical import Declaration, canonical_url, link_header_canonical

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Document:
    """One input document; ``declared``: what its HTTP ``Link`` header or its record's ``canonical`` field
    declares canonical (its HTML's own declaration is read with the HTML). A WARC record's HTML stays bytes,
    with its ``content_type``, until a worker decodes it (:func:`~scrapy_neardup.engine.extract.decode_html`,
    as a crawl does)."""

    url: str
    html: str | bytes | None = None
    text: str | None = None
    declared: Declaration | None = None
    content_type: str | None = None


def _is_warc(path: str) -> bool:
    return path.lower().endswith((".warc", ".warc.gz", ".arc", ".arc.gz"))


@dataclass(frozen=True)
class RawLine:
    """A JSON line not decoded or parsed yet: both are left to the worker processes of a batch run."""

    path: str
    number: int
    line: bytes

    @property
    def size(self) -> int:
        return len(self.line)


class InputError(Exception):
    """An input file that cannot be read, or not to its end; the message is one line naming the file."""


#: How WARC and ARC files begin (after gzip, if compressed).
_WARC_MAGIC = (b"WARC/", b"filedesc://")


def check_inputs(paths: list[str]) -> None:
    """Refuse, before any work, an input that is missing, not a file, unreadable, or a WARC name on
    something that is not a WARC file."""
    for path in paths:
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file")
        if not os.path.isfile(path):
            raise InputError(f"{path}: not a file (a directory?); give the files inside it")
        try:
            with open(path, "rb") as f:
                head = f.read(64)
                if _is_warc(path) and head[:2] == b"\x1f\x8b":
                    f.seek(0)
                    with gzip.open(f) as unzipped:
                        head = unzipped.read(64)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: cannot be read: {exc}") from None
        if _is_warc(path) and head and not head.startswith(_WARC_MAGIC):
            raise InputError(
                f"{path}: not a WARC file (it begins {head[:24]!r}); JSON lines files must be named .jsonl or .jsonl.gz"
            )


class BadLine(ValueError):
    """A JSON line that is not ``{"url", "html"}`` or ``{"url", "text"}``."""


def parse_line(raw: RawLine) -> Document:
    """The document of a JSON line; :class:`BadLine` saying what is wrong with it, in one line."""
    where = f"{raw.path}:{raw.number}: line passed over"
    try:
        row = json.loads(raw.line.decode("utf-8", errors="replace"))
    except RecursionError:
        raise BadLine(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:
        problem = exc.msg if isinstance(exc, json.JSONDecodeError) else "invalid"
        # json's "Unterminated string starting at" ends in the word the column follows.
        at = "" if problem.endswith(" at") else " at"
        column = f"{at} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise BadLine(f"{where}: not JSON ({problem.lower()}{column})") from None
    if not isinstance(row, dict):
        raise BadLine(f'{where}: {_json_kind(row)}, not a JSON object with "url" and "html" or "text"')
    url, html, text = row.get("url"), row.get("html"), row.get("text")
    if "url" not in row:
        raise BadLine(f'{where}: no "url" field')
    if not isinstance(url, str) or not url.strip():
        raise BadLine(f'{where}: "url" is {_json_kind(url)}, not a non-empty string')
    if html is None and text is None:
        raise BadLine(f'{where}: no "html" or "text" field')
    for name, value in (("html", html), ("text", text)):
        if value is not None and not isinstance(value, str):
            raise BadLine(f'{where}: "{name}" is {_json_kind(value)}, not a string')
    field = row.get("canonical")
    declared = canonical_url(field, url) if isinstance(field, str) else None
    return Document(
        url,
        html=html,
        text=text if html is None else None,
        declared=Declaration(declared, "field") if declared else None,
    )


def _json_kind(value: object) -> str:
    """What a JSON value is, in words: "a list", "a number", "null"."""
    if value is None:
        return "null"
    kinds = (
        (bool, "a boolean"),
        (int, "a number"),
        (float, "a number"),
        (str, "a string"),
        (list, "a list"),
        (dict, "an object"),
    )
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


@dataclass(frozen=True)
class ReadCounts:
    """What reading passed over: unreadable lines, lines or records over the size limit, WARC records that
    are not HTML responses, HTML responses that are not 2xx; the files used only up to a cut
    (``--allow-truncated``), and the messages of files that could not be read (summed over a Spark job's
    splits)."""

    unreadable: int = 0
    too_large: int = 0
    not_html: int = 0
    not_ok: int = 0
    truncated: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()

    def __add__(self, other: ReadCounts) -> ReadCounts:
        return ReadCounts(
            self.unreadable + other.unreadable,
            self.too_large + other.too_large,
            self.not_html + other.not_html,
            self.not_ok + other.not_ok,
            self.truncated + other.truncated,
            self.failures + other.failures,
        )


class DocumentReader:
    """Documents of JSONL and WARC files, in order. With ``raw_lines``, JSON lines come as :class:`RawLine`
    for the caller to parse (with :func:`parse_line`) and to count in :meth:`bad_line`."""

    def __init__(
        self,
        paths: list[str],
        raw_lines: bool = False,
        max_size: int | None = None,
        quiet: bool = False,
        warc_reader: str = "auto",
        allow_truncated: bool = False,
    ) -> None:
        self.paths = paths
        #: A file cut short is read to its last complete record or line (said in a WARNING, listed in
        #: :attr:`truncated`) instead of failing the run.
        self.allow_truncated = allow_truncated
        self.truncated: list[str] = []
        #: ``auto``: FastWARC for WARC files where it is installed, warcio otherwise (and for ARC files).
        self.warc_reader = warc_reader
        self.quiet = quiet  # a first pass over the input: its main pass says what is wrong
        self.raw_lines = raw_lines
        self.max_size = max_size
        self.errors = 0
        self._done_bytes = 0  # input bytes of the files read to their end
        self._position: Any = None  # the offset reached in the file being read (compressed bytes for .gz)
        self.passed_over = 0  # WARC records that are not HTML responses
        self.not_ok = 0  # WARC HTML responses whose status is not 2xx (a crawl checks none of them)
        self.too_large = 0  # lines or records over max_size bytes

    def __iter__(self) -> Iterator[Document | RawLine]:
        self._done_bytes = 0
        for path in self.paths:
            yield from (self._warc(path) if _is_warc(path) else self._jsonl(path))
            self._done_bytes += os.path.getsize(path)
            self._position = None

    @property
    def fraction(self) -> float | None:
        """How much of the input (in bytes of the files as stored) has been read; ``None`` if unknown."""
        try:
            total = sum(os.path.getsize(p) for p in self.paths)
            here = self._position() if self._position is not None else 0
        except (OSError, ValueError):
            return None
        return min(1.0, (self._done_bytes + here) / total) if total else None

    def counts(self, failures: tuple[str, ...] = ()) -> ReadCounts:
        """What this reader passed over so far, with ``failures``: messages of files it could not read."""
        return ReadCounts(self.errors, self.too_large, self.passed_over, self.not_ok, tuple(self.truncated), failures)

    def bad_line(self, message: str) -> None:
        self.errors += 1
        if not self.quiet:
            logger.warning("%s", message)

    def _jsonl(self, path: str) -> Iterator[Document | RawLine]:
        opener = gzip.open if path.endswith(".gz") else open
        number = 0
        limit = self.max_size
        try:
            with opener(path, "rb") as f:
                self._position = getattr(f, "fileobj", f).tell
                while True:
                    line = f.readline() if limit is None else f.readline(limit + 1)
                    if not line:
                        break
                    number += 1
                    if limit is not None and len(line) > limit:
                        while line and not line.endswith(b"\n"):  # the rest of the line, a piece at a time
                            line = f.readline(1 << 20)
                        self.too_large += 1
                        if not self.quiet:
                            logger.warning("%s:%d: line passed over: larger than %d bytes", path, number, limit)
                        continue
                    if not line.strip():
                        continue
                    raw = RawLine(path, number, line)
                    if self.raw_lines:
                        yield raw
                        continue
                    try:
                        yield parse_line(raw)
                    except BadLine as exc:
                        self.bad_line(str(exc))
        except (OSError, EOFError, zlib.error) as exc:  # a corrupt or truncated .gz, a disk error
            if isinstance(exc, EOFError) and self._cut_short(path, f"after line {number}"):
                return
            hint = "; pass --allow-truncated to use the lines before the cut" if isinstance(exc, EOFError) else ""
            raise InputError(f"{path}: reading stopped after line {number}: {exc}{hint}") from None

    def _warc(self, path: str) -> Iterator[Document]:
        """The HTML responses of a WARC or ARC file, read with FastWARC where it is installed (WARC only) and
        warcio otherwise. A gzipped file is decompressed here, as one stream whether its records are gzip
        members of their own or the whole file is one (both are found in the wild), so that a file cut short
        is an error of Python's gzip, never a silent end."""
        records = 0
        with open(path, "rb") as raw, _Watched(gzip.open(raw, "rb") if _is_gzip(path) else raw) as f:
            self._position = raw.tell
            try:
                with _quiet_warcio(self.quiet):
                    fast = self.warc_reader == "fastwarc" or (self.warc_reader == "auto" and _fastwarc() is not None)
                    if fast and _fastwarc() is None:
                        raise InputError("--warc-reader fastwarc needs FastWARC: pip install fastwarc")
                    reader = self._fastwarc if fast and not _is_arc(path) else self._warcio
                    for doc in reader(f):
                        records += 1
                        if doc is not None:
                            yield doc
                if f.failure is not None:  # a reader that ended quietly on the stream's error
                    raise f.failure
            except InputError:
                raise
            except Exception as exc:  # noqa: BLE001 - a truncated or corrupt archive (the readers raise many kinds)
                size, where = os.path.getsize(path), raw.tell()
                if where >= size or isinstance(exc, EOFError):
                    if self._cut_short(path, f"inside record {records + 1}, after {records} complete records"):
                        return
                    raise InputError(
                        f"{path}: truncated: the file ends inside record {records + 1}, after "
                        f"{records} complete records ({size:,} bytes); pass --allow-truncated to use them"
                    ) from None
                message = " ".join(str(exc).split())  # warcio's messages run over several lines
                raise InputError(
                    f"{path}: WARC reading stopped at record {records + 1} (byte {where:,} of "
                    f"{size:,}): {type(exc).__name__}: {message}"
                ) from None

    def _cut_short(self, path: str, where: str) -> bool:
        """A file that ends early: with ``allow_truncated``, said loudly and its complete part kept (True);
        else False, for the caller to fail the run."""
        if not self.allow_truncated:
            return False
        if path not in self.truncated:
            self.truncated.append(path)
            if not self.quiet:
                logger.warning(
                    "%s: TRUNCATED: the file ends %s; what came before the cut was used (--allow-truncated), "
                    "the rest of the file is lost",
                    path,
                    where,
                )
        return True

    def _warcio(self, stream) -> Iterator[Document | None]:
        from warcio.archiveiterator import ArchiveIterator

        for record in ArchiveIterator(stream, arc2warc=True):
            yield self._warc_document(record)

    def _warc_document(self, record) -> Document | None:
        """The document of an HTML ``response`` record; ``None`` for any other record. Every record is read
        to its end, because warcio ends a cut file without an error: a record whose block is shorter than
        its ``Content-Length`` is how a truncated file shows."""
        doc = None
        ctype = (record.http_headers.get_header("Content-Type") if record.http_headers else "") or ""
        status = record.http_headers.get_statuscode() if record.http_headers else ""
        if record.rec_type == "response" and "html" in ctype.lower() and not _ok_status(status):
            self.not_ok += 1
        elif record.rec_type == "response" and "html" in ctype.lower():
            url = record.rec_headers.get_header("WARC-Target-URI") or ""
            limit = self.max_size
            body = record.content_stream().read() if limit is None else record.content_stream().read(limit + 1)
            if limit is not None and len(body) > limit:
                self.too_large += 1
                if not self.quiet:
                    logger.warning(
                        "%s: record of %s passed over: larger than %d bytes",
                        record.rec_headers.get_header("WARC-Record-ID") or "a WARC record",
                        url,
                        limit,
                    )
            else:
                links = [value for name, value in record.http_headers.headers if name.lower() == "link"]
                declared = link_header_canonical(links, url) if links else None
                doc = Document(
                    url, html=body, declared=Declaration(declared, "header") if declared else None, content_type=ctype
                )
        elif record.rec_type == "response":
            self.passed_over += 1
        while record.raw_stream.read(1 << 20):
            pass
        if getattr(record.raw_stream, "limit", 0) > 0:
            raise EOFError("record shorter than its Content-Length")
        return doc

    def _fastwarc(self, stream) -> Iterator[Document | None]:
        fastwarc = _fastwarc()
        assert fastwarc is not None
        for record in fastwarc.ArchiveIterator(
            stream, record_types=fastwarc.WarcRecordType.response, parse_http=True, stream_detect=False
        ):
            ctype = (record.http_headers.get("Content-Type") if record.http_headers is not None else "") or ""
            if "html" not in ctype.lower():
                self.passed_over += 1
                yield None
                continue
            if not _ok_status(record.http_headers.status_code):
                self.not_ok += 1
                yield None
                continue
            url = record.headers.get("WARC-Target-URI") or ""
            limit = self.max_size
            body = record.reader.read() if limit is None else record.reader.read(limit + 1)
            if limit is not None and len(body) > limit:
                self.too_large += 1
                if not self.quiet:
                    logger.warning(
                        "%s: record of %s passed over: larger than %d bytes",
                        record.headers.get("WARC-Record-ID") or "a WARC record",
                        url,
                        limit,
                    )
                yield None
                continue
            if len(body) < record.content_length:
                raise EOFError("record shorter than its Content-Length")
            links = [value for name, value in record.http_headers.astuples() if name.lower() == "link"]
            declared = link_header_canonical(links, url) if links else None
            yield Document(
                url, html=body, declared=Declaration(declared, "header") if declared else None, content_type=ctype
            )


class _Watched:
    """A binary stream that remembers the error it raised (a gzip stream cut short raises ``EOFError``), for
    a reader that ends quietly on one (warcio does)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.failure: Exception | None = None

    def _watch(self, fn, *args):
        try:
            return fn(*args)
        except (OSError, EOFError, zlib.error) as exc:
            self.failure = exc
            raise

    def read(self, *args):
        return self._watch(self.stream.read, *args)

    def readline(self, *args):
        return self._watch(self.stream.readline, *args)

    def readinto(self, buffer):
        return self._watch(self.stream.readinto, buffer)

    def tell(self) -> int:
        return self.stream.tell()

    def __enter__(self) -> _Watched:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.close()


def _ok_status(status: object) -> bool:
    """Whether an archived response's HTTP status is 2xx: the responses a crawl checks (it passes the others
    over, a "not found" page and a redirect included)."""
    try:
        return 200 <= int(str(status)) < 300
    except ValueError:
        return False


def _is_arc(path: str) -> bool:
    return path.lower().endswith((".arc", ".arc.gz"))


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _fastwarc():
    """FastWARC's reader module when it is installed (``pip install fastwarc``), else ``None``."""
    try:
        from fastwarc import warc
    except ImportError:
        return None
    return warc


class _quiet_warcio:  # noqa: N801 - a context manager, named as the statement reads
    """Silences warcio's own warnings (a URL with spaces, say) in a first pass over an input: the main pass
    says them once."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.logger = logging.getLogger("warcio")

    def __enter__(self) -> None:
        if self.quiet:
            self.previous = self.logger.level
            self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: object) -> None:
        if self.quiet:
            self.logger.setLevel(self.previous)
