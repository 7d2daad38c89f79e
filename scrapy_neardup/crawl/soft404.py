"""Soft-404 pages: what a server answers, with status 200, for a URL that cannot exist.

A server that answers every unknown URL with one "not found" page and status 200 (3-7 % of servers in the
surveys: Meneses et al., 2012; Prieto et al., 2014) makes all its dead links one group of near-duplicates of
unrelated URLs, and the first of them the canonical page of the others. So, as Bar-Yossef et al. ("Sic
transit gloria telae", WWW 2004) did, each host is asked once for a URL that cannot exist; when it answers 200
with an HTML page, that page's fingerprints are the host's soft-404 answer, and a page of the host that is
its near-duplicate is a soft-404 page (verdict ``soft404``): dropped or tagged like a near-duplicate, counted
apart, never filed (so never a canonical page) and never a lesson for the URL rules.

Most "not found" pages are a heading and a sentence or two, too short to fingerprint. Such a page is compared
with its host's answer on its short text (:func:`soft404_similarity`): the words of both, less the words of
either URL (a "not found" page often repeats the path it was asked for), at a Jaccard similarity of at least
:data:`SHORT_SIMILARITY`. The probe's answer is kept whatever its length.

A probe that is redirected (many servers send unknown URLs to their home page) teaches nothing: the page it
lands on is a real page of the site, so the host is taken to have no soft-404 answer.

Some servers answer the probe's URL with a 404 and only some unknown URLs (an unknown product, an expired
listing) with their "not found" page. Those show up as a group of unrelated URLs of one host sharing one
short text (:class:`ShortTextGroups`): from the group's :data:`SHORT_GROUP_URLS`-th unrelated URL on, its
pages are soft-404 pages too. The first ones were decided before the group showed what it is, and stay
near-duplicates.

Both are kept per host for the whole crawl, so both are bounded, the least recently met forgotten first: a
broad crawl meets hosts without end. A host forgotten and met again is probed again; a group forgotten
counts again from its next page.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from twisted.internet.defer import Deferred

from ..engine.detector import Verdict
from .meta import META_SOFT404_PROBE
from .screening import is_html

if TYPE_CHECKING:
    from ..engine.detector import Detector
    from ..engine.prepare import Prepared
    from .ownrequests import OwnRequests
    from .service import NearDupService
    from .storethread import Outcome

#: A text of fewer characters, shared by this many URLs of one host that no URL rewrite relates, each at
#: least this similar to the group's first page (one template served again, not an edited copy), is taken
#: for a "not found" template: a soft-404 page.
SHORT_TEXT_CHARS = 1000
SHORT_GROUP_URLS = 5
SHORT_GROUP_SIMILARITY = 0.9

#: Two short texts (too short to fingerprint) sharing this share of their words, less their URLs' words, are
#: one "not found" page served twice.
SHORT_SIMILARITY = 0.8

#: Hosts whose probe's outcome is remembered, and short-text groups counted (the least recently met forgotten
#: first).
MAX_PROBED_HOSTS = 100_000
MAX_SHORT_GROUPS = 100_000


class HostAnswer(NamedTuple):
    """A host's soft-404 answer, as much of it as pages are compared with: the URL that was asked (one that
    cannot exist), and the answer's fingerprint signature, or its short text when it was too short to
    fingerprint. A tuple of plain values, which the garbage collector stops tracking: a crawl keeps one for
    every soft-404 host it met (up to :data:`MAX_PROBED_HOSTS`)."""

    url: str
    signature: bytes | None
    short_text: str

    @classmethod
    def of(cls, prepared: Prepared, url: str) -> HostAnswer:
        signature = None if prepared.fingerprint is None else prepared.fingerprint.signature
        return cls(url, signature, prepared.short_text if signature is None else "")


#: What a probe brings back: the host's answer, or ``None`` (no soft-404 answer).
Answer = HostAnswer | None


def soft404_similarity(detector: Detector, page: Prepared, url: str, answer: HostAnswer) -> float | None:
    """How alike a page at ``url`` is to its host's answer (to a URL that cannot exist), when they are alike
    enough to be one "not found" page; else ``None``. Two fingerprinted texts are compared by their
    fingerprints at the detector's threshold, two short ones by :func:`short_text_similarity`; a short text and
    a long one are not one page."""
    from ..engine.text import short_text_similarity

    if page.fingerprint is not None and answer.signature is not None:
        return detector.matches(page.fingerprint.signature, answer.signature)
    if page.fingerprint is None and answer.signature is None and page.short_text and answer.short_text:
        similarity = short_text_similarity(page.short_text, url, answer.short_text, answer.url)
        return similarity if similarity >= SHORT_SIMILARITY else None
    return None


def probe_url(url: str) -> str:
    """A URL of ``url``'s host that cannot exist: a path made of a hash of the host (the same in every
    process and every crawl, so that one probe per host is all a server sees of a distributed crawl)."""
    parts = urlsplit(url)
    digest = hashlib.sha256(parts.netloc.lower().encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return urlunsplit((parts.scheme, parts.netloc, f"/neardup-no-such-page-{digest}", "", ""))


class HostAnswers:
    """Each host's soft-404 answer, probed once per host (``netloc``) on first need; the pages that arrive
    while a probe is under way wait for it. Up to ``max_hosts`` hosts' outcomes are remembered, the least
    recently met forgotten first (met again, such a host is probed again)."""

    def __init__(self, max_hosts: int = MAX_PROBED_HOSTS) -> None:
        self.max_hosts = max_hosts
        self._answers: OrderedDict[str, Answer] = OrderedDict()
        self._waiting: dict[str, list[Deferred]] = {}

    def __len__(self) -> int:
        return len(self._answers)

    async def answer(self, url: str, probe: Callable[[str], Awaitable[Answer]]) -> Answer:
        """The soft-404 answer of ``url``'s host (``probe`` fetches it the first time)."""
        from scrapy.utils.defer import maybe_deferred_to_future

        host = urlsplit(url).netloc.lower()
        if host in self._answers:
            self._answers.move_to_end(host)
            return self._answers[host]
        if host in self._waiting:
            waiter: Deferred = Deferred()
            self._waiting[host].append(waiter)
            return await maybe_deferred_to_future(waiter)
        self._waiting[host] = []
        try:
            found = await probe(probe_url(url))
        except Exception:  # noqa: BLE001 - a failed probe means no soft-404 answer, never a failed page
            found = None
        self._answers[host] = found
        if len(self._answers) > self.max_hosts:
            self._answers.popitem(last=False)
        for waiter in self._waiting.pop(host):
            waiter.callback(found)
        return found


