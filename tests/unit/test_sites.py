"""Which site a host is of (:func:`scrapy_neardup.engine.canonical.site_of`): the public suffix list kept as
two sets of strings gives what tldextract's own trie gives, for every rule of the list."""

from __future__ import annotations

import functools

import idna
import pytest
import tldextract

from scrapy_neardup.engine import canonical


@functools.lru_cache(maxsize=1)
def _extractor() -> tldextract.TLDExtract:
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)


def site_by_tldextract(host: str) -> str:
    """The site of a (lower-case, non-address) host as tldextract decides it: its registrable domain, the last
    two labels of a host without a public suffix, a public suffix itself."""
    parts = _extractor()(host)
    registered = getattr(parts, "top_domain_under_public_suffix", None)
    if registered is None:  # tldextract before 5.3
        registered = parts.registered_domain
    if registered:
        return str(registered)
    if not parts.suffix:
        return ".".join(host.split(".")[-2:])
    return host


def hosts_of_rule(rule: str) -> list[str]:
    """Hosts at, under and beside a rule: a wildcard's and an exception's, and the IDNA spelling of its labels."""
    bare = rule.lstrip("!").replace("*", "wild")
    out = [bare, f"a.{bare}", f"b.a.{bare}"]
    if rule.startswith("*."):
        out += [rule[2:], f"x.{rule[2:]}", f"y.x.{rule[2:]}"]
    if rule.startswith("!"):
        out += [f"x.{rule[1:]}", rule[1:].split(".", 1)[1]]
    try:
        spelled = ".".join(idna.encode(label).decode("ascii") for label in bare.split("."))
    except idna.IDNAError:
        spelled = None
    if spelled is not None and spelled != bare:
        out += [spelled, f"a.{spelled}", f"b.a.{spelled}"]
    return out


ODD_HOSTS = [
    "localhost",
    "intranet",
    "wiki.corp.internal",
    "mirror.corp.internal",
    "a.b.c.test",
    "com",
    "co.uk",
    "www.example.co.uk",
    "a.github.io",
    "github.io",
    "a..example.com",
    ".example.com",
    "example..com",
    "example\u3002com",
    "a.example\uff0eco\uff61uk",
    " example.com ",
    "xn--.com",
    "xn--zz--.example.com",
    "1.2.3.04",
    "999.1.1.1",
    "www.city.kobe.jp",
    "city.kobe.jp",
    "a.b.kobe.jp",
    "kobe.jp",
]


def test_every_rule_of_the_list_gives_the_site_tldextract_gives() -> None:
    rules = _extractor().tlds
    assert len(rules) > 5_000 and any(r.startswith("*.") for r in rules) and any(r.startswith("!") for r in rules)
    hosts = [h for rule in rules for h in hosts_of_rule(rule)] + ODD_HOSTS
    different = [(h, canonical._site_of_host(h), site_by_tldextract(h)) for h in hosts]
    different = [d for d in different if d[1] != d[2]]
    assert not different, different[:20]
    assert len(hosts) > 30_000


@pytest.mark.parametrize(
    ("url", "site"),
    [
        ("https://news.example.co.uk/a", "example.co.uk"),
        ("https://a.b.kobe.jp/", "a.b.kobe.jp"),  # *.kobe.jp: b.kobe.jp is a public suffix
        ("https://www.city.kobe.jp/", "city.kobe.jp"),  # !city.kobe.jp: an exception to the wildcard
        ("https://b.github.io/x", "b.github.io"),  # a private suffix
        ("https://xn--p1ai/", "xn--p1ai"),  # a public suffix (рф) alone
        ("https://www.xn--80ak6aa92e.xn--p1ai/", "xn--80ak6aa92e.xn--p1ai"),
        ("http://wiki.corp.internal/", "corp.internal"),
        ("http://10.1.2.3/", "10.1.0.0/16"),
        ("http://8.8.8.8/", "8.8.8.8"),
    ],
)
def test_sites_of_urls(url: str, site: str) -> None:
    assert canonical.site_of(url) == site
