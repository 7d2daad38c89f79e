"""Downloader middleware: fingerprint each HTML response and drop or tag near-duplicates.

Order 540 (see :mod:`scrapy_neardup.addon`): ``process_response`` runs from high to low order numbers, so
at 540 a response has been decompressed (HttpCompressionMiddleware, 590), redirects have been followed
(RedirectMiddleware, 600) and retries are settled (RetryMiddleware, 550). A dropped page raises
:class:`~scrapy.exceptions.IgnoreRequest`: the spider never parses it and its links are never followed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, TextResponse

from ..engine.extract import link_header_canonical
from .service import NearDupService, verdict_meta

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

#: ``Request.meta`` key: set to ``False`` to leave a request's response unchecked.
META_ENABLED = "neardup_enabled"
#: ``Request.meta`` key: the key a page is filed under instead of its URL.
META_KEY = "neardup_key"
#: ``Request.meta`` key the verdict is written to (a dict, see docs/reference.md).
META_VERDICT = "neardup"
#: Flag added to ``Response.flags`` of a near-duplicate in tag mode.
FLAG = "near-duplicate"

_HTML_TYPES = (b"text/html", b"application/xhtml+xml")


def is_html(response: Response) -> bool:
    if isinstance(response, HtmlResponse):
        return True
    content_type = response.headers.get(b"Content-Type", b"") or b""
    return isinstance(response, TextResponse) and content_type.split(b";")[0].strip().lower() in _HTML_TYPES


class NearDupDownloaderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.service = NearDupService.for_crawler(crawler)
        self.config = self.service.config
        if self.config.item_field:
            # Items carry the text to compare; pages are not fingerprinted as well.
            self.check_pages = False
        else:
            self.check_pages = True

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_response(self, request: Request, response: Response, spider: object = None) -> Response:
        service = self.service
        if service.refused:  # the store could not be opened and the spider is closing: nothing unchecked
            raise IgnoreRequest(f"scrapy-neardup: the store could not be opened ({service.refused})")
        if not self.check_pages:
            return response
        if request.meta.get(META_ENABLED, True) is False:
            service.skip("disabled", response.url)
            return response
        if not 200 <= response.status < 300:
            service.skip("status", response.url)
            return response
        if not is_html(response):
            service.skip("not_html", response.url)
            return response
        own_key = request.meta.get(META_KEY)
        key = own_key or response.url
        declared = None
        if self.config.canonical and not own_key:
            links = response.headers.getlist(b"Link")
            if links:
                declared = link_header_canonical([v.decode("latin-1") for v in links], response.url)
        prepared, verdict = await service.check(str(key), service.response_job(response), url=response.url,
                                                declared=declared, own_key=bool(own_key))
        if verdict is None:
            request.meta[META_VERDICT] = {"status": "skipped", "reason": prepared.skip_reason or "store_error"}
            return response
        request.meta[META_VERDICT] = verdict_meta(verdict)
        if verdict.is_duplicate:
            if self.config.action == "drop":
                service.stats.inc_value("neardup/dropped")
                raise IgnoreRequest(f"near-duplicate of {verdict.canonical} (similarity {verdict.similarity:.3f})")
            service.stats.inc_value("neardup/tagged")
            return response.replace(flags=[*response.flags, FLAG])
        return response
