"""From a document to a fingerprint: the steps shared by the Scrapy plugin and the batch CLI.

HTML → main text (or page text when the main text is too short) → tokens → shingles → fingerprint.
Keeping this in one place is what makes a crawl and an offline run over its dump agree.

This half is *stateless*, so it runs in worker processes: what it returns (:class:`Prepared`) carries
everything the decision needs, including what the template guard (:mod:`.template`) compares. The guard
itself keeps state across pages and so runs where the decisions are made, in one process, in order.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, replace

import mmh3
import numpy as np

from .algorithms.base import Algorithm, Fingerprint, NoWords
from .canonical import declared_canonical
from .extract import TEMPLATE_MAX_SHARE, Extraction, decode_html, extract
from .learned import (
    Lesson,
    Offers,
    agreement,
    in_keys,
    lesson,
    page_text_of,
    parse,
    prekey,
    replay,
    sampled,
    skeleton_key,
    words,
)

#: mmh3 seed of the main-text hash; fixed so that every process agrees on it.
_SEED = 0x7E3A

#: Characters of a page too short to fingerprint kept for its soft-404 check (:attr:`Prepared.short_text`).
SHORT_TEXT_KEPT = 2000

#: The guard's own page-text sketch: MinHash with this many permutations and this seed.
SKETCH_PERM = 64
SKETCH_SEED = 0x5EED


def text_key(text: str) -> int:
    """A 128-bit hash of a text's words, case folded (white space and punctuation aside): equal for
    identical main texts, whether trafilatura or a learned template (:mod:`.learned`) read them."""
    return mmh3.hash128(" ".join(words(text)), _SEED)


def page_sketcher(algorithm=None):
    """The MinHash the guard compares page texts with: ``algorithm`` itself when it already is MinHash of
    word 2-shingles (its page fingerprint then serves as the sketch, computed once), else a fixed one of
    ``SKETCH_PERM`` permutations. Either estimates the same Jaccard, so ``PAGE_TEXTS_DIFFER`` means one
    thing whatever fingerprints the pages."""
    from .algorithms.minhash import MinHashLSH

    if type(algorithm) is MinHashLSH and algorithm.shingle_size == 2:
        return algorithm
    return MinHashLSH(threshold=0.5, num_perm=SKETCH_PERM, seed=SKETCH_SEED, shingle_size=2)


def body_digest(body: bytes, content_type: str | None) -> bytes:
    """The key of a page's bytes: SHA-256 of its ``Content-Type`` (which decides its decoding) and body. A
    page cannot pick bytes that take another page's key, as it could with a non-cryptographic hash."""
    digest = hashlib.sha256((content_type or "").encode("latin-1", "replace"))
    digest.update(b"\0")
    digest.update(body)
    return digest.digest()


