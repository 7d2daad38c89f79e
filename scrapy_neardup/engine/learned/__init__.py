"""Main content by learned templates: trafilatura's decision, learned once per template, replayed by lexbor.

A site serves thousands of pages from one template, and trafilatura (Barbaresi, ACL 2021) makes the same
decision on each: where the article sits, and which blocks inside it (share bars, related lists, comment
threads) are not the article. This module learns that decision from the pages trafilatura has extracted
and replays it on later pages of the template with a fast parser (lexbor, through selectolax), at a
twentieth of the cost.

* **The template** of a page is its host and its *skeleton*: the set of tag/class paths of the page's upper
  levels (:data:`SKELETON_DEPTH`), the part pages of one template share and the article does not change.
  A page is parsed for it only when its :func:`prekey` (read without a parse) was met on its host before.
  This is the page-level idea of template detection by shared structure (Bar-Yossef & Rajagopalan, WWW
  2002: pagelets shared by many pages of a site are its template; Yi, Liu & Li, KDD 2003: a site style
  tree, where the presentation styles shared by many pages are noise).
* **A lesson** (:func:`lesson`) is what one page teaches, given trafilatura's text of it: the element that
  holds that text (the deepest element holding :data:`COVERS` of its word pairs, grown by a heading above
  them), and, below it, each block path trafilatura kept or dropped, down to :data:`DECISION_DEPTH`
  levels: the blocks' text decides, as in boilerpipe's block classification (Kohlschütter, Fankhauser &
  Nejdl, WSDM 2010), except that the label comes from trafilatura, not from shallow features. A lesson
  counts only if replaying it on its own page reproduces trafilatura's text (:func:`agreement` ≥ the
  bound).
* **A selector** (:class:`Selector`) is the lessons of one template that agree on where the article sits,
  merged. Replayed (:func:`replay`), it refuses a page where the article element is not found as learned,
  where a block under it has text at a path no lesson decided, or where it keeps far less of the element
  than its lessons did: such a page goes to trafilatura, and teaches the selector what it lacked. A share
  of its pages is checked against trafilatura (:func:`verify_share`); a disagreement retires it.

Why a Jaccard bound is the right test: Jaccard distance is a metric, so a text ``A'`` within ``ε`` of
trafilatura's ``A`` is within ``d(A, B) ± ε`` of any other text ``B``: replacing ``A`` by ``A'`` can change
a verdict only for a pair whose similarity is within ``ε`` of the threshold.

Nothing of a page is executed: lexbor parses it; only the selector's own data (paths, decisions) is kept.
"""

from .learner import LESSONS, TEACHES_FROM, TemplateLearner
from .lesson import AGREEMENT, COVERS, DECISION_DEPTH, SHORT_CONFLICT_WORDS, Lesson, Locator, lesson, replay_element
from .page import (
    KEY_BITS,
    PREKEY_CHARS,
    SKELETON_DEPTH,
    SPARSE_KEYS,
    KeySet,
    agreement,
    either_keys,
    in_bits,
    in_keys,
    key_bits,
    key_set,
    page_text_of,
    parse,
    prekey,
    skeleton_key,
    word_pairs,
    words,
)
from .selector import (
    FORGIVEN_AFTER,
    LEARNER_VERSION,
    MAX_RETIREMENTS,
    MIN_CHECK_SHARE,
    RELEARN_AFTER,
    Offer,
    Offers,
    Selector,
    extractor_id,
    merge,
    replay,
    sampled,
    verify_share,
)

__all__ = [
    "AGREEMENT",
    "COVERS",
    "DECISION_DEPTH",
    "FORGIVEN_AFTER",
    "KEY_BITS",
    "LEARNER_VERSION",
    "LESSONS",
    "MAX_RETIREMENTS",
    "MIN_CHECK_SHARE",
    "PREKEY_CHARS",
    "RELEARN_AFTER",
    "SHORT_CONFLICT_WORDS",
    "SKELETON_DEPTH",
    "SPARSE_KEYS",
    "TEACHES_FROM",
    "KeySet",
    "Lesson",
    "Locator",
    "Offer",
    "Offers",
    "Selector",
    "TemplateLearner",
    "agreement",
    "extractor_id",
    "either_keys",
    "in_bits",
    "in_keys",
    "key_bits",
    "key_set",
    "lesson",
    "merge",
    "page_text_of",
    "parse",
    "prekey",
    "replay",
    "replay_element",
    "sampled",
    "skeleton_key",
    "verify_share",
    "word_pairs",
    "words",
]
