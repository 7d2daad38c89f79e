"""The plugin's ``Request.meta`` keys and ``Response.flags`` (docs/reference.md, "Request meta keys").

The first three are the user's: they switch a check off, give a page a key of its own, and carry the verdict.
The others mark the plugin's own requests, so that each comes back to the collaborator that made it.
"""

from __future__ import annotations

#: ``Request.meta`` key: set to ``False`` to leave a request's response unchecked.
META_ENABLED = "neardup_enabled"
#: ``Request.meta`` key: the key a page is filed under instead of its URL.
META_KEY = "neardup_key"
#: ``Request.meta`` key the verdict is written to (a dict, see docs/reference.md).
META_VERDICT = "neardup"
#: Flag added to ``Response.flags`` of a near-duplicate in tag mode.
FLAG = "near-duplicate"
#: Flag added to ``Response.flags`` of a soft-404 page in tag mode.
SOFT404_FLAG = "soft-404"
#: Flag added to ``Response.flags`` of a declared page's response fetched first and handed over to the first
#: request of its URL (one download, not counted twice in the books).
KEPT_FLAG = "neardup-kept"
#: ``Request.meta`` keys of the plugin's own requests for a declared canonical page: fetched first, before the
#: copy that declared it is decided (the value: the copy's URL); and followed afterwards, through the
#: scheduler, so that the declared original reaches the spider (the value: the copy's URL).
META_DECLARED_BY = "neardup_declared_by"
META_FOLLOWED_FROM = "neardup_followed_from"
#: ``Request.meta`` key of a request the URL rules predicted to be a duplicate (the value: the URL already
#: decided that its URL becomes): fetched anyway to keep checking the rules, or sent back to the scheduler
#: at a lower priority (``NEARDUP_URL_RULES = "deprioritize"``).
META_PREDICTED = "neardup_predicted"
#: ``Request.meta`` key of a request the URL rules predict to be a duplicate in tag mode (the value: its group's
#: page): fetched, and passed on tagged from the prediction without being extracted.
META_PREDICTED_GROUP = "neardup_predicted_group"
#: ``Request.meta`` key of a request made in the place of a predicted duplicate (the value: the URL asked):
#: when it is not answered with a page (a 4xx or 5xx, a failure), that URL is fetched after all.
META_REWRITTEN_FROM = "neardup_rewritten_from"
#: ``Request.meta`` key of the plugin's request for a URL of a host that cannot exist (the value: the URL of
#: the page that made it ask): its answer is the host's soft-404 page (``NEARDUP_SOFT404``).
META_SOFT404_PROBE = "neardup_soft404_probe"

#: The plugin's own meta keys, and Scrapy's of one download, not carried from a copy's request to a request
#: the plugin makes in its place (or for its declared page).
OWN_META = (
    META_VERDICT,
    META_DECLARED_BY,
    META_FOLLOWED_FROM,
    META_PREDICTED,
    META_PREDICTED_GROUP,
    META_SOFT404_PROBE,
    META_REWRITTEN_FROM,
    "redirect_urls",
    "redirect_times",
    "redirect_ttl",
    "redirect_reasons",
    "download_slot",
    "download_latency",
    "retry_times",
)


def carried_meta(meta: dict) -> dict:
    """A request's meta without :data:`OWN_META`: what a request made in its place carries."""
    return {k: v for k, v in meta.items() if k not in OWN_META}
