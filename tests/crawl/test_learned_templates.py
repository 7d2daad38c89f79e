"""Learned templates in real crawls (NEARDUP_LEARN_TEMPLATES): a site of three templates crawled with its
selectors learned, the same verdicts as trafilatura alone, a second crawl that starts warm, and a template
that changes mid-crawl."""

from __future__ import annotations

import random

import pytest
from helpers.crawlkit import crawl_tagged
from helpers.sitegen import templated_page

pytestmark = pytest.mark.slow

PER_TEMPLATE = 14
LINKS = "<p>" + " ".join(f"<a href='/n/{k}'>newsletter offer {k}</a>" for k in range(40)) + "</p>"


def site(changed_from: int | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Three templates of one host, 14 articles each; every seventh article crossposted into the next
    template, every fifth mirrored. ``changed_from``: articles of template 0 from this one on carry a
    paragraph of links inside the article (trafilatura drops it; a selector learned before keeps it).
    Returns the pages and each copy's article page."""
    pages, copy_of = {}, {}
    for t in range(3):
        for k in range(PER_TEMPLATE):
            n = t * PER_TEMPLATE + k
            extra = LINKS if changed_from is not None and t == 0 and k >= changed_from else ""
            path = f"/t{t}/article-{n}.html"
            pages[path] = templated_page(t, n, extra_block=extra)
            if n % 7 == 3:
                other = (t + 1) % 3
                pages[f"/t{other}/story-{n}.html"] = templated_page(other, 1000 + n, article_seed=n)
                copy_of[f"/t{other}/story-{n}.html"] = path
            elif n % 5 == 4:
                pages[f"/mirror{path}"] = pages[path]
                copy_of[f"/mirror{path}"] = path
    return pages, copy_of


def groups(result) -> set[frozenset[str]]:
    """The groups the crawl's tags make: each tagged item with the page it names."""
    out: dict[str, set[str]] = {}
    for item in result.items:
        canonical = item.get("near_duplicate_of")
        if canonical:
            canonical_path = "/" + canonical.split("/", 3)[3]
            out.setdefault(canonical_path, {canonical_path}).add(item["path"])
    return {frozenset(g) for g in out.values()}


def expected(copy_of: dict[str, str]) -> set[frozenset[str]]:
    out: dict[str, set[str]] = {}
    for copy, article in copy_of.items():
        out.setdefault(article, {article}).add(copy)
    return {frozenset(g) for g in out.values()}


def folder(tmp_path, name: str):
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    return path


def shuffled(pages: dict[str, str], seed: int) -> dict[str, str]:
    order = list(pages)
    random.Random(seed).shuffle(order)
    return {path: pages[path] for path in order}


@pytest.mark.parametrize("seed", [1, 2])
def test_a_template_rich_site_is_extracted_by_learned_selectors_with_trafilatura_s_verdicts(tmp_path, seed):
    pages, copy_of = site()
    pages = shuffled(pages, seed)
    learned = crawl_tagged(folder(tmp_path, "on"), pages)
    alone = crawl_tagged(folder(tmp_path, "off"), pages, {"NEARDUP_LEARN_TEMPLATES": "False"})
    for result in (learned, alone):
        assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
        assert len(result.items) == len(pages)
    assert groups(learned) == groups(alone) == expected(copy_of), (groups(learned), learned.neardup_stats())
    stats = learned.neardup_stats()
    assert stats["neardup/learned/learned"] >= 3 and stats["neardup/learned/selectors"] == 3, stats
    assert stats.get("neardup/learned/replayed", 0) >= len(pages) // 3, stats
    assert "neardup/learned/replayed" not in alone.neardup_stats()
    # The next crawl on the same store starts warm: every template's selector is there before its first page.
    again = crawl_tagged(folder(tmp_path, "on"), pages, name="again")
    warm = again.neardup_stats()
    assert warm["neardup/learned/adopted"] == 3, warm
    assert "neardup/learned/trafilatura" not in warm and "neardup/learned/learned" not in warm, warm
    assert warm.get("neardup/learned/replayed", 0) >= len(pages) // 2, warm


def test_a_template_that_changes_mid_crawl_retires_its_selector_and_loses_no_verdict(tmp_path):
    """Template 0 starts carrying a paragraph of links inside the article after its fourth page: a selector
    learned before keeps it, trafilatura drops it; the checks (half of the pages here) find the disagreement, the
    selector is retired, and every verdict is still trafilatura's, the pages replayed before it included."""
    pages, copy_of = site(changed_from=4)
    first = {p: pages[p] for p in pages if p.startswith("/t0/article-") and int(p.split("-")[1][:-5]) < 4}
    rest = shuffled({p: pages[p] for p in pages if p not in first}, 3)
    ordered = {**first, **rest}
    settings = {"NEARDUP_LEARN_CHECK_SHARE": "0.5", "CONCURRENT_REQUESTS": "1"}
    learned = crawl_tagged(folder(tmp_path, "on"), ordered, settings)
    alone = crawl_tagged(folder(tmp_path, "off"), ordered, {"NEARDUP_LEARN_TEMPLATES": "False"})
    assert learned.returncode == 0 and "Traceback" not in learned.log, learned.log[-3000:]
    stats = learned.neardup_stats()
    assert stats.get("neardup/learned/retired", 0) + stats.get("neardup/learned/unstable", 0) >= 1, stats
    assert "is retired: a check against trafilatura disagreed" in learned.log
    assert stats.get("neardup/learned/disagreed", 0) >= 1, stats
    assert groups(learned) == groups(alone) == expected(copy_of), (groups(learned), stats)
