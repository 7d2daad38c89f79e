"""Which URL of a group of near-duplicates is the group's page: the best copy, not the first met.

The first page of a group that a crawl meets becomes its canonical page, and crawl order is an accident: a
tracking-parameter link met before the article's own makes the tracking URL the group's page, and a URL
rule that is right (``param:utm_source`` rewrites the tracking URL into the plain one) then points the wrong
way. Search engines choose the representative of a duplicate cluster by evidence about the URLs, not by
arrival: a declared ``rel=canonical`` that the content bears out, then a preference for https, for URLs
without tracking or session parameters, and for shorter paths (Google's "Consolidate duplicate URLs"; Nutch's
``DeduplicationJob`` keeps the copy with the shortest URL). A declaration borne out is handled by the
decision loop (:mod:`.canonical`); what is left for URLs is the order below.

:func:`copy_rank` ranks URLs by what makes one copy better than another, and a group is re-pointed only to
a strictly better copy: every re-point goes down a well-founded order, so re-pointing always ends, and two
copies alike in every respect (``/a/2`` and ``/a/3``) never trade places on an arbitrary tie-break. It agrees
with the atomic rewrites of :mod:`.urlrules`: a URL that a rewrite turns into another (drops a parameter,
an ``amp`` segment, ``index.html``, ``www.``, a trailing slash, http for https) always ranks below its
rewrite, so the clean URL a host's rules lead to is its group's page.
URLs of different hosts are never ranked against each other: which site holds the original of a syndicated
story is for declarations to say, not the shape of its URL.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from .urlrules import INDEX_NAMES, host_of
from .urlshape import is_tracking

#: Path segments that make a URL a rendering of another page's content: an AMP, print, mobile or comments
#: view, or the archive of the page's date.
DECORATIONS = frozenset(
    {"amp", "print", "printable", "printer-friendly", "print-friendly", "mobile", "comments", "archive", "archives"}
)


def _is_decoration(segment: str) -> bool:
    """An AMP, print, mobile, comments or archive segment, or a date's number (``2024``, ``05``, ``2024-05-01``)
    before the page's own name."""
    lowered = segment.lower()
    return lowered in DECORATIONS or (lowered.replace("-", "").isdigit() and len(lowered) in (2, 4, 8, 10))


def copy_rank(url: str) -> tuple[int, int, int, int, int, int, int, int]:
    """A URL's place in the order of copies, best first: fewer tracking or session parameters, fewer
    decorations (an ``amp``, ``print``, ``comments`` or archive date segment: :data:`DECORATIONS`), fewer
    parameters, fewer path segments, https, no index file, no trailing slash, no ``www.``. The page's own
    shape comes before its scheme: an article served over http has no better copy in its https print view or
    its https ``?rev=2`` revision."""
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    path = parts.path or "/"
    segments = [s for s in path.split("/") if s]
    return (
        sum(1 for name, _ in params if is_tracking(name)),
        sum(1 for segment in segments[:-1] if _is_decoration(segment))
        + (1 if segments and segments[-1].lower() in DECORATIONS else 0),
        len(params),
        len(segments),
        0 if parts.scheme == "https" else 1,
        1 if segments and segments[-1] in INDEX_NAMES else 0,
        1 if path != "/" and path.endswith("/") else 0,
        1 if (parts.hostname or "").startswith("www.") else 0,
    )


def better_copy(new: str, old: str) -> bool:
    """Whether ``new`` should be its group's page instead of ``old``: both of one host, ``new`` strictly first
    in :func:`copy_rank`, or alike there and ``old`` a revision of it (:func:`revision_of`)."""
    if new == old or host_of(new) != host_of(old):
        return False
    new_rank, old_rank = copy_rank(new), copy_rank(old)
    return new_rank < old_rank or (new_rank == old_rank and revision_of(old, new))


#: What separates a page's name from a revision's suffix (``bridge-updated``, ``bridge_v2``, ``bridge.1``).
_REVISION_SEPARATORS = "-_."


def revision_of(url: str, page: str) -> bool:
    """Whether ``url`` names a revision of ``page``: the same path and query but its last segment, whose name
    (its extension aside) is ``page``'s followed by a separator and more (``/news/bridge-updated.html`` of
    ``/news/bridge.html``). Strictly longer, so the relation has no cycle: re-pointing by it always ends."""
    a, b = urlsplit(url), urlsplit(page)
    if a.query != b.query:
        return False
    head_a, _, last_a = a.path.rpartition("/")
    head_b, _, last_b = b.path.rpartition("/")
    if head_a != head_b or not last_b:
        return False
    stem_a, ext_a = _split_extension(last_a)
    stem_b, ext_b = _split_extension(last_b)
    return (
        ext_a == ext_b
        and len(stem_a) > len(stem_b) + 1
        and stem_a.startswith(stem_b)
        and stem_a[len(stem_b)] in _REVISION_SEPARATORS
    )


def _split_extension(segment: str) -> tuple[str, str]:
    stem, dot, ext = segment.rpartition(".")
    return (stem, dot + ext) if dot and stem and ext.isalnum() and len(ext) <= 5 else (segment, "")
