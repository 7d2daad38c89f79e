"""Which responses cross to an extraction worker, and as what: the cheap checks run in the crawler process,
so that a body that is skipped (empty, too large, binary) never crosses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..workers import analyze_html, analyze_text

if TYPE_CHECKING:
    from scrapy.http import Response

    from ..workers import AtSend


@dataclass(frozen=True)
class Skip:
    """A document passed on unchecked: ``reason`` is its ``neardup/skipped/<reason>`` counter (``empty``,
    ``status``, ``worker_lost``, ``store_error``, ...: docs/reference.md), ``error`` what went wrong, when
    something did (a lost worker, a timeout, the store's failure), for the log line."""

    reason: str
    error: BaseException | None = None


@dataclass(frozen=True)
class Job:
    """What a worker needs to analyse a document: an HTML ``body`` with its ``url`` and ``content_type`` (a
    response), or a ``text`` (an item's field)."""

    body: bytes | None = None
    url: str | None = None
    content_type: str | None = None
    text: str | None = None

    @property
    def is_html(self) -> bool:
        return self.body is not None

    def call(self, offers: bytes | AtSend | None = None) -> tuple[Any, ...]:
        """The worker function and its arguments (plain values: what crosses to a worker process); ``offers``:
        the page's host's learned selectors (:mod:`scrapy_neardup.engine.learned`), pickled (or made so when
        a worker takes the page), when templates are learned."""
        if self.body is not None:
            return (analyze_html, self.body, self.url, self.content_type, offers)
        return (analyze_text, self.text)


def response_job(response: Response, max_body_size: int) -> Job | Skip:
    """What a worker needs to analyse a response, or why it is skipped."""
    body = response.body
    if not body or body.isspace():  # isspace: no copy of the body, as strip() would make
        return Skip("empty")
    if len(body) > max_body_size:
        return Skip("too_large")
    content_type = response.headers.get(b"Content-Type")
    if looks_binary(body, content_type):
        return Skip("binary")
    return Job(body, response.url, content_type.decode("latin-1") if content_type else None)


def text_job(text: str) -> Job:
    return Job(text=text)


#: Byte-order marks of the encodings whose text is full of NUL bytes.
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def _wide_encoding(body: bytes, content_type: bytes | None) -> bool:
    """Whether the body is declared UTF-16 or UTF-32 (by a byte-order mark or the ``Content-Type``
    charset): its NUL bytes are then text, not a sign of binary data."""
    if body.startswith(_WIDE_BOMS):
        return True
    if content_type:
        charset = content_type.lower().partition(b"charset=")[2].split(b";")[0].strip(b" \"'")
        return charset.replace(b"-", b"").replace(b"_", b"").startswith((b"utf16", b"utf32", b"ucs2", b"ucs4"))
    return False


def looks_binary(body: bytes, content_type: bytes | None = None) -> bool:
    head = body[:2048]
    if b"\x00" in head and not _wide_encoding(body, content_type):
        return True
    return head.startswith((b"%PDF", b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"PK\x03\x04", b"\x1f\x8b"))


_HTML_TYPES = (b"text/html", b"application/xhtml+xml")


def is_html(response: Response) -> bool:
    """Whether a response is an HTML page (by its class, or a text response's ``Content-Type``)."""
    from scrapy.http import HtmlResponse, TextResponse

    if isinstance(response, HtmlResponse):
        return True
    content_type = response.headers.get(b"Content-Type", b"") or b""
    return isinstance(response, TextResponse) and content_type.split(b";")[0].strip().lower() in _HTML_TYPES
