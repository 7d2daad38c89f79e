"""From a document to a fingerprint: the steps shared by the Scrapy plugin and the batch CLI.

HTML → main text (or page text when the main text is too short, or is the site's template text, see
:mod:`.template`) → tokens → shingles → fingerprint.
Keeping this in one place is what makes a crawl and an offline run over its dump agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .algorithms import Algorithm, Fingerprint
from .extract import Extraction, extract, page_text
from .template import TemplateGuard

#: A repeated main text is taken as template only when it is at most this share of the page's text.
TEMPLATE_MAX_SHARE = 0.5


@dataclass(frozen=True)
class Prepared:
    """A document made ready for the decision: its fingerprint, or why it is skipped. ``method`` says which
    text was fingerprinted: ``main``, ``page`` (main text too short), ``template`` (page text, because the
    main text was the host's template) or ``text`` (given as text)."""

    fingerprint: Fingerprint | None
    skip_reason: str = ""
    method: str = ""
    text_length: int = 0


class DocumentPipeline:
    """Turns HTML or plain text into a :class:`Prepared` document. Safe in worker threads: its only state,
    the optional :class:`TemplateGuard`, is locked."""

    def __init__(self, algorithm: Algorithm, *, use_main: bool = True, min_text_length: int = 200,
                 fast: bool = True, favor: str = "recall", template_guard: TemplateGuard | None = None) -> None:
        self.algorithm = algorithm
        self.use_main = use_main
        self.min_text_length = min_text_length
        self.fast = fast
        self.favor = favor
        self.template_guard = template_guard

    def from_html(self, html: str | bytes, url: str | None = None) -> Prepared:
        return self.from_extraction(self.text_of(html, url))

    def text_of(self, html: str | bytes, url: str | None = None) -> Extraction:
        """The text a page is fingerprinted on (the costly step; the evaluator caches it)."""
        got = extract(html, url, use_main=self.use_main, min_length=self.min_text_length, fast=self.fast,
                      favor=self.favor)
        return self.guard(got, url, lambda: html)

    def guard(self, got: Extraction, url: str | None, html: Callable[[], str | bytes]) -> Extraction:
        """The page text instead of a main text that is this host's template (see :mod:`.template`).

        A main text repeated under several paths of one host is a template only when it is at most
        ``TEMPLATE_MAX_SHARE`` of the page's whole text: copies of one article under several paths of one
        site repeat their main text too, but there it is most of the page. Separate from
        :meth:`text_of` so that a caller holding cached extractions (the evaluator) applies the guard in
        document order; ``html`` is called only when the main text is repeated.
        """
        if self.template_guard is None or got.method != "main" or not self.template_guard.is_template(url, got.text):
            return got
        text = page_text(html())
        if len(got.text) > TEMPLATE_MAX_SHARE * len(text):
            return got
        return Extraction(text, "page", "template")

    def from_extraction(self, got: Extraction) -> Prepared:
        if got.method == "none":
            return Prepared(None, got.reason, text_length=len(got.text))
        method = "template" if got.reason == "template" else got.method
        return Prepared(self.algorithm.fingerprint(got.text), method=method, text_length=len(got.text))

    def from_text(self, text: str) -> Prepared:
        stripped = text.strip()
        if len(stripped) < max(self.min_text_length, 1):
            return Prepared(None, "too_little_text" if stripped else "no_text", text_length=len(stripped))
        return Prepared(self.algorithm.fingerprint(text), method="text", text_length=len(stripped))
