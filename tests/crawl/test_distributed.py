"""Crawls that span processes: several ``scrapy`` processes on one Redis store; faults mid-crawl."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime

import pytest
from demo_site import build_site, make_server
from helpers import SPIDERS, TESTS
from helpers.crawlkit import ROOT, ServerThread, assert_no_process_left, run_scrapy, wait_until
from helpers.redis_server import one_server_kind

pytestmark = pytest.mark.slow
SPIDER = os.path.join(SPIDERS, "paths.py")


@pytest.fixture(scope="module")
def site():
    with ServerThread(make_server(0)) as server:
        yield server.url.rstrip("/")


def article_paths():
    pages, groups = build_site()
    paths = sorted(p for p in pages if p.startswith(("/news/", "/mirror/", "/print/", "/partner/", "/teasers/")))
    return paths, groups


def settings_for(store_url, **extra):
    return {
        "ADDONS": json.dumps({"scrapy_neardup.Addon": 300}),
        "NEARDUP_ENABLED": "True",
        "NEARDUP_ACTION": "drop",
        "NEARDUP_STORE_URL": store_url,
        "LOG_LEVEL": "DEBUG",
        "NEARDUP_DEBUG": "True",
        **extra,
    }


def write_paths(tmp_path, name, paths):
    path = tmp_path / f"{name}.txt"
    path.write_text("\n".join(paths))
    return str(path)


def spider_args(site, paths_file, *more):
    return ["runspider", SPIDER, "-a", f"base={site}", "-a", f"paths_file={paths_file}", *more]


def popen_scrapy(args, tmp_path, settings, name):
    """Start a crawl without waiting (for concurrent processes); returns (process, stats file, items file)."""
    stats_file, items_file = tmp_path / f"{name}-stats.json", tmp_path / f"{name}-items.jsonl"
    all_settings = {
        "EXTENSIONS": json.dumps({"helpers.crawlkit.StatsToFile": 0}),
        "TEST_STATS_FILE": str(stats_file),
        **settings,
    }
    cmd = [sys.executable, "-m", "scrapy", *args, "-O", f"{items_file}:jsonlines"]
    for key, value in all_settings.items():
        cmd += ["-s", f"{key}={value}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, ROOT, os.environ.get("PYTHONPATH", "")]))
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - the crawl process writes it until it ends
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, stats_file, items_file


def assert_parts_keep_what_one_process_keeps(site, tmp_path, store_url, processes, name, **settings):
    """``processes`` crawls at once on a shared store, each on a part of the site (round robin, so every group
    of copies spans the parts), keep together exactly what one process on SQLite keeps."""
    paths, groups = article_paths()
    parts = [paths[i::processes] for i in range(processes)]
    assert all(len({p for p in g if p in part}) < len(g) for g in groups for part in parts)
    # One crawl in parts: no process sends a request before all have joined the crawl on the store, so that
    # none ends before another begins (processes that do not overlap are crawls of their own).
    opened = tmp_path / f"{name}-opened"
    opened.mkdir()
    runs = [
        popen_scrapy(
            spider_args(site, write_paths(tmp_path, f"part{i}", part), "-a", f"together={opened}:{processes}"),
            tmp_path,
            settings_for(store_url, **settings),
            f"{name}{i}",
        )
        for i, part in enumerate(parts)
    ]
    for proc, _, _ in runs:
        assert proc.wait(180) == 0
    kept = set()
    stats = []
    for _, stats_file, items_file in runs:
        stats.append(json.loads(stats_file.read_text()))
        assert stats[-1]["finish_reason"] == "finished" and "neardup/store_error" not in stats[-1]
        kept |= {json.loads(line)["path"] for line in items_file.read_text().splitlines()}
    for group in groups:
        assert len([p for p in group if p in kept]) == 1, (group, kept)  # no near-duplicate pair kept
    single = run_scrapy(
        spider_args(site, write_paths(tmp_path, "all", paths)),
        tmp_path,
        settings_for(f"sqlite:///{tmp_path}/single.sqlite3"),
        cwd=str(tmp_path),
        name="single",
    )
    assert single.returncode == 0
    total = lambda key: sum(s.get(key, 0) for s in stats)  # noqa: E731
    assert total("neardup/unique") == single.stats["neardup/unique"]
    assert total("neardup/duplicate") == single.stats["neardup/duplicate"]
    assert len(kept) == len(single.items)


@pytest.mark.extended
def test_four_processes_sharing_redis_keep_what_one_process_keeps(site, redis_server, tmp_path):
    assert_parts_keep_what_one_process_keeps(
        site, tmp_path, redis_server.url, 4, "p", NEARDUP_REDIS_KEY="multi4:{%(spider)s}"
    )


@one_server_kind()
def test_two_processes_sharing_redis_keep_what_one_process_keeps(site, redis_server, tmp_path):
    """Two processes: the same protocol as four, on one server kind (the four run on each)."""
    assert_parts_keep_what_one_process_keeps(
        site, tmp_path, redis_server.url, 2, "p", NEARDUP_REDIS_KEY="multi2:{%(spider)s}"
    )


@one_server_kind()
def test_a_process_that_joins_a_running_crawl_late_keeps_what_one_process_keeps(site, redis_server, tmp_path):
    """Processes that crawl on one store at once are one crawl, however far apart they start: a page another
    process filed before this one began was fetched in this crawl, so this one's copy of it is dropped and
    that page is not requested again in the copy's place (it would reach the spiders twice). The first
    process crawls slowly (over ``BEAT_SECS``: its beats are seen on the store); the second starts once the
    first has filed half of its part; both leave the store's roll when they close."""
    import redis

    from scrapy_neardup.store.parts import BEAT_SECS

    paths, groups = article_paths()
    parts = [paths[0::2], paths[1::2]]
    settings = settings_for(redis_server.url, NEARDUP_REDIS_KEY="late:{%(spider)s}")
    delay = 1.2 * BEAT_SECS / len(parts[0])
    first = popen_scrapy(
        spider_args(site, write_paths(tmp_path, "first", parts[0])),
        tmp_path,
        {**settings, "DOWNLOAD_DELAY": f"{delay:.3f}", "RANDOMIZE_DOWNLOAD_DELAY": "False", "CONCURRENT_REQUESTS": "1"},
        "first",
    )
    client = redis.Redis.from_url(redis_server.url)
    roll = lambda: {k: int(v) for k, v in client.hgetall("late:{paths}:running").items() if k.startswith(b"p:")}  # noqa: E731
    wait_until(lambda: len(roll()) == 1, what="the first process on the store's roll")
    ((member, joined),) = roll().items()
    wait_until(lambda: int(client.get("late:{paths}:count") or 0) >= len(parts[0]) // 2, what="half filed")
    second = popen_scrapy(spider_args(site, write_paths(tmp_path, "second", parts[1])), tmp_path, settings, "second")
    wait_until(lambda: roll().get(member, 0) > joined, timeout=3 * BEAT_SECS, what="a beat of the first process")
    kept, stats = [], []
    for proc, stats_file, items_file in (first, second):
        assert proc.wait(180) == 0
        stats.append(json.loads(stats_file.read_text()))
        assert stats[-1]["finish_reason"] == "finished" and "neardup/store_error" not in stats[-1]
        kept += [json.loads(line)["path"] for line in items_file.read_text().splitlines()]
    when = datetime.fromisoformat
    assert when(stats[0]["finish_time"]) > when(stats[1]["start_time"])  # the crawls ran together
    joined = "joined the crawl running on the store since"
    assert joined in (tmp_path / "second.log").read_text() and joined not in (tmp_path / "first.log").read_text()
    for group in groups:
        assert len([p for p in group if p in kept]) == 1, (group, sorted(kept))
    assert len(kept) == len(set(kept)), Counter(kept).most_common(3)
    assert roll() == {}


def test_a_crawl_started_again_after_its_process_was_killed_is_a_crawl_of_its_own(site, redis_server, tmp_path):
    """A process killed in the middle of its crawl never leaves the store's roll, and its beats stop. A crawl
    started again on the same machine at once, long before they are ``STALE_SECS`` old, takes it off the roll
    and begins a crawl of its own, as after a process that closed: it does not take the dead one's pages for
    its own, and says so in one line. It keeps one page of each group, and leaves the roll empty."""
    import redis

    paths, groups = article_paths()
    settings = settings_for(redis_server.url, NEARDUP_REDIS_KEY="killed:{%(spider)s}")
    slow = {**settings, "DOWNLOAD_DELAY": "0.5", "RANDOMIZE_DOWNLOAD_DELAY": "False", "CONCURRENT_REQUESTS": "1"}
    first, _, _ = popen_scrapy(spider_args(site, write_paths(tmp_path, "all", paths)), tmp_path, slow, "first")
    client = redis.Redis.from_url(redis_server.url)
    roll = lambda: [k.decode()[2:] for k in client.hkeys("killed:{paths}:running") if k.startswith(b"p:")]  # noqa: E731
    try:
        wait_until(lambda: int(client.get("killed:{paths}:count") or 0) >= 3, what="3 pages filed")
        (dead,) = roll()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert roll() == [dead]  # killed: it never left
    again, stats_file, items_file = popen_scrapy(
        spider_args(site, write_paths(tmp_path, "all", paths)), tmp_path, settings, "again"
    )
    assert again.wait(180) == 0
    stats = json.loads(stats_file.read_text())
    assert stats["finish_reason"] == "finished" and "neardup/store_error" not in stats
    log = (tmp_path / "again.log").read_text()
    assert f"1 process(es) of this machine died without leaving the crawl on the store ({dead})" in log
    assert "joined the crawl running on the store" not in log
    kept = [json.loads(line)["path"] for line in items_file.read_text().splitlines()]
    for group in groups:
        assert len([p for p in group if p in kept]) == 1, (group, sorted(kept))
    assert roll() == []
    client.close()


def filed(client) -> int:
    """Documents the paths spider has filed in a Redis store (its ``:count``), through any redis-py client."""
    return int(client.get("neardup:{paths}:count") or 0)


def crawl_riding_out_faults(site, tmp_path, store_url, name, delay):
    """A slow crawl of every article (one request at a time) that retries Redis for long and passes pages on
    when it cannot: the process, its stats file and the paths, for a fault injected while it runs."""
    paths, _ = article_paths()
    settings = settings_for(
        store_url,
        DOWNLOAD_DELAY=delay,
        CONCURRENT_REQUESTS="1",
        NEARDUP_REDIS_RETRIES="8",
        NEARDUP_ON_STORE_ERROR="pass",
    )
    proc, stats_file, _ = popen_scrapy(spider_args(site, write_paths(tmp_path, "all", paths)), tmp_path, settings, name)
    return proc, stats_file, paths


def test_redis_faults_mid_crawl_leave_no_page_unchecked_and_lose_nothing_acknowledged(site, redis_server, tmp_path):
    """One crawl meets, in turn, SCRIPT FLUSH, CLIENT KILL of its connections, and a restart of the server
    with its AOF (Redis 7+ and Valkey come back without the scripts): every page is checked, none is a store
    error, and a re-crawl on the same store finds every page filed (each one is seen)."""
    proc, stats_file, paths = crawl_riding_out_faults(site, tmp_path, redis_server.url, "faults", "0.15")
    import redis

    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: filed(client) >= 6, what="6 pages filed")
    redis_server.cli("SCRIPT", "FLUSH")
    wait_until(lambda: filed(client) >= 12, what="12 pages filed")
    redis_server.cli("CLIENT", "KILL", "TYPE", "normal")
    wait_until(lambda: filed(client) >= 18, what="18 pages filed")
    client.close()
    redis_server.stop()
    time.sleep(0.3)  # down for a while: calls in flight fail and are retried
    redis_server.start()
    assert proc.wait(120) == 0
    stats = json.loads(stats_file.read_text())
    neardup = {k: v for k, v in stats.items() if k.startswith("neardup/")}
    assert stats["finish_reason"] == "finished"
    assert "neardup/store_error" not in stats and "neardup/skipped/store_closed" not in stats, neardup
    # A call whose reply was lost in the restart filed its page; the retry finds that page known ("seen").
    acknowledged = stats["neardup/unique"] + stats["neardup/duplicate"] + stats.get("neardup/seen", 0)
    assert acknowledged == len(paths), json.dumps(neardup)
    client = redis.Redis.from_url(redis_server.url)
    assert filed(client) == len(paths)
    client.close()
    again, again_stats, _ = crawl_riding_out_faults(site, tmp_path, redis_server.url, "again", "0")
    assert again.wait(120) == 0
    second = json.loads(again_stats.read_text())
    # Each page seen; a group re-pointed to a better copy in the first crawl (/news/x after /mirror/news/x) has
    # that copy followed in its former page's place, and fetched again for the spider's own dont_filter request
    # (unless the spider asked for that copy before: the dupefilter drops the followed request then).
    followed = second.get("neardup/canonical/followed", 0)
    assert followed == stats.get("neardup/repointed", 0)
    refetched = followed - second.get("dupefilter/filtered", 0)
    assert second.get("neardup/seen") == len(paths) + refetched, {
        k: v for k, v in second.items() if k.startswith("neardup/")
    }


