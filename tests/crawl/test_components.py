"""The Scrapy components in-process (``scrapy.utils.test.get_crawler``), beside the real crawls: the add-on's
orders, the meta keys, the skip reasons decided before a page reaches a worker, untaggable items and the item
pipeline's switch. What needs the reactor and the workers is tested by real crawls (test_crawl and others)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import scrapy
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import HtmlResponse, Request, TextResponse
from scrapy.utils.test import get_crawler

from scrapy_neardup import Addon, NearDupDownloaderMiddleware, NearDupPipeline
from scrapy_neardup.crawl.service import NearDupService
from scrapy_neardup.crawl.spider import ItemTagger


def crawler_with(**settings):
    crawler = get_crawler(
        settings_dict={"ADDONS": {Addon: 300}, "NEARDUP_ENABLED": True, "NEARDUP_STORE_URL": "memory://", **settings}
    )
    return crawler


def html(url="http://a.test/x", body=b"<html><body><p>Some text</p></body></html>", **kwargs):
    return HtmlResponse(url, body=body, **kwargs)


def respond(middleware, request, response):
    return asyncio.run(middleware.process_response(request, response))


def test_the_addon_adds_each_component_at_its_order_and_keeps_a_projects_own():
    from scrapy_neardup import NearDupSpiderMiddleware

    settings = crawler_with().settings
    assert settings.getdict("DOWNLOADER_MIDDLEWARES")[NearDupDownloaderMiddleware] == 540
    assert settings.getdict("SPIDER_MIDDLEWARES")[NearDupSpiderMiddleware] == 100
    assert settings.getdict("ITEM_PIPELINES")[NearDupPipeline] == 100
    # A project that lists a component itself keeps its own order (by path or by class).
    own = crawler_with(DOWNLOADER_MIDDLEWARES={"scrapy_neardup.NearDupDownloaderMiddleware": 800}).settings
    assert own.getdict("DOWNLOADER_MIDDLEWARES") == {"scrapy_neardup.NearDupDownloaderMiddleware": 800}


def test_responses_skipped_before_any_work_are_counted_by_reason():
    crawler = crawler_with()
    middleware = NearDupDownloaderMiddleware.from_crawler(crawler)
    disabled = Request("http://a.test/off", meta={"neardup_enabled": False})
    assert respond(middleware, disabled, html("http://a.test/off")).url == "http://a.test/off"
    assert respond(middleware, Request("http://a.test/404"), html("http://a.test/404", status=404)).status == 404
    feed = TextResponse("http://a.test/feed", body=b'{"a": 1}', headers={"Content-Type": "application/json"})
    respond(middleware, Request("http://a.test/feed"), feed)
    # The spider has not opened, so the store is not open: the page passes unchecked, never blocked.
    request = Request("http://a.test/page")
    respond(middleware, request, html("http://a.test/page"))
    assert request.meta["neardup"] == {"status": "skipped", "reason": "store_closed"}
    stats = crawler.stats.get_stats()
    assert {k: v for k, v in stats.items() if k.startswith("neardup/skipped/")} == {
        "neardup/skipped/disabled": 1,
        "neardup/skipped/status": 1,
        "neardup/skipped/not_html": 1,
        "neardup/skipped/store_closed": 1,
    }
    assert "neardup" not in disabled.meta  # an unchecked request gets no verdict


def test_a_store_that_could_not_be_opened_lets_no_response_through():
    crawler = crawler_with()
    middleware = NearDupDownloaderMiddleware.from_crawler(crawler)
    NearDupService.for_crawler(crawler).refused = "neardup_store_error"
    with pytest.raises(IgnoreRequest, match="the store could not be opened"):
        respond(middleware, Request("http://a.test/x"), html())


def test_bodies_that_cannot_be_fingerprinted_are_skipped_before_a_worker():
    from scrapy_neardup.crawl.screening import Job, Skip, response_job

    assert response_job(html(body=b"   \n"), 100) == Skip("empty")
    assert response_job(html(body=b"<p>" + b"x" * 200 + b"</p>"), 100) == Skip("too_large")
    assert response_job(html(body=b"%PDF-1.7 ..."), 100) == Skip("binary")
    assert response_job(html(body=b"<p>\x00\x00</p>"), 100) == Skip("binary")
    job = response_job(html(), 100)
    assert isinstance(job, Job) and job.is_html and job.url == "http://a.test/x"


class Untaggable(scrapy.Item):
    title = scrapy.Field()


class Taggable(scrapy.Item):
    title = scrapy.Field()
    near_duplicate_of = scrapy.Field()
    near_duplicate_similarity = scrapy.Field()


def test_items_without_the_tag_fields_pass_untagged_with_one_warning(caplog):
    crawler = crawler_with()
    tagger = ItemTagger(NearDupService.for_crawler(crawler))
    with caplog.at_level(logging.WARNING, logger="scrapy_neardup"):
        for _ in range(3):
            tagger.tag(Untaggable(title="t"), "http://a.test/c", 0.9)
    tagged = Taggable(title="t")
    tagger.tag(tagged, "http://a.test/c", 0.9)
    tagger.tag({"title": "a dict takes any field"}, "http://a.test/c", 0.8)
    stats = crawler.stats.get_stats()
    assert stats["neardup/items/untaggable"] == 3 and stats["neardup/items/tagged"] == 2
    assert [r.message.count("cannot tag Untaggable items") for r in caplog.records] == [1]
    assert tagged["near_duplicate_of"] == "http://a.test/c" and tagged["near_duplicate_similarity"] == 0.9


def test_the_item_pipeline_is_on_only_with_neardup_item_field():
    with pytest.raises(NotConfigured):
        NearDupPipeline.from_crawler(crawler_with())
    crawler = crawler_with(NEARDUP_ITEM_FIELD="body")
    pipeline = NearDupPipeline.from_crawler(crawler)
    item = {"url": "http://a.test/1", "title": "no body field"}
    assert asyncio.run(pipeline.process_item(item)) is item
    assert crawler.stats.get_value("neardup/skipped/item_without_text") == 1
    # With items carrying the text, pages are not fingerprinted as well.
    request = Request("http://a.test/page")
    respond(NearDupDownloaderMiddleware.from_crawler(crawler), request, html("http://a.test/page"))
    assert "neardup" not in request.meta


def test_soft404_answers_are_bounded_and_a_forgotten_host_is_probed_again():
    from scrapy_neardup.crawl.soft404 import HostAnswer, HostAnswers

    probed = []

    async def probe(url):
        probed.append(url)
        host = url.split("/")[2]
        return None if host.startswith("sound") else HostAnswer(url, None, "Page not found")

    async def meet(answers, *hosts):
        return [await answers.answer(f"http://{host}/page", probe) for host in hosts]

    answers = HostAnswers(max_hosts=3)
    asyncio.run(meet(answers, "soft1.test", "sound1.test", "soft2.test"))
    asyncio.run(meet(answers, "soft1.test"))  # met again: remembered, and now the most recently met
    assert len(probed) == 3
    asyncio.run(meet(answers, "sound2.test", "soft3.test"))  # sound1, then soft2, are forgotten
    assert len(answers) == 3
    assert sum(not url.split("/")[2].startswith("sound") for url in probed) == 3  # soft-404 hosts probed
    found = asyncio.run(meet(answers, "soft1.test", "soft2.test"))
    assert [url.split("/")[2] for url in probed[5:]] == ["soft2.test"]  # soft1 kept; soft2 probed again
    assert found[0] is not None and found[0].short_text == "Page not found"
    assert len(probed) == 6 and len(answers) == 3


def test_short_text_groups_are_bounded_and_a_group_met_again_keeps_its_count():
    from scrapy_neardup.crawl.soft404 import ShortTextGroups

    groups = ShortTextGroups(min_urls=3, max_groups=2)

    def member(n, group):
        return groups.is_soft404(f"http://h.test/gone-{group}-{n}", f"http://h.test/first-{group}", 80, 1.0)

    assert not member(1, "a")
    assert not member(1, "b")
    assert member(2, "a")  # a's third URL: a "not found" group; a is now the most recently met
    assert not member(1, "c")  # b is forgotten, not a
    assert len(groups) == 2
    assert member(3, "a")
    assert not member(2, "b")  # counts again from its first page
