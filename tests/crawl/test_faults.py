"""Fault injection: real faults under real crawls and real CLI runs, and nothing lost without a word.

A tiny file system (a real tmpfs mount where the machine allows it, else a file-size limit on the crawl
process that really makes SQLite's writes fail), read-only mounts, a store whose final commit fails,
symbolic links, foreign SQLite files, corrupted B-tree pages, Redis with ``requirepass``, garbage records in
real Redis keys, token-less and UTF-16 pages, hostile JSON lines. Each test checks the books: every page
fetched is filed, counted as skipped, or counted as a store error, and what the stats call filed is what
the store holds (less what ``neardup/unsaved`` says a failed write lost).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import resource
import signal
import sqlite3
import struct
import subprocess
import sys
import time
import uuid

import pytest
from helpers.crawlkit import books, crawl_tagged
from helpers.pages import WORDS, article, distinct_pages
from helpers.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.faults]


# -- real file systems -------------------------------------------------------------------------------------
@contextlib.contextmanager
def tmpfs(path, size: str):
    """A real tmpfs of ``size`` mounted on ``path``; ``None`` where this machine does not allow mounts."""
    os.makedirs(path, exist_ok=True)
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        != 0
    ):
        yield None
        return
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount_read_only(path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)


def file_size_limit(limit: int):
    """For a child process: writes past ``limit`` bytes fail with EFBIG (SIGXFSZ ignored), as a full disk's
    do. The fallback where no file system can be mounted."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def assert_books_balance(result, fetched: int) -> dict[str, int]:
    """Every page fetched is checked, skipped or a store error: nothing else happened to it."""
    b = books(result)
    assert b["checked"] + b["skipped"] + b["store_error"] == fetched, (b, fetched, result.log[-3000:])
    return b


def stored_docs(path: str) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]


def digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# -- 1. a full disk ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["pass", "stop"])
def test_a_full_disk_loses_no_page_silently(tmp_path, policy):
    pages = distinct_pages(600, copies_every=5)
    with tmpfs(tmp_path / "tiny", "256k") as mounted:
        folder = mounted or str(tmp_path / "tiny")
        store = os.path.join(folder, "store.sqlite3")
        result = crawl_tagged(
            tmp_path,
            pages,
            {
                "NEARDUP_STORE_URL": f"sqlite:///{store}",
                "NEARDUP_ON_STORE_ERROR": policy,
                "NEARDUP_STORE_COMMIT_EVERY": "20",
            },
            preexec=None if mounted else file_size_limit(256 * 1024),
        )
        in_file = stored_docs(store)
    assert "Traceback" not in result.log, result.log[-4000:]
    b = books(result)
    assert b["store_error"] >= 1, (b, result.log[-3000:])
    filed = result.stats.get("neardup/unique", 0) + result.stats.get("neardup/duplicate", 0)
    # What the stats call filed is in the file, but for what a failed write says it lost.
    assert filed - b["unsaved"] == in_file, (b, filed, in_file)
    if policy == "pass":
        assert result.stats["finish_reason"] == "finished"
        assert len(result.items) == len(pages)  # tag mode: every page reached the spider
        assert_books_balance(result, len(pages))
        assert "passed on unchecked (NEARDUP_ON_STORE_ERROR = 'pass')" in result.log
    else:
        assert result.stats["finish_reason"] == "neardup_store_error"
        assert "stopping the crawl (NEARDUP_ON_STORE_ERROR = 'stop')" in result.log
        # Less the plugin's own probe for a soft-404 answer (NEARDUP_SOFT404): a response, not a page.
        probes = result.stats.get("neardup/soft404/probed", 0)
        assert_books_balance(result, result.stats["response_received_count"] - probes)


