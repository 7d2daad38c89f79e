"""Reading crawl dumps for the batch CLI: JSON lines and WARC files, streamed one document at a time.

* JSONL: one object per line with ``url`` and either ``html`` or ``text``; ``.jsonl.gz`` is read too.
* WARC / WARC.gz: ``response`` records with an HTML content type (read with warcio); the record's
  ``WARC-Target-URI`` is the document's URL.

Lines or records that cannot be read are counted in :attr:`DocumentReader.errors` and passed over; one bad
line never ends a run.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Document:
    url: str
    html: str | bytes | None = None
    text: str | None = None


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


class BadLine(ValueError):
    """A JSON line that is not ``{"url", "html"}`` or ``{"url", "text"}``."""


def parse_line(raw: RawLine) -> Document:
    try:
        row = json.loads(raw.line.decode("utf-8", errors="replace"))
        url = row["url"]
        html, text = row.get("html"), row.get("text")
        if not isinstance(url, str) or not (isinstance(html, str) or isinstance(text, str)):
            raise ValueError("needs a string 'url' and a string 'html' or 'text'")
    except (ValueError, KeyError, TypeError) as exc:
        raise BadLine(f"{raw.path}:{raw.number}: line passed over: {exc}") from None
    return Document(url, html=html if isinstance(html, str) else None, text=text if html is None else None)


class DocumentReader:
    """Documents of JSONL and WARC files, in order. With ``raw_lines``, JSON lines come as :class:`RawLine`
    for the caller to parse (with :func:`parse_line`) and to count in :meth:`bad_line`."""

    def __init__(self, paths: list[str], raw_lines: bool = False) -> None:
        self.paths = paths
        self.raw_lines = raw_lines
        self.errors = 0
        self.passed_over = 0  # WARC records that are not HTML responses

    def __iter__(self) -> Iterator[Document | RawLine]:
        for path in self.paths:
            yield from (self._warc(path) if _is_warc(path) else self._jsonl(path))

    def bad_line(self, message: str) -> None:
        self.errors += 1
        logger.warning("%s", message)

    def _jsonl(self, path: str) -> Iterator[Document | RawLine]:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:  # type: ignore[operator]
            for number, line in enumerate(f, 1):
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

    def _warc(self, path: str) -> Iterator[Document]:
        try:
            from warcio.archiveiterator import ArchiveIterator
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise SystemExit("Reading WARC files needs warcio: pip install 'scrapy-neardup[warc]'") from exc
        with open(path, "rb") as f:
            try:
                for record in ArchiveIterator(f, arc2warc=True):
                    if record.rec_type != "response":
                        continue
                    ctype = (record.http_headers.get_header("Content-Type") if record.http_headers else "") or ""
                    if "html" not in ctype.lower():
                        self.passed_over += 1
                        continue
                    url = record.rec_headers.get_header("WARC-Target-URI") or ""
                    body = record.content_stream().read()
                    yield Document(url, html=_decode(body, ctype))
            except Exception as exc:  # a truncated or corrupt archive: keep what was read
                self.errors += 1
                logger.warning("%s: WARC reading stopped early: %s", path, exc)


def _decode(body: bytes, content_type: str) -> str | bytes:
    """Decode with the declared charset; otherwise leave bytes for lxml to sniff (meta charset)."""
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            try:
                return body.decode(value.strip().strip("'\""), errors="replace")
            except LookupError:
                break
    return body
