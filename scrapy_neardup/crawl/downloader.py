"""Downloader middleware: fingerprint each HTML response and drop or tag near-duplicates.

Order 540 (see :mod:`scrapy_neardup.addon`): ``process_response`` runs from high to low order numbers, so
at 540 a response has been decompressed (HttpCompressionMiddleware, 590), redirects have been followed
(RedirectMiddleware, 600) and retries are settled (RetryMiddleware, 550). A dropped page raises
:class:`~scrapy.exceptions.IgnoreRequest`: the spider never parses it and its links are never followed.

A response is checked in five steps, each by a collaborator with typed answers: screened (a :class:`Skip`
before any work), prepared in a worker (:class:`Preparer`), compared with its host's soft-404 answer
(:class:`Soft404Check`), given its declared page (:class:`DeclaredPages`), then decided in the store
(:class:`StoreThread`) and counted (:meth:`NearDupService.settle`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest

from ..engine.canonical import Declaration, chosen, link_header_canonical
from ..engine.detector import Verdict
from ..engine.urlrules import same_host
from .declared import DeclaredPages
from .meta import (
    FLAG,
    KEPT_FLAG,
    META_DECLARED_BY,
    META_ENABLED,
    META_KEY,
    META_PREDICTED_GROUP,
    META_REWRITTEN_FROM,
    META_SOFT404_PROBE,
    META_VERDICT,
    SOFT404_FLAG,
)
from .ownrequests import OwnRequests
from .predictions import RulePredictor
from .reporting import verdict_meta
from .screening import Skip, is_html, response_job
from .service import NearDupService
from .soft404 import Soft404Check

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

    from ..engine.decisions import Declared
    from .storethread import Outcome


class NearDupDownloaderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.service = NearDupService.for_crawler(crawler)
        config = self.config = self.service.config
        # Items carry the text to compare (NEARDUP_ITEM_FIELD): pages are not fingerprinted as well.
        self.check_pages = not config.item_field
        requests = OwnRequests(crawler, self.service)
        self.declared = DeclaredPages(crawler, self.service, requests)
        self.soft404 = Soft404Check(self.service, requests) if config.soft404 else None
        self.predictor = RulePredictor(crawler, self.service)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_request(self, request: Request, spider: object = None) -> Request | Response | None:
        """A declared page fetched before its copy was decided: that response, for the first request of its
        URL. With ``NEARDUP_URL_RULES`` ``skip`` or ``deprioritize``: a request the URL rules predict to be a
        duplicate is not fetched, is replaced by its group's page, or is sent back at a lower priority."""
        kept = await self.declared.kept(request)
        if kept is not None:
            return kept
        if self.predictor.may_predict(request):
            return await self.predictor.screened(request)
        return None

    async def process_response(self, request: Request, response: Response, spider: object = None) -> Response | Request:
        service = self.service
        if KEPT_FLAG not in response.flags:  # a response downloaded before and handed over is not a fetch
            service.report.fetched(response.url, len(response.body))
        if not 200 <= response.status < 300 and request.meta.get(META_REWRITTEN_FROM):
            return self.predictor.fell_back(request, f"status {response.status}")
        if service.refused:  # the store could not be opened and the spider is closing: nothing unchecked
            raise IgnoreRequest(f"scrapy-neardup: the store could not be opened ({service.refused})")
        if (
            not self.check_pages
            or request.meta.get(META_DECLARED_BY) is not None
            or request.meta.get(META_SOFT404_PROBE) is not None
        ):
            return response  # a declared page fetched first, or a probe: the check that asked decides
        for reason, unchecked in (
            ("disabled", request.meta.get(META_ENABLED, True) is False),
            ("status", not 200 <= response.status < 300),
            ("not_html", not is_html(response)),
        ):
            if unchecked:  # passed on before any work, without a verdict
                service.report.skip(reason, response.url)
                return response
        given = request.meta.get(META_KEY)
        key, own_key = str(given or response.url), bool(given)
        group = request.meta.get(META_PREDICTED_GROUP)
        if group is not None and response.url == request.url and not own_key:
            self.declared.decided(request.url, response.url)
            return self._tagged_as_predicted(request, response, key, str(group))
        try:
            result = await self._checked(request, response, key, own_key)
        finally:
            self.declared.decided(request.url, response.url)
        if isinstance(result, Skip):
            request.meta[META_VERDICT] = {"status": "skipped", "reason": result.reason}
            return response
        request.meta[META_VERDICT] = verdict_meta(result, service.names.of(result))
        return await self._acted_on(request, response, key, own_key, result)

    def _tagged_as_predicted(self, request: Request, response: Response, key: str, group: str) -> Response:
        """A copy the URL rules predicted in tag mode: passed on tagged as a near-duplicate of its group's page,
        without extraction (its similarity is not measured: 1.0 stands for the rule's "same page"); neither
        filed nor counted as checked, as a copy the rules leave unfetched in drop mode."""
        service = self.service
        verdict = Verdict("duplicate", key, group, 1.0)
        service.report.count("neardup/url_rules/tagged")
        service.report.count("neardup/tagged")
        request.meta[META_VERDICT] = {**verdict_meta(verdict, service.names.note(verdict)), "predicted": True}
        return response.replace(flags=[*response.flags, FLAG])

    async def _checked(self, request: Request, response: Response, key: str, own_key: bool) -> Verdict | Skip:
        """The response's verdict, or why it was passed on unchecked (both counted)."""
        service = self.service
        guessed_by: tuple[str, ...] = ()
        prepared = await service.prepare(key, response_job(response, self.config.max_body_size), response.url)
        if isinstance(prepared, Skip):
            return prepared
        if self.soft404 is not None and not own_key:
            soft404 = await self.soft404.verdict(key, response.url, prepared)
            if soft404 is not None:
                return soft404
        declared = None
        if self.config.canonical and not own_key:
            declaration = chosen(self._header_declaration(response), prepared.declared_canonical)
            if declaration is not None and declaration.url != key:
                declared = await self.declared.resolve(request, key, declaration.url)
            elif declaration is None and self.config.canonical_fetch != "none":
                declared, guessed_by = await self._likely_page(request, key, response.url)
        outcome = await service.decide(key, response.url, prepared, declared)
        if guessed_by and declared is not None and not self._bore_out(outcome, declared.key):
            await service.store_thread.guess_failed(response.url, guessed_by, had=True)
        if declared is not None:
            self.declared.count_other_site(request, key, declared.key, outcome)
        if self.soft404 is not None and not own_key:
            outcome = self.soft404.confirmed(response.url, outcome)
        return service.settle(key, outcome)

    @staticmethod
    def _bore_out(outcome: Outcome, page: str) -> bool:
        """Whether a decided page is a near-duplicate of ``page`` (its group's page, or in its group)."""
        verdict = outcome.result
        if isinstance(verdict, Skip):
            return True  # nothing learned: not counted against the guess
        return (
            verdict.is_duplicate
            and (verdict.canonical == page or verdict.displaced == page)
            or any(d.key == page for d in outcome.before)
        )

    async def _likely_page(self, request: Request, key: str, url: str) -> tuple[Declared | None, tuple[str, ...]]:
        """A page that declares nothing, whose URL its host's rules or the priors every site shares make
        another URL of the host not filed yet (a tracking, AMP or print copy met before its article): that
        page is fetched and decided first, as a declared one, so that the article, not the copy, becomes the
        group's page on the first crawl. A guess: the decision weighs it by content as a declaration."""
        guessed = await self.service.store_thread.likely_page(url)
        if guessed is None:
            return None, ()
        guess, rules = guessed
        if guess == key or not same_host(url, guess):
            return None, ()
        found = await self.declared.resolve(request, key, guess)
        if found.prepared is None:
            if self.declared.failed_page(guess):  # a 404, an error: a miss of the rules that made the guess
                await self.service.store_thread.guess_failed(url, rules, had=False)
            return None, ()
        self.service.report.count("neardup/url_rules/page_first")
        return found, rules

    @staticmethod
    def _header_declaration(response: Response) -> Declaration | None:
        """The canonical URL the response's ``Link`` header declares (the page's own ``<link rel="canonical">``
        comes back from the worker)."""
        links = response.headers.getlist(b"Link")
        if not links:
            return None
        url = link_header_canonical([v.decode("latin-1") for v in links], response.url)
        return Declaration(url, "header") if url else None

    async def _acted_on(
        self, request: Request, response: Response, key: str, own_key: bool, verdict: Verdict
    ) -> Response:
        """``NEARDUP_ACTION`` on a decided page: a near-duplicate or soft-404 page dropped
        (``IgnoreRequest``) or tagged; a near-duplicate's group page followed."""
        service = self.service
        if verdict.status == "soft404":
            if self.config.action == "drop":
                service.report.count("neardup/dropped")
                raise IgnoreRequest(f"soft-404 page: its host answers {verdict.canonical}, which cannot exist, alike")
            service.report.count("neardup/tagged")
            return response.replace(flags=[*response.flags, SOFT404_FLAG])
        if not verdict.is_duplicate:
            return response
        if not own_key:
            await self.declared.follow_group(request, verdict.canonical)
        if self.config.action == "drop":
            budget = self.config.group_budget
            if not (budget and await service.store_thread.admitted(verdict.canonical, key, budget)):
                service.report.count("neardup/dropped")
                raise IgnoreRequest(f"near-duplicate of {verdict.canonical} (similarity {verdict.similarity:.3f})")
            service.report.count("neardup/budget/passed")  # within its group's budget: let through
        service.report.count("neardup/tagged")
        return response.replace(flags=[*response.flags, FLAG])

    def process_exception(self, request: Request, exception: BaseException, spider: object = None) -> Request | None:
        """A request that failed: the copies waiting for its page's decision go on; one made in a predicted
        duplicate's place falls back to that duplicate's URL."""
        self.declared.failed(request)
        if request.meta.get(META_REWRITTEN_FROM):
            return self.predictor.fell_back(request, type(exception).__name__)
        return None