def test_a_final_commit_that_fails_ends_the_crawl_and_says_what_was_lost(tmp_path):
    """Nothing is committed before close (huge batches), and the disk is too small for the commit."""
    pages = distinct_pages(300)
    with tmpfs(tmp_path / "tiny", "160k") as mounted:
        folder = mounted or str(tmp_path / "tiny")
        store = os.path.join(folder, "store.sqlite3")
        started = time.monotonic()
        result = crawl_tagged(
            tmp_path,
            pages,
            {
                "NEARDUP_STORE_URL": f"sqlite:///{store}",
                "NEARDUP_STORE_COMMIT_EVERY": "1000000",
                "NEARDUP_STORE_COMMIT_SECS": "3600",
            },
            preexec=None if mounted else file_size_limit(160 * 1024),
            timeout=120,
        )
        in_file = stored_docs(store)
    assert time.monotonic() - started < 110
    assert result.returncode == 0 and result.stats["finish_reason"] == "finished", result.log[-3000:]
    b = assert_books_balance(result, len(pages))
    assert b["checked"] == len(pages) and in_file == 0
    assert b["unsaved"] == len(pages) and b["store_error"] == 0  # store_error counts pages; this was the close
    lost = f"closing the store failed; the fingerprints of the last {len(pages)} pages filed were not saved"
    assert lost in result.log
    assert "pages checked" in result.log  # the closing summary is still written


# -- 2. files and folders that cannot be written --------------------------------------------------------
def test_a_read_only_store_stops_the_crawl_at_open(tmp_path):
    from scrapy_neardup.store import SqliteStore

    pages = distinct_pages(20)
    with tmpfs(tmp_path / "ro", "4m") as mounted:
        if mounted is None:
            pytest.skip("this machine allows no mount, and root writes through file modes")
        store = os.path.join(mounted, "store.sqlite3")
        first = SqliteStore(store)
        first.open({"format_version": 2})
        first.close()
        before = digest(store)
        remount_read_only(mounted)
        result = crawl_tagged(tmp_path, pages, {"NEARDUP_STORE_URL": f"sqlite:///{store}"})
        assert digest(store) == before
    assert result.refused_at_start(), result.log[-3000:]
    assert "Read-only file system" in result.log or "readonly" in result.log


def test_a_symlinked_store_path_meets_the_same_lock(tmp_path):
    from scrapy_neardup.store import SqliteStore, StoreLockedError

    real = tmp_path / "real.sqlite3"
    link = tmp_path / "link.sqlite3"
    first = SqliteStore(str(real))
    first.open({"format_version": 2})
    link.symlink_to(real)
    second = SqliteStore(str(link))
    with pytest.raises(StoreLockedError, match="in use by another process"):
        second.open({"format_version": 2})
    first.close()
    second.open({"format_version": 2})  # free now, through the link
    assert second.path == str(real)
    second.close()


# -- 3. other people's databases -------------------------------------------------------------------------
FOREIGN = {
    "users": ["CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO users (name) VALUES ('ada')"],
    "meta-key-val": ["CREATE TABLE meta (key TEXT, val TEXT)", "INSERT INTO meta VALUES ('owner', 'billing')"],
    "meta-name-value": [
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT)",
        "INSERT INTO meta VALUES ('format_version', 'theirs')",
        "INSERT INTO meta VALUES ('invoices', '1200')",
    ],
}


@pytest.mark.parametrize("shape", sorted(FOREIGN))
def test_a_foreign_sqlite_database_is_never_written(tmp_path, shape):
    from scrapy_neardup.store import ForeignDatabaseError, SqliteStore

    path = tmp_path / "theirs.db"
    with contextlib.closing(sqlite3.connect(str(path))) as db:
        for statement in FOREIGN[shape]:
            db.execute(statement)
        db.commit()
    before = digest(path)
    with pytest.raises(ForeignDatabaseError, match="not a scrapy-neardup store"):
        SqliteStore(str(path)).open({"format_version": 2}, reset=True)
    assert digest(path) == before
    # And in a real crawl told to reset the store, as the mismatch message used to advise.
    result = crawl_tagged(
        tmp_path, distinct_pages(10), {"NEARDUP_STORE_URL": f"sqlite:///{path}", "NEARDUP_RESET": "True"}
    )
    assert result.refused_at_start(), result.log[-3000:]
    assert "is not a scrapy-neardup store" in result.log and "Traceback" not in result.log
    assert digest(path) == before


