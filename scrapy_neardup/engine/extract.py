"""Main-content extraction: the text a page is fingerprinted on.

Boilerplate (navigation, ads, related links, footers) is what makes unrelated pages of one site look alike
and copies of one article on two sites look different, so the fingerprint is taken on the main content
found by trafilatura (Barbaresi, ACL 2021). Extraction can fail quietly, though: for some sites it returns
nothing, or the same short template text for every article. Hence the fallbacks here (too little main
text → the whole visible text of the page), and the per-host repeat check in
:mod:`scrapy_neardup.engine.template`.

Nothing in a page is executed: lxml parses it, scripts and styles are discarded.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

_per_thread = threading.local()
_DROP_TAGS = ("script", "style", "noscript", "template", "svg", "head")
#: Elements that end a run of words: their text must not be glued to the text around them.
_BREAK_TAGS = frozenset(
    (
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "caption",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "img",
        "input",
        "label",
        "legend",
        "li",
        "main",
        "nav",
        "ol",
        "option",
        "p",
        "pre",
        "section",
        "select",
        "summary",
        "table",
        "td",
        "textarea",
        "th",
        "tr",
        "ul",
        "button",
        "title",
        "body",
        "html",
    )
)


#: What finds a page's main content (``NEARDUP_EXTRACTOR``):
#:
#: * ``trafilatura``: Barbaresi's trafilatura (ACL 2021), its tree walk in Python: the reference;
#: * ``resiliparse``: Resiliparse's main-content heuristics on the lexbor parser (Bevendorff et al., ECIR
#:   2018; the extractor Fröbe et al. 2021 measure for near-duplicate detection), C++ throughout;
#: * ``resiliparse-blocks``: Resiliparse's main content cut into blocks, then the blocks classified by their
#:   word counts as boilerpipe's shallow text features do (Kohlschütter, Fankhauser, Nejdl, WSDM 2010):
#:   short blocks (links, bylines, teasers) are dropped unless they sit between long ones;
#: * ``resiliparse-checked``: ``resiliparse-blocks``, and trafilatura where its main text is shorter than
#:   :data:`CHECKED_MIN_CHARS` (a page it is unsure of: short texts are where a wrong block weighs most).
#:
#: Each records itself with the store's parameters, so fingerprints of two extractors are never compared.
EXTRACTOR_NAMES = ("trafilatura", "resiliparse", "resiliparse-blocks", "resiliparse-checked")
#: ``resiliparse-checked``: a fast main text shorter than this is taken by trafilatura again.
CHECKED_MIN_CHARS = 1000

#: What trafilatura favours when unsure (its ``favor_recall`` / ``favor_precision``, or neither): more text or less.
TRAFILATURA_FAVORS = ("recall", "balanced", "precision")

#: A main text is a candidate for a template block only when it is at most this share of the page's text;
#: above it, the main text is most of the page, which is what an article (or a copy of one) looks like.
TEMPLATE_MAX_SHARE = 0.5


@dataclass(frozen=True)
class Extraction:
    """Text to fingerprint, and how it was obtained: ``main`` (trafilatura), ``page`` (all visible text,
    used when the main text is too short), or ``none`` with ``reason`` when the page has no usable text.

    ``page_text`` is the page's whole visible text when it was asked for and the main text is at most
    ``TEMPLATE_MAX_SHARE`` of it: what the template guard (:mod:`.template`) compares and falls back on.
    """

    text: str
    method: str
    reason: str = ""
    page_text: str = ""


def decode_html(body: bytes, content_type: str | None = None) -> str:
    """The text of an HTML body, decoded as Scrapy's ``TextResponse.text`` does: the BOM, then the
    ``Content-Type`` charset, then the document's own declaration, then ASCII, UTF-8 or cp1252. Every path
    (a crawl's workers, the batch CLI, the evaluator) decodes this one way, so trafilatura and the page
    text always read the same characters."""
    from w3lib.encoding import html_to_unicode, resolve_encoding

    def auto_detect(data: bytes) -> str | None:
        for encoding in ("ascii", "utf-8", "cp1252"):
            try:
                data.decode(encoding)
            except UnicodeError:
                continue
            return resolve_encoding(encoding)
        return None

    return html_to_unicode(content_type, body, auto_detect_fun=auto_detect)[1]


def _text_sheet() -> Any:
    """The XSLT that writes a tree's visible text: dropped elements and comments give nothing (the text
    after them, their tail, stays), block elements a space on each side. Compiled once per thread: the
    in-process pool (``NEARDUP_WORKERS = 0``) shares no lxml object between its threads."""
    sheet = getattr(_per_thread, "text_sheet", None)
    if sheet is None:
        import lxml.etree

        drop, breaks = "|".join(_DROP_TAGS), "|".join(sorted(_BREAK_TAGS))
        sheet = _per_thread.text_sheet = lxml.etree.XSLT(
            lxml.etree.XML(
                '<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">'
                '<xsl:output method="text" encoding="utf-8"/>'
                f'<xsl:template match="{drop}|comment()|processing-instruction()"/>'
                f'<xsl:template match="{breaks}"><xsl:text> </xsl:text><xsl:apply-templates/>'
                "<xsl:text> </xsl:text></xsl:template>"
                "</xsl:stylesheet>"
            )
        )
    return sheet


def _visible_text(root: Any) -> str:
    """The visible text of a parsed page (see :func:`page_text`), the tree left as it was: libxslt walks it
    in C, where a loop in Python visited every node (and dropped scripts from the tree first). White space
    is folded by ``split``/``join``, the same result as ``re.sub(r"\\s+", " ")`` and a strip (both split on
    ``str.isspace``), at a third of its cost: 0.09 against 0.26 ms a page on neardup-dev's 19 KB page texts."""
    return " ".join(str(_text_sheet()(root)).split())


