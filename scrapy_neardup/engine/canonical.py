"""Declared canonical URLs: read them, and weigh them.

A page may name its original: ``<link rel="canonical" href="...">`` in its head (Kupke and Ohye, RFC 6596)
or a ``Link: <...>; rel="canonical"`` header (RFC 8288). A declaration is a *claim*. Sites declare another
URL canonical for good reasons (the http → https, ``www.``, tracking-parameter, AMP and print variants of
an article), and for bad ones: a scraper or a syndication partner keeps its template's declaration, which
then names an unrelated article, and some sites declare their home page canonical for every page. So the
rules, the same for a crawl and for the batch CLI:

1. A page is filed under its own key (its URL, or the key the caller gives), always. A declaration never
   names the key that a page's content is filed under: a re-crawl finds every page under the key it was
   fetched as, and a page is never a near-duplicate of itself.
2. A declaration changes a verdict only when the content behind the declared URL is known and matches
   (:meth:`~scrapy_neardup.engine.detector.Detector.check_many` with a :class:`~.detector.Check`'s
   ``prefer``): the copy is then filed as a near-duplicate of the declared page's group, whatever other
   canonical page it also resembles. A declaration that the content does not bear out is ignored.
3. The declared page is decided before its copy when it can be had: a crawl fetches it first when it is on
   the same site (:func:`same_site`), the batch CLI takes it from later in its input. The declared original
   therefore becomes the group's canonical page whichever of them arrives first.
4. A declared page decided after a copy that declared it (a syndicated page whose original is on another
   site, not fetched) is never filed as a near-duplicate of that copy: it is filed as a canonical page of its
   own (:class:`Declarations` remembers who declared whom, for the deciding process).
"""

from __future__ import annotations

import ipaddress
import re
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

import idna

#: Where a declaration came from: the page's head, the response's ``Link`` header, or a field of an input
#: record (the batch CLI's JSONL ``canonical`` field).
Source = Literal["html", "header", "field"]


@dataclass(frozen=True)
class Declaration:
    """A page's claim that ``url`` is its canonical URL."""

    url: str
    source: Source = "html"