def test_a_redis_restarting_as_the_crawl_starts_is_waited_for(site, redis_server, tmp_path):
    """The server is down when the crawl starts and back two seconds later (a routine restart): the crawl
    waits for it, says so in one line, and checks every page, where it used to stop after ~1.4 s of retries."""
    redis_server.stop()
    paths, _ = article_paths()
    settings = settings_for(redis_server.url, NEARDUP_REDIS_START_WAIT_SECS="20")
    proc, stats_file, _ = popen_scrapy(
        spider_args(site, write_paths(tmp_path, "all", paths)), tmp_path, settings, "late"
    )
    log = tmp_path / "late.log"
    wait_until(lambda: "NEARDUP_REDIS_START_WAIT_SECS" in log.read_text(), what="the line that says it waits")
    time.sleep(2)
    redis_server.start()
    assert proc.wait(120) == 0
    stats = json.loads(stats_file.read_text())
    assert stats["finish_reason"] == "finished"
    checked = stats["neardup/unique"] + stats["neardup/duplicate"]
    assert checked == len(paths) and "neardup/store_error" not in stats, stats
    assert log.read_text().count("waiting up to 20 s for it to come back") == 1


@pytest.mark.extended
def test_a_redis_restarted_without_persistence_mid_crawl_leaves_no_page_unchecked(site, redis_server, tmp_path):
    """Killed and started again with nothing on disk: the index is gone, and the crawl checks every page
    after it in an empty one (no store error, the scripts loaded again)."""
    proc, stats_file, paths = crawl_riding_out_faults(site, tmp_path, redis_server.url, "amnesia", "0.1")
    import redis

    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: filed(client) >= 10, what="10 pages filed")
    client.close()
    redis_server.kill()
    shutil.rmtree(redis_server.directory)
    redis_server.start()
    assert proc.wait(120) == 0
    stats = json.loads(stats_file.read_text())
    neardup = {k: v for k, v in stats.items() if k.startswith("neardup/")}
    checked = stats["neardup/unique"] + stats["neardup/duplicate"] + stats.get("neardup/seen", 0)
    # Every response checked (less the plugin's soft-404 probes, and its guesses of a copy's article that
    # brought no page: /print/x has no /x here), every page among them; a group's page the emptied store no
    # longer knows may be fetched again when a copy of it asks for it (canonical/followed,
    # url_rules/rewritten: the spider's own requests here are dont_filter, so the dupefilter lets it by).
    not_pages = stats.get("neardup/soft404/probed", 0) + stats.get("neardup/canonical/fetch_failed", 0)
    responses = stats["downloader/response_count"] - not_pages
    assert "neardup/store_error" not in stats and checked == responses >= len(paths), json.dumps(neardup)
    assert stats.get("neardup/canonical/fetch_failed", 0) <= 2, neardup  # a wrong guess is retired on the host
    again = neardup.get("neardup/canonical/followed", 0) + neardup.get("neardup/url_rules/rewritten", 0)
    assert checked - len(paths) <= again, neardup
    client = redis.Redis.from_url(redis_server.url)
    assert 0 < filed(client) < len(paths)  # what was filed after the restart
    client.close()