def page_text(html: str | bytes) -> str:
    """All visible text of a page, scripts and styles removed, white space collapsed.

    Block elements (paragraphs, list items, table cells, ``<br>``) separate words: lxml's ``text_content``
    alone would glue ``<li>Home</li><li>News</li>`` into one token ``HomeNews``, and shingles of glued
    words match nothing on another page. Text after a comment is kept (``© <!-- -->2020``: pages rendered
    by React put such comments between most words).
    """
    import lxml.etree  # imported on first use: text-only jobs (the batch CLI on text) never need it
    import lxml.html

    try:
        root = lxml.html.fromstring(html)
    except (lxml.etree.ParserError, ValueError):
        return ""
    return _visible_text(root)


def quiet_trafilatura() -> None:
    """Keep trafilatura's own warnings (``discarding data``, ``empty HTML tree``: notes on its heuristics,
    one per odd page) out of a crawl's log, unless the user has set its logger's level themselves."""
    trafilatura_logger = logging.getLogger("trafilatura")
    if trafilatura_logger.level == logging.NOTSET:
        trafilatura_logger.setLevel(logging.ERROR)


def main_text(html: Any, url: str | None = None, fast: bool = False, favor: str = "recall") -> str:
    """trafilatura's main text (no comments; tables kept), or ``""`` when it finds none or fails. ``html``:
    the page, or its tree as :func:`parse_for_extraction` made it (trafilatura works on a copy).

    ``favor``: ``recall`` (the default) asks trafilatura to keep more of a page when unsure, ``precision``
    to keep less, ``balanced`` neither. Measured on neardup-dev (docs/quality.md), ``recall`` finds more
    copies at the same precision, at every threshold, and extracts faster (it skips the comparison with
    the fallback extractors that the balanced mode runs on most pages).
    """
    import trafilatura  # heavy import (lxml, courlan, justext): only when extraction is used

    try:
        text = trafilatura.extract(
            html,
            url=url,
            fast=fast,
            favor_recall=favor == "recall",
            favor_precision=favor == "precision",
            include_comments=False,
            include_tables=True,
            include_images=False,
            include_links=False,
            deduplicate=False,
            with_metadata=False,
        )
    except Exception:  # trafilatura can fail on pathological markup; a page is never lost for that
        logger.debug("trafilatura failed on %s", url, exc_info=True)
        return ""
    return text or ""