#: The attributes of a ``<link>`` tag.
_ATTRIBUTE = re.compile(r"""([a-zA-Z-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")
#: How far into a page its ``<link rel="canonical">`` is looked for: the whole head (it belongs there), up to
#: this bound. Real heads run past 64 KB (inline styles, scripts, JSON-LD) with the link after them, and
#: search engines read it there.
CANONICAL_SCAN_CHARS = 1024 * 1024


def canonical_url(value: str | None, base: str | None) -> str | None:
    """A declared canonical URL made absolute against ``base``, without its fragment; ``None`` unless it
    is an http(s) URL."""
    from urllib.parse import urldefrag, urljoin, urlsplit

    if not value or not value.strip():
        return None
    try:
        url = urldefrag(urljoin(base or "", value.strip()))[0]
        parts = urlsplit(url)
        return url if parts.scheme in ("http", "https") and parts.netloc else None
    except ValueError:
        return None


_CANONICAL_WORD = re.compile("canonical", re.IGNORECASE)


#: The head's tokens that matter to a declaration, found as an HTML parser's tokenizer meets them: a comment
#: or the start of an element whose contents are text, not markup (a ``<script>`` that mentions ``<body>`` or
#: holds a ``<link>`` in a string declares nothing), the head's end (its end tag, or the body's start tag where
#: the end tag is left out: HTML allows it), and ``<link`` tags.
_HEAD_TOKEN = re.compile(
    r"<!--|<(script|style|title|textarea|xmp|iframe|noembed|noframes)(?=[\s/>])|</head\s*>|<body(?=[\s/>])|<link\b",
    re.IGNORECASE,
)
#: Where a raw-text element ends: its end tag (HTML 5, 13.2.5.15: ``</script`` followed by space, ``/`` or
#: ``>``), per element name.
_RAW_TEXT_END = {
    name: re.compile(rf"</{name}[\s/>]", re.IGNORECASE)
    for name in ("script", "style", "title", "textarea", "xmp", "iframe", "noembed", "noframes")
}


def declared_canonical(html: str, base: str | None = None) -> str | None:
    """The URL a page declares canonical with ``<link rel="canonical" href="...">`` in its head, made
    absolute (RFC 6596). Read as a parser's tokenizer reads the head, but only its few tokens that matter:
    comments and the contents of scripts, styles and the other raw-text elements are skipped (they are text,
    not markup), the head ends at ``</head>`` or ``<body``, and each ``<link`` tag in it is read for
    ``rel=canonical``. Patterns over the page's first :data:`CANONICAL_SCAN_CHARS` characters, tens of
    microseconds a page; an attribute the patterns misread yields ``None``, never a wrong page."""
    end = min(len(html), CANONICAL_SCAN_CHARS)
    at = 0
    while at < end:
        token = _HEAD_TOKEN.search(html, at, end)
        if token is None:
            return None
        text = token.group(0)
        if text == "<!--":
            close = html.find("-->", token.end(), end)
            if close < 0:
                return None
            at = close + 3
        elif token.group(1):
            raw_end = _RAW_TEXT_END[token.group(1).lower()].search(html, token.end(), end)
            if raw_end is None:
                return None
            at = raw_end.end()
        elif text[1] == "/" or text[1] in "bB":
            return None
        else:
            close = html.find(">", token.end(), end)
            if close < 0:
                return None
            at = close + 1
            tag = html[token.end() : close]
            if not _CANONICAL_WORD.search(tag):
                continue
            attributes = {name.lower(): next((v for v in values if v), "") for name, *values in _ATTRIBUTE.findall(tag)}
            if "canonical" in attributes.get("rel", "").lower().split():
                return canonical_url(attributes.get("href"), base)
    return None


_LINK_VALUE = re.compile(r"<([^>]*)>((?:\s*;\s*[^;,]+)*)")


def link_header_canonical(values: list[str], base: str | None = None) -> str | None:
    """The canonical URL an HTTP ``Link`` header declares (``<https://...>; rel="canonical"``, RFC 8288),
    made absolute against ``base``."""
    for value in values:
        for target, params in _LINK_VALUE.findall(value):
            for param in params.split(";"):
                name, _, rel = param.partition("=")
                if name.strip().lower() == "rel" and "canonical" in rel.strip().strip("\"'").lower().split():
                    return canonical_url(target, base)
    return None


#: Full stops other than "." that separate a host's labels (IDNA 2003, as tldextract reads them).
_OTHER_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


@dataclass(frozen=True)
class PublicSuffixes:
    """The public suffix list (its ICANN and private rules), read as tldextract reads it, kept as two sets of
    strings: ``paths``, every rule's labels from the right (``jp``, ``kobe.jp``, ``*.kobe.jp``,
    ``!city.kobe.jp``: the nodes of tldextract's trie), and ``rules``, the rules themselves (the nodes where
    a suffix ends). Two objects instead of a trie of one object per label, which the garbage collector of a
    crawler process would visit at each full collection for as long as the crawl lasts."""

    paths: frozenset[str]
    rules: frozenset[str]

    @classmethod
    def of(cls, rules: list[str]) -> PublicSuffixes:
        paths: set[str] = set()
        for rule in rules:
            labels = rule.split(".")
            paths.update(".".join(labels[i:]) for i in range(len(labels)))
        return cls(frozenset(paths), frozenset(rules))

    def suffix_start(self, labels: list[str]) -> int | None:
        """Where the public suffix of a host's ``labels`` begins (``None``: it has none), matching labels
        from the right as tldextract's trie does: the longest rule met, or at a wildcard (``*.kobe.jp``)
        the next label too, unless an exception (``!city.kobe.jp``) names it."""
        path, at, start = "", len(labels), None
        for label in reversed(labels):
            decoded = _decoded_label(label)
            longer = f"{decoded}.{path}" if path else decoded
            if longer in self.paths:
                path, at = longer, at - 1
                if longer in self.rules:
                    start = at
                continue
            if (f"*.{path}" if path else "*") in self.paths:
                return at if (f"!{decoded}.{path}" if path else f"!{decoded}") in self.paths else at - 1
            break
        return start


def _decoded_label(label: str) -> str:
    """A label as the suffix list spells it: lower case, and Unicode for an IDNA one (``xn--``)."""
    lowered = label.lower()
    if lowered.startswith("xn--"):
        try:
            return str(idna.decode(lowered))
        except (UnicodeError, IndexError):
            pass
    return lowered


@lru_cache(maxsize=1)
def _suffixes() -> PublicSuffixes:
    import tldextract

    # The public suffix list bundled with tldextract: never fetched from the network. Its trie is let go.
    return PublicSuffixes.of(
        tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True).tlds
    )


def site_of(url: str) -> str:
    """The registrable domain of ``url`` (``news.example.co.uk`` → ``example.co.uk``, by the public suffix
    list). Intranets have none, and are sites too: a host without a public suffix (``.internal``,
    ``.test``, ``.lan``) is taken as if its last label were one (``wiki.corp.internal`` → ``corp.internal``;
    a single label is its own site); a private, loopback or link-local address is of the site of its
    network (``10.1.x.x``: the first 16 bits of an IPv4 address, 48 of an IPv6 one); a public address is its
    own site."""
    return _site_of_host((urlsplit(url).hostname or "").lower().rstrip("."))


@lru_cache(maxsize=65_536)
def _site_of_host(host: str) -> str:
    if not host:
        return ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if not (address.is_private or address.is_loopback or address.is_link_local):
            return host
        prefix = 16 if address.version == 4 else 48
        return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))
    labels = host.strip().translate(_OTHER_DOTS).rstrip(".").split(".")
    start = _suffixes().suffix_start(labels)
    if start is None:  # no public suffix: an intranet's name
        return ".".join(host.split(".")[-2:])
    if start == 0 or not labels[start - 1]:  # a public suffix itself
        return host
    return ".".join(labels[start - 1 :])


def same_site(a: str, b: str) -> bool:
    """Whether two URLs are on one site (the same registrable domain, any scheme or subdomain): a
    declaration within a site is one the site made about its own pages."""
    site = site_of(a)
    return bool(site) and site == site_of(b)


class Declarations:
    """Who declared whom, as the deciding process met it: a declared page decided after a copy that
    declared it must not become that copy's near-duplicate (rule 4). Bounded: the oldest are forgotten."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._by_declared: OrderedDict[str, set[str]] = OrderedDict()

    def note(self, key: str, declared: str) -> None:
        keys = self._by_declared.get(declared)
        if keys is None:
            keys = self._by_declared[declared] = set()
            if len(self._by_declared) > self.limit:
                self._by_declared.popitem(last=False)
        keys.add(key)

    def declarers_of(self, key: str) -> frozenset[str]:
        """The keys of the pages that declared ``key`` their canonical URL."""
        return frozenset(self._by_declared.get(key, ()))


def chosen(given: Declaration | None, in_html: str | None) -> Declaration | None:
    """A document's declaration, in order of precedence: its HTTP ``Link`` header (the server's own word),
    its HTML's ``<link rel="canonical">`` (``in_html``), then an input record's ``canonical`` field."""
    if given is not None and given.source == "header":
        return given
    if in_html:
        return Declaration(in_html, "html")
    return given


#: Which declared pages are had before the copy that declares them is decided (``NEARDUP_CANONICAL_FETCH``): on
#: the same site as the copy, on any site, or none.
CANONICAL_FETCH_POLICIES = ("site", "all", "none")


def may_fetch(policy: str, page_url: str, declared_url: str) -> bool:
    """Whether a declared page is had before its copy is decided (``NEARDUP_CANONICAL_FETCH``): ``site``,
    when both are on one site (:func:`same_site`); ``all``, always; ``none``, never."""
    return policy == "all" or (policy == "site" and same_site(page_url, declared_url))