# The client's retries and timeouts are under test, not the server: one server kind.
@pytest.mark.extended
@one_server_kind()
def test_a_redis_paused_longer_than_the_retries_costs_the_pages_met_meanwhile_only(site, redis_server, tmp_path):
    """A server that answers nothing for longer than the retries last: the pages met meanwhile pass on
    unchecked and are counted; once it answers again every page is checked."""
    paths, _ = article_paths()
    settings = settings_for(
        redis_server.url,
        DOWNLOAD_DELAY="0.1",
        CONCURRENT_REQUESTS="1",
        NEARDUP_REDIS_RETRIES="1",
        NEARDUP_REDIS_TIMEOUT_SECS="0.5",
        NEARDUP_ON_STORE_ERROR="pass",
    )
    proc, stats_file, _ = popen_scrapy(
        spider_args(site, write_paths(tmp_path, "all", paths)), tmp_path, settings, "pause"
    )
    import redis

    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: filed(client) >= 6, what="6 pages filed")
    redis_server.cli("CLIENT", "PAUSE", "2500", "ALL")
    assert proc.wait(120) == 0
    stats = json.loads(stats_file.read_text())
    checked = stats["neardup/unique"] + stats["neardup/duplicate"] + stats.get("neardup/seen", 0)
    errors = stats.get("neardup/store_error", 0)
    assert errors >= 1 and checked + errors == len(paths)
    # What was checked was filed; a call that timed out may still have run once the server woke up.
    assert checked <= filed(client) <= len(paths)
    # The last pages of the crawl came after the pause: checked.
    log = (tmp_path / "pause.log").read_text()
    last = paths[-1]
    assert f"store error on {site}{last}" not in log
    client.close()


