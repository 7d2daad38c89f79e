"""A page as the learned templates read it: lexbor's tree (selectolax), the page's skeleton and pre-key
(its template), its words and its text, blocks separated as trafilatura separates them."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
from functools import lru_cache
from typing import Any, Union

import mmh3

#: Levels below ``<body>`` whose element paths make a page's skeleton (its template key).
SKELETON_DEPTH = 3
#: Levels below the article element at which blocks are decided (deeper elements follow their block). A CMS
#: wraps an article's paragraphs in two or three levels of fields (Drupal's ``field > field-items >
#: field-item``), and the box trafilatura drops (a pull quote, a donation call) sits beside them.
DECISION_DEPTH = 5
#: Class and id tokens longer than this, or with a digit in them, are page-specific (``post-1234``): not kept.
_MAX_TOKEN = 32
_TOKEN = re.compile(r"^[A-Za-z_-][A-Za-z_-]*$")
WORD = re.compile(r"\w+")
_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
#: Elements whose content is never page text.
SILENT = frozenset(("script", "style", "noscript", "template", "svg", "head", "iframe", "object", "canvas"))
_STRIPPED_SELECTOR = ",".join(sorted(SILENT - {"head"}))
#: Elements whose text is not glued to the text around them.
INLINE = frozenset(
    ("a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "font", "i", "kbd", "mark", "q",
     "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var", "wbr", "del", "ins")
)  # fmt: skip


def words(text: str) -> list[str]:
    """The words of a text, case folded: what :func:`agreement` compares."""
    return WORD.findall(text.casefold())


def word_pairs(tokens: list[str]) -> set[tuple[str, ...]]:
    """Word 2-shingles (a single word for a one-word text): the unit the fingerprints are taken on."""
    if len(tokens) < 2:
        return {tuple(tokens)} if tokens else set()
    return set(zip(tokens, tokens[1:]))


def agreement(a: str | set[tuple[str, ...]], b: str | set[tuple[str, ...]]) -> float:
    """Jaccard similarity of two texts' word pairs (1.0 for two empty texts); either may be given as its
    pairs already."""
    pa = a if isinstance(a, set) else word_pairs(words(a))
    pb = b if isinstance(b, set) else word_pairs(words(b))
    if not pa and not pb:
        return 1.0
    return len(pa & pb) / len(pa | pb)


def path_step(node: Any) -> str:
    """An element's step in a path: its tag, its stable id and its stable classes, in a CSS form."""
    attrs = node.attributes
    return _step(node.tag, attrs.get("id") or "", attrs.get("class") or "")


@lru_cache(maxsize=8192)
def _step(tag: str, ident: str, classes: str) -> str:
    """:func:`path_step` of an element's tag, id and class attribute: the same few recur on every page of a
    template."""
    step = tag if _TAG.match(tag) else "*"  # a namespaced tag (o:p) is no CSS type selector
    if ident and len(ident) <= _MAX_TOKEN and _TOKEN.match(ident):
        step += "#" + ident
    kept = sorted({c for c in classes.split() if len(c) <= _MAX_TOKEN and _TOKEN.match(c)})
    return step + "".join("." + c for c in kept)


def child_elements(node: Any) -> Iterator[Any]:
    child = node.child
    while child is not None:
        tag = child.tag
        if tag and tag[0] not in "-_" and tag not in SILENT:
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
    # Their text is never page text: lexbor's own text() is then safe. One selector walks the tree once
    # (strip_tags walks it once a tag); removed, not destroyed, so that a match inside another stays valid.
    for node in tree.css(_STRIPPED_SELECTOR):
        node.remove()
    return tree


def page_text_of(tree: Any) -> str:
    """The page's whole visible text (what the template guard compares), blocks separated: lexbor's own
    walk (a quarter of the cost of one in Python) of a tree :func:`parse` made, scripts and styles gone."""
    return flat_text(tree.body)


def flat_text(node: Any) -> str:
    """A node's text by lexbor, every element a word boundary: what the learner measures shares with
    (where :func:`block_text`, which glues inline elements as trafilatura does, makes the replayed text)."""
    return " ".join(node.text(separator=" ").split())


