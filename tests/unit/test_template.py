"""Template guard: a site whose extraction returns its template text is detected; copies on one site never are."""

import pytest
from helpers.crawlkit import crawl_pages
from helpers.sitegen import article_page, print_page, template_page

from scrapy_neardup.assembly import build_pipeline, build_template_guard
from scrapy_neardup.engine.detector import Detector
from scrapy_neardup.engine.template import TemplateGuard
from scrapy_neardup.settings import Config, ConfigError
from scrapy_neardup.store import MemoryStore


def prepared(pipeline, html, url):
    return pipeline.from_html(html, url)


def test_different_articles_around_one_block_make_it_a_template():
    config = Config.from_settings({})
    pipeline, guard = build_pipeline(config), build_template_guard(config)
    first = prepared(pipeline, template_page(0), "http://site.example/story-0")
    second = prepared(pipeline, template_page(1), "http://site.example/story-1")
    assert first.main_key == second.main_key  # the failure itself: two stories, one extracted text
    assert first.page_fingerprint is not None  # the About box is under half of the page
    decided, refile = guard.decide("http://site.example/story-0", "http://site.example/story-0", first)
    assert decided is first and refile == []
    decided, refile = guard.decide("http://site.example/story-1", "http://site.example/story-1", second)
    assert decided.method == "template" and decided.fingerprint == second.page_fingerprint
    assert refile == [("http://site.example/story-0", first.page_fingerprint)]  # the first moves too
    third = prepared(pipeline, template_page(2), "http://site.example/story-2")
    decided, refile = guard.decide("http://site.example/story-2", "http://site.example/story-2", third)
    assert decided.method == "template" and refile == []
    # Another host with the same block counts on its own.
    other = prepared(pipeline, template_page(3), "http://other.example/story-3")
    assert guard.decide("http://other.example/story-3", "http://other.example/story-3", other)[0] is other


def test_copies_on_one_host_are_never_a_template_whatever_their_number():
    config = Config.from_settings({})
    pipeline, guard = build_pipeline(config), build_template_guard(config)
    urls = ["/a/7", "/category/a/7", "/amp/7", "/a/7?page=1", "/a/7?page=2", "/mirror/a/7"]
    pages = [article_page(7) for _ in urls]
    pages[2] = article_page(7, extra="<aside><p>Advertisement: buy copper lanterns today at the market.</p></aside>")
    pages.append(print_page(7))
    urls.append("/print/7")
    for url, html in zip(urls, pages):
        got = prepared(pipeline, html, f"http://news.example{url}")
        assert got.method == "main"
        decided, refile = guard.decide(url, f"http://news.example{url}", got)
        assert decided is got and refile == [], url
    assert guard.fired == 0


def test_a_page_that_is_mostly_its_article_carries_nothing_for_the_guard():
    """Only a main text that is at most half of its page can be a template block: any other page gets no
    page fingerprint and no main-text key, and the guard passes it as it is."""
    config = Config.from_settings({})
    pipeline, guard = build_pipeline(config), build_template_guard(config)
    words = "copper lanterns lit the harbour while the council debated the new tide tables".split()
    paragraphs = "".join(f"<p>{' '.join(words[i:] + words[:i])} in spring {i}.</p>" for i in range(len(words)))
    html = f"<html><head><title>Lanterns</title></head><body><article>{paragraphs}</article></body></html>"
    got = prepared(pipeline, html, "http://news.example/lanterns")
    assert got.method == "main" and got.fingerprint is not None
    assert got.page_fingerprint is None and got.main_key is None
    assert guard.decide("http://news.example/lanterns", "http://news.example/lanterns", got) == (got, [])


def test_refiled_first_article_still_finds_its_copy():
    """Pages decided before the guard fired stay comparable with those decided after it."""
    config = Config.from_settings({})
    pipeline, guard = build_pipeline(config), build_template_guard(config)
    store = MemoryStore()
    detector = Detector(pipeline.algorithm, store)
    detector.open()
    verdicts = {}
    for path, seed in [("/story-0", 0), ("/story-1", 1), ("/story-2", 2), ("/copies/story-0", 0)]:
        url = f"http://site.example{path}"
        decided, refile = guard.decide(url, url, prepared(pipeline, template_page(seed), url))
        for key, fp in refile:
            assert store.refile(key, fp.signature, fp.buckets)
        verdicts[path] = detector.check_fingerprint(url, decided.fingerprint.signature, decided.fingerprint.buckets)
    assert [verdicts[p].status for p in ("/story-0", "/story-1", "/story-2")] == ["unique"] * 3
    assert verdicts["/copies/story-0"].status == "duplicate"
    assert verdicts["/copies/story-0"].canonical == "http://site.example/story-0"
    assert not store.refile("http://site.example/copies/story-0", b"x", [1])  # a near-duplicate is not re-filed
    assert not store.refile("http://site.example/unknown", b"x", [1])