# NEARDUP_ON_STORE_ERROR is under test, not the server: one server kind.
@one_server_kind()
def test_lost_redis_stops_the_crawl_when_told_to(site, redis_server, tmp_path):
    paths, _ = article_paths()
    settings = settings_for(
        redis_server.url,
        DOWNLOAD_DELAY="0.2",
        CONCURRENT_REQUESTS="1",
        NEARDUP_REDIS_RETRIES="1",
        NEARDUP_ON_STORE_ERROR="stop",
        NEARDUP_REDIS_TIMEOUT_SECS="1",
        NEARDUP_WORKERS="2",
        EXTENSIONS=json.dumps({"helpers.crawlkit.StatsToFile": 0, "helpers.crawlkit.WorkerWatch": 0}),
        TEST_PIDS_FILE=str(tmp_path / "pids.json"),
    )
    proc, stats_file, _ = popen_scrapy(
        spider_args(site, write_paths(tmp_path, "all", paths * 3)), tmp_path, settings, "stop"
    )
    import redis

    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: filed(client) >= 5, what="5 pages filed")
    redis_server.stop()
    assert proc.wait(60) == 0  # never hangs
    stats = json.loads(stats_file.read_text())
    assert stats["finish_reason"] == "neardup_store_error"
    assert stats["neardup/store_error"] >= 1
    assert "stopping the crawl" in (tmp_path / "stop.log").read_text()
    workers = json.loads((tmp_path / "pids.json").read_text())
    assert workers["workers"]  # the crawl had extraction workers, and none outlives it
    assert_no_process_left(workers)


