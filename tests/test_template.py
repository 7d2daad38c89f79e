"""A site whose extraction returns its template text for every article: detected, not trusted."""

import json
import os
import random
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawlkit import HERE, ServerThread, run_scrapy
from scrapy_neardup._config import Config, ConfigError
from scrapy_neardup.engine.extract import Extraction
from scrapy_neardup.engine.template import TemplateGuard

SPIDER = os.path.join(HERE, "spiders", "paths.py")
ABOUT = ("About this magazine. We are an independent publication covering gardening, cooking and local life "
         "since 1998. Our editors live in the valley and write about what grows there. Subscribe to our "
         "newsletter to receive every new issue, and follow us on the usual networks for daily updates. ") * 2


def story(seed, n=400):
    r = random.Random(seed)
    words = "river stone harvest lantern orchard meadow copper whistle garden market bread winter".split()
    return " ".join(r.choice(words) + str(r.randint(0, 999)) for _ in range(n))


def template_page(seed):
    """trafilatura takes the <article> (the site's About box) and drops the story: a quiet failure."""
    return (f"<html><head><title>Story {seed}</title></head><body><div class='comments' id='comments'>"
            f"<div class='comment'>{story(seed)}</div></div><article><h1>About</h1><p>{ABOUT}</p></article>"
            "</body></html>")


def test_third_path_with_the_same_text_is_a_template():
    guard = TemplateGuard(repeats=3)
    assert not guard.is_template("http://a.example/story-1", ABOUT)
    # The same path again (tracking parameters, a session id): still one path.
    assert not guard.is_template("http://a.example/story-1?utm_source=feed", ABOUT)
    assert not guard.is_template("http://a.example/print/story-1", ABOUT)  # article + print version
    assert not guard.is_template("http://b.example/story-9", ABOUT)  # another host counts on its own
    assert guard.is_template("http://a.example/story-2", ABOUT.upper())  # case and spacing do not matter
    assert guard.is_template("http://a.example/story-1", ABOUT)  # from then on, everywhere on that host
    assert not guard.is_template("http://a.example/story-3", ABOUT + " more")
    assert not guard.is_template(None, ABOUT) and not guard.is_template("not a url", ABOUT)


def test_memory_is_bounded():
    guard = TemplateGuard(repeats=2, max_entries=100)
    for i in range(1000):
        guard.is_template(f"http://h{i}.example/a", f"text {i}")
    assert len(guard._paths) <= 100
    assert not guard.is_template("http://h0.example/b", "text 0")  # forgotten: starts counting again


def test_pipeline_fingerprints_the_page_text_of_a_template_page():
    pipeline = Config.from_settings({}).build_pipeline()
    got = [pipeline.text_of(template_page(i), f"http://site.example/story-{i}") for i in range(4)]
    assert [g.method for g in got] == ["main", "main", "page", "page"]
    assert got[0].text == got[1].text  # the failure itself: two stories, one extracted text
    assert got[2].reason == "template" and story(2)[:200] in got[2].text
    prepared = [pipeline.from_extraction(g) for g in got]
    assert [p.method for p in prepared] == ["main", "main", "template", "template"]
    # Turned off, every page keeps the template text.
    off = Config.from_settings({"NEARDUP_TEMPLATE_REPEATS": 0}).build_pipeline()
    assert {off.text_of(template_page(i), f"http://site.example/story-{i}").method for i in range(4)} == {"main"}


def test_repeated_text_that_is_most_of_its_page_is_kept():
    """One article under several paths of one site (mirror folder, AMP, print): not a template."""
    pipeline = Config.from_settings({}).build_pipeline()
    main = Extraction(ABOUT, "main")
    for i in range(4):
        got = pipeline.guard(main, f"http://x.example/{i}", lambda: f"<h1>Title</h1><p>{ABOUT}</p><p>Share</p>")
        assert got is main


@pytest.mark.parametrize("value", [1, -1, "many"])
def test_bad_setting_names_itself(value):
    with pytest.raises(ConfigError, match="NEARDUP_TEMPLATE_REPEATS"):
        Config.from_settings({"NEARDUP_TEMPLATE_REPEATS": value})


PAGES = {f"/story-{i}": template_page(i) for i in range(6)}
PAGES["/story-3-copy"] = template_page(3)  # a real mirror of story 3 under another path
PAGES["/story-5?utm_source=feed"] = template_page(5)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = PAGES[self.path].encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_crawl_of_a_template_site_keeps_its_articles(tmp_path):
    """Without the guard all eight pages would be one group; with it only the real copies are dropped."""
    with ServerThread(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        paths_file = tmp_path / "paths.txt"
        paths_file.write_text("\n".join(PAGES))
        result = run_scrapy(
            ["runspider", SPIDER, "-a", f"base={server.url}", "-a", f"paths_file={paths_file}"], tmp_path,
            {"ADDONS": json.dumps({"scrapy_neardup.Addon": 300}), "NEARDUP_ENABLED": "True",
             "NEARDUP_ACTION": "drop", "NEARDUP_STORE_URL": f"sqlite:///{tmp_path}/store.sqlite3",
             "CONCURRENT_REQUESTS": "1", "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"},
            cwd=str(tmp_path))
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    kept = {i["path"] for i in result.items}
    # story-1 is the one page lost to the failure: its template text equals story-0's, and the guard cannot
    # tell two paths from an article and its print version. From the third path on, page text is used.
    assert kept == {"/story-0", "/story-2", "/story-3", "/story-4", "/story-5"}, kept
    stats = result.neardup_stats()
    assert stats["neardup/extract/template"] == 6
    assert stats["neardup/duplicate"] == 3  # story-1 (template), story-3-copy, story-5?utm_source=feed