def test_a_store_of_an_earlier_version_is_still_opened_and_then_marked(tmp_path):
    from scrapy_neardup.store import SqliteStore
    from scrapy_neardup.store.sqlite import APPLICATION_ID

    path = tmp_path / "old.sqlite3"
    store = SqliteStore(str(path))
    store.open({"format_version": 2})
    store.add("http://a/", b"sig", [1, 2])
    store.close()
    with contextlib.closing(sqlite3.connect(str(path))) as db:  # as a version before the mark left it
        db.execute("PRAGMA application_id = 0")
        db.commit()
    store = SqliteStore(str(path))
    store.open({"format_version": 2})
    assert store.get("http://a/") is not None
    store.close()
    with contextlib.closing(sqlite3.connect(str(path))) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_corrupted_btree_pages_cost_no_page_silently(tmp_path):
    path = tmp_path / "store.sqlite3"
    first = crawl_tagged(tmp_path, distinct_pages(400), {"NEARDUP_STORE_URL": f"sqlite:///{path}"}, name="first")
    assert first.stats["finish_reason"] == "finished"
    with contextlib.closing(sqlite3.connect(str(path))) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
    size = os.path.getsize(path)
    r = random.Random(3)
    with open(path, "r+b") as f:  # three pages in the middle of the file: garbage
        for page in r.sample(range(size // page_size // 3, size // page_size), 3):
            f.seek(page * page_size)
            f.write(bytes(r.randrange(256) for _ in range(page_size)))
    pages = {**distinct_pages(400), **{f"/b/{i}": article(10_000 + i) for i in range(200)}}
    result = crawl_tagged(tmp_path, pages, {"NEARDUP_STORE_URL": f"sqlite:///{path}"}, name="second")
    assert "Traceback" not in result.log, result.log[-4000:]
    if result.returncode == 1:  # found at open: the crawl did not start
        assert result.refused_at_start(), result.log[-3000:]
    else:
        assert result.stats["finish_reason"] == "finished"
        b = assert_books_balance(result, len(pages))
        assert b["store_error"] >= 1, b


# -- 4. Redis: credentials, garbage ----------------------------------------------------------------------
def test_redis_credentials_are_never_logged_and_a_refused_login_is_said_at_once(tmp_path, redis_kind):
    from helpers.redis_server import kind_named

    secret = f"s3cr3t-{uuid.uuid4().hex[:8]}"
    server = RedisServer(str(tmp_path / "redis"), password=secret, kind=kind_named(redis_kind)).start()
    try:
        pages = distinct_pages(30, copies_every=3)
        host = f"127.0.0.1:{server.port}"
        good = crawl_tagged(tmp_path, pages, {"NEARDUP_STORE_URL": f"redis://{host}/0?password={secret}"}, name="good")
        assert good.stats["finish_reason"] == "finished", good.log[-3000:]
        assert books(good)["checked"] == 30 and good.stats["neardup/duplicate"] == 9
        started = time.monotonic()
        bad = crawl_tagged(
            tmp_path,
            pages,
            {"NEARDUP_STORE_URL": f"redis://:wrong-{secret}@{host}/0", "NEARDUP_REDIS_RETRIES": "4"},
            name="bad",
        )
        elapsed = time.monotonic() - started
        none = crawl_tagged(tmp_path, pages, {"NEARDUP_STORE_URL": f"redis://{host}/0"}, name="none")
    finally:
        server.stop()
    for result in (good, bad, none):
        assert secret not in result.log and secret not in json.dumps(result.stats)
    assert "password=***" in good.log
    for result in (bad, none):
        assert result.refused_at_start(), result.log[-3000:]
        assert "refused the credentials" in result.log and "unreachable" not in result.log
    assert elapsed < 30  # no retries with back-off for a wrong password


def test_garbage_in_redis_keys_becomes_a_store_error_naming_the_key(tmp_path, redis_kind):
    import redis as redis_py
    from helpers.stores import make_store

    from scrapy_neardup.engine.algorithms.minhash import MinHashLSH
    from scrapy_neardup.engine.detector import Detector
    from scrapy_neardup.store import StoreError
    from scrapy_neardup.store.redis import pack_record

    algorithm = MinHashLSH(threshold=0.45, shingle_size=2)
    store = make_store("redis", tmp_path, redis_kind=redis_kind)
    detector = Detector(algorithm, store)
    detector.open()
    text = " ".join(random.Random(1).choice(WORDS) for _ in range(200))
    fp = algorithm.fingerprint(text)
    assert detector.check_fingerprint("http://a/1", fp.signature, fp.buckets).status == "unique"
    client = redis_py.Redis.from_url(store.url)
    doc_id = store._id_of("http://a/1")
    record_bin = store.layout.bin_name(store.layout.record_group(doc_id), b"r", doc_id // 64)
    for damage, named in [
        (pack_record("x", fp.signature, 0, 1.0)[:-1] + b"\xff\xfe", "not UTF-8"),
        (pack_record("http://a/1", b"abc", 0, 1.0), "malformed"),
        (b"\x03\x02", "too short"),
    ]:
        client.set(record_bin, bytes([doc_id % 64]) + struct.pack("<H", len(damage)) + damage)
        with pytest.raises(StoreError, match=named) as caught:
            detector.check_fingerprint(f"http://a/{uuid.uuid4().hex}", fp.signature, fp.buckets)
        assert repr(record_bin) in str(caught.value) or "http://a/1" in str(caught.value)
    detector.close()

    # A key of the wrong type stops a crawl at open, with the reason, and lets no page through unchecked.
    prefix = f"wrongtype:{{{uuid.uuid4().hex}}}"
    client.set(f"{prefix}:meta", "a string, not a hash")
    result = crawl_tagged(tmp_path, distinct_pages(10), {"NEARDUP_STORE_URL": store.url, "NEARDUP_REDIS_KEY": prefix})
    assert result.refused_at_start(), result.log[-3000:]
    assert "WRONGTYPE" in result.log


def test_a_read_only_redis_replica_is_refused_at_open(tmp_path, redis_kind):
    from helpers.redis_server import kind_named

    master = RedisServer(str(tmp_path / "master"), kind=kind_named(redis_kind)).start()
    replica = RedisServer(str(tmp_path / "replica"), replica_of=master.port, kind=kind_named(redis_kind)).start()
    try:
        result = crawl_tagged(tmp_path, distinct_pages(5), {"NEARDUP_STORE_URL": replica.url})
    finally:
        replica.stop()
        master.stop()
    assert result.refused_at_start(), result.log[-3000:]
    assert "is a read-only replica" in result.log


def test_a_store_folder_that_cannot_be_created_stops_the_crawl(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = crawl_tagged(tmp_path, distinct_pages(5), {"NEARDUP_STORE_URL": f"sqlite:///{blocker}/store.sqlite3"})
    assert result.refused_at_start(), result.log[-3000:]
    assert "Cannot open the SQLite store" in result.log


# -- 5. pages without words, UTF-16 pages --------------------------------------------------------------------
def wordless(body: str) -> str:
    return f"<html><head><title>x</title></head><body><article><p>{body}</p></article></body></html>"


WORDLESS = {
    "/hashes": wordless("#" * 50_000),
    "/zero-width": wordless("\u200b\u200c\u200d" * 3000),
    "/amp": wordless("&amp; " * 3000),
    "/emoji": wordless("\U0001f600\U0001f680\U0001f4a9 " * 1500),
    "/punctuation": wordless("!?.,;:-_/\\()[]{} " * 800),
    "/box": wordless("\u2500\u2502\u250c\u2510\u2514\u2518\u253c " * 1200),
}


def utf16(page: str) -> tuple[bytes, dict[str, str]]:
    """A page served as UTF-16 (with its byte-order mark) under a correct charset."""
    return page.encode("utf-16"), {"Content-Type": "text/html; charset=utf-16"}


def test_pages_without_words_are_skipped_and_utf16_pages_are_read(tmp_path):
    pages = {**WORDLESS, "/story": article(1), "/story-utf16": utf16(article(1)), "/other-utf16": utf16(article(2))}
    for algorithm in ("minhash", "simhash"):
        result = crawl_tagged(
            tmp_path,
            pages,
            {"NEARDUP_ALGORITHM": algorithm, "NEARDUP_STORE_URL": f"sqlite:///{tmp_path}/{algorithm}.sqlite3"},
            name=algorithm,
        )
        assert result.stats["finish_reason"] == "finished" and "Traceback" not in result.log
        assert_books_balance(result, len(pages))
        stats = result.neardup_stats()
        assert stats.get("neardup/skipped/no_words") == len(WORDLESS), stats
        assert "neardup/skipped/binary" not in stats
        assert stats["neardup/checked"] == 3 and stats["neardup/duplicate"] == 1, stats


# -- 6. the batch CLI under hostile input -----------------------------------------------------------------
def cli(*args, timeout=120, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def test_hostile_json_lines_cost_one_line_each(tmp_path):
    rngs = [random.Random(i) for i in range(6)]
    texts = [" ".join(f"w{r.randrange(10**6)}" for _ in range(120)) for r in rngs]
    lines = [json.dumps({"url": f"http://a/{i}", "text": t}) for i, t in enumerate(texts)]
    lines.insert(2, "[" * 100_000 + "]" * 100_000)  # nested too deeply for the parser
    lines.insert(3, json.dumps({"url": "http://a/huge", "text": "word " * 600_000}))  # 3 MB
    lines.append(json.dumps({"url": "http://a/tab\tnew\nline", "text": texts[0]}))  # a copy, with a hostile URL
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "pairs.tsv"
    run = cli("dedup", source, "-o", out, "--workers", 2)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stderr.strip().splitlines()[-1])
    assert summary["unreadable"] == 1 and summary["skipped"] == {"too_large": 1}
    assert summary["documents"] == 7 and summary["duplicate"] == 1
    rows = out.read_text().splitlines()
    assert rows == ["http://a/tab%09new%0Aline\thttp://a/0\t1.0000"]
    for bad in (0, -3):
        refused = cli("dedup", source, "-o", out, "--workers", bad)
        assert refused.returncode == 2 and "at least 1" in refused.stderr


def test_a_bad_clusters_path_is_found_before_a_persistent_store_is_written(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps({"url": f"http://a/{i}", "text": article(i)}) for i in range(5)) + "\n")
    store = tmp_path / "store.sqlite3"
    (tmp_path / "clusters-dir").mkdir()
    run = cli(
        "dedup",
        source,
        "-o",
        tmp_path / "pairs.tsv",
        "--clusters",
        tmp_path / "clusters-dir",
        "--store",
        f"sqlite:///{store}",
    )
    assert run.returncode == 1 and "clusters-dir: is a directory" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert not store.exists() and not (tmp_path / "pairs.tsv").exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_ctrl_c_stops_the_batch_cli_cleanly_with_consistent_files(tmp_path):
    import threading

    source = tmp_path / "in.jsonl"
    total = 12_000
    with open(source, "w") as f:
        for i in range(total):
            f.write(json.dumps({"url": f"http://a/{i}", "html": article(i // 2, words=400)}) + "\n")
    out, clusters, store = tmp_path / "pairs.tsv", tmp_path / "clusters.jsonl", tmp_path / "store.sqlite3"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scrapy_neardup.offline.cli",
            "dedup",
            str(source),
            "-o",
            str(out),
            "--clusters",
            str(clusters),
            "--store",
            f"sqlite:///{store}",
            "--workers",
            "2",
            "--progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    err = bytearray()
    progressing = threading.Event()

    def read_stderr() -> None:
        while chunk := proc.stderr.read1(4096):
            err.extend(chunk)
            decided = re.findall(rb"\r([\d,]+) documents[ ,]", err)  # the progress line, rewritten in place
            if decided and int(decided[-1].replace(b",", b"")) >= 300:
                progressing.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    assert progressing.wait(60), err.decode()
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    proc.wait(60)
    reader.join(10)
    stderr = err.decode()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    summary = json.loads(stderr.strip().splitlines()[-1])
    assert summary["interrupted"] is True and 0 < summary["documents"] < total, summary
    assert "interrupted after" in stderr
    pairs = out.read_text().splitlines()
    assert len(pairs) == summary["duplicate"] > 0
    members = sum(json.loads(line)["size"] for line in clusters.read_text().splitlines())
    assert members == 2 * summary["duplicate"]  # each cluster: a page and its copy
    assert stored_docs(str(store)) == summary["unique"] + summary["duplicate"]


def test_a_store_path_whose_folder_does_not_exist_fails_the_start_up(tmp_path):
    """A typo in NEARDUP_STORE_URL's folder: the crawl refuses to start in one line and makes no folder,
    where it used to make the folders and crawl on an empty history."""
    missing = tmp_path / "no-such-folder"
    result = crawl_tagged(tmp_path, distinct_pages(4), {"NEARDUP_STORE_URL": f"sqlite:///{missing}/s.sqlite3"})
    assert result.refused_at_start(), result.log[-3000:]
    assert "does not exist" in result.log and "Traceback" not in result.log
    assert not missing.exists()