@dataclass(frozen=True)
class Prepared:
    """A document made ready for the decision: its fingerprint, or why it is skipped.

    ``method`` says which text was fingerprinted: ``main``, ``page`` (main text too short), ``template``
    (page text, because the main text was the host's template: set by the guard) or ``text`` (given as
    text). ``page_fingerprint`` is the fingerprint of the page's whole text, present for a main-text page
    whose main text is at most half of it (only such a main text can be a template block), with
    ``page_sketch``, the guard's own sketch of that page text, and ``main_key``, which identifies the main
    text; the guard has nothing to do with a page without them, so the main text's key is not made for it.
    ``extract_seconds``: how long the text extraction took (where it ran: a worker process, usually), for
    the timing of the plugin's own cost beyond extraction; ``work_seconds``: the whole job there (decoding,
    extraction, fingerprints), so that the time a page spends travelling can be told from its work;
    ``work_started``: when that job began, on ``time.perf_counter``'s clock (the machine's monotonic clock,
    the same in every process), so that the trip to the worker can be told from the trip back.
    ``declared_canonical``: the URL the page declares canonical with ``<link rel="canonical">``, when asked
    for (the crawl files such a page under that URL, see :meth:`Detector.check_declared`). ``reused``: made
    for another response with the same bytes, not extracted again (set in the crawler process, never sent).
    ``text_length``: the characters of the text fingerprinted (a short text shared by unrelated URLs of a
    host is what a soft-404 template looks like: :mod:`scrapy_neardup.crawl.soft404`). ``short_text``: the
    text of a page too short to fingerprint (its first :data:`SHORT_TEXT_KEPT` characters), what a soft-404
    check compares it on. ``cpu_seconds``: the CPU time of the job where it ran (for the crawl's books).
    ``template``: the page's template key (:func:`~.learned.skeleton_key`) when templates are learned;
    ``learned``: how its text was found: ``replayed`` (by its template's selector), ``agreed`` or
    ``disagreed`` (replayed and checked against trafilatura, whose text was fingerprinted), ``refused``
    (the selector could not vouch for the page: trafilatura), ``""`` (trafilatura alone); ``lesson``: what the
    page taught about its template (:func:`~.learned.lesson`); ``agreement``: the checked replay's agreement.
    ``body``: the digest of the page's bytes (``Content-Type`` and body), filed with its record so that a
    fetch with the same bytes keeps the page's verdict (:attr:`~.detector.Check.body`); set in the crawler
    process, never sent.
    """

    fingerprint: Fingerprint | None
    skip_reason: str = ""
    method: str = ""
    main_key: int | None = None
    page_fingerprint: Fingerprint | None = None
    page_sketch: bytes | None = None
    extract_seconds: float = 0.0
    work_seconds: float = 0.0
    work_started: float = 0.0
    declared_canonical: str | None = None
    reused: bool = False
    text_length: int = 0
    short_text: str = ""
    cpu_seconds: float = 0.0
    template: int | None = None
    learned: str = ""
    lesson: Lesson | None = None
    agreement: float = 0.0
    prekey: int | None = None
    own_selector: bool = False
    body: bytes | None = None

    def to_wire(self) -> tuple:
        """Plain bytes, ints and strings: what crosses from a worker process (far cheaper to pickle than
        numpy arrays)."""
        return (
            self.skip_reason,
            self.method,
            self.main_key,
            _fp_wire(self.fingerprint),
            _fp_wire(self.page_fingerprint),
            self.page_sketch,
            self.extract_seconds,
            self.work_seconds,
            self.work_started,
            self.declared_canonical,
            self.text_length,
            self.short_text,
            self.cpu_seconds,
            self.template,
            self.learned,
            None if self.lesson is None else self.lesson.to_wire(),
            self.agreement,
            self.prekey,
            self.own_selector,
        )

    @classmethod
    def from_wire(cls, wire: tuple) -> Prepared:
        (
            skip_reason,
            method,
            main_key,
            fp,
            page_fp,
            page_sketch,
            seconds,
            work,
            started,
            declared,
            length,
            short,
            cpu,
            template,
            learned,
            taught,
            agreed,
            pre,
            own,
        ) = wire
        return cls(
            _fp_unwire(fp),
            skip_reason,
            method,
            main_key,
            _fp_unwire(page_fp),
            page_sketch,
            seconds,
            work,
            started,
            declared,
            text_length=length,
            short_text=short,
            cpu_seconds=cpu,
            template=template,
            learned=learned,
            lesson=None if taught is None else Lesson.from_wire(taught),
            agreement=agreed,
            prekey=pre,
            own_selector=own,
        )


def _fp_wire(fp: Fingerprint | None) -> tuple[bytes, bytes] | None:
    return None if fp is None else (fp.signature, fp.buckets.astype(np.int64, copy=False).tobytes())


def _fp_unwire(wire: tuple[bytes, bytes] | None) -> Fingerprint | None:
    return None if wire is None else Fingerprint(wire[0], np.frombuffer(wire[1], dtype=np.int64))