def test_sqlite_crawl_killed_and_resumed_keeps_every_committed_fingerprint(site, tmp_path):
    paths, _ = article_paths()
    db = tmp_path / "store.sqlite3"
    settings = settings_for(
        f"sqlite:///{db}",
        DOWNLOAD_DELAY="0.1",
        CONCURRENT_REQUESTS="1",
        NEARDUP_STORE_COMMIT_EVERY="3",
        JOBDIR=str(tmp_path / "job"),
    )
    proc, _, _ = popen_scrapy(spider_args(site, write_paths(tmp_path, "all", paths)), tmp_path, settings, "killed")

    def committed_docs():
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    wait_until(lambda: committed_docs() >= 8, what="8 pages committed")
    committed = committed_docs()
    assert committed >= 8
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    with sqlite3.connect(str(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        before = {k for (k,) in conn.execute("SELECT key FROM docs")}
    assert len(before) >= committed
    resumed = run_scrapy(
        spider_args(site, write_paths(tmp_path, "all", paths)),
        tmp_path,
        {**settings, "DOWNLOAD_DELAY": "0"},
        cwd=str(tmp_path),
        name="resumed",
    )
    assert resumed.returncode == 0, resumed.log[-2000:]
    assert resumed.stats["neardup/initial"] == len(before)
    with sqlite3.connect(str(db)) as conn:
        after = {k for (k,) in conn.execute("SELECT key FROM docs")}
    assert before <= after
    assert after == {site + p for p in paths}


def test_second_process_on_one_sqlite_file_gets_a_clear_error(site, tmp_path):
    paths, _ = article_paths()
    db = tmp_path / "store.sqlite3"
    settings = settings_for(f"sqlite:///{db}", DOWNLOAD_DELAY="0.2", CONCURRENT_REQUESTS="1")
    first, _, _ = popen_scrapy(spider_args(site, write_paths(tmp_path, "all", paths)), tmp_path, settings, "first")

    def first_has_it_open():
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0] >= 1

    wait_until(first_has_it_open, what="the first crawl to file a page")
    second = run_scrapy(
        spider_args(site, write_paths(tmp_path, "all", paths)), tmp_path, settings, cwd=str(tmp_path), name="second"
    )
    assert second.refused_at_start(), second.log[-3000:]
    assert "in use by another process" in second.log
    first.send_signal(signal.SIGINT)  # the first crawl's work is done here: it stops as Ctrl-C stops it
    assert first.wait(120) == 0
    with sqlite3.connect(str(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# The same protocol as four processes on one server (run on each kind), across shards: one kind;
# each kind's cluster is under test in the failover test.
@pytest.mark.extended
@one_server_kind()
def test_three_processes_on_a_redis_cluster_keep_what_one_process_keeps(site, shared_cluster, tmp_path):
    assert_parts_keep_what_one_process_keeps(
        site, tmp_path, shared_cluster.url, 3, "c", NEARDUP_REDIS_KEY="three:{%(spider)s}"
    )


@pytest.mark.extended
def test_a_cluster_master_killed_mid_crawl_is_replaced_and_the_crawl_goes_on(site, redis_cluster, tmp_path):
    from redis.cluster import ClusterNode, RedisCluster

    proc, stats_file, paths = crawl_riding_out_faults(site, tmp_path, redis_cluster.url, "failover", "0.1")
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in redis_cluster.nodes])
    wait_until(lambda: filed(client) >= 8, what="8 pages filed")
    master = client.get_node_from_key("neardup:{paths}:count")  # the spider's own slot; groups on all
    next(n for n in redis_cluster.nodes if n.port == master.port).stop()  # its replica takes over
    assert proc.wait(180) == 0  # never hangs
    stats = json.loads(stats_file.read_text())
    assert stats["finish_reason"] == "finished"
    decided = stats["neardup/unique"] + stats["neardup/duplicate"] + stats.get("neardup/seen", 0)
    assert decided + stats.get("neardup/store_error", 0) == len(paths)
    assert decided > len(paths) // 2  # the crawl went on checking on the promoted replica
    client.close()
    survivors = [ClusterNode("127.0.0.1", n.port) for n in redis_cluster.nodes if n.port != master.port]
    fresh = RedisCluster(startup_nodes=survivors)  # a new view of the cluster: the replica is the master now
    assert fresh.get_node_from_key("neardup:{paths}:count").port != master.port
    assert filed(fresh) >= 8
    fresh.close()


def test_processes_filing_near_duplicates_at_once_on_a_cluster_keep_one_canonical(shared_cluster):
    """Four processes file the four copies of each of 40 texts at the same instant, on a cluster of three
    masters: check-and-insert across shards leaves one canonical per text. One spider's keys are spread:
    each master serves 21 or 22 of the 64 groups, whatever the prefix, and holds about a third of the keys."""
    import redis
    from helpers.racing import assert_racing_processes_keep_one_canonical_per_group
    from redis.cluster import RedisCluster as ClusterClient

    from scrapy_neardup.store.redis import KeyLayout

    prefix = f"race:{{{uuid.uuid4().hex}}}"
    assert_racing_processes_keep_one_canonical_per_group(shared_cluster.url, prefix=prefix)
    router = ClusterClient(host="127.0.0.1", port=shared_cluster.nodes[0].port)
    served = Counter(router.get_node_from_key(f"{tag}:r").port for tag in KeyLayout(prefix).tags)
    router.close()
    assert sorted(served.values()) == [21, 21, 22], served
    counts = []
    for node in shared_cluster.nodes:
        client = redis.Redis(host="127.0.0.1", port=node.port)
        if client.info("replication")["role"] == "master":
            counts.append(client.dbsize())
        client.close()
    assert len(counts) == 3
    assert all(0.27 <= c / sum(counts) <= 0.40 for c in counts), counts


def test_maintenance_reaches_every_master_of_a_cluster(shared_cluster):
    """Export, reset, expiry and purge read and delete the spider's keys on all three masters."""
    from scrapy_neardup.store.redis import RedisStore

    store = RedisStore(shared_cluster.url, prefix="upkeep:{x}")
    store.open({"format_version": 1})
    for i in range(300):
        store.add(f"http://x/{i}", b"s" * 16, [i * 7919 + j for j in range(10)])
    assert store.count() == 300 and len(list(store.iter_records())) == 300
    assert len(store._group_keys()) > 64
    store.close()
    store = RedisStore(shared_cluster.url, prefix="upkeep:{x}")
    store.open({"format_version": 1}, reset=True)
    assert store.count() == 0 and store._group_keys() == []
    store.add("http://y/", b"s" * 16, [1, 2])
    assert store.expire(time.time() + 10) == 1 and store.count() == 0
    assert store.purge() == 0 and store.lookup([1, 2])[0] == []
    store.close()


def _example_process(tmp_path, redis_url, name, **settings):
    """A ``scrapy crawl news_redis`` of example_project with its distributed settings, started, not waited."""
    from helpers.crawlkit import EXAMPLE

    stats_file, items_file = tmp_path / f"{name}-stats.json", tmp_path / f"{name}-items.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "scrapy",
        "crawl",
        "news_redis",
        "-O",
        f"{items_file}:jsonlines",
        "-s",
        "EXTENSIONS=" + json.dumps({"helpers.crawlkit.StatsToFile": 0}),
        "-s",
        f"TEST_STATS_FILE={stats_file}",
        "-s",
        "MAX_IDLE_TIME_BEFORE_CLOSE=8",
        "-s",
        "LOG_LEVEL=INFO",
    ]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={value}"]
    env = dict(
        os.environ,
        SCRAPY_SETTINGS_MODULE="distributed_settings",
        NEARDUP_EXAMPLE_REDIS_URL=redis_url,
        PYTHONPATH=os.pathsep.join([EXAMPLE, TESTS, ROOT, os.environ.get("PYTHONPATH", "")]),
    )
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - the crawl process writes it until it ends
    return subprocess.Popen(cmd, cwd=EXAMPLE, env=env, stdout=log, stderr=subprocess.STDOUT), stats_file, items_file


