"""Which URL of a group is its page (scrapy_neardup.engine.bestcopy): the best copy, of one host."""

import pytest

from scrapy_neardup.engine.bestcopy import better_copy, copy_rank
from scrapy_neardup.engine.urlrules import UrlRule, explain


@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("https://a.com/x", "https://a.com/x?utm_source=feed"),
        ("https://a.com/x?id=2", "https://a.com/x?id=2&fbclid=abc"),
        ("https://a.com/x", "http://a.com/x"),
        ("https://a.com/x", "https://a.com/amp/x"),
        ("https://a.com/x", "https://a.com/x/print"),
        ("https://a.com/x/", "https://a.com/x/index.html"),
        ("https://a.com/x", "https://a.com/x/"),
        ("https://a.com/x", "https://www.a.com/x"),
        ("https://a.com/x?sessionid=1", "https://a.com/x?sessionid=1&utm_medium=m"),
        # The page's shape before its scheme: an http article over its https views and revisions.
        ("http://a.com/x.htm", "https://a.com/x.htm?rev=2"),
        ("http://a.com/x", "https://a.com/x/print"),
        ("http://a.com/275221/", "https://a.com/275221/comments"),
        ("https://a.com/news/x", "https://a.com/archive/2024/05/x"),
        ("https://a.com/news/x", "https://a.com/amp/x"),
        ("https://a.com/news/bridge.html", "https://a.com/news/bridge-updated.html"),
    ],
)
def test_the_clean_copy_is_better(new, old):
    assert better_copy(new, old) and not better_copy(old, new)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://a.com/a/2", "https://a.com/a/3"),  # alike in every respect: neither takes the group
        ("https://a.com/copy", "https://a.com/article"),  # alike, and neither a revision of the other
        ("https://a.com/news/bridge.html", "https://a.com/other/bridge-updated.html"),  # another folder
        ("https://a.com/x", "https://b.com/x?utm_source=feed"),  # another host: declarations decide that
        ("https://a.com/x", "https://a.com/x"),
    ],
)
def test_no_copy_is_better(a, b):
    assert not better_copy(a, b) and not better_copy(b, a)


def test_every_atomic_rewrite_leads_to_a_better_copy():
    """The order agrees with the URL rules: the URL a rule rewrites into ranks above the URL rewritten, so the
    page a host's rules lead to is its group's page."""
    for copy in (
        "http://www.a.com/amp/news/x/index.html?utm_source=t&page=2",
        "http://a.com/news/x/print/?ref=home",
        "https://www.a.com/x/",
        "http://a.com/amp/2024/05/x/print?utm_source=t",
    ):
        for rule in (
            UrlRule(k, arg) for k, arg in [("scheme", ""), ("www", ""), ("prefix", "amp"), ("suffix", "print")]
        ):
            rewritten = rule.apply(copy)
            if rewritten is not None:
                assert copy_rank(rewritten) < copy_rank(copy), (rule, copy)
        for name in ("utm_source", "ref", "page"):
            rewritten = UrlRule("param", name).apply(copy)
            if rewritten is not None:
                assert explain(copy, rewritten) and copy_rank(rewritten) < copy_rank(copy)
