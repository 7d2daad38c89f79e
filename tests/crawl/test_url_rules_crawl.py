"""URL rules in real crawls (NEARDUP_URL_RULES): learned from the verdicts, kept in the store, used to
leave predicted duplicates unfetched; never a request the spider forces, never a page of its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.crawlkit import LoggedPages, ServerThread, pages_server, paths_crawl_command, read_result
from helpers.pages import html, story
from helpers.redis_server import one_server_kind

from scrapy_neardup.settings import Config, ConfigError
from scrapy_neardup.store import SqliteStore

pytestmark = pytest.mark.slow

ORIGINALS = [f"/news/{i}" for i in range(30)]


def site() -> LoggedPages:
    """The articles, their tracking and AMP copies, and a page the spider forces (``dont_filter``); served
    with a log of what was asked: drop mode leaves predicted copies unfetched, and the log says which."""
    pages = {}
    for i, path in enumerate(ORIGINALS):
        pages[path] = html(story(100 + i))
        pages[f"{path}?utm_source=feed"] = html(story(100 + i))
        pages[f"/amp{path}"] = html(story(100 + i))
    pages["/forced/a"] = html(story(7))
    pages["/forced/a?utm_source=feed"] = html(story(7))
    return LoggedPages(pages)


def crawl(tmp_path, server, paths, name, **settings):
    settings = {
        "NEARDUP_ACTION": "drop",  # tag mode fetches every page the spider asks for: skipping is drop mode's
        "NEARDUP_URL_RULES": "skip",
        "NEARDUP_URL_RULES_MIN_SUPPORT": "3",
        "NEARDUP_URL_RULES_CONFIDENCE": "0.8",  # (3 + 1) / (3 + 2): three successes and no failure
        "NEARDUP_URL_RULES_EXPLORE": "0",
        "CONCURRENT_REQUESTS": "1",
        "LOG_LEVEL": "INFO",
        **settings,
    }
    pages = server.pages
    pages.clear_log()
    cmd, env, stats_file, items_file = paths_crawl_command(
        tmp_path, server.url, paths, settings, name, spider_args=["filtered=1"]
    )
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180)
    result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    # What the server was asked: the spider's and the plugin's requests, less robots.txt and the soft-404 probe.
    result.fetched = [p for p in pages.order if p != "/robots.txt" and not p.startswith("/neardup-no-such-page-")]
    return result


def test_learned_rules_leave_predicted_duplicates_unfetched_and_every_original_fetched(tmp_path):
    """The first ten articles come with their aliases (the warm-up: each alias a near-duplicate, each a
    success of its rule); after three successes a rule is used, and the later aliases are not fetched. Every
    original reaches the spider, the forced request is fetched, and a second crawl on the same store skips
    every alias from its first request on."""
    paths = ["/forced/a"]
    for path in ORIGINALS[:10]:
        paths += [path, f"{path}?utm_source=feed", f"/amp{path}"]
    for path in ORIGINALS[10:]:
        paths += [path, f"/amp{path}", f"{path}?utm_source=feed"]
    paths.append("/forced/a?utm_source=feed")
    with ServerThread(pages_server(site())) as server:
        first = crawl(tmp_path, server, paths, "first")
        fetched = set(first.fetched)
        assert set(ORIGINALS) <= fetched  # no page of its own was left unfetched
        assert "/forced/a?utm_source=feed" in fetched  # dont_filter: never predicted away
        stats = first.neardup_stats()
        # After the warm-up (three successes a rule), the 20 later articles' 40 aliases are predicted.
        assert stats.get("neardup/skipped/predicted", 0) >= 38, stats
        assert stats.get("neardup/url_rules/confident") == 2
        assert "not fetched: the URL rules" in first.log
        store = SqliteStore(str(tmp_path / "store.sqlite3"))
        store.open_existing()
        counts = store.rules.read()
        store.close()
        assert counts[("127.0.0.1", "param:utm_source")][1] == 0
        assert counts[("127.0.0.1", "prefix:amp")][1] == 0
        assert counts[("127.0.0.1", "param:utm_source")][0] >= 3  # confident at three: then not fetched
        again = crawl(tmp_path, server, paths, "again")
    fetched = set(again.fetched)
    assert fetched == set(ORIGINALS) | {"/forced/a", "/forced/a?utm_source=feed"}
    assert {item["path"] for item in again.items} == set(ORIGINALS) | {"/forced/a"}
    assert again.neardup_stats().get("neardup/skipped/predicted", 0) == 60


def test_learn_mode_fetches_everything_and_keeps_the_rules(tmp_path):
    """Learn mode: the rules are learned and stored, nothing is skipped."""
    paths = [p for path in ORIGINALS[:12] for p in (path, f"{path}?utm_source=feed")]
    with ServerThread(pages_server(site())) as server:
        result = crawl(tmp_path, server, paths, "learn", NEARDUP_URL_RULES="learn")
    assert sorted(result.fetched) == sorted(paths)
    assert "neardup/skipped/predicted" not in result.stats
    store = SqliteStore(str(tmp_path / "store.sqlite3"))
    store.open_existing()
    assert store.rules.read()[("127.0.0.1", "param:utm_source")] == (12, 0)
    store.close()
    # scrapy-neardup rules: the table, JSON, and duplicate-url-discarder's rule file.
    url = f"sqlite:///{tmp_path}/store.sqlite3"
    table = cli("rules", url, "--min-support", "3", "--min-confidence", "0.9")
    assert table.splitlines()[1].split("\t") == ["127.0.0.1", "param:utm_source", "12", "0", "0.9286", "yes", ""]
    assert cli("rules", url).splitlines()[1:] == ["127.0.0.1\tparam:utm_source\t12\t0\t0.9286\tyes\t"]  # defaults
    assert cli("rules", url, "--min-confidence", "0.95").splitlines() == [
        "host\trule\tsuccesses\tfailures\tconfidence\tused\twhy unused"
    ]
    unused = cli("rules", url, "--min-confidence", "0.95", "--all").splitlines()[1].split("\t")
    assert unused[5:] == ["no", "confidence 0.929, below 0.95"], unused
    listed = json.loads(cli("rules", url, "--all", "--format", "json"))
    assert listed == [
        {
            "host": "127.0.0.1",
            "rule": "param:utm_source",
            "successes": 12,
            "failures": 0,
            "confidence": 0.9286,
            "confident": True,
            "source": "learned",
            "why_unused": "",
        }
    ]
    out = tmp_path / "dud.json"
    cli("rules", url, "--all", "--format", "dud", "-o", str(out))
    assert json.loads(out.read_text()) == [
        {"args": ["utm_source"], "order": 100, "processor": "queryRemoval", "urlPattern": {"include": ["127.0.0.1"]}}
    ]


def test_hand_written_rules_are_used_from_the_first_page_and_listed_apart(tmp_path):
    """A team's duplicate-url-discarder rule file (NEARDUP_URL_RULES_FILE): on a new store, the tracking
    aliases after the articles are left unfetched from the first one on (no warm-up), the learned rule
    for /amp/ still needs its three successes, and ``rules --rules-file`` lists the hand-written rule apart.
    An entry no URL rule expresses is said in one WARNING line and left out."""
    rules_file = tmp_path / "team-rules.json"
    rules_file.write_text(
        json.dumps(
            [
                {
                    "args": ["utm_source"],
                    "order": 100,
                    "processor": "queryRemoval",
                    "urlPattern": {"include": ["127.0.0.1"]},
                },
                {
                    "args": ["x"],
                    "order": 100,
                    "processor": "queryRemovalExcept",
                    "urlPattern": {"include": ["127.0.0.1"]},
                },
            ]
        )
    )
    paths = list(ORIGINALS) + [f"{p}?utm_source=feed" for p in ORIGINALS] + [f"/amp{p}" for p in ORIGINALS]
    with ServerThread(pages_server(site())) as server:
        result = crawl(tmp_path, server, paths, "curated", NEARDUP_URL_RULES_FILE=str(rules_file))
    fetched = set(result.fetched)
    assert fetched >= set(ORIGINALS) and not any("utm_source" in p for p in fetched), sorted(fetched)
    assert len([p for p in fetched if p.startswith("/amp/")]) == 3  # learned: three successes, then used
    assert result.stats["neardup/skipped/predicted"] == 30 + 27
    assert "1 hand-written URL rules of 1 domains" in result.log
    assert [line for line in result.log.splitlines() if "queryRemovalExcept" in line and "WARNING" in line]
    url = f"sqlite:///{tmp_path}/store.sqlite3"
    listed = json.loads(cli("rules", url, "--all", "--format", "json", "--rules-file", str(rules_file)))
    assert [(r["rule"], r["source"]) for r in listed] == [("prefix:amp", "learned"), ("param:utm_source", "file")]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="NEARDUP_URL_RULES_FILE = .* not JSON"):
        Config.from_settings({"NEARDUP_URL_RULES_FILE": str(bad)})


def cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.extended
@one_server_kind()
def test_processes_sharing_a_redis_store_add_up_their_counts(tmp_path, redis_server):
    """Two crawl processes at once on one Redis server (each a half of the site, each in learn mode): the
    store holds the sum of what each learned, and a third process that crawls the site in skip mode uses it."""
    pages = site()
    halves = [
        [p for path in ORIGINALS[:6] for p in (path, f"{path}?utm_source=feed")],
        [p for path in ORIGINALS[6:12] for p in (path, f"{path}?utm_source=feed")],
    ]
    redis = {"NEARDUP_STORE_URL": redis_server.url, "NEARDUP_REDIS_KEY": "rules:{%(spider)s}"}
    with ServerThread(pages_server(pages)) as server:
        procs = []
        for i, half in enumerate(halves):
            cmd, env, stats_file, items_file = paths_crawl_command(
                tmp_path,
                server.url,
                half,
                {"NEARDUP_ACTION": "tag", "NEARDUP_URL_RULES": "learn", "CONCURRENT_REQUESTS": "1", **redis},
                f"half{i}",
                spider_args=["filtered=1"],
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
        for proc, stats_file, items_file in procs:
            log, _ = proc.communicate(timeout=180)
            result = read_result(proc.returncode, stats_file, items_file, log)
            assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
        listed = json.loads(cli("rules", redis_server.url, "--redis-key", "rules:{paths}", "--all", "--format", "json"))
        assert [(r["host"], r["rule"], r["successes"], r["failures"]) for r in listed] == [
            ("127.0.0.1", "param:utm_source", 12, 0)
        ]
        later = [p for path in ORIGINALS[12:20] for p in (path, f"{path}?utm_source=feed")]
        third = crawl(
            tmp_path,
            server,
            later,
            "third",
            NEARDUP_URL_RULES_MIN_SUPPORT="10",
            NEARDUP_URL_RULES_CONFIDENCE="0.9",
            **redis,
        )
    assert {item["path"] for item in third.items} == set(ORIGINALS[12:20])
    assert third.neardup_stats().get("neardup/skipped/predicted") == 8


def test_an_alias_met_before_its_original_is_fetched_as_the_original_once(tmp_path):
    """With confident rules, an alias whose original was not decided yet is requested as the original, and
    the original's own request, met later, is the dupefilter's: every original reaches the spider, once, and
    no alias is fetched."""
    warm = [p for path in ORIGINALS[:10] for p in (path, f"{path}?utm_source=feed")]
    later = [f"{path}?utm_source=feed" for path in ORIGINALS[10:20]] + ORIGINALS[10:20]
    with ServerThread(pages_server(site())) as server:
        crawl(tmp_path, server, warm, "warm")
        result = crawl(tmp_path, server, later, "aliases-first")
    fetched = result.fetched
    assert sorted(item["path"] for item in result.items) == sorted(ORIGINALS[10:20])
    assert sorted(fetched) == sorted(ORIGINALS[10:20]), fetched  # each original once, under its own URL
    stats = result.neardup_stats()
    assert stats.get("neardup/url_rules/rewritten") == 10, stats
    assert result.stats.get("dupefilter/filtered") == 10  # the originals' own requests, met later


def test_deprioritize_fetches_predicted_duplicates_after_the_rest_and_never_a_disabled_request(tmp_path):
    """NEARDUP_URL_RULES = "deprioritize": a predicted duplicate is sent back to the scheduler at a lower
    priority, so the pages the rules do not predict come first; every page is still fetched."""
    warm = [p for path in ORIGINALS[:10] for p in (path, f"{path}?utm_source=feed")]
    later = [p for path in ORIGINALS[10:16] for p in (path, f"{path}?utm_source=feed")] + ORIGINALS[16:22]
    with ServerThread(pages_server(site())) as server:
        crawl(tmp_path, server, warm, "warm")
        result = crawl(tmp_path, server, later, "later", NEARDUP_URL_RULES="deprioritize")
    fetched = result.fetched
    assert sorted(fetched) == sorted(later)  # nothing lost
    assert result.neardup_stats().get("neardup/url_rules/deprioritized") == 6
    # The six aliases come after every page the rules did not predict.
    assert all(path.endswith("?utm_source=feed") for path in fetched[-6:]), fetched
