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

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import mmh3

#: The learned format; a selector of another version is never replayed.
LEARNER_VERSION = 1
#: Levels below ``<body>`` whose element paths make a page's skeleton (its template key).
SKELETON_DEPTH = 3
#: The article element is the deepest that holds at least this share of trafilatura's word pairs.
COVERS = 0.9
#: Levels below the article element at which blocks are decided (deeper elements follow their block).
DECISION_DEPTH = 3
#: A block whose word pairs are at least this share in trafilatura's text is kept; at most ``DROPPED``, dropped;
#: in between it is decided by its children (or kept, at ``DECISION_DEPTH``).
KEPT, DROPPED = 0.9, 0.1
#: A lesson, or a replay checked against trafilatura, must reproduce its text to this word-pair Jaccard.
AGREEMENT = 0.95
#: A block at a path that trafilatura kept on some pages and dropped on others (a subheading, a category
#: label) is kept when it has at most this many words: whichever trafilatura would choose, the text's word
#: pairs change by at most as many; a longer one makes the selector refuse the page.
SHORT_CONFLICT_WORDS = 12
#: Class and id tokens longer than this, or with a digit in them, are page-specific (``post-1234``): not kept.
_MAX_TOKEN = 32
_TOKEN = re.compile(r"^[A-Za-z_-][A-Za-z_-]*$")
_WORD = re.compile(r"\w+")
_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
#: Elements whose content is never page text.
_SILENT = frozenset(("script", "style", "noscript", "template", "svg", "head", "iframe", "object", "canvas"))
_STRIPPED = sorted(_SILENT - {"head"})
#: Elements whose text is not glued to the text around them.
_INLINE = frozenset(
    ("a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "font", "i", "kbd", "mark", "q",
     "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var", "wbr", "del", "ins")
)  # fmt: skip


def words(text: str) -> list[str]:
    """The words of a text, case folded: what :func:`agreement` compares."""
    return _WORD.findall(text.casefold())


def word_pairs(tokens: list[str]) -> set[tuple[str, ...]]:
    """Word 2-shingles (a single word for a one-word text): the unit the fingerprints are taken on."""
    if len(tokens) < 2:
        return {tuple(tokens)} if tokens else set()
    return set(zip(tokens, tokens[1:]))


def agreement(a: str, b: str | set[tuple[str, ...]]) -> float:
    """Jaccard similarity of two texts' word pairs (1.0 for two empty texts); ``b`` may be given as its
    pairs already."""
    pa, pb = word_pairs(words(a)), (b if isinstance(b, set) else word_pairs(words(b)))
    if not pa and not pb:
        return 1.0
    return len(pa & pb) / len(pa | pb)


def _step(node: Any) -> str:
    """An element's step in a path: its tag, its stable id and its stable classes, in a CSS form."""
    attrs = node.attributes
    step = node.tag if _TAG.match(node.tag) else "*"  # a namespaced tag (o:p) is no CSS type selector
    ident = attrs.get("id") or ""
    if ident and len(ident) <= _MAX_TOKEN and _TOKEN.match(ident):
        step += "#" + ident
    classes = sorted({c for c in (attrs.get("class") or "").split() if len(c) <= _MAX_TOKEN and _TOKEN.match(c)})
    return step + "".join("." + c for c in classes)


def _elements(node: Any) -> Iterator[Any]:
    child = node.child
    while child is not None:
        tag = child.tag
        if tag and tag[0] not in "-_" and tag not in _SILENT:
            yield child
        child = child.next


def parse(html: str) -> Any:
    """The page's lexbor tree (selectolax), or ``None`` when it has no body."""
    from selectolax.lexbor import LexborHTMLParser, SelectolaxError

    try:
        tree = LexborHTMLParser(html)
    except (SelectolaxError, ValueError):  # a page is never lost for its markup: it goes to trafilatura
        return None
    if tree.body is None:
        return None
    tree.strip_tags(_STRIPPED)  # their text is never page text: lexbor's own text() is then safe
    return tree


def page_text_of(tree: Any) -> str:
    """The page's whole visible text (what the template guard compares), blocks separated: lexbor's own
    walk (a quarter of the cost of one in Python) of a tree :func:`parse` made, scripts and styles gone."""
    return _flat(tree.body)


