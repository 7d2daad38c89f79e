"""The page a response declares canonical, had before the response is decided, and its group's page
followed after (``NEARDUP_CANONICAL_FETCH``).

A copy is decided against its declared page when that page is filed, or fetched first (through every
downloader middleware, as a redirect would be); a page being downloaded already is awaited, not fetched
twice; a response fetched first is kept, as soon as it is downloaded, for the first request of its URL to
come (one that comes during the download waits for it), and used again by the next copy that declares it; a
page that could not be had is not asked for again in the crawl. What a page
declares is a claim: the decision weighs it by content (:mod:`scrapy_neardup.engine.canonical`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from ..engine.bounded import remember
from ..engine.canonical import may_fetch, site_of
from ..engine.decisions import Declared
from ..engine.urlrules import same_host
from .meta import KEPT_FLAG, META_DECLARED_BY, META_FOLLOWED_FROM, carried_meta
from .screening import Skip, is_html

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from .ownrequests import OwnRequests
    from .service import NearDupService
    from .storethread import Outcome

#: Responses of declared pages fetched first, kept for the first request of their URL (no second download).
MAX_KEPT_RESPONSES = 256
#: How long a copy waits for its declared page's own request, already being downloaded, to be decided.
DECLARED_WAIT_SECS = 30.0
#: Declared pages remembered as not to be had (their fetch failed in this crawl), the oldest forgotten first.
MAX_FAILED_DECLARED = 10_000


def _release(waiters: Iterable[Deferred]) -> None:
    """The waiting requests or copies go on."""
    for waiter in waiters:
        if not waiter.called:
            waiter.callback(None)


class DeclaredPages:
    def __init__(self, crawler: Crawler, service: NearDupService, requests: OwnRequests) -> None:
        self.crawler = crawler
        self.service = service
        self.requests = requests
        self.policy = service.config.canonical_fetch
        self._kept: OrderedDict[str, Response] = OrderedDict()
        #: Copies waiting for the decision of a declared page whose own request is being downloaded (URL ->
        #: their Deferreds), and the URLs of the copies waiting (a copy never waits for a page waiting itself).
        self._deciding: dict[str, list[Deferred]] = {}
        self._waiting: set[str] = set()
        #: The declared page each copy fetched first (copy URL -> declared URL): in flight as that copy's own
        #: request, not as one that comes back through process_response, so the copy's decision releases the
        #: copies that wait for it.
        self._fetching_for: dict[str, str] = {}
        #: Declared pages whose fetch failed in this crawl (an error, robots.txt, off the allowed domains, not
        #: 2xx, not HTML): the other copies that declare one (a template declaring a missing page on every
        #: page of a site) are checked on their own without fetching it again. The fetch went through the
        #: downloader middlewares, retries included, so it would fail again.
        self._failed: OrderedDict[str, None] = OrderedDict()
        #: Declared pages being downloaded for a copy (URL -> the Deferreds of requests of that URL waiting for
        #: the download): a request of the URL that comes meanwhile takes its response, not a download of its own.
        self._downloading: dict[str, list[Deferred]] = {}

    async def kept(self, request: Request) -> Response | None:
        """The response of a declared page fetched first, for the first request of its URL to come (the
        plugin's own, following the copy, or the spider's, queued before it: one download, whichever comes
        first, with any scheduler); awaited when that page is being downloaded for a copy now."""
        if request.method != "GET" or request.meta.get(META_DECLARED_BY) is not None:
            return None
        waiters = self._downloading.get(request.url)
        if waiters is not None:
            waiter: Deferred = Deferred()
            waiters.append(waiter)
            await maybe_deferred_to_future(waiter)
        if not self._kept:
            return None
        kept = self._kept.pop(request.url, None)
        return None if kept is None else kept.replace(request=request, flags=[*kept.flags, KEPT_FLAG])

    async def resolve(self, request: Request, key: str, declared_url: str) -> Declared:
        """The page ``key`` declares canonical, for its decision: fetched first when it may be (``None`` as its
        prepared page when it is not fetched, fails, or is not an HTML page with text)."""
        if self.policy != "none":
            fetched = await self._fetched(request, key, declared_url)
            if fetched is not None:
                return fetched
        return Declared(declared_url)

    def count_other_site(self, request: Request, key: str, declared_url: str, outcome: Outcome) -> None:
        """A copy decided against the page it declares: under ``site``, one that declares a page of another
        site, neither filed before (a declaration that ``all`` would have fetched first), is counted and
        said once, with the setting. The decision's own reads tell (no store read of its own)."""
        if self.policy != "site" or may_fetch(self.policy, request.url, declared_url):
            return
        verdict = outcome.result
        if isinstance(verdict, Skip) or outcome.declared_filed or outcome.again:
            return
        if verdict.status == "seen" or verdict.rechecked is not None:  # the copy itself was filed before
            return
        report = self.service.report
        report.count("neardup/canonical/other_site")
        report.log_once(
            "canonical_other_site",
            f"the page {declared_url} that {key} declares canonical is on another site than it "
            f"({site_of(declared_url)}, not {site_of(key)}), so it is not fetched first and {key} is "
            "checked on its own (such pages are counted in neardup/canonical/other_site); set "
            "NEARDUP_CANONICAL_FETCH = 'all' to fetch declared pages of every site",
        )

    async def _fetched(self, request: Request, key: str, declared_url: str) -> Declared | None:
        service = self.service
        report = service.report
        if not may_fetch(self.policy, request.url, declared_url):
            return None  # under "site", counted once decided (:meth:`count_other_site`)
        if declared_url in self._failed:
            report.count("neardup/canonical/failed_before")
            return None
        known = await service.store_thread.known(key, declared_url)
        if known is None or any(known):  # a page filed before (a re-crawl), or the declared one: no fetch
            return None
        if declared_url not in self._waiting and self._in_flight(declared_url):
            # The spider's own request for it is being downloaded: its decision is awaited, not a second
            # download (the copy is then decided against the declared page, filed by then).
            report.count("neardup/canonical/awaited")
            await self._decision_of(request.url, declared_url)
            return None
        response = self._kept.get(declared_url)
        reused = response is not None
        if response is None:
            response = await self._download(request, key, declared_url)
            if response is None:
                return None
        prepared = await self.requests.prepared(response)
        if prepared is None or response.url == key:  # no text; or the declaration led back to the page itself
            return None
        # One fetched for an earlier copy, which it did not match (so it was not filed), and kept for its own
        # request, is used again, not downloaded again (its extraction is shared too: the same bytes).
        report.count("neardup/canonical/reused" if reused else "neardup/canonical/fetched")
        return Declared(response.url, prepared)

    async def _download(self, request: Request, key: str, declared_url: str) -> Response | None:
        """The declared page, downloaded in the place of the copy's request; ``None`` (and the page
        remembered as not to be had) when it cannot be had."""
        report = self.service.report
        # Not dont_filter, whatever the copy's request says: the offsite check must apply to the declared page.
        own = request.replace(
            url=declared_url, meta={**carried_meta(request.meta), META_DECLARED_BY: request.url}, dont_filter=False
        )
        self._fetching_for[request.url] = declared_url
        waiting = self._downloading.setdefault(declared_url, [])
        try:
            response = await self.requests.download(own)
        except Exception as exc:  # noqa: BLE001 - forbidden by robots.txt, off the allowed domains, unreachable
            report.count("neardup/canonical/fetch_failed")
            report.log_once(
                "canonical_fetch_failed",
                f"the page {declared_url} that {key} declares canonical could "
                f"not be fetched ({type(exc).__name__}: {exc}); {key} is checked on its own (such "
                "pages are counted in neardup/canonical/fetch_failed)",
            )
            remember(self._failed, declared_url, None, MAX_FAILED_DECLARED)
            return None
        else:
            if not 200 <= response.status < 300 or not is_html(response):
                report.count("neardup/canonical/fetch_failed")
                remember(self._failed, declared_url, None, MAX_FAILED_DECLARED)
                return None
            if response.url not in (key, request.url):  # not a declaration that led back to the copy itself
                # Kept at once, not once the copy is decided: the page's own request may come meanwhile.
                remember(self._kept, response.url, response, MAX_KEPT_RESPONSES)
            return response
        finally:
            if self._downloading.get(declared_url) is waiting:
                del self._downloading[declared_url]
            _release(waiting)  # the requests of the URL that came meanwhile: the kept response, or their own

    def failed_page(self, url: str) -> bool:
        """Whether the page at ``url`` could not be had in this crawl (its fetch failed, or was not an HTML page)."""
        return url in self._failed

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
            self.service.report.count("neardup/canonical/await_timeout")
        finally:
            self._waiting.discard(copy_url)

    def decided(self, request_url: str, response_url: str | None = None) -> None:
        """The page of this request was decided (or failed): the copies waiting for it, or for the declared
        page it fetched first, go on."""
        urls = [request_url]
        if response_url is not None:
            urls.append(response_url)
        fetched = self._fetching_for.pop(request_url, None)
        if fetched:
            urls.append(fetched)
        for url in urls:
            _release(self._deciding.pop(url, ()))

    def failed(self, request: Request) -> None:
        """A request that failed: the copies waiting for its page's decision go on."""
        if self._deciding:
            self.decided(request.url)

    async def follow_group(self, request: Request, page: str) -> None:
        """A near-duplicate of ``page``, its group's page: when that page was not fetched in this crawl (a
        declared page fetched first, whose response is kept; a group's page no link of this crawl led to yet),
        it is requested in the copy's place (the copy's callback and meta carried over, as a redirect would),
        through the scheduler, so that the group reaches the spider once even when the spider never links to
        its page; the dupefilter drops the request when the spider asked for that page itself. Within
        ``NEARDUP_CANONICAL_FETCH`` (by default: the same site)."""
        policy = self.policy
        kept = self._kept.get(page) is not None
        if policy == "none" or page == request.url or not may_fetch(policy, request.url, page):
            self._kept.pop(page, None)
            return
        if not kept:
            # A group's page no declaration led to is followed on the copy's own host only; and not when it
            # was fetched in this crawl already (it reached the spider then), or the store cannot say.
            if not same_host(request.url, page) or await self.service.store_thread.fetched_now(page) is not False:
                return
        engine = self.crawler.engine
        if engine is None:  # pragma: no cover - the crawl is over
            return
        meta = {**carried_meta(request.meta), META_FOLLOWED_FROM: request.url}
        engine.crawl(request.replace(url=page, meta=meta, dont_filter=False))
        self.service.report.count("neardup/canonical/followed")
