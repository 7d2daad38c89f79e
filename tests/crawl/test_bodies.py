"""Byte-identical responses share one extraction (``NEARDUP_BODY_CACHE_SIZE``): in real crawls the verdicts
are those of a crawl that extracts every copy, a relative canonical is read against each copy's own URL,
and a copy waiting on a job whose worker is SIGKILLed is extracted on its own; the cache itself with real
worker processes."""

from __future__ import annotations

import json

import pytest
from helpers.crawlkit import assert_no_process_left, crawl_pages, segfault
from helpers.pages import html, story
from helpers.sitegen import article_page, slow_page

from scrapy_neardup.crawl.bodies import IdenticalBodies, body_digest

EXTENSIONS = json.dumps({"helpers.crawlkit.StatsToFile": 0, "helpers.crawlkit.WorkerWatch": 0})


def settings(tmp_path, **more):
    return {"EXTENSIONS": EXTENSIONS, "TEST_PIDS_FILE": str(tmp_path / "pids.json"), "NEARDUP_WORKERS": "2", **more}


def outcome(result):
    """What the crawl decided, page by page: path -> the path it is a near-duplicate of (tag mode)."""
    assert result.returncode == 0 and result.stats["finish_reason"] == "finished", result.log[-3000:]
    return {item["path"]: (item.get("near_duplicate_of") or "").rsplit("/", 2)[-2:] for item in result.items}


@pytest.mark.slow
def test_identical_copies_reuse_the_first_extraction_with_the_same_verdicts(tmp_path):
    """All on one host: articles, byte-identical copies under other paths (mirrors, tracking parameters),
    and a near-copy that differs by a byte. One request at a time, so both crawls meet pages in one order."""
    pages = {f"/p/{i}": article_page(i) for i in range(12)}
    pages.update({f"/mirror/{i}": article_page(i) for i in range(4)})
    pages.update({f"/p/{i}?utm_source=feed": article_page(i) for i in range(2)})
    pages["/p/1/amp"] = article_page(1, extra="<div>amp</div>")  # not byte-identical: extracted
    tag = {"NEARDUP_ACTION": "tag", "CONCURRENT_REQUESTS": "1"}
    reused = crawl_pages(tmp_path, pages, settings(tmp_path, **tag), name="reused")
    alone = crawl_pages(
        tmp_path,
        pages,
        settings(tmp_path, NEARDUP_BODY_CACHE_SIZE="0", **tag, NEARDUP_STORE_URL=f"sqlite:///{tmp_path}/alone.sqlite3"),
        name="alone",
    )
    assert outcome(reused) == outcome(alone)
    assert reused.stats["neardup/extract/reused"] == 6
    assert "neardup/extract/reused" not in alone.stats
    for result in (reused, alone):
        assert result.stats["neardup/checked"] == len(pages)
        assert result.stats["neardup/duplicate"] == 7


@pytest.mark.slow
def test_a_relative_canonical_is_read_against_each_copys_own_url(tmp_path):
    """Two sections serve the same bytes, whose ``<link rel="canonical" href="../articles/x">`` names each
    section's own article. Reusing the first copy's canonical as it was resolved would file the second
    copy under the first section's article."""
    printed = html(story(1), head='<link rel="canonical" href="../articles/x">')
    pages = {
        "/en/print/x": printed,
        "/fr/print/x": printed,
        "/en/articles/x": html(story(1), chrome="<nav>en</nav>"),
        "/fr/articles/x": html(story(1), chrome="<nav>fr</nav>"),
    }
    base = {"CONCURRENT_REQUESTS": "1"}
    reused = crawl_pages(tmp_path, pages, settings(tmp_path, **base), name="reused")
    alone = crawl_pages(
        tmp_path,
        pages,
        settings(
            tmp_path, NEARDUP_BODY_CACHE_SIZE="0", **base, NEARDUP_STORE_URL=f"sqlite:///{tmp_path}/alone.sqlite3"
        ),
        name="alone",
    )
    # Reused: the second print page, and the article followed in the first print page's place (the response
    # fetched before the print page was decided, kept for it).
    assert reused.stats["neardup/extract/reused"] == 2
    assert {i["path"] for i in reused.items} == {i["path"] for i in alone.items}
    counts = [  # what was decided; the books' CPU seconds are a measurement, the learned templates' counts
        # are of extractions (a reused body is not extracted)
        {
            k: v
            for k, v in result.neardup_stats().items()
            if k != "neardup/books/cpu_seconds" and not k.startswith("neardup/learned/")
        }
        for result in (reused, alone)
    ]
    assert counts[0].items() - {("neardup/extract/reused", 2)} == counts[1].items()
    # Each print page declared its own section's article, which was fetched before it was decided: two
    # fetches (read against the first copy's URL, the second would have declared a page already filed).
    assert reused.stats["neardup/canonical/fetched"] == 2


