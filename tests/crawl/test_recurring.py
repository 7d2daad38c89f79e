"""Recurring crawls over one store (issue #14, point 10): a known URL whose content changed is checked afresh
and its fingerprint replaced; records not fetched for NEARDUP_EXPIRATION_SECS are forgotten at start-up;
``scrapy-neardup store`` counts, shows, removes and expires records. Real crawls of one host, a real SQLite
file and a real redis-server, the CLI as a real process."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest
from helpers.crawlkit import ServerThread, pages_server, paths_crawl_command, read_result
from helpers.pages import PATHS, first_pages, html, story
from helpers.redis_server import one_server_kind

pytestmark = pytest.mark.slow


def edited(text: str, seed: int = 0) -> str:
    """A page that changed a little (a counter, a date): three words of 300."""
    words = text.split()
    for i in random.Random(seed).sample(range(len(words)), 3):
        words[i] = "changed"
    return " ".join(words)


def crawl(server, tmp_path, name, settings=None):
    # One request at a time: the first copy of a page fetched is its canonical, so the order must be fixed.
    settings = {"CONCURRENT_REQUESTS": "1", **(settings or {})}
    cmd, env, stats_file, items_file = paths_crawl_command(tmp_path, server.url, PATHS, settings, name)
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    return result


def cli(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *args], capture_output=True, text=True, timeout=60
    )
    return proc.returncode, proc.stdout, proc.stderr


def show(store_url, *urls, extra=()):
    code, out, err = cli("store", store_url, *extra, "show", *urls)
    assert code == 0, err
    return {record["url"]: record for record in map(json.loads, out.splitlines())}


def test_a_page_whose_content_changed_is_checked_afresh_on_the_next_crawl(tmp_path):
    pages = first_pages()
    store = f"sqlite:///{tmp_path}/store.sqlite3"
    with ServerThread(pages_server(pages)) as server:
        first = crawl(server, tmp_path, "first")
        assert first.stats["neardup/unique"] == 4 and first.stats["neardup/dropped"] == 1
        # A month later: /a/1 has a new date line; /a/2 now carries /a/3's story (lightly edited); /b/9 is
        # a new story under the same URL.
        pages["/a/1"] = html(edited(story(1)))
        pages["/a/2"] = html(edited(story(3), seed=1))
        pages["/b/9"] = html(story(10))
        second = crawl(server, tmp_path, "second", {"NEARDUP_DEBUG": "True"})
        stats = second.neardup_stats()
        assert stats["neardup/rechecked/changed"] == 2
        assert stats["neardup/seen"] == 3  # /a/1 (lightly edited), /a/3, /print/1
        assert stats["neardup/duplicate"] == 1 and stats["neardup/unique"] == 1
        assert sorted(i["path"] for i in second.items) == ["/a/1", "/a/3", "/b/9"]  # /a/2 dropped now
        base = server.url.rstrip("/")
        assert f"{base}/a/2 was filed before, but its content changed" in second.log
        records = show(store, *(base + p for p in ("/a/2", "/b/9", "/print/1")))
        assert records[f"{base}/a/2"]["canonical"] == f"{base}/a/3"
        assert records[f"{base}/b/9"]["status"] == "canonical"
        assert records[f"{base}/print/1"]["canonical"] == f"{base}/a/1"
        # Re-checking off: a changed page stays what it was filed as.
        pages["/a/3"] = html(story(11))
        third = crawl(server, tmp_path, "third", {"NEARDUP_RECHECK_CHANGED": "False"})
        assert "neardup/rechecked/changed" not in third.stats and third.stats["neardup/seen"] == 5


def related_page(related: int) -> str:
    """One article on a heavy template, with 60 short blocks of related links inside it (``related``: which):
    trafilatura keeps them when it favours recall and drops them when it favours precision."""
    from helpers.sitegen import chrome
    from helpers.sitegen import story as words

    head, foot = chrome()
    paragraphs = "".join(f"<p>{words(10 + k, 60)}.</p>" for k in range(3))
    blocks = "".join(f"<div class='related'>{words(related * 100 + i, 5)}</div>" for i in range(60))
    return (
        f"<html><head><title>Article</title></head><body>{head}<main><article><h1>Article</h1>{paragraphs}"
        f"{blocks}</article></main>{foot}</body></html>"
    )


def test_an_unchanged_page_keeps_its_verdict_when_its_text_is_found_another_way(tmp_path):
    """A page fetched again with the bytes it was filed with is the page its verdict was made on, even when its
    text comes out otherwise this time, as a learned template's replay may differ from trafilatura's text.
    Here the extraction changes between the crawls by a setting the store does not record: the first crawl
    favours precision (both pages' texts are the article alone: one page is the other's near-duplicate); the
    second favours recall (each text gains its own related blocks, and falls under the threshold against
    what was filed). Both pages are seen, and the same page is dropped again; new bytes are still checked
    afresh."""
    pages = {"/article": related_page(1), "/copy": related_page(2)}

    def crawl_in(order, name, favor):
        settings = {"CONCURRENT_REQUESTS": "1", "NEARDUP_EXTRACT_FAVOR": favor}
        # Through the dupefilter, as a crawl's links: a page is delivered once, when the plugin follows it too.
        cmd, env, stats_file, items_file = paths_crawl_command(
            tmp_path, server.url, order, settings, name, spider_args=("filtered=1",)
        )
        proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
        result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
        assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
        return result

    with ServerThread(pages_server(pages)) as server:
        first = crawl_in(["/article", "/copy"], "first", "precision")
        kept = [i["path"] for i in first.items]  # the group's best copy (bestcopy.py), one page
        assert len(kept) == 1 and first.stats["neardup/dropped"] == 1
        second = crawl_in(["/copy", "/article"], "second", "recall")
        stats = second.neardup_stats()
        assert [i["path"] for i in second.items] == kept
        assert stats["neardup/seen"] == 2 and "neardup/rechecked/changed" not in stats, json.dumps(stats)
        pages["/copy"] = related_page(3)  # its related links changed: other bytes, a text unlike what was filed
        third = crawl_in(["/article", "/copy"], "third", "recall")
        assert third.neardup_stats()["neardup/rechecked/changed"] == 1
        assert sorted(i["path"] for i in third.items) == ["/article", "/copy"]


def test_a_group_budget_lets_the_same_copies_through_on_every_crawl(tmp_path):
    """NEARDUP_GROUP_BUDGET = 2 in drop mode: of each article's five tracking copies (met after it, in
    shuffled order), two reach the spider tagged with the article, the others are dropped; three crawls on
    one store deliver the same pages: the URL rules (on by default), confident from the second crawl on,
    skip the other copies and never an admitted one."""
    articles = {f"/a/{g}": html(story(700 + g)) for g in range(4)}
    copies = {f"/a/{g}?utm_source=s{j}": articles[f"/a/{g}"] for g in range(4) for j in range(5)}
    order = list(copies)
    random.Random(4).shuffle(order)
    pages = {**articles, **copies}
    settings = {"CONCURRENT_REQUESTS": "1", "NEARDUP_GROUP_BUDGET": "2"}
    delivered, skipped = [], []
    with ServerThread(pages_server(pages)) as server:
        for name in ("first", "second", "third"):
            cmd, env, stats_file, items_file = paths_crawl_command(
                tmp_path, server.url, list(articles) + order, settings, name, spider_args=("filtered=1",)
            )
            proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
            result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
            assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
            delivered.append({item["path"]: item.get("near_duplicate_of") for item in result.items})
            skipped.append(result.stats.get("neardup/skipped/predicted", 0))
    first = delivered[0]
    assert {p for p, of in first.items() if of is None} == set(articles)
    for g in range(4):
        passed = [p for p, of in first.items() if of == server.url.rstrip("/") + f"/a/{g}"]
        assert len(passed) == 2 and all(p.startswith(f"/a/{g}?") for p in passed), (first, skipped)
    assert delivered[1] == first and delivered[2] == first
    # Of the 12 copies past the budget, the rules leave most unfetched (a few are fetched to check them).
    assert min(skipped[1:]) >= 9, skipped


def test_records_not_fetched_for_the_age_limit_are_forgotten_at_start_up(tmp_path):
    pages = first_pages()
    with ServerThread(pages_server(pages)) as server:
        crawl(server, tmp_path, "first")
        kept = crawl(server, tmp_path, "kept", {"NEARDUP_EXPIRATION_SECS": "3600"})
        assert "neardup/expired" not in kept.stats and kept.stats["neardup/seen"] == 5
        time.sleep(2.2)
        aged = crawl(server, tmp_path, "aged", {"NEARDUP_EXPIRATION_SECS": "2"})
    assert aged.stats["neardup/expired"] == 5 and aged.stats["neardup/initial"] == 0
    assert "forgot 5 of 5 stored pages not fetched in the last 2 seconds" in aged.log
    assert aged.stats["neardup/unique"] == 4 and aged.stats["neardup/duplicate"] == 1  # judged afresh
    assert "neardup/seen" not in aged.stats


def test_store_command_counts_shows_removes_and_expires(tmp_path):
    pages = first_pages()
    store = f"sqlite:///{tmp_path}/store.sqlite3"
    with ServerThread(pages_server(pages)) as server:
        crawl(server, tmp_path, "first")
        base = server.url.rstrip("/")
        assert cli("store", store, "count")[1] == "5\n"
        before = show(store, f"{base}/a/1", f"{base}/print/1", f"{base}/nowhere")
        assert before[f"{base}/a/1"]["status"] == "canonical"
        assert before[f"{base}/print/1"] == {
            **before[f"{base}/print/1"],
            "status": "near-duplicate",
            "canonical": f"{base}/a/1",
        }
        assert before[f"{base}/nowhere"]["status"] == "unknown"
        code, out, _ = cli("store", store, "export")
        exported = [json.loads(line) for line in out.splitlines()]
        assert code == 0 and [r["url"] for r in exported] == [base + p for p in PATHS]  # in filing order
        assert exported[3] == before[f"{base}/print/1"]
        # Removing a canonical page removes its near-duplicate's ground too: the purge deletes it.
        code, out, _ = cli("store", store, "remove", f"{base}/a/1", f"{base}/nowhere")
        assert code == 0 and "removed 1 of the 2 URLs given" in out and "1 orphaned near-duplicates" in out
        assert cli("store", store, "count")[1] == "3\n"
        # The next crawl checks both afresh (not "seen"): one unique, one near-duplicate of it again.
        again = crawl(server, tmp_path, "again")
        assert again.stats["neardup/seen"] == 3 and again.stats["neardup/unique"] == 1
        assert again.stats["neardup/duplicate"] == 1
        # Expire: nothing fetched since an hour ago; everything before a date in the future.
        code, out, _ = cli("store", store, "expire", "--older-than", "1h")
        assert code == 0 and out.startswith("expired 0 of 5 documents")
        code, out, _ = cli("store", store, "expire", "--before", "2999-01-01")
        assert code == 0 and out.startswith("expired 5 of 5 documents") and out.rstrip().endswith("0 documents held")


def test_store_command_refuses_what_it_cannot_do_in_one_line(tmp_path):
    missing = tmp_path / "missing.sqlite3"
    code, _, err = cli("store", f"sqlite:///{missing}", "count")
    assert code == 1 and err.strip() == f"scrapy-neardup: There is no SQLite store at {missing}"
    assert not missing.exists()  # nothing is created
    code, _, err = cli("store", "redis://127.0.0.1:1/0", "count")
    assert code == 1 and "pass --spider NAME, or --redis-key PREFIX" in err
    code, _, err = cli("store", f"sqlite:///{missing}", "expire", "--older-than", "soon")
    assert code == 1 and "an age is seconds, or a number with s, m, h or d" in err
    code, _, err = cli("store", f"sqlite:///{missing}", "expire", "--before", "yesterday")
    assert code == 1 and "is not an ISO 8601 date" in err


@pytest.mark.extended
@one_server_kind()
def test_store_command_on_a_redis_store_of_a_crawl(tmp_path, redis_server):
    pytest.importorskip("redis")
    pages = first_pages()
    with ServerThread(pages_server(pages)) as server:
        first = crawl(server, tmp_path, "first", {"NEARDUP_STORE_URL": redis_server.url})
        assert first.stats["neardup/unique"] == 4
        base = server.url.rstrip("/")
        spider = ("--spider", "paths")
        assert cli("store", redis_server.url, *spider, "count")[1] == "5\n"
        assert show(redis_server.url, f"{base}/print/1", extra=spider)[f"{base}/print/1"]["canonical"] == f"{base}/a/1"
        pages["/b/9"] = html(story(10))
        second = crawl(server, tmp_path, "second", {"NEARDUP_STORE_URL": redis_server.url})
        assert second.stats["neardup/rechecked/changed"] == 1 and second.stats["neardup/seen"] == 4
        code, out, _ = cli("store", redis_server.url, *spider, "remove", f"{base}/a/1")
        assert code == 0 and "removed 1 of the 1 URLs given" in out and "1 orphaned near-duplicates" in out
        code, out, _ = cli(
            "store", redis_server.url, "--redis-key", "neardup:{paths}", "expire", "--before", "2999-01-01T00:00:00Z"
        )
        assert code == 0 and out.startswith("expired 3 of 3 documents")
