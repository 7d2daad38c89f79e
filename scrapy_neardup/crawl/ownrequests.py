"""The plugin's own requests (a declared page fetched before its copy is decided, a soft-404 probe): sent
through every downloader middleware (robots.txt, the allowed domains, the download delay, retries,
redirects) as a redirect would be, not through the scheduler, and their responses prepared in a worker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.defer import maybe_deferred_to_future

from ..engine.prepare import Prepared
from .screening import Skip, response_job

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from .service import NearDupService


class OwnRequests:
    def __init__(self, crawler: Crawler, service: NearDupService) -> None:
        self.crawler = crawler
        self.service = service

    async def download(self, request: Request) -> Response:
        engine = self.crawler.engine
        assert engine is not None
        if hasattr(engine, "download_async"):
            return await engine.download_async(request)
        return await maybe_deferred_to_future(engine.download(request))  # pragma: no cover - Scrapy < 2.14

    async def prepared(self, response: Response, short: bool = False) -> Prepared | None:
        """A response fingerprinted; ``None`` when it has no text to judge (``short``: a text too short to
        fingerprint is one, for a soft-404 answer)."""
        service = self.service
        job = response_job(response, service.config.max_body_size)
        if isinstance(job, Skip):
            return None
        prepared = await service.preparer.prepare(job)
        if isinstance(prepared, Skip):
            return None
        if prepared.fingerprint is None and not (short and prepared.short_text):
            return None
        return prepared
