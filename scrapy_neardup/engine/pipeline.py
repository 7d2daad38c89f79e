"""From a document to a fingerprint: the steps shared by the Scrapy plugin and the batch CLI.

HTML → main text (or page text when the main text is too short) → tokens → shingles → fingerprint.
Keeping this in one place is what makes a crawl and an offline run over its dump agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from .algorithms import Algorithm, Fingerprint
from .extract import Extraction, extract


@dataclass(frozen=True)
class Prepared:
    """A document made ready for the decision: its fingerprint, or why it is skipped."""

    fingerprint: Fingerprint | None
    skip_reason: str = ""
    method: str = ""
    text_length: int = 0


class DocumentPipeline:
    """Turns HTML or plain text into a :class:`Prepared` document. Stateless, so safe in worker threads."""

    def __init__(self, algorithm: Algorithm, *, use_main: bool = True, min_text_length: int = 200,
                 fast: bool = True) -> None:
        self.algorithm = algorithm
        self.use_main = use_main
        self.min_text_length = min_text_length
        self.fast = fast

    def from_html(self, html: str | bytes, url: str | None = None) -> Prepared:
        return self.from_extraction(self.text_of(html, url))

    def text_of(self, html: str | bytes, url: str | None = None) -> Extraction:
        """The text a page is fingerprinted on (the costly step; the evaluator caches it)."""
        return extract(html, url, use_main=self.use_main, min_length=self.min_text_length, fast=self.fast)

    def from_extraction(self, got: Extraction) -> Prepared:
        if got.method == "none":
            return Prepared(None, got.reason, text_length=len(got.text))
        return Prepared(self.algorithm.fingerprint(got.text), method=got.method, text_length=len(got.text))

    def from_text(self, text: str) -> Prepared:
        stripped = text.strip()
        if len(stripped) < max(self.min_text_length, 1):
            return Prepared(None, "too_little_text" if stripped else "no_text", text_length=len(stripped))
        return Prepared(self.algorithm.fingerprint(text), method="text", text_length=len(stripped))