def test_memory_is_bounded():
    config = Config.from_settings({})
    pipeline = build_pipeline(config)
    guard = TemplateGuard(repeats=2, max_groups=10)
    page = prepared(pipeline, template_page(0), "http://h.example/")
    for i in range(100):
        guard.decide(f"http://h{i}.example/a", f"http://h{i}.example/a", page)
    assert len(guard._groups) <= 10


def test_guard_off_reads_no_page_text():
    pipeline = build_pipeline(Config.from_settings({"NEARDUP_TEMPLATE_REPEATS": 0}))
    assert build_template_guard(Config.from_settings({"NEARDUP_TEMPLATE_REPEATS": 0})) is None
    got = prepared(pipeline, template_page(0), "http://site.example/story-0")
    assert got.page_fingerprint is None and got.main_key is None  # the guard's inputs are not made at all


@pytest.mark.parametrize("value", [1, -1, "many"])
def test_bad_setting_names_itself(value):
    with pytest.raises(ConfigError, match="NEARDUP_TEMPLATE_REPEATS"):
        Config.from_settings({"NEARDUP_TEMPLATE_REPEATS": value})


def crawl_paths(tmp_path, pages, **settings):
    result = crawl_pages(tmp_path, pages, {"CONCURRENT_REQUESTS": "1", **settings})
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    return result


@pytest.mark.slow
def test_crawl_of_a_template_site_keeps_every_article(tmp_path):
    """Without the guard all eight pages would be one group; with it only the real copies are dropped,
    and the first story, filed before the guard fired, still finds its copy."""
    pages = {f"/story-{i}": template_page(i) for i in range(6)}
    pages["/story-3-copy"] = template_page(3)
    pages["/story-5?utm_source=feed"] = template_page(5)
    pages["/story-0-copy"] = template_page(0)
    result = crawl_paths(tmp_path, pages)
    kept = {i["path"] for i in result.items}
    assert kept == {f"/story-{i}" for i in range(6)}, kept
    stats = result.neardup_stats()
    assert stats["neardup/duplicate"] == 3  # story-3-copy, story-5?utm_source=feed, story-0-copy
    assert stats["neardup/extract/template"] == 8  # all but story-0, which was re-filed on its page text
    assert stats["neardup/extract/refiled"] == 1


@pytest.mark.slow
def test_crawl_of_copies_on_one_host_finds_every_copy(tmp_path):
    """The same article under five paths of one site, on a template heavier than the article: copies,
    matched whatever their number, and distinct articles on the same template all kept."""
    pages = {}
    for seed in range(4):
        pages[f"/a/{seed}"] = article_page(seed)
        pages[f"/category/a/{seed}"] = article_page(seed)
        pages[f"/amp/{seed}"] = article_page(seed, extra="<aside><p>Advertisement: copper lanterns.</p></aside>")
        pages[f"/a/{seed}?page=2"] = article_page(seed)
        pages[f"/print/{seed}"] = print_page(seed)
    result = crawl_paths(tmp_path, pages)
    kept = {i["path"] for i in result.items}
    assert kept == {f"/a/{seed}" for seed in range(4)}, kept
    stats = result.neardup_stats()
    assert stats["neardup/duplicate"] == 16
    assert "neardup/extract/template" not in stats


def test_groups_are_plain_values_the_garbage_collector_stops_tracking():
    """The guard keeps a group for nearly every page of a crawl; each object the collector tracks would be
    visited by every full collection of the crawler process. A group is tuples of strings, bytes, numbers
    and arrays, which the collector stops tracking once it has seen them."""
    import gc

    config = Config.from_settings({"NEARDUP_TEMPLATE_REPEATS": 3})
    pipeline, guard = build_pipeline(config), build_template_guard(config)
    for i in range(2):
        url = f"http://site.example/story-{i}"
        guard.decide(url, url, prepared(pipeline, template_page(i), url))
    (group,) = guard._groups.values()
    members, templates = group
    assert len(members) == 2 and not templates  # two different pages around one block: not yet a template
    gc.collect()
    gc.collect()  # a tuple is let go once its items were: the group's own the pass after its members'
    assert not gc.is_tracked(group) and not any(gc.is_tracked(m) for m in members)
