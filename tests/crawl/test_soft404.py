"""Soft-404 pages in real crawls (NEARDUP_SOFT404): a host that answers 200 with one "not found" page for
every unknown URL, beside a host that answers 404; in every order, twice on one store."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest
from helpers.crawlkit import ServerThread, pages_server, paths_crawl_command, read_result
from helpers.pages import html, story

pytestmark = pytest.mark.slow

#: The soft-404 answer: the site's chrome around a "not found" text (long enough to be fingerprinted).
NOT_FOUND = html(
    "Sorry, the page you were looking for could not be found. It may have been moved, renamed or deleted. "
    + story(999)[:900],
    chrome="<nav>Home News Sport Culture Contact</nav>",
)


def short_not_found(path: str) -> str:
    """What most servers answer: a heading and a sentence that repeats the path asked for, far under
    NEARDUP_MIN_TEXT_LENGTH."""
    return html(f"Page not found. Sorry, {path} does not exist here.", chrome="<nav>Home News Sport</nav>")


class SoftSite(dict):
    """Every unknown path answered 200 with :data:`NOT_FOUND` (or, ``short``, :func:`short_not_found`)."""

    def __init__(self, pages, short=False):
        super().__init__(pages)
        self.short = short

    def get(self, key, default=None):
        if key in self:
            return super().get(key)
        return short_not_found(key) if self.short else NOT_FOUND


def crawl(tmp_path, urls, name, **settings):
    settings = {"NEARDUP_ACTION": "drop", "LOG_LEVEL": "INFO", **settings}
    cmd, env, stats_file, items_file = paths_crawl_command(tmp_path, "", urls, settings, name)
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180)
    result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    return result


@pytest.mark.parametrize(
    ("order", "size"),
    [
        pytest.param("dead links first", "long", marks=pytest.mark.extended),
        ("shuffled", "long"),
        pytest.param("articles first", "long", marks=pytest.mark.extended),
        ("shuffled", "short"),
    ],
)
def test_dead_links_of_a_soft404_host_are_soft404_and_no_page_of_a_sound_host_is(tmp_path, order, size):
    """Long "not found" pages are compared by fingerprint, short ones (a heading and a sentence repeating the
    path asked for) on their text: both are caught, and no short page of the sound host is."""
    soft = SoftSite({f"/article/{i}": html(story(200 + i)) for i in range(6)}, short=size == "short")
    soft["/contact"] = html("Contact the newsroom: desk 7, open Monday to Friday, nine to five.")
    sound = {f"/article/{i}": html(story(300 + i)) for i in range(6)}
    # Short real pages of the sound host: too short to fingerprint, not its "not found" page.
    sound.update({f"/contact/{i}": html(f"Contact us: desk {i}, open Monday to Friday.") for i in range(2)})
    with ServerThread(pages_server(soft)) as soft_host, ServerThread(pages_server(sound)) as sound_host:
        articles = [f"{soft_host.url}/article/{i}" for i in range(6)] + [
            f"{sound_host.url}/article/{i}" for i in range(6)
        ]
        dead = [f"{soft_host.url}/gone/{i}" for i in range(5)]
        short_pages = [f"{sound_host.url}/contact/{i}" for i in range(2)] + [f"{soft_host.url}/contact"]
        articles += short_pages
        urls = dead + articles if order == "dead links first" else articles + dead
        if order == "shuffled":
            random.Random(4).shuffle(urls)
        first = crawl(tmp_path, urls, "first")
        again = crawl(tmp_path, urls, "again")
    for result in (first, again):
        stats = result.neardup_stats()
        assert stats.get("neardup/soft404") == 5, stats
        assert stats.get("neardup/soft404/probed") == 2 and stats.get("neardup/soft404/hosts") == 1, stats
        assert {item["url"] for item in result.items} == set(articles)  # dropped: every dead link, no article
    assert first.neardup_stats()["neardup/unique"] == 12  # soft-404 pages are never filed, never canonical
    assert again.neardup_stats()["neardup/seen"] == 12
    assert "is a soft-404 page" in first.log


def test_soft404_off_and_tag_mode(tmp_path):
    soft = SoftSite({"/article/1": html(story(400))})
    with ServerThread(pages_server(soft)) as host:
        urls = [f"{host.url}/article/1", f"{host.url}/gone/1", f"{host.url}/gone/2"]
        crawl(tmp_path, urls, "tag-before", NEARDUP_ACTION="tag")
        tagged = crawl(tmp_path, urls, "tag", NEARDUP_ACTION="tag")
        off = crawl(tmp_path, urls, "off", NEARDUP_SOFT404="False", NEARDUP_STORE_URL="memory://")
    assert tagged.neardup_stats().get("neardup/soft404") == 2
    assert len(tagged.items) == 3  # tag mode: every page reaches the spider
    # Its items say so, in the field a pipeline already filters near-duplicates on.
    marks = {item["url"].rsplit("/", 2)[-2]: item.get("near_duplicate_of") for item in tagged.items}
    assert marks["article"] is None and "/neardup-no-such-page-" in str(marks["gone"]), tagged.items
    # store show says why a URL the store holds no record of was not filed.
    shown = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", "store", f"sqlite:///{tmp_path}/store.sqlite3"]
        + ["show", f"{host.url}/gone/1", f"{host.url}/never"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    gone, never = (json.loads(line) for line in shown.stdout.splitlines())
    assert gone["status"] == "soft404" and "/neardup-no-such-page-" in gone["answered"], gone
    assert never["status"] == "unknown"
    # The crawls left their books in the store, for the report: it counts the last crawl's, not their sum.
    report = tmp_path / "report.html"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrapy_neardup.offline.cli",
            "report",
            f"sqlite:///{tmp_path}/store.sqlite3",
            "-o",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    page = report.read_text()
    assert "<b>1</b>soft-404 hosts in the last crawl" in page
    assert "<td class=n>2</td></tr>" in page.split("id=soft404")[1]
    # Without the probe, the two dead links are one group: the second a near-duplicate of the first.
    assert "neardup/soft404/probed" not in off.stats
    assert off.neardup_stats().get("neardup/duplicate") == 1


def test_unrelated_urls_sharing_one_short_text_are_soft404_from_the_groups_fifth_on(tmp_path):
    """A host that answers the probe with a 404, but some unknown URLs (expired listings) with one short
    "not available" page: from the group's fifth unrelated URL on, its pages are soft-404 pages; the first
    ones were decided before the group showed what it is. A short article with its print copy is no such
    group (a URL rewrite relates them)."""
    unavailable = html("This listing is no longer available. " + story(555)[:400])
    pages = {f"/listing/{n}": unavailable for n in range(8)}
    pages.update({f"/article/{i}": html(story(600 + i)) for i in range(4)})
    short = html(story(700)[:600])
    pages.update({"/short": short, "/print/short": short})
    with ServerThread(pages_server(pages)) as host:
        urls = [f"{host.url}{path}" for path in pages]
        result = crawl(tmp_path, urls, "groups", NEARDUP_ACTION="tag", CONCURRENT_REQUESTS="1")
    stats = result.neardup_stats()
    assert stats.get("neardup/soft404/hosts") == 0  # the probe got a 404
    assert stats.get("neardup/soft404") == 4, stats  # listings 5 to 8
    assert stats.get("neardup/duplicate") == 4, stats  # listings 2 to 4, and the print copy
    assert stats.get("neardup/unique") == 6  # the first listing, four articles, the short page


def test_two_processes_on_one_redis_store_find_the_same_soft404_pages(tmp_path):
    """A distributed crawl: each process probes the hosts it meets (one request a host each), and the
    dead links of the soft-404 host are soft-404 pages whichever process fetched them; nothing is filed
    for them in the shared store."""
    import uuid

    from helpers.stores import shared_redis

    server = shared_redis(tmp_path.parent)
    soft = SoftSite({f"/article/{i}": html(story(800 + i)) for i in range(4)})
    with ServerThread(pages_server(soft)) as host:
        urls = [f"{host.url}/article/{i}" for i in range(4)] + [f"{host.url}/gone/{n}" for n in range(6)]
        random.Random(2).shuffle(urls)
        shared = {"NEARDUP_STORE_URL": server.url, "NEARDUP_REDIS_KEY": f"soft:{{{uuid.uuid4().hex}}}"}
        procs = []
        for i, part in enumerate((urls[0::2], urls[1::2])):
            cmd, env, stats_file, items_file = paths_crawl_command(
                tmp_path, "", part, {"NEARDUP_ACTION": "tag", "LOG_LEVEL": "INFO", **shared}, f"part{i}"
            )
            procs.append(
                (
                    subprocess.Popen(
                        cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                    ),
                    stats_file,
                    items_file,
                )
            )
        results = []
        for proc, stats_file, items_file in procs:
            log, _ = proc.communicate(timeout=180)
            result = read_result(proc.returncode, stats_file, items_file, log)
            assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
            results.append(result)
    assert sum(r.neardup_stats().get("neardup/soft404", 0) for r in results) == 6
    assert sum(r.neardup_stats().get("neardup/unique", 0) for r in results) == 4
    assert all(r.neardup_stats().get("neardup/soft404/probed") == 1 for r in results)


@pytest.mark.parametrize("short", [False, True], ids=["long", "short"])
def test_soft404_pages_are_counted_once_through_a_redis_restart(tmp_path, short):
    """Ten dead links among twenty articles, the Redis store restarted mid-crawl (pages met meanwhile pass on
    unchecked, counted as store errors): each soft-404 page is counted once, none twice."""
    from helpers.redis_server import RedisServer

    server = RedisServer(str(tmp_path / "redis"), persistent=True).start()
    soft = SoftSite({f"/article/{i}": html(story(700 + i)) for i in range(20)}, short=short)
    try:
        with ServerThread(pages_server(soft)) as host:
            urls = [f"{host.url}/article/{i}" for i in range(20)] + [f"{host.url}/gone/{n}" for n in range(10)]
            random.Random(3).shuffle(urls)
            settings = {
                "NEARDUP_ACTION": "drop",
                "LOG_LEVEL": "INFO",
                "NEARDUP_STORE_URL": server.url,
                "DOWNLOAD_DELAY": "0.1",
                "CONCURRENT_REQUESTS": "1",
                "NEARDUP_REDIS_RETRIES": "1",
            }
            cmd, env, stats_file, items_file = paths_crawl_command(tmp_path, "", urls, settings, "outage")
            proc = subprocess.Popen(
                cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            time.sleep(2.5)
            server.stop()
            time.sleep(1.0)
            server.start()
            log, _ = proc.communicate(timeout=180)
            result = read_result(proc.returncode, stats_file, items_file, log)
    finally:
        server.stop()
    stats = result.neardup_stats()
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    assert stats.get("neardup/soft404", 0) + stats.get("neardup/store_error", 0) >= 10, stats
    assert stats.get("neardup/soft404", 0) <= 10, stats
