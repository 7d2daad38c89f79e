"""Right on every crawl users run, at the defaults: tag mode passes every page the spider asked for, one name
per group, the article on the first crawl, and books that match the server's log.

The site: articles on one host, each with a tracking, an AMP and a print copy; a third declare their
canonical, the rest declare nothing; the home page links the copies before the articles (or after)."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers.crawlkit import LoggedPages, ServerThread, pages_server, site_crawl
from helpers.pages import html, story

pytestmark = pytest.mark.slow

ARTICLES = 24


def copies(i: int) -> dict[str, str]:
    """The URLs of article ``i``: the article, then its tracking, AMP and print copies."""
    return {
        "article": f"/a/{i}.html",
        "tracking": f"/a/{i}.html?utm_source=home",
        "amp": f"/amp/a/{i}.html",
        "print": f"/print/a/{i}.html",
    }


def article_of(path: str) -> int:
    return int(path.rsplit("/", 1)[1].split(".")[0])


def site(copies_first: bool) -> dict[str, str]:
    pages: dict[str, str] = {}
    links = []
    for i in range(ARTICLES):
        urls = copies(i)
        head = f"<link rel='canonical' href='{urls['article']}'>" if i % 3 == 0 else ""
        text = story(900 + i)
        pages[urls["article"]] = pages[urls["tracking"]] = html(text, head=head)
        pages[urls["amp"]] = html(text, head=head, chrome="<div>AMP</div>")
        pages[urls["print"]] = html(text, head=head, chrome="<div>Print this page</div>")
        order = ["tracking", "amp", "print", "article"] if copies_first else ["article", "tracking", "amp", "print"]
        links += [f"<a href='{urls[kind]}'>{kind} {i}</a>" for kind in order]
    pages["/"] = f"<html><body>{' '.join(links)}</body></html>"
    return pages


def crawls(tmp_path, settings, copies_first, runs):
    tmp_path.mkdir(parents=True, exist_ok=True)
    pages = LoggedPages(site(copies_first))
    results, logs = [], []
    with ServerThread(pages_server(pages)) as server:
        for n in range(runs):
            pages.clear_log()
            results.append(site_crawl(tmp_path, server.url, settings, name=f"crawl{n}", items="/"))
            logs.append(Counter(pages.requests))
    return results, logs


def page_items(result) -> list[dict]:
    return [item for item in result.items if item["path"] != "/"]


@pytest.mark.parametrize("copies_first", [True, False], ids=["copies-first", "articles-first"])
def test_tag_mode_at_its_defaults_passes_every_page_with_one_name_per_group(tmp_path, copies_first):
    """Every URL the plugin-off crawl yields reaches the spider, in each of three crawls on one store; no item
    is tagged as a copy of a page itself tagged; all the items of one article carry one group name."""
    off, _ = crawls(tmp_path / "off", {"NEARDUP_ENABLED": "False"}, copies_first, 1)
    every = sorted(item["path"] for item in page_items(off[0]))
    assert len(every) == 4 * ARTICLES
    results, _ = crawls(tmp_path / "tag", {"NEARDUP_ACTION": "tag"}, copies_first, 3)
    for n, result in enumerate(results):
        items = page_items(result)
        assert sorted(item["path"] for item in items) == every, (n, result.neardup_stats())
        tagged = {item["url"]: item["near_duplicate_of"] for item in items if item.get("near_duplicate_of")}
        chains = {url: of for url, of in tagged.items() if of in tagged}
        assert not chains, (n, chains)
        groups: dict[int, set[str]] = {}
        for item in items:
            groups.setdefault(article_of(item["path"]), set()).add(item.get("near_duplicate_group"))
        split = {i: names for i, names in groups.items() if len(names) != 1 or None in names}
        assert not split, (n, split)
        assert len(tagged) == 3 * ARTICLES, (n, len(tagged))
    # From the second crawl on, the rules tag most copies from the prediction, unextracted.
    assert results[2].stats.get("neardup/url_rules/tagged", 0) > ARTICLES, results[2].neardup_stats()


@pytest.mark.parametrize("copies_first", [True, False], ids=["copies-first", "articles-first"])
def test_drop_mode_delivers_each_article_under_its_own_url_from_the_first_crawl(tmp_path, copies_first):
    """Copies linked before their articles: the first crawl fetches the article a copy's URL rewrites to
    first, so each article reaches the spider under its own URL, once, in every crawl; the books count what
    the server served."""
    results, logs = crawls(tmp_path, {}, copies_first, 3)
    for n, result in enumerate(results):
        delivered = Counter(article_of(item["path"]) for item in page_items(result))
        assert sorted(delivered) == list(range(ARTICLES)) and max(delivered.values()) == 1, (n, delivered)
        own = [
            item["path"] for item in page_items(result) if item["path"] == copies(article_of(item["path"]))["article"]
        ]
        assert len(own) == ARTICLES, (n, sorted(item["path"] for item in page_items(result)))
        served = sum(count for path, count in logs[n].items() if path != "/robots.txt")
        assert result.stats["neardup/books/fetches"] == served + logs[n]["/robots.txt"], (
            n,
            result.neardup_stats(),
            logs[n],
        )
