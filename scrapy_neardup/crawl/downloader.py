"""Downloader middleware: fingerprint each HTML response and drop or tag near-duplicates.

Order 540 (see :mod:`scrapy_neardup.addon`): ``process_response`` runs from high to low order numbers, so
at 540 a response has been decompressed (HttpCompressionMiddleware, 590), redirects have been followed
(RedirectMiddleware, 600) and retries are settled (RetryMiddleware, 550). A dropped page raises
:class:`~scrapy.exceptions.IgnoreRequest`: the spider never parses it and its links are never followed.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, TextResponse
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from ..engine.canonical import Declaration, link_header_canonical, may_fetch, site_of
from ..engine.decisions import Declared
from ..engine.urlrules import same_host
from .reporting import verdict_meta
from .screening import response_job
from .service import NearDupService, Prepared
from .soft404 import Answer

if TYPE_CHECKING:
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
#: ``Request.meta`` keys of the plugin's own requests for a declared canonical page: fetched first, before the
#: copy that declared it is decided (the value: the copy's URL); and followed afterwards, through the
#: scheduler, so that the declared original reaches the spider (the value: the copy's URL).
META_DECLARED_BY = "neardup_declared_by"
META_FOLLOWED_FROM = "neardup_followed_from"
#: ``Request.meta`` key of a request the URL rules predicted to be a duplicate (the value: the URL already
#: decided that its URL becomes): fetched anyway to keep checking the rules, or sent back to the scheduler
#: at a lower priority (``NEARDUP_URL_RULES = "deprioritize"``).
META_PREDICTED = "neardup_predicted"
#: ``Request.meta`` key of a request made in the place of a predicted duplicate (the value: the URL asked):
#: when it is not answered with a page (a 4xx or 5xx, a failure), that URL is fetched after all.
META_REWRITTEN_FROM = "neardup_rewritten_from"
#: ``Request.meta`` key of the plugin's request for a URL of a host that cannot exist (the value: the URL of
#: the page that made it ask): its answer is the host's soft-404 page (``NEARDUP_SOFT404``).
META_SOFT404_PROBE = "neardup_soft404_probe"
#: Flag added to ``Response.flags`` of a soft-404 page in tag mode.
SOFT404_FLAG = "soft-404"
#: How much lower a deprioritized request's priority is made.
DEPRIORITIZE_BY = 1000
#: Responses of declared pages fetched first, kept for the first request of their URL (no second download).
MAX_KEPT_RESPONSES = 256
#: How long a copy waits for its declared page's own request, already being downloaded, to be decided.
DECLARED_WAIT_SECS = 30.0

_HTML_TYPES = (b"text/html", b"application/xhtml+xml")


def explored(url: str, share: float) -> bool:
    """Whether a predicted duplicate is fetched anyway: ``share`` of them, chosen by a stable hash of the
    URL (the same URLs in every process and every crawl, so that a re-crawl gives the same verdicts)."""
    return zlib.crc32(url.encode("utf-8", "surrogateescape")) % 10_000 < share * 10_000


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
        # Items carry the text to compare (NEARDUP_ITEM_FIELD): pages are not fingerprinted as well.
        self.check_pages = not self.config.item_field
        self._kept: OrderedDict[str, Response] = OrderedDict()
        #: Copies waiting for the decision of a declared page whose own request is being downloaded (URL ->
        #: their Deferreds), and the URLs of the copies waiting (a copy never waits for a page waiting itself).
        self._deciding: dict[str, list[Deferred]] = {}
        self._waiting: set[str] = set()
        #: The declared page each copy fetched first (copy URL -> declared URL): in flight as that copy's probe,
        #: not as a request that comes back through process_response, so the copy's own decision releases the
        #: copies that wait for it.
        self._fetching_for: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_request(self, request: Request, spider: object = None) -> Request | Response | None:
        """A declared page fetched before its copy was decided: the response fetched then, if still kept, for
        the first request of that URL to come (the plugin's own, following the copy, or the spider's, queued
        before it: the page is downloaded once, whichever comes first, with any scheduler).
        With ``NEARDUP_URL_RULES`` ``skip`` or ``deprioritize``: a request the URL rules predict to be a
        duplicate is not fetched, or is sent back to the scheduler at a lower priority."""
        if self._kept and request.method == "GET" and request.meta.get(META_DECLARED_BY) is None:
            kept = self._kept.pop(request.url, None)
            if kept is not None:
                return kept.replace(request=request)
        if self.config.url_rules in ("skip", "deprioritize") and self._may_predict(request):
            return await self._predict(request)
        return None

    def _may_predict(self, request: Request) -> bool:
        """Never a request the spider asked to fetch whatever (``dont_filter``), one left unchecked, one
        with a key of its own, one of the plugin's own, or one predicted before."""
        meta = request.meta
        return not (
            request.dont_filter
            or meta.get(META_ENABLED, True) is False
            or meta.get(META_KEY)
            or meta.get(META_DECLARED_BY) is not None
            or meta.get(META_PREDICTED) is not None
            or not self.check_pages
        )

    async def _predict(self, request: Request) -> Request | None:
        """A request the URL rules predict to be a duplicate. It is fetched when it is its group's page (the
        page the group reaches the spider through) or explored; else it is left unfetched when its group's
        page was fetched in this crawl already, or replaced by a request for that page (through the
        scheduler, whose dupefilter keeps the page to one fetch) when it was not: a skip never removes the
        page a group reaches the spider through, in this crawl or the next."""
        service = self.service
        prediction = await service.predicted(request.url)
        if prediction is None:
            return None
        stats = service.stats
        if prediction.decided and prediction.group == request.url:
            stats.inc_value("neardup/url_rules/group_page")
            return None
        if explored(request.url, prediction.explore):
            stats.inc_value("neardup/url_rules/explored")
            request.meta[META_PREDICTED] = prediction.target
            return None
        if self.config.group_budget and prediction.group and await service.admitted(prediction.group, request.url):
            # A copy its group's budget lets through (NEARDUP_GROUP_BUDGET), admitted now or by an earlier
            # crawl: fetched, in every crawl, so that the same copies reach the spider.
            stats.inc_value("neardup/budget/fetched")
            return None
        if self.config.url_rules == "deprioritize":
            engine = self.crawler.engine
            if engine is not None:
                stats.inc_value("neardup/url_rules/deprioritized")
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
                stats.inc_value("neardup/url_rules/rewritten")
                service.report.avoided(request.url, prediction.target, page, prediction.rules)
                service.report.log_once(
                    "rewritten",
                    f"{request.url} requested as {page}: the URL rules {', '.join(prediction.rules)} of its "
                    "host make it that page (such requests are counted in neardup/url_rules/rewritten; see "
                    "NEARDUP_URL_RULES)",
                )
                return request.replace(
                    url=page, meta={**request.meta, META_PREDICTED: request.url, META_REWRITTEN_FROM: request.url}
                )
        stats.inc_value("neardup/skipped/predicted")
        service.report.predicted(
            request.url, prediction.target, prediction.group or prediction.target, prediction.rules
        )
        raise IgnoreRequest(
            f"scrapy-neardup: {request.url} not fetched: its URL rules make it {prediction.target}, met before"
        )

    async def process_response(self, request: Request, response: Response, spider: object = None) -> Response | Request:
        service = self.service
        service.report.fetched(response.url, len(response.body))
        if not 200 <= response.status < 300 and request.meta.get(META_REWRITTEN_FROM):
            return self._fall_back(request, f"status {response.status}")
        if service.refused:  # the store could not be opened and the spider is closing: nothing unchecked
            raise IgnoreRequest(f"scrapy-neardup: the store could not be opened ({service.refused})")
        if (
            not self.check_pages
            or request.meta.get(META_DECLARED_BY) is not None
            or request.meta.get(META_SOFT404_PROBE) is not None
        ):
            return response  # a declared page fetched first, or a probe: the check that asked decides
        if request.meta.get(META_ENABLED, True) is False:
            service.report.skip("disabled", response.url)
            return response
        if not 200 <= response.status < 300:
            service.report.skip("status", response.url)
            return response
        if not is_html(response):
            service.report.skip("not_html", response.url)
            return response
        own_key = request.meta.get(META_KEY)
        key = str(own_key or response.url)
        declaration = None
        if self.config.canonical and not own_key:
            links = response.headers.getlist(b"Link")
            if links:
                url = link_header_canonical([v.decode("latin-1") for v in links], response.url)
                declaration = Declaration(url, "header") if url else None

        async def fetch_first(page_key: str, declared_url: str) -> Declared | None:
            return await self._fetch_declared(request, page_key, declared_url)

        try:
            prepared, verdict = await service.check(
                key,
                response_job(response, self.config.max_body_size),
                url=response.url,
                declaration=declaration,
                own_key=bool(own_key),
                resolve=fetch_first if self.config.canonical_fetch != "none" else None,
                probe=self._probe if self.config.soft404 and not own_key else None,
            )
        finally:
            declared_fetched = self._fetching_for.pop(request.url, None)
            self._decided(request.url, response.url, *([declared_fetched] if declared_fetched else []))
        if verdict is None:
            request.meta[META_VERDICT] = {"status": "skipped", "reason": prepared.skip_reason or "store_error"}
            return response
        request.meta[META_VERDICT] = verdict_meta(verdict)
        if verdict.status == "soft404":
            if self.config.action == "drop":
                service.stats.inc_value("neardup/dropped")
                raise IgnoreRequest(f"soft-404 page: its host answers {verdict.canonical}, which cannot exist, alike")
            service.stats.inc_value("neardup/tagged")
            return response.replace(flags=[*response.flags, SOFT404_FLAG])
        if verdict.is_duplicate:
            if not own_key:
                await self._follow_group(request, verdict.canonical)
            if self.config.action == "drop":
                if not (self.config.group_budget and await service.admitted(verdict.canonical, key)):
                    service.stats.inc_value("neardup/dropped")
                    raise IgnoreRequest(f"near-duplicate of {verdict.canonical} (similarity {verdict.similarity:.3f})")
                service.stats.inc_value("neardup/budget/passed")  # within its group's budget: let through
            service.stats.inc_value("neardup/tagged")
            return response.replace(flags=[*response.flags, FLAG])
        return response

    async def _fetch_declared(self, request: Request, key: str, declared_url: str) -> Declared | None:
        """The page a response declares canonical, fetched before the response is decided, as a redirect
        would be (through every downloader middleware: robots.txt, allowed domains, retries, redirects), when
        it may be fetched (``NEARDUP_CANONICAL_FETCH``) and neither page is filed yet. ``None`` (decide the
        response on its own) when it is not fetched, fails, or is not an HTML page with text."""
        service = self.service
        if not may_fetch(self.config.canonical_fetch, request.url, declared_url):
            if self.config.canonical_fetch == "site" and await service.known(key, declared_url) == [False, False]:
                # A declaration that would have been fetched first under "all": said once, with the setting.
                service.stats.inc_value("neardup/canonical/other_site")
                service.report.log_once(
                    "canonical_other_site",
                    f"the page {declared_url} that {key} declares canonical is on another site than it "
                    f"({site_of(declared_url)}, not {site_of(key)}), so it is not fetched first and {key} is "
                    "checked on its own (such pages are counted in neardup/canonical/other_site); set "
                    "NEARDUP_CANONICAL_FETCH = 'all' to fetch declared pages of every site",
                )
            return None
        known = await service.known(key, declared_url)
        if known is None or any(known):  # a page filed before (a re-crawl), or the declared one: no fetch
            return None
        if declared_url not in self._waiting and self._in_flight(declared_url):
            # The spider's own request for it is being downloaded: its decision is awaited, not a second
            # download (the copy is then decided against the declared page, filed by then).
            service.stats.inc_value("neardup/canonical/awaited")
            await self._decision_of(request.url, declared_url)
            return None
        meta = {k: v for k, v in request.meta.items() if k not in _OWN_META}
        # Not dont_filter, whatever the copy's request says: the offsite check must apply to the declared page.
        probe = request.replace(url=declared_url, meta={**meta, META_DECLARED_BY: request.url}, dont_filter=False)
        self._fetching_for[request.url] = declared_url
        try:
            response = await self._download(probe)
        except Exception as exc:  # noqa: BLE001 - forbidden by robots.txt, off the allowed domains, unreachable
            service.stats.inc_value("neardup/canonical/fetch_failed")
            service.report.log_once(
                "canonical_fetch_failed",
                f"the page {declared_url} that {key} declares canonical could "
                f"not be fetched ({type(exc).__name__}: {exc}); {key} is checked on its own (such "
                "pages are counted in neardup/canonical/fetch_failed)",
            )
            return None
        if not 200 <= response.status < 300 or not is_html(response):
            service.stats.inc_value("neardup/canonical/fetch_failed")
            return None
        prepared = await self._prepared(response)
        if prepared is None:
            return None
        if response.url == key:
            return None  # the declaration led back to the page itself
        service.stats.inc_value("neardup/canonical/fetched")
        self._kept[response.url] = response
        while len(self._kept) > MAX_KEPT_RESPONSES:
            self._kept.popitem(last=False)
        return Declared(response.url, prepared)

    def _in_flight(self, url: str) -> bool:
        """Whether a request for ``url`` is being downloaded (or is in the downloader middlewares) now."""
        downloader = getattr(self.crawler.engine, "downloader", None)
        return downloader is not None and any(r.url == url for r in getattr(downloader, "active", ()))

    async def _decision_of(self, copy_url: str, url: str) -> None:
        """Until the page at ``url`` in flight is decided, or :data:`DECLARED_WAIT_SECS` have passed (its
        request failed, or was redirected elsewhere)."""
        from twisted.internet import reactor

        waiter: Deferred = Deferred()
        waiter.addTimeout(DECLARED_WAIT_SECS, reactor)
        self._deciding.setdefault(url, []).append(waiter)
        self._waiting.add(copy_url)
        try:
            await maybe_deferred_to_future(waiter)
        except Exception:  # noqa: BLE001 - a timeout: the copy is decided on its own
            self.service.stats.inc_value("neardup/canonical/await_timeout")
        finally:
            self._waiting.discard(copy_url)

    def _decided(self, *urls: str) -> None:
        """A page was decided (or failed): the copies waiting for it go on."""
        for url in urls:
            for waiter in self._deciding.pop(url, ()):
                if not waiter.called:
                    waiter.callback(None)

    def process_exception(self, request: Request, exception: BaseException, spider: object = None) -> Request | None:
        """A request that failed: the copies waiting for its page's decision go on; one made in a predicted
        duplicate's place falls back to that duplicate's URL."""
        if self._deciding:
            self._decided(request.url)
        if request.meta.get(META_REWRITTEN_FROM):
            return self._fall_back(request, type(exception).__name__)
        return None

    def _fall_back(self, request: Request, why: str) -> Request:
        """A request made in a predicted duplicate's place that brought no page: the URL asked is fetched after
        all (a rewrite into a URL that does not exist is a wrong prediction, never a lost page)."""
        asked = str(request.meta[META_REWRITTEN_FROM])
        self.service.stats.inc_value("neardup/url_rules/fell_back")
        self.service.report.log_once(
            "fell_back",
            f"{asked} was requested as {request.url}, which brought no page ({why}): fetched as itself after all "
            "(such requests are counted in neardup/url_rules/fell_back)",
        )
        meta = {k: v for k, v in request.meta.items() if k not in _OWN_META}
        return request.replace(url=asked, meta={**meta, META_PREDICTED: asked}, dont_filter=True)

    async def _probe(self, url: str) -> Answer:
        """Fetch ``url``, a URL of a host that cannot exist, through every downloader middleware (robots.txt,
        the download delay, retries, redirects), and prepare its answer: the host's soft-404 page, when it
        answers 200 with HTML where it was asked (``None`` otherwise: a 404, a redirect, an error)."""
        self.service.stats.inc_value("neardup/soft404/probed")
        request = Request(url, meta={META_SOFT404_PROBE: url}, dont_filter=True)
        try:
            response = await self._download(request)
        except Exception:  # noqa: BLE001 - robots.txt, an error: no soft-404 answer for this host
            return None
        if not 200 <= response.status < 300 or not is_html(response) or response.url != url:
            return None
        prepared = await self._prepared(response, short=True)
        return None if prepared is None else (prepared, url)

    async def _download(self, request: Request) -> Response:
        """One of the plugin's own requests, through every downloader middleware, not the scheduler."""
        engine = self.crawler.engine
        assert engine is not None
        if hasattr(engine, "download_async"):
            return await engine.download_async(request)
        return await maybe_deferred_to_future(engine.download(request))  # pragma: no cover - Scrapy < 2.14

    async def _prepared(self, response: Response, short: bool = False) -> Prepared | None:
        """A response of the plugin's own fingerprinted in a worker; ``None`` when it has no text to judge
        (``short``: a text too short to fingerprint is one, for a soft-404 answer)."""
        job = response_job(response, self.config.max_body_size)
        if isinstance(job, str):
            return None
        prepared = await self.service.prepare(job)
        if not isinstance(prepared, Prepared):
            return None
        if prepared.fingerprint is None and not (short and prepared.short_text):
            return None
        return prepared

    async def _follow_group(self, request: Request, page: str) -> None:
        """A near-duplicate of ``page``, its group's page: when that page was not fetched in this crawl (a
        declared page fetched first, whose response is kept; a group's page no link of this crawl led to yet),
        it is requested in the copy's place (the copy's callback and meta carried over, as a redirect would),
        through the scheduler, so that the group reaches the spider once even when the spider never links to
        its page; the dupefilter drops the request when the spider asked for that page itself. Within
        ``NEARDUP_CANONICAL_FETCH`` (by default: the same site)."""
        policy = self.config.canonical_fetch
        kept = self._kept.get(page) is not None
        if policy == "none" or page == request.url or not may_fetch(policy, request.url, page):
            self._kept.pop(page, None)
            return
        if not kept and (not same_host(request.url, page) or await self.service.fetched_now(page) is not False):
            # A group's page no declaration led to is followed on the copy's own host only; and not when it
            # was fetched in this crawl already (it reached the spider then), or the store cannot say.
            return
        engine = self.crawler.engine
        if engine is None:  # pragma: no cover - the crawl is over
            return
        meta = {k: v for k, v in request.meta.items() if k not in _OWN_META}
        engine.crawl(request.replace(url=page, meta={**meta, META_FOLLOWED_FROM: request.url}, dont_filter=False))
        self.service.stats.inc_value("neardup/canonical/followed")


#: The plugin's own meta keys, not carried from a copy's request to the declared page's.
_OWN_META = (
    META_VERDICT,
    META_DECLARED_BY,
    META_FOLLOWED_FROM,
    META_PREDICTED,
    META_SOFT404_PROBE,
    META_REWRITTEN_FROM,
    "redirect_urls",
    "redirect_times",
    "redirect_ttl",
    "redirect_reasons",
    "download_slot",
    "download_latency",
    "retry_times",
)