class ShortTextGroups:
    """Counts, per host and group, the near-duplicates of a short text whose URLs are unrelated to their
    canonical page's (another path that no URL rewrite of :mod:`scrapy_neardup.engine.urlrules` explains). Up
    to ``max_groups`` groups are counted, the least recently met forgotten first."""

    def __init__(
        self, max_chars: int = SHORT_TEXT_CHARS, min_urls: int = SHORT_GROUP_URLS, max_groups: int = MAX_SHORT_GROUPS
    ) -> None:
        self.max_chars = max_chars
        self.min_urls = min_urls
        self.max_groups = max_groups
        self._members: OrderedDict[tuple[str, str], int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._members)

    def is_soft404(self, url: str, canonical: str, text_length: int, similarity: float) -> bool:
        """A near-duplicate of ``canonical`` at ``url``: whether its group has shown itself a soft-404 group
        (this page included)."""
        from ..engine.urlrules import explain

        if text_length >= self.max_chars or similarity < SHORT_GROUP_SIMILARITY:
            return False
        if urlsplit(url).netloc.lower() != urlsplit(canonical).netloc.lower():
            return False
        if explain(url, canonical) or explain(canonical, url):
            return False
        key = (urlsplit(url).netloc.lower(), canonical)
        members = self._members[key] = self._members.pop(key, 1) + 1  # the canonical page is the group's first URL
        if len(self._members) > self.max_groups:
            self._members.popitem(last=False)
        return members >= self.min_urls


class Soft404Check:
    """A crawl's soft-404 check (``NEARDUP_SOFT404``): before a page is decided, whether it is a near-duplicate
    of its host's answer to a URL that cannot exist (the host probed once, by a request of the plugin's own);
    after, whether a near-duplicate joined a group of unrelated URLs sharing one short text."""

    def __init__(self, service: NearDupService, requests: OwnRequests) -> None:
        self.service = service
        self.requests = requests
        #: Each host's answer to a URL that cannot exist, probed once per host on first need.
        self.answers = HostAnswers()
        self.short_groups = ShortTextGroups()

    async def verdict(self, key: str, url: str, prepared: Prepared) -> Verdict | None:
        """The ``soft404`` verdict of a page that is a near-duplicate of its host's answer (counted); ``None``
        for any other page, or a host without such an answer. Pages too short to fingerprint too: most "not
        found" pages are a heading and a sentence."""
        if prepared.fingerprint is None and not prepared.short_text:
            return None
        answer = await self.answers.answer(url, self._probe)
        detector = self.service.store_thread.detector
        if answer is None or detector is None:
            return None
        if answer.url == url:
            return None
        similarity = soft404_similarity(detector, prepared, url, answer)
        if similarity is None:
            return None
        verdict = Verdict("soft404", key, answer.url, similarity)
        self.service.report.record(key, verdict)
        return verdict

    def confirmed(self, url: str, outcome: Outcome) -> Outcome:
        """A decided page: a ``soft404`` verdict for a near-duplicate (now, or in an earlier crawl: *seen*)
        whose group has shown itself a group of unrelated URLs sharing one short text."""
        verdict = outcome.result
        if (
            isinstance(verdict, Verdict)
            and verdict.is_duplicate
            and not outcome.again
            and self.short_groups.is_soft404(url, verdict.canonical, outcome.prepared.text_length, verdict.similarity)
        ):
            return replace(outcome, result=replace(verdict, status="soft404"))
        return outcome

    async def _probe(self, url: str) -> Answer:
        """Fetch ``url``, a URL of a host that cannot exist, and prepare its answer: the host's soft-404 page,
        when it answers 200 with HTML where it was asked (``None`` otherwise: a 404, a redirect, an error)."""
        from scrapy import Request

        self.service.report.count("neardup/soft404/probed")
        request = Request(url, meta={META_SOFT404_PROBE: url}, dont_filter=True)
        try:
            response = await self.requests.download(request)
        except Exception:  # noqa: BLE001 - robots.txt, an error: no soft-404 answer for this host
            return None
        if not 200 <= response.status < 300 or not is_html(response) or response.url != url:
            return None
        prepared = await self.requests.prepared(response, short=True)
        if prepared is None:
            return None
        self.service.report.count("neardup/soft404/hosts")  # a soft-404 host (a host probed again counts again)
        return HostAnswer.of(prepared, url)