def _flat(node: Any) -> str:
    """A node's text by lexbor, every element a word boundary: what the learner measures shares with
    (where :func:`_text`, which glues inline elements as trafilatura does, makes the replayed text)."""
    return " ".join(node.text(separator=" ").split())


def skeleton_key(tree: Any) -> int:
    """The template key of a page (without its host): a 64-bit hash of the set of element paths of its
    upper ``SKELETON_DEPTH`` levels. A set, so that how many items a list has changes nothing."""
    paths: set[str] = set()
    level = [("", tree.body)]
    for _ in range(SKELETON_DEPTH):
        below = []
        for path, node in level:
            for child in _elements(node):
                child_path = path + ">" + _step(child)
                paths.add(child_path)
                below.append((child_path, child))
        level = below
    return mmh3.hash64("\n".join(sorted(paths)), 0x7E3B, signed=False)[0]


#: The characters of markup after ``<body`` a page's pre-key reads (:func:`prekey`), scripts, styles and
#: inline SVG left out: its header and navigation, which its template fixes; further on, an article's own
#: classes (``category-sport``, ``tag-election``) would make every page a pre-key of its own.
PREKEY_CHARS = 4096
_BODY_TAG = re.compile(r"<body\b", re.IGNORECASE)
_NOT_MARKUP = re.compile(r"<(script|style|svg)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_CONTAINER = re.compile(
    r"<(div|section|header|nav|main|aside|footer|article|ul|ol|form|table)\b([^>]*)>", re.IGNORECASE
)
_CLASS_OR_ID = re.compile(r"""\b(?:class|id)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)


def prekey(html: str) -> int:
    """A cheap key of a page's template, read without parsing it: the set of container tags with their
    stable classes and ids in the first ``PREKEY_CHARS`` characters of markup of its body. It only decides whether a
    page is worth parsing for its template (its pre-key met before on its host): two templates sharing one
    costs a parse, never a verdict."""
    at = _BODY_TAG.search(html)
    start = at.start() if at else 0
    chunk = _NOT_MARKUP.sub("", html[start : start + 4 * PREKEY_CHARS])[:PREKEY_CHARS]
    seen = set()
    for tag, attrs in _CONTAINER.findall(chunk):
        names = " ".join(_CLASS_OR_ID.findall(attrs)).split()
        seen.add(tag.lower() + "".join(sorted({"." + n for n in names if len(n) <= _MAX_TOKEN and _TOKEN.match(n)})))
    return mmh3.hash64("\n".join(sorted(seen)), 0x7E3C, signed=False)[0]


#: Bits of the sets of keys a host's pages are sent with (:class:`Offers`): a few false positives (a parse, a
#: lesson more) for a fixed size, whatever the number of templates a host has.
KEY_BITS = 8192


def key_bits(keys: Iterator[int] | set[int] | list[int]) -> bytes:
    bits = bytearray(KEY_BITS // 8)
    for key in keys:
        bit = key % KEY_BITS
        bits[bit >> 3] |= 1 << (bit & 7)
    return bytes(bits)


def in_bits(bits: bytes, key: int) -> bool:
    bit = key % KEY_BITS
    return bool(bits[bit >> 3] & (1 << (bit & 7)))


def _text(node: Any, skip: Any = None) -> str:
    """The visible text under ``node``, blocks separated, white space folded; ``skip(path, element)`` may
    leave out a subtree (``True``) or refuse the page (raises :class:`_Unknown`)."""
    out: list[str] = []
    _collect(node, "", 0, skip, out)
    return " ".join(" ".join(out).split())


class _Unknown(Exception):
    """A block with text at a path no lesson decided."""


def _collect(node: Any, path: str, depth: int, skip: Any, out: list[str]) -> None:
    """``skip(path, element)`` says of each element down to ``DECISION_DEPTH``: ``True`` leave it out,
    ``False`` keep it whole (no decision below), ``None`` go on deciding below it."""
    child = node.child
    while child is not None:
        tag = child.tag
        if tag == "-text":
            out.append(child.text_content or "")
        elif tag and tag[0] not in "-_" and tag not in _SILENT:
            below = skip
            child_path = path
            if skip is not None and depth < DECISION_DEPTH:
                child_path = path + ">" + _step(child)
                dropped = skip(child_path, child)
                if dropped:
                    child = child.next
                    continue
                if dropped is False:
                    below = None
            if tag in _INLINE:
                _collect(child, child_path, depth + 1, below, out)
            else:
                out.append(" ")
                _collect(child, child_path, depth + 1, below, out)
                out.append(" ")
        child = child.next


@dataclass(frozen=True)
class Locator:
    """Where a template's article element is: a CSS path from ``<body>``, which match it is, of how many."""

    css: str
    index: int
    matches: int

    def find(self, tree: Any) -> Any:
        from selectolax.lexbor import SelectolaxError

        try:
            found = tree.css(self.css)
        except SelectolaxError:  # a path lexbor cannot read is not this page's template
            return None
        return found[self.index] if len(found) == self.matches else None


@dataclass(frozen=True)
class Lesson:
    """What one page teaches: where its article element is, each block path below it kept (``True``) or
    dropped, and how well replaying just this lesson reproduces trafilatura's text on the page."""

    locator: Locator
    decisions: Mapping[str, bool]
    agreement: float
    kept: float = 1.0

    def to_wire(self) -> tuple:
        return (
            self.locator.css,
            self.locator.index,
            self.locator.matches,
            dict(self.decisions),
            self.agreement,
            self.kept,
        )

    @classmethod
    def from_wire(cls, wire: tuple) -> Lesson:
        css, index, matches, decisions, agreed, kept = wire
        return cls(Locator(css, index, matches), decisions, agreed, kept)


def _counts(
    node: Any, pairs: set[tuple[str, ...]], main_words: set[str], out: dict[int, tuple[int, int]]
) -> tuple[int, int]:
    """One walk of the page: for each element, how many word pairs of its text (a word, for a one-word
    text) are in trafilatura's text, and how many it has: ``out[mem_id] = (in main, all)``."""
    main = total = 0
    child = node.child
    while child is not None:
        tag = child.tag
        if tag == "-text":
            text = child.text_content
            found = _WORD.findall(text.casefold()) if text and not text.isspace() else ()
            if len(found) >= 2:
                total += len(found) - 1
                main += sum(1 for pair in zip(found, found[1:]) if pair in pairs)
            elif found:
                total += 1
                main += found[0] in main_words
        elif tag and tag[0] not in "-_" and tag not in _SILENT:
            in_main, all_ = _counts(child, pairs, main_words, out)
            main += in_main
            total += all_
        child = child.next
    out[node.mem_id] = (main, total)
    return main, total


def _article_element(tree: Any, counts: dict[int, tuple[int, int]]) -> tuple[Any, str] | None:
    """The article element, with its CSS path from body: the deepest element holding ``COVERS`` of the
    page's word pairs that are in trafilatura's text, then its ancestors as long as each adds at least as
    many of those pairs as others (a heading above the paragraphs belongs to the article; a header that
    repeats its title among the navigation does not)."""
    in_body = counts[tree.body.mem_id][0]
    path = [(tree.body, "body")]
    while True:
        node = path[-1][0]
        best = next((c for c in _elements(node) if counts.get(c.mem_id, (0, 0))[0] >= COVERS * in_body), None)
        if best is None:
            break
        path.append((best, path[-1][1] + " > " + _step(best)))
    while len(path) > 2:
        (inner, _), (outer, _) = (path[-1], path[-2])
        (inner_main, inner_all), (outer_main, outer_all) = counts[inner.mem_id], counts[outer.mem_id]
        gained = outer_main - inner_main
        if not gained or (outer_all - outer_main) - (inner_all - inner_main) > gained:
            break
        path.pop()
    return path[-1] if len(path) > 1 else None


def lesson(tree: Any, main: str) -> Lesson | None:
    """What this page, whose trafilatura text is ``main``, teaches about its template; ``None`` when its
    text is not found in one element, or the lesson does not reproduce it (:data:`AGREEMENT`)."""
    tokens = words(main)
    pairs = word_pairs(tokens)
    if len(pairs) < 8:
        return None
    counts: dict[int, tuple[int, int]] = {}
    if _counts(tree.body, pairs, set(tokens), counts)[0] < COVERS * len(pairs) / 2:
        return None  # most of trafilatura's text is not in the page as lexbor reads it
    found = _article_element(tree, counts)
    if found is None:
        return None
    article, css = found
    from selectolax.lexbor import SelectolaxError

    try:
        matches = tree.css(css)
    except SelectolaxError:  # a path lexbor's selector reader refuses: no lesson from this page
        return None
    index = next((i for i, m in enumerate(matches) if m.mem_id == article.mem_id), -1)
    if index < 0:
        return None
    decisions: dict[str, bool] = {}

    def decide(node: Any, path: str, depth: int) -> None:
        for child in _elements(node):
            child_path = path + ">" + _step(child)
            in_main, all_ = counts.get(child.mem_id, (0, 0))
            if not all_:
                continue
            share = in_main / all_
            if share >= KEPT or (depth + 1 >= DECISION_DEPTH and share > DROPPED):
                _decided(decisions, child_path, True)
            elif share <= DROPPED:
                _decided(decisions, child_path, False)
            else:
                before = len(decisions)
                decide(child, child_path, depth + 1)
                if len(decisions) == before:  # a mixed block whose text is its own, not its children's
                    _decided(decisions, child_path, True)

    decide(article, "", 0)
    text = replay_element(article, decisions)
    if text is None:
        return None
    return Lesson(Locator(css, index, len(matches)), decisions, agreement(text, pairs), _kept(text, article))


def _kept(text: str, article: Any) -> float:
    """The share of the article element's words a replay kept."""
    return len(words(text)) / max(1, len(words(_flat(article))))


def _decided(decisions: dict[str, bool], path: str, keep: bool) -> None:
    """One page's decision for a path: a path met twice on one page (two lists of one class) is kept if
    either is, so that no text is lost on the strength of one page."""
    decisions[path] = decisions.get(path, False) or keep


def replay_element(
    article: Any, decisions: Mapping[str, bool], kept_low: float = 0.0, conflicts: frozenset[str] = frozenset()
) -> str | None:
    """The article element's text with the dropped blocks left out; ``None`` when a block with text is at
    a path no lesson decided, or at one of ``conflicts`` (lessons decided it both ways) with more than
    ``SHORT_CONFLICT_WORDS`` words (a shorter one is kept), and when the text keeps less than half of
    ``kept_low``, the smallest share of the element's words a lesson kept (the article moved into a block
    the template used to drop)."""
    prefixes = {p[:i] for p in decisions for i in range(len(p)) if p[i] == ">" and i}

    def skip(path: str, element: Any) -> bool | None:
        keep = decisions.get(path)
        if keep is not None:
            return not keep
        if path in prefixes:
            return None  # a mixed block: its children are decided
        text = element.text(separator=" ")
        if not _WORD.search(text):
            return True
        if path in conflicts and len(_WORD.findall(text)) <= SHORT_CONFLICT_WORDS:
            return False
        raise _Unknown(path)

    try:
        text = _text(article, skip)
    except _Unknown:
        return None
    if kept_low and _kept(text, article) < kept_low / 2:
        return None
    return text


@dataclass(frozen=True)
class Selector:
    """A template's learned extraction, as the store keeps it (JSON, never pickled).

    ``host`` and ``template`` (:func:`skeleton_key`) name the template; ``locator`` and ``decisions`` are the
    merged lessons (a path the lessons decided both ways is left out: a page with text there goes to
    trafilatura); ``extractor`` names what it reproduces (:func:`extractor_id`): a selector of another
    extractor, version or setting is never used. ``state``: ``active`` (replayed, verified by sampling),
    ``retired`` (a verification disagreed: learned again) or ``unstable`` (retired too often: trafilatura
    only). ``served``: pages replayed; ``verified``: replays checked against trafilatura and found to agree;
    ``retired``: how often the template's selector was retired.
    """

    host: str
    template: int
    locator: Locator
    decisions: Mapping[str, bool]
    extractor: str
    state: str = "active"
    served: int = 0
    verified: int = 0
    retired: int = 0
    conflicts: frozenset[str] = field(default_factory=frozenset)
    kept_low: float = 0.0

    @property
    def usable(self) -> bool:
        return self.state == "active"

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": LEARNER_VERSION,
                "host": self.host,
                "template": self.template,
                "css": self.locator.css,
                "index": self.locator.index,
                "matches": self.locator.matches,
                "decisions": dict(self.decisions),
                "conflicts": sorted(self.conflicts),
                "extractor": self.extractor,
                "state": self.state,
                "served": self.served,
                "verified": self.verified,
                "retired": self.retired,
                "kept_low": self.kept_low,
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Selector | None:
        """A stored selector, or ``None`` when the record is not one this version reads (checked field by
        field: store data is data, never trusted)."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("v") != LEARNER_VERSION:
                return None
            decisions = data["decisions"]
            ok = (
                isinstance(data["host"], str)
                and isinstance(data["template"], int)
                and isinstance(data["css"], str)
                and isinstance(data["index"], int)
                and isinstance(data["matches"], int)
                and 0 <= data["index"] < data["matches"]
                and isinstance(decisions, dict)
                and all(isinstance(k, str) and isinstance(v, bool) for k, v in decisions.items())
                and isinstance(data["conflicts"], list)
                and all(isinstance(c, str) for c in data["conflicts"])
                and isinstance(data["extractor"], str)
                and data["state"] in ("active", "retired", "unstable")
                and all(isinstance(data[n], int) and data[n] >= 0 for n in ("served", "verified", "retired"))
                and isinstance(data["kept_low"], (int, float))
                and 0.0 <= data["kept_low"] <= 1.0
            )
            if not ok:
                return None
            return cls(
                data["host"],
                data["template"],
                Locator(data["css"], data["index"], data["matches"]),
                decisions,
                data["extractor"],
                data["state"],
                data["served"],
                data["verified"],
                data["retired"],
                frozenset(data["conflicts"]),
                float(data["kept_low"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


def extractor_id(favor: str, fast: bool) -> str:
    """What a selector reproduces: trafilatura's version and the settings it ran with, and this learner's."""
    from importlib.metadata import version

    return f"trafilatura {version('trafilatura')} favor={favor} fast={int(fast)} learner={LEARNER_VERSION}"


def merge(
    selector_decisions: Mapping[str, bool], conflicts: frozenset[str], taught: Mapping[str, bool]
) -> tuple[dict[str, bool], frozenset[str]]:
    """A template's decisions with one more lesson's: a path decided both ways becomes a conflict (neither
    kept nor dropped: a page with text there goes to trafilatura)."""
    merged = dict(selector_decisions)
    clashes = set(conflicts)
    for path, keep in taught.items():
        if path in clashes:
            continue
        known = merged.get(path)
        if known is None:
            merged[path] = keep
        elif known != keep:
            del merged[path]
            clashes.add(path)
    return merged, frozenset(clashes)


@dataclass(frozen=True)
class Offers:
    """What a page of a host is sent with: the host's selectors by template, the pre-keys met on the host
    (a page whose pre-key is not among them is not parsed: :func:`prekey`), and the templates met often
    enough to teach (:data:`TEACHES_FROM`); both sets as :func:`key_bits`."""

    selectors: Mapping[int, Offer]
    parse: bytes
    learn: bytes


def replay(tree: Any, offer: Offer) -> str | None:
    """The page's main text by its template's selector; ``None`` when the selector refuses the page."""
    article = offer.locator.find(tree)
    if article is None:
        return None
    return replay_element(article, offer.decisions, offer.kept_low, offer.conflicts)


#: The least share of a selector's pages checked against trafilatura (``NEARDUP_LEARN_CHECK_SHARE``).
MIN_CHECK_SHARE = 1 / 32


def verify_share(served: int, floor: float = MIN_CHECK_SHARE) -> float:
    """The share of a selector's pages also extracted by trafilatura to check it: a quarter of its first
    (its lessons already checked it on as many pages as it needs lessons), fewer as it proves itself
    (``1 / (4 + 2 * served)``: about ``ln(n) / 2`` checks in its first ``n`` pages), never under ``floor``."""
    return max(floor, 1 / (4 + 2 * served))


def sampled(url: str, share: float) -> bool:
    """Whether this page is one of the ``share`` checked: decided by its URL, the same in every process."""
    return mmh3.hash(url, 0x5A3B, signed=False) < share * 2**32


@dataclass(frozen=True)
class Offer:
    """A template's selector as sent with a page of its host: replay it (checked against trafilatura for
    ``share`` of the pages), or, ``unstable``, neither replay nor learn: trafilatura only."""

    template: int
    locator: Locator
    decisions: Mapping[str, bool]
    share: float
    unstable: bool = False
    kept_low: float = 0.0
    conflicts: frozenset[str] = frozenset()


#: A template's selector is retired for good (``unstable``: trafilatura only) after this many retirements.
MAX_RETIREMENTS = 3
#: Hosts, and templates a host, remembered as met (the least recently met forgotten first).
MAX_SEEN_HOSTS, MAX_SEEN_TEMPLATES = 100_000, 4096
#: A template teaches once its pages were parsed ``TEACHES_FROM - 1`` times, and a page is parsed for its
#: template only when its pre-key was met before on its host: most templates of a broad crawl are met once or twice (on
#: neardup-dev, 1,615 of 2,340 pages are the first of their host and template, 483 the second, 183 the third),
#: and parsing a page costs a twentieth of trafilatura's time, a lesson a quarter.
TEACHES_FROM = 4


class TemplateLearner:
    """The crawl's learned templates: lessons gathered per template until ``lessons`` agree on where the
    article sits, then an active selector, its pages counted, retired when a check disagrees.

    State of the deciding process; the selectors are shared through the store (:meth:`adopt`,
    :meth:`take_changes`), lessons are not (each process learns from its own pages; the first selector
    saved is the one every process adopts). Memory is bounded: ``MAX_SEEN_HOSTS`` hosts are remembered,
    with their lessons and the templates met (``MAX_SEEN_TEMPLATES`` each), the least recently met first
    forgotten; selectors are kept (the store holds them all).
    """

    def __init__(
        self,
        extractor: str,
        lessons: int = 3,
        agreement_bound: float = AGREEMENT,
        check_share: float = MIN_CHECK_SHARE,
    ) -> None:
        self.extractor = extractor
        self.check_share = check_share
        self.lessons_needed = lessons
        self.agreement_bound = agreement_bound
        self._selectors: dict[str, dict[int, Selector]] = {}  # host -> template -> selector
        self._hosts: OrderedDict[str, _Host] = OrderedDict()
        self._offers: dict[str, Offers] = {}
        self._changed: dict[tuple[str, int], Selector] = {}
        self.foreign = 0

    # -- what a page of a host is sent with --------------------------------------------------------------
    def offers(self, host: str) -> Offers:
        """What a page of ``host`` is sent with (:class:`Offers`)."""
        cached = self._offers.get(host)
        if cached is not None:
            return cached
        met = self._hosts.get(host) or _Host()
        selectors = {
            template: Offer(
                template,
                selector.locator,
                selector.decisions,
                verify_share(selector.served, self.check_share),
                selector.state == "unstable",
                selector.kept_low,
                selector.conflicts,
            )
            for template, selector in self._selectors.get(host, {}).items()
            if selector.state in ("active", "unstable")
        }
        teaching = [t for t, n in met.templates.items() if n >= TEACHES_FROM - 1]
        cached = self._offers[host] = Offers(selectors, key_bits(met.prekeys), key_bits(teaching))
        return cached

    def _met(self, host: str, prekey: int | None, template: int | None) -> _Host:
        met = self._hosts.get(host)
        if met is None:
            met = self._hosts[host] = _Host()
            if len(self._hosts) > MAX_SEEN_HOSTS:
                self._offers.pop(self._hosts.popitem(last=False)[0], None)
        else:
            self._hosts.move_to_end(host)
        if prekey is not None and prekey not in met.prekeys:
            met.prekeys.add(prekey)
            if len(met.prekeys) > MAX_SEEN_TEMPLATES:
                met.prekeys.pop()
            self._offers.pop(host, None)
        if template is not None:
            n = met.templates.pop(template, 0) + 1
            met.templates[template] = n
            if len(met.templates) > MAX_SEEN_TEMPLATES:
                met.lessons.pop(next(iter(met.templates)), None)
                met.templates.popitem(last=False)
            if n == TEACHES_FROM - 1:
                self._offers.pop(host, None)
        return met

    def active(self, host: str, template: int) -> bool:
        selector = self._selectors.get(host, {}).get(template)
        return selector is not None and selector.usable

    def selectors(self) -> list[Selector]:
        return [s for templates in self._selectors.values() for s in templates.values()]

    # -- what a page taught -------------------------------------------------------------------------------
    def observe(
        self, host: str, template: int | None, learned: str, taught: Lesson | None, prekey: int | None = None
    ) -> str:
        """Take what a page's extraction found (``template``: its key, ``None`` when it was not parsed;
        ``learned``: ``replayed``, ``agreed``, ``disagreed``, or ``""`` for trafilatura alone; ``taught``:
        its lesson; ``prekey``: its :func:`prekey`); returns what changed: ``learned`` (a new selector),
        ``extended``, ``retired``, ``unstable`` or ``""``."""
        met = self._met(host, prekey, template)
        if template is None:
            return ""
        selector = self._selectors.get(host, {}).get(template)
        if learned in ("replayed", "agreed") and selector is not None and selector.usable:
            served = replace(selector, served=selector.served + 1, verified=selector.verified + (learned == "agreed"))
            self._put(served, offers=learned == "agreed" or selector.served < 64)
            return ""
        if learned == "disagreed" and selector is not None and selector.usable:
            retired = selector.retired + 1
            state = "unstable" if retired >= MAX_RETIREMENTS else "retired"
            self._put(replace(selector, state=state, retired=retired))
            met.lessons.pop(template, None)
            return state
        if taught is None or taught.agreement < self.agreement_bound:
            return ""
        if selector is not None and selector.usable:
            if taught.locator != selector.locator:
                return ""
            decisions, conflicts = merge(selector.decisions, selector.conflicts, taught.decisions)
            if decisions == selector.decisions and conflicts == selector.conflicts:
                return ""
            kept_low = min(selector.kept_low, taught.kept)
            self._put(replace(selector, decisions=decisions, conflicts=conflicts, kept_low=kept_low))
            return "extended"
        if selector is not None and selector.state == "unstable":
            return ""
        gathered = met.lessons.setdefault(template, [])
        gathered.append(taught)
        agreeing = [x for x in gathered if x.locator == taught.locator]
        if len(agreeing) < self.lessons_needed:
            return ""
        del met.lessons[template]
        self._put(self._selector(host, template, agreeing, selector.retired if selector is not None else 0))
        return "learned"

    def _selector(self, host: str, template: int, agreeing: list[Lesson], retired: int) -> Selector:
        """A template's selector from the lessons that agree on where its article sits."""
        decisions: dict[str, bool] = {}
        conflicts: frozenset[str] = frozenset()
        for one in agreeing:
            decisions, conflicts = merge(decisions, conflicts, one.decisions)
        return Selector(
            host,
            template,
            agreeing[0].locator,
            decisions,
            self.extractor,
            retired=retired,
            conflicts=conflicts,
            kept_low=min(one.kept for one in agreeing),
        )

    def _put(self, selector: Selector, offers: bool = True, changed: bool = True) -> None:
        self._selectors.setdefault(selector.host, {})[selector.template] = selector
        if changed:
            self._changed[(selector.host, selector.template)] = selector
        if offers:
            self._offers.pop(selector.host, None)

    # -- shared through the store ---------------------------------------------------------------------------
    def adopt(self, records: list[Selector]) -> int:
        """Take the store's selectors: one of another extractor is never used (counted in ``foreign``); a
        stored one replaces ours when we have none, or when it was retired more often (another process met
        a disagreement), or when ours is retired and it is not. Returns how many were taken."""
        taken = 0
        for record in records:
            if record.extractor != self.extractor:
                self.foreign += 1
                continue
            key = (record.host, record.template)
            ours = self._selectors.get(record.host, {}).get(record.template)
            if key in self._changed and (ours is None or ours.retired >= record.retired):
                continue  # ours is newer: it is saved next
            if (
                ours is None
                or record.retired > ours.retired
                or (not ours.usable and record.usable and record.retired >= ours.retired)
            ):
                self._put(record, changed=False)
                taken += 1
        return taken

    def take_changes(self) -> list[Selector]:
        """The selectors changed since the last call, for the store."""
        changed = list(self._changed.values())
        self._changed.clear()
        return changed


@dataclass
class _Host:
    """What the learner remembers of a host: the pre-keys of its pages, its templates met (key -> pages),
    and the lessons gathered for those without a selector."""

    prekeys: set[int] = field(default_factory=set)
    templates: OrderedDict[int, int] = field(default_factory=OrderedDict)
    lessons: dict[int, list[Lesson]] = field(default_factory=dict)