@pytest.fixture
def one_redis_server(tmp_path):
    """A server of the first kind of the matrix only (a test of the example, not of the servers)."""
    from helpers.redis_server import RedisServer

    server = RedisServer(str(tmp_path / "redis"), persistent=True).start()
    yield server
    server.stop()


@pytest.mark.extended
def test_the_scrapy_redis_example_shares_the_crawl_and_the_index_and_recrawls(site, one_redis_server, tmp_path):
    """example_project's RedisSpider, as docs/scaling.md runs it: two processes share the queue and the index
    and keep together what one process keeps; after the dupefilter key is deleted, a re-crawl finds every page
    it checked seen or leaves it to the URL rules. (A process idle for a while looks at the shared queue on
    Scrapy's 5 s heartbeat: the crawl is slowed so that both take part.)"""
    pytest.importorskip("scrapy_redis")
    import redis

    redis_server = one_redis_server
    client = redis.Redis.from_url(redis_server.url)
    rounds = []
    for round_name in ("first", "again"):
        if round_name == "again":
            assert client.delete("news_redis:dupefilter") == 1  # what a re-crawl under SCHEDULER_PERSIST needs
        # One request at a time each, a little apart: the shared queue feeds both processes.
        runs = [
            _example_process(tmp_path, redis_server.url, f"{round_name}{i}", CONCURRENT_REQUESTS=1, DOWNLOAD_DELAY=0.25)
            for i in range(2)
        ]
        wait_until(
            lambda: all("Spider opened" in (tmp_path / f"{round_name}{i}.log").read_text() for i in range(2)),
            what="both spiders opened",
        )
        client.lpush("news_redis:start_urls", site + "/")
        for proc, _, _ in runs:
            assert proc.wait(120) == 0
        stats = [json.loads(stats_file.read_text()) for _, stats_file, _ in runs]
        for s in stats:
            assert s["finish_reason"] == "finished" and "neardup/store_error" not in s
            assert s.get("neardup/checked", 0) >= 1, s  # both processes took part
        rounds.append(stats)
    total = lambda stats, key: sum(s.get(key, 0) for s in stats)  # noqa: E731
    first, again = rounds
    checked = total(first, "neardup/checked")
    single = run_scrapy(
        ["crawl", "news", "-a", f"site={site}/"],
        tmp_path,
        {"NEARDUP_STORE_URL": f"sqlite:///{tmp_path}/single.sqlite3"},
        name="single",
    )
    assert single.stats["finish_reason"] == "finished"
    for key in ("neardup/checked", "neardup/unique", "neardup/duplicate"):
        assert total(first, key) == single.stats[key], key
    # The re-crawl checks every page again and finds it seen, or leaves it unfetched by the URL rules that the
    # first round made confident (skipped, or requested as its group's page, which it then stands in for).
    recrawled = total(again, "neardup/checked")
    # (In tag mode, as here, a predicted copy is fetched and tagged from the prediction: url_rules/tagged.)
    by_rules = sum(
        total(again, key)
        for key in ("neardup/skipped/predicted", "neardup/url_rules/rewritten", "neardup/url_rules/tagged")
    )
    neardup_stats = [{k: v for k, v in s.items() if k.startswith("neardup/")} for s in again]
    assert total(again, "neardup/seen") == recrawled, json.dumps(neardup_stats)
    assert recrawled + by_rules == checked, json.dumps(neardup_stats)
    client.close()
