"""Requests the URL rules predict to be duplicates (``NEARDUP_URL_RULES`` ``skip`` or ``deprioritize``): in
drop mode left unfetched, replaced by a request for their group's page, or sent back to the scheduler at a
lower priority, before they are downloaded; in tag mode fetched, and passed on tagged from the prediction
without being extracted, since tag mode passes every page the spider asked for
(:mod:`scrapy_neardup.engine.urlrules`)."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest

from ..engine.urlrules import same_host
from .meta import (
    META_DECLARED_BY,
    META_ENABLED,
    META_KEY,
    META_PREDICTED,
    META_PREDICTED_GROUP,
    META_REWRITTEN_FROM,
    carried_meta,
)

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from .service import NearDupService

#: How much lower a deprioritized request's priority is made.
DEPRIORITIZE_BY = 1000


def explored(url: str, share: float) -> bool:
    """Whether a predicted duplicate is fetched anyway: ``share`` of them, chosen by a stable hash of the
    URL (the same URLs in every process and every crawl, so that a re-crawl gives the same verdicts)."""
    return zlib.crc32(url.encode("utf-8", "surrogateescape")) % 10_000 < share * 10_000


class RulePredictor:
    def __init__(self, crawler: Crawler, service: NearDupService) -> None:
        self.crawler = crawler
        self.service = service
        self.mode = service.config.url_rules
        self.budget = service.config.group_budget
        self.on = self.mode in ("skip", "deprioritize") and not service.config.item_field
        #: Tag mode passes every page the spider asked for: a predicted copy is fetched, and tagged from the
        #: prediction instead of being extracted (the rules save work there, not fetches).
        self.tags = service.config.action == "tag"

    def may_predict(self, request: Request) -> bool:
        """Never a request the spider asked to fetch whatever (``dont_filter``), one left unchecked, one
        with a key of its own, one of the plugin's own, or one predicted before."""
        meta = request.meta
        return self.on and not (
            request.dont_filter
            or meta.get(META_ENABLED, True) is False
            or meta.get(META_KEY)
            or meta.get(META_DECLARED_BY) is not None
            or meta.get(META_PREDICTED) is not None
        )

    async def screened(self, request: Request) -> Request | None:
        """A request the URL rules predict to be a duplicate. It is fetched when it is its group's page (the
        page the group reaches the spider through) or explored; else it is left unfetched (``IgnoreRequest``)
        when its group's page was fetched in this crawl already, or replaced by a request for that page
        (through the scheduler, whose dupefilter keeps the page to one fetch) when it was not: a skip never
        removes the page a group reaches the spider through, in this crawl or the next."""
        service = self.service
        prediction = await service.store_thread.predicted(request.url)
        if prediction is None:
            return None
        report = service.report
        if prediction.decided and prediction.group == request.url:
            report.count("neardup/url_rules/group_page")
            return None
        if explored(request.url, prediction.explore):
            report.count("neardup/url_rules/explored")
            request.meta[META_PREDICTED] = prediction.target
            return None
        if self.tags:
            if prediction.decided and prediction.group is not None:
                request.meta[META_PREDICTED] = prediction.target
                request.meta[META_PREDICTED_GROUP] = prediction.group
            return None
        group = prediction.group
        if self.budget and group and await service.store_thread.admitted(group, request.url, self.budget):
            # A copy its group's budget lets through (NEARDUP_GROUP_BUDGET), admitted now or by an earlier
            # crawl: fetched, in every crawl, so that the same copies reach the spider.
            report.count("neardup/budget/fetched")
            return None
        if self.mode == "deprioritize":
            engine = self.crawler.engine
            if engine is not None:
                report.count("neardup/url_rules/deprioritized")
                engine.crawl(
                    request.replace(
                        priority=request.priority - DEPRIORITIZE_BY,
                        meta={**request.meta, META_PREDICTED: prediction.target},
                        dont_filter=True,
                    )
                )
                raise IgnoreRequest(f"scrapy-neardup: {request.url} sent back at a lower priority")
            return None
        page = prediction.target if not prediction.decided else prediction.group
        if page is not None and not prediction.group_fetched and page != request.url:
            if prediction.decided and not same_host(request.url, page):
                page = None  # a group of another host: this page would be its near-duplicate, not its way in
            else:
                # Its page, by the rules, is the one at the rewritten URL (or its group's page), not fetched in
                # this crawl: that URL is requested in its place, through the scheduler.
                report.count("neardup/url_rules/rewritten")
                report.avoided(request.url, prediction.target, page, prediction.rules)
                report.log_once(
                    "rewritten",
                    f"{request.url} requested as {page}: the URL rules {', '.join(prediction.rules)} of its "
                    "host make it that page (such requests are counted in neardup/url_rules/rewritten; see "
                    "NEARDUP_URL_RULES)",
                )
                return request.replace(
                    url=page, meta={**request.meta, META_PREDICTED: request.url, META_REWRITTEN_FROM: request.url}
                )
        report.count("neardup/skipped/predicted")
        report.predicted(request.url, prediction.target, prediction.group or prediction.target, prediction.rules)
        raise IgnoreRequest(
            f"scrapy-neardup: {request.url} not fetched: its URL rules make it {prediction.target}, met before"
        )

    def fell_back(self, request: Request, why: str) -> Request:
        """A request made in a predicted duplicate's place that brought no page: the URL asked is fetched after
        all (a rewrite into a URL that does not exist is a wrong prediction, never a lost page)."""
        asked = str(request.meta[META_REWRITTEN_FROM])
        self.service.report.count("neardup/url_rules/fell_back")
        self.service.report.log_once(
            "fell_back",
            f"{asked} was requested as {request.url}, which brought no page ({why}): fetched as itself after all "
            "(such requests are counted in neardup/url_rules/fell_back)",
        )
        return request.replace(url=asked, meta={**carried_meta(request.meta), META_PREDICTED: asked}, dont_filter=True)