def resiliparse_texts(html: str, with_page_text: bool, blocks: bool) -> tuple[str, str]:
    """Resiliparse's main text of a page (its blocks filtered by :func:`content_blocks` when ``blocks``) and,
    when asked, its whole visible text: one parse by lexbor serves both."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    try:
        tree = HTMLTree.parse(html)
        main = extract_plain_text(
            tree,
            preserve_formatting=blocks,
            main_content=True,
            list_bullets=False,
            alt_texts=False,
            comments=False,
        )
        page = (
            extract_plain_text(tree, preserve_formatting=False, list_bullets=False, alt_texts=False)
            if with_page_text
            else ""
        )
    except Exception:  # as with trafilatura: a page is never lost for its markup
        logger.debug("resiliparse failed on a page", exc_info=True)
        return "", ""
    if blocks:
        main = content_blocks(main.splitlines())
    return " ".join(main.split()), " ".join(page.split())


#: boilerpipe's thresholds (Kohlschütter et al. 2010, the NumWordsRulesClassifier): a block of at least this
#: many words is content; one of fewer than ``SHORT_BLOCK_WORDS`` is content only between two content blocks.
LONG_BLOCK_WORDS = 16
SHORT_BLOCK_WORDS = 8


def content_blocks(blocks: list[str]) -> str:
    """The blocks boilerpipe's shallow text features keep: long blocks, and shorter ones next to a long
    block (a heading above a paragraph, a short paragraph between two long ones), in their order."""
    words = [len(block.split()) for block in blocks]
    keep = [n >= LONG_BLOCK_WORDS for n in words]
    for i, n in enumerate(words):
        if keep[i] or n == 0:
            continue
        before = next((keep[j] for j in range(i - 1, -1, -1) if words[j]), False)
        after = next((keep[j] for j in range(i + 1, len(words)) if words[j]), False)
        if (n >= SHORT_BLOCK_WORDS and (before or after)) or (before and after):
            keep[i] = True
    return "\n".join(block for block, kept in zip(blocks, keep) if kept)


def parse_for_extraction(html: str) -> Any:
    """The page's tree as trafilatura parses it (``None`` when it rejects the page): one parse serves the
    page text and, copied by trafilatura, the main text. trafilatura's own size limit applies."""
    import trafilatura
    from trafilatura.settings import DEFAULT_CONFIG

    try:
        return trafilatura.load_html(html, DEFAULT_CONFIG.getint("DEFAULT", "MAX_FILE_SIZE"))
    except Exception:  # as in main_text: a page is never lost for its markup
        logger.debug("trafilatura could not parse a page", exc_info=True)
        return None


def extract(
    html: str | bytes,
    url: str | None = None,
    *,
    use_main: bool = True,
    min_length: int = 200,
    fast: bool = False,
    favor: str = "recall",
    with_page_text: bool = False,
    extractor: str = "trafilatura",
) -> Extraction:
    """The text to fingerprint a page on: its main text; the page text when trafilatura finds no main text
    at all (an extraction failure, or a page of links); nothing (``too_little_text``) when the main text it
    finds is shorter than ``min_length``.

    ``with_page_text``: also read the page's whole text after a main-text extraction, and keep it when the
    main text is at most ``TEMPLATE_MAX_SHARE`` of it (only the template guard needs it). The page is then
    parsed once: trafilatura extracts from a copy of the tree the page text is read from. On neardup-dev
    that costs 1.3 ms a page less than a second parse and a walk in Python did (``bench/extract_ab.py``), the
    main texts unchanged. Bytes are decoded first (:func:`decode_html`).
    """
    if isinstance(html, bytes):
        html = decode_html(html)
    tree = None
    if use_main:
        page: str | None = None
        text = ""
        if extractor != "trafilatura":
            text, page = resiliparse_texts(html, with_page_text, blocks=extractor != "resiliparse")
        if extractor == "trafilatura" or (extractor == "resiliparse-checked" and len(text) < CHECKED_MIN_CHARS):
            tree = parse_for_extraction(html) if with_page_text and page is None else None
            text = main_text(html if tree is None else tree, url, fast=fast, favor=favor)
        if len(text) >= min_length:
            if with_page_text:
                if page is None:
                    page = page_text(html) if tree is None else _visible_text(tree)
                if len(text) <= TEMPLATE_MAX_SHARE * len(page):
                    return Extraction(text, "main", page_text=page)
            return Extraction(text, "main")
        if text.strip():
            # trafilatura found the page's own text, and it is short (an "about" or "contact" page in a
            # large template): too short to judge. Its page text would be mostly the template, which every
            # page of the site shares, so comparing that would make it a near-duplicate of any of them.
            return Extraction(text, "none", "too_little_text")
    text = page_text(html) if tree is None else _visible_text(tree)
    if len(text) >= min_length:
        return Extraction(text, "page")
    return Extraction(text, "none", "too_little_text" if text else "no_text")