@pytest.mark.slow
def test_a_copy_waiting_on_a_killed_workers_job_is_extracted_on_its_own(tmp_path):
    """The worker holding one of two byte-identical pages (whichever arrived first) is SIGKILLed once the
    other waits on its job: that page is lost and counted; the copy is extracted by a replacement worker
    and gets its verdict."""
    pages = {"/slow": slow_page(), "/copy/slow": slow_page()}
    pages.update({f"/p/{i}": article_page(i) for i in range(10)})
    result = crawl_pages(
        tmp_path,
        pages,
        settings(
            tmp_path,
            NEARDUP_ACTION="tag",
            CONCURRENT_REQUESTS="4",
            TEST_KILL_URL_SUFFIX="/slow",
            TEST_KILL_WHEN_WAITED="1",
        ),
    )
    assert result.returncode == 0, result.log[-3000:]
    info = json.loads((tmp_path / "pids.json").read_text())
    assert len(info["killed"]) == 1
    stats = result.stats
    assert stats["neardup/skipped/worker_lost"] == 1
    assert stats["neardup/checked"] == len(pages) - 1  # the copy included
    assert "neardup/extract/reused" not in stats  # it was extracted, not reused
    warnings = [line for line in result.log.splitlines() if "WARNING" in line and "passed on unchecked" in line]
    assert len(warnings) == 1 and warnings[0].split(" passed on")[0].endswith("/slow"), warnings
    assert_no_process_left(info)


# -- the cache alone, with a real worker process (conftest's pool) ---------------------------------------
def test_the_cache_shares_running_and_finished_jobs_and_forgets_failed_ones(pool):
    from scrapy_neardup.workers import WorkerLost, analyze_html

    bodies = IdenticalBodies(2)
    page = article_page(1).encode()
    digest = body_digest(page, "text/html")
    submitted = []

    def submit(fn, *args):
        def go():
            submitted.append(args)
            return pool.submit(fn, *args)

        return go

    first, own = bodies.share(digest, "http://a/1", submit(analyze_html, page, "http://a/1", "text/html"))
    again, first_url = bodies.share(digest, "http://b/1", submit(analyze_html, page, "http://b/1", "text/html"))
    assert own is None and first_url == "http://a/1" and again is first  # waits on the running job
    wire = first.result(timeout=60)
    later, first_url = bodies.share(digest, "http://c/1", submit(analyze_html, page, "http://c/1", "text/html"))
    assert later.result(timeout=0) == wire and first_url == "http://a/1" and len(submitted) == 1
    # The digest names the Content-Type too: the same bytes declared in another charset are another job.
    assert body_digest(page, "text/html; charset=cp1252") != digest

    crash = body_digest(b"crash", None)
    failed, _ = bodies.share(crash, "http://a/x", submit(segfault, "http://a/x"))
    with pytest.raises(WorkerLost):
        failed.result(timeout=60)
    retried, own = bodies.share(crash, "http://b/x", submit(segfault, "http://b/x"))
    assert own is None and retried is not failed  # a failed job is not reused: the copy is tried afresh
    with pytest.raises(WorkerLost):
        retried.result(timeout=60)

    for i in range(3):  # least recently met first out: two entries at most
        body = article_page(10 + i).encode()
        bodies.share(body_digest(body, None), f"http://d/{i}", submit(analyze_html, body, "http://d/", None))
    assert len(bodies) == 2
    assert bodies.share(digest, "http://e/1", submit(analyze_html, page, "http://e/1", "text/html"))[1] is None