def skeleton_key(tree: Any) -> int:
    """The template key of a page (without its host): a 64-bit hash of the set of element paths of its
    upper ``SKELETON_DEPTH`` levels. A set, so that how many items a list has changes nothing."""
    paths: set[str] = set()
    level = [("", tree.body)]
    for _ in range(SKELETON_DEPTH):
        below = []
        for path, node in level:
            for child in child_elements(node):
                child_path = path + ">" + path_step(child)
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


#: Bits of a large set of keys a host's pages are sent with (:class:`Offers`): a few false positives (a
#: parse, a lesson more) for a fixed size, whatever the number of templates a host has.
KEY_BITS = 8192
#: A set of keys of up to this many is sent as the keys themselves (:func:`key_set`): most hosts of a broad
#: crawl are met on a few pages and hold a few keys, which ``KEY_BITS`` bits would make a kilobyte each.
SPARSE_KEYS = 64

#: A set of keys as a host's pages are sent with it: the keys, sorted (up to ``SPARSE_KEYS``; a tuple, which
#: is far smaller than a set of a few), or ``KEY_BITS`` bits.
KeySet = Union[tuple, bytes]


def key_set(keys: Collection[int]) -> KeySet:
    """``keys`` as a :data:`KeySet`: themselves while they are few, else their bits."""
    return tuple(sorted(keys)) if len(keys) <= SPARSE_KEYS else key_bits(keys)


def in_keys(keys: KeySet, key: int) -> bool:
    """Whether ``key`` is in a :data:`KeySet` (as bits: or shares its bit with one that is)."""
    return in_bits(keys, key) if type(keys) is bytes else key in keys


def either_keys(a: KeySet, b: KeySet) -> KeySet:
    """The union of two :data:`KeySet`."""
    if type(a) is not bytes and type(b) is not bytes:
        return a if not b else b if not a else key_set({*a, *b})
    a_bits, b_bits = (k if type(k) is bytes else key_bits(k) for k in (a, b))
    return (int.from_bytes(a_bits, "little") | int.from_bytes(b_bits, "little")).to_bytes(KEY_BITS // 8, "little")


def key_bits(keys: Iterable[int]) -> bytes:
    bits = bytearray(KEY_BITS // 8)
    for key in keys:
        set_bit(bits, key)
    return bytes(bits)


def set_bit(bits: bytearray, key: int) -> None:
    """Add ``key`` to a set of :func:`key_bits`, in place."""
    bit = key % KEY_BITS
    bits[bit >> 3] |= 1 << (bit & 7)


def in_bits(bits: bytes, key: int) -> bool:
    bit = key % KEY_BITS
    return bool(bits[bit >> 3] & (1 << (bit & 7)))


def block_text(node: Any, skip: Any = None) -> str:
    """The visible text under ``node``, blocks separated, white space folded; ``skip(path, element)`` may
    leave out a subtree (``True``) or refuse the page (raises :class:`UndecidedBlock`)."""
    out: list[str] = []
    _collect(node, "", 0, skip, out)
    return " ".join(" ".join(out).split())


class UndecidedBlock(Exception):
    """A block with text at a path no lesson decided."""


def _collect(node: Any, path: str, depth: int, skip: Any, out: list[str]) -> None:
    """``skip(path, element)`` says of each element down to ``DECISION_DEPTH``: ``True`` leave it out,
    ``False`` keep it whole (no decision below), ``None`` go on deciding below it."""
    child = node.child
    while child is not None:
        tag = child.tag
        if tag == "-text":
            out.append(child.text_content or "")
        elif tag and tag[0] not in "-_" and tag not in SILENT:
            below = skip
            child_path = path
            if skip is not None and depth < DECISION_DEPTH:
                child_path = path + ">" + path_step(child)
                dropped = skip(child_path, child)
                if dropped:
                    child = child.next
                    continue
                if dropped is False:
                    below = None
            if tag in INLINE:
                _collect(child, child_path, depth + 1, below, out)
            else:
                out.append(" ")
                _collect(child, child_path, depth + 1, below, out)
                out.append(" ")
        child = child.next
