"""What a URL's shape says of the page behind it, before it is fetched: tracking and session parameters, and
the AMP and print renderings sites make of their pages. The URL rules guess a copy's article by them before any
rule is learned (:meth:`~.urlrules.RuleBook.likely_page`), the best copy avoids them (:mod:`.bestcopy`), and a
crawl's books estimate an avoided fetch by the size of the responses of its shape."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

#: Query parameters that only track a visit or a session: their presence makes a URL a worse copy.
TRACKING_PARAMS = frozenset(
    {
        "fbclid",
        "gclid",
        "dclid",
        "msclkid",
        "yclid",
        "mc_cid",
        "mc_eid",
        "igshid",
        "ref",
        "ref_src",
        "referrer",
        "source",
        "src",
        "cmpid",
        "sessionid",
        "session_id",
        "sid",
        "phpsessid",
        "jsessionid",
        "aspsessionid",
        "_ga",
        "_gl",
        "share",
        "from",
    }
)


def is_tracking(name: str) -> bool:
    """A query parameter that only tracks a visit or a session (``utm_*`` and :data:`TRACKING_PARAMS`)."""
    name = name.lower()
    return name.startswith("utm_") or name in TRACKING_PARAMS


#: The path segments of the AMP and print renderings sites make of their pages: with tracking parameters
#: (:func:`is_tracking`), the rewrites a page's likely original is guessed by before any rule is learned
#: (:meth:`~.urlrules.RuleBook.likely_page`).
PRIOR_SEGMENTS = ("amp", "print")


def url_shape(url: str) -> str:
    """What kind of copy a URL's shape makes it, by the priors (:data:`PRIOR_SEGMENTS`, :func:`is_tracking`):
    ``amp`` or ``print`` (its first or last path segment), ``tracking`` (a tracking parameter), or ``""``.
    Copies of one shape are alike in size (an AMP page is a fraction of its article's)."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.lower().split("/") if s]
    for segment in (segments[0], segments[-1]) if segments else ():
        if segment in PRIOR_SEGMENTS:
            return segment
    if parts.query and any(is_tracking(name) for name, _ in parse_qsl(parts.query, keep_blank_values=True)):
        return "tracking"
    return ""