class DocumentPipeline:
    """Turns HTML or plain text into a :class:`Prepared` document. Stateless: safe in threads and in
    worker processes. ``with_page_text`` reads each main-text page's whole text too, for the template
    guard; ``find_canonical`` reads the URL a page declares canonical."""

    def __init__(
        self,
        algorithm: Algorithm,
        *,
        use_main: bool = True,
        min_text_length: int = 200,
        fast: bool = False,
        favor: str = "recall",
        with_page_text: bool = False,
        find_canonical: bool = False,
        extractor: str = "trafilatura",
        learn: bool = False,
        learn_agreement: float = 0.95,
    ) -> None:
        self.algorithm = algorithm
        self.use_main = use_main
        self.min_text_length = min_text_length
        self.fast = fast
        self.favor = favor
        self.with_page_text = with_page_text
        self.find_canonical = find_canonical
        self.extractor = extractor
        self.learn = learn and use_main and extractor == "trafilatura"
        self.learn_agreement = learn_agreement
        self._sketcher = page_sketcher(algorithm) if with_page_text else None

    def from_html(self, html: str | bytes, url: str | None = None, offers: Offers | None = None) -> Prepared:
        """A page made ready; with ``offers`` (its host's learned selectors, :mod:`.learned`), its main text
        by its template's selector where one vouches for it, else by trafilatura, with what it teaches."""
        started = time.perf_counter()
        if isinstance(html, bytes):
            html = decode_html(html)
        got, learnt = self.learned_text(html, url, offers)
        seconds = time.perf_counter() - started
        declared = None
        if self.find_canonical:
            declared = declared_canonical(html, url)
        return replace(self.from_extraction(got), extract_seconds=seconds, declared_canonical=declared, **learnt)

    def learned_text(self, html: str, url: str | None, offers: Offers | None) -> tuple[Extraction, dict]:
        """The page's text by its template's selector (checked against trafilatura on a sampled share of
        pages), or by trafilatura with the lesson it teaches; and what to record of it in :class:`Prepared`.
        Without ``offers`` (or templates not learned): trafilatura's text. A page whose :func:`~.learned.prekey`
        its host has not met before is not parsed for its template, unless its offers say every page of the host
        is (:data:`~.learned.learner.PARSE_ALL_TRIAL`); such a page's pre-key is not read (it decides nothing
        there), unless the page cannot be parsed."""
        if not self.learn or offers is None:
            return self.text_of(html, url), {}
        pre = None if offers.parse_all else prekey(html)
        if pre is not None and not in_keys(offers.parse, pre):
            return self.text_of(html, url), {"prekey": pre}
        tree = parse(html)
        if tree is None:
            return self.text_of(html, url), {"prekey": prekey(html) if pre is None else pre}
        template = skeleton_key(tree)
        found = {"prekey": pre, "template": template}
        offer = offers.selectors.get(template)
        if offer is not None and not offer.unstable:
            text = replay(tree, offer, self.learn_agreement)
            if text:
                if url is not None and sampled(url, offer.share):
                    got = self.text_of(html, url)
                    agreed = agreement(text, got.text) if got.method == "main" else 0.0
                    learned = "agreed" if agreed >= self.learn_agreement else "disagreed"
                    return got, {**found, "learned": learned, "agreement": agreed}
                return self._replayed(tree, text), {**found, "learned": "replayed"}
        got = self.text_of(html, url)
        if offer is not None and offer.unstable:
            return got, found
        teaches = offer is not None or in_keys(offers.learn, template)
        taught = lesson(tree, got.text, self.learn_agreement) if teaches and got.method == "main" else None
        return got, {**found, "learned": "refused" if offer is not None else "", "lesson": taught}

    def _replayed(self, tree: object, text: str) -> Extraction:
        """A replayed main text as :func:`~.extract.extract` would have returned trafilatura's."""
        if len(text) < self.min_text_length:
            return Extraction(text, "none", "too_little_text")
        if self.with_page_text:
            page = page_text_of(tree)
            if len(text) <= TEMPLATE_MAX_SHARE * len(page):
                return Extraction(text, "main", page_text=page)
        return Extraction(text, "main")

    def text_of(self, html: str | bytes, url: str | None = None) -> Extraction:
        """The text a page is fingerprinted on (the costly step; the evaluator caches it)."""
        return extract(
            html,
            url,
            use_main=self.use_main,
            min_length=self.min_text_length,
            fast=self.fast,
            favor=self.favor,
            with_page_text=self.with_page_text,
            extractor=self.extractor,
        )

    def from_extraction(self, got: Extraction) -> Prepared:
        if got.method == "none":
            return Prepared(None, got.reason, short_text=got.text.strip()[:SHORT_TEXT_KEPT])
        try:
            fingerprint = self.algorithm.fingerprint(got.text)
        except NoWords:
            return Prepared(None, "no_words")
        length = len(got.text)
        if got.method != "main":
            return Prepared(fingerprint, method=got.method, text_length=length)
        if not got.page_text or self._sketcher is None:
            return Prepared(fingerprint, method="main", text_length=length)
        try:
            page = self.algorithm.fingerprint(got.page_text)
            sketch = (
                page.signature
                if self._sketcher is self.algorithm
                else self._sketcher.fingerprint(got.page_text).signature
            )
        except NoWords:  # the page text holds the main text's words: only for safety
            return Prepared(fingerprint, method="main", text_length=length)
        return Prepared(
            fingerprint,
            method="main",
            main_key=text_key(got.text),
            page_fingerprint=page,
            page_sketch=sketch,
            text_length=length,
        )

    def from_text(self, text: str) -> Prepared:
        stripped = text.strip()
        if len(stripped) < max(self.min_text_length, 1):
            return Prepared(None, "too_little_text" if stripped else "no_text")
        try:
            return Prepared(self.algorithm.fingerprint(text), method="text", text_length=len(stripped))
        except NoWords:
            return Prepared(None, "no_words")
