"""The store contract, run against every backend."""

import numpy as np
import pytest
from helpers.stores import PERSISTENT_BACKENDS, STORE_BACKENDS, make_store

from scrapy_neardup.store import Filing, Query, StoreError, StoreMismatchError, sqlite_path, store_from_url
from scrapy_neardup.store.sqlite import SqliteStore, StoreLockedError

META = {"format_version": 1, "algorithm": "minhash", "num_perm": 4}


@pytest.fixture
def store(store_kind, tmp_path):
    s = make_store(store_kind, tmp_path)
    s.open(META)
    yield s
    s.close()


def test_empty_store(store):
    assert store.count() == 0
    assert store.get("http://a/") is None
    assert store.lookup([1, 2, 3])[0] == []


def test_canonical_documents_are_found_through_their_buckets(store):
    assert store.add("http://a/", b"sig-a", [1, 2])
    assert store.add("http://b/", b"sig-b", [2, 3])
    found = {c.key: c.signature for c in store.lookup([2])[0]}
    assert found == {"http://a/": b"sig-a", "http://b/": b"sig-b"}
    assert [c.key for c in store.lookup([1, 2, 99])[0]].count("http://a/") == 1  # each document once
    assert [c.key for c in store.lookup([3])[0]] == ["http://b/"]
    assert store.lookup([np.int64(-5)])[0] == []
    assert store.count() == 2


def test_near_duplicates_are_recorded_not_indexed(store):
    store.add("http://a/", b"sig-a", [1])
    store.add("http://a-copy/", b"sig-a2", [1], canonical="http://a/", similarity=0.9)
    assert [c.key for c in store.lookup([1])[0]] == ["http://a/"]
    record = store.get("http://a-copy/")
    assert record.canonical == "http://a/" and record.similarity == pytest.approx(0.9)
    assert store.get("http://a/").canonical is None
    assert store.count() == 2


def test_a_document_keeps_the_digest_of_its_bytes_through_every_read_and_change(store):
    """The body digest filed with a document comes back from every read of it (a record, a lookup of its
    key, the export), survives a touch, a re-filing and a re-pointing, and is absent where none was given."""
    a, a2, b, c = b"A" * 8, b"a" * 8, b"B" * 8, b"C" * 8
    store.add_many([Filing("http://a/", b"sig-a", [1], body=a)])
    store.add_many([Filing("http://a-copy/", None, [], "http://a/", 0.9, body=a2)])
    (found,) = store.lookup_many([Query("http://b/", b"sig-b", [2], b)], file_alone=True)
    if not found.filed:  # a backend that files only through add_many (Redis)
        store.add_many([Filing("http://b/", b"sig-b", [2], token=found.token, body=b)])
    store.add("http://none/", b"sig-n", [3])
    assert [store.get(k).body for k in ("http://a/", "http://a-copy/", "http://b/", "http://none/")] == [a, a2, b, None]
    known = store.lookup_many([Query(k, b"x", [9]) for k in ("http://a/", "http://a-copy/", "http://none/")])
    assert [found.known.body for found in known] == [a, a2, None]
    store.touch(["http://a/"])
    store.refile("http://b/", b"sig-b2", [4])
    store.add_many([Filing("http://c/", b"sig-c", [5], body=c)])
    repointed = store.repoint("http://a/", "http://c/", 0.8)
    assert store.get("http://a/").body == a and store.get("http://b/").body == b
    if repointed:  # a backend that cannot re-point keeps every group's first canonical
        assert store.get("http://a/").canonical == "http://c/"
    exported = {r.key: r.body for r in store.iter_records()}
    assert exported == {"http://a/": a, "http://a-copy/": a2, "http://b/": b, "http://none/": None, "http://c/": c}


def test_adding_a_known_key_changes_nothing(store):
    store.add("http://a/", b"one", [1])
    store.add("http://a/", b"two", [2])
    assert store.get("http://a/").signature == b"one"
    assert store.lookup([2])[0] == []
    assert store.count() == 1


def test_negative_and_large_bucket_keys(store):
    keys = [-(2**63), 2**63 - 1, 0, -1]
    store.add("http://k/", b"s", keys)
    for key in keys:
        assert [c.key for c in store.lookup([key])[0]] == ["http://k/"]


def test_iter_records(store):
    store.add("http://a/", b"a", [1])
    store.add("http://b/", None, [], canonical="http://a/", similarity=0.8)
    records = {r.key: r for r in store.iter_records()}
    assert set(records) == {"http://a/", "http://b/"}
    assert records["http://b/"].canonical == "http://a/"


@pytest.mark.parametrize("new_signature", [b"page-a", b"a longer page-text signature"])
def test_refile_gives_a_canonical_a_new_signature_and_buckets(store, new_signature):
    store.add("http://a/", b"sig-a", [1, 2])
    store.add("http://b/", b"sig-b", [2])
    store.add("http://a-copy/", None, [], canonical="http://a/", similarity=0.9)
    assert store.refile("http://a/", new_signature, [7, 8])
    assert {c.key: c.signature for c in store.lookup([8])[0]} == {"http://a/": new_signature}
    # An old bucket may still name it; what is read is always the current signature.
    assert {c.key: c.signature for c in store.lookup([1, 2])[0]} in (
        {"http://a/": new_signature, "http://b/": b"sig-b"},
        {"http://b/": b"sig-b"},
    )
    assert store.get("http://a/").signature == new_signature
    assert store.get("http://a-copy/").canonical == "http://a/"  # its near-duplicates still point to it
    assert not store.refile("http://a-copy/", b"x", [9])  # a near-duplicate is not re-filed
    assert not store.refile("http://unknown/", b"x", [9])
    assert store.lookup([9])[0] == [] and store.count() == 3


@pytest.mark.parametrize("store_kind", PERSISTENT_BACKENDS)
def test_refiled_signature_outlives_the_process(store_kind, tmp_path):
    s = make_store(store_kind, tmp_path)
    s.open(META)
    s.add("http://a/", b"sig-a", [1])
    assert s.refile("http://a/", b"page-text signature", [5])
    s.close()
    s = make_store(store_kind, tmp_path)
    s.open(META)
    assert {c.key: c.signature for c in s.lookup([5])[0]} == {"http://a/": b"page-text signature"}
    s.close()


def test_url_rule_counts_add_up_and_clear_forgets_them(store):
    """The URL rules' counts (scrapy_neardup.engine.urlrules): added to, never overwritten, so that the
    processes of a crawl add what each counted; a rule proposed with no count yet is listed."""
    assert store.rules.read() == {}
    store.rules.add({("a.com", "param:utm_source"): (3, 0), ("b.org", "prefix:amp"): (0, 0)})
    store.rules.add({("a.com", "param:utm_source"): (2, 1), ("a.com", "www"): (1, 0)})
    assert store.rules.read() == {
        ("a.com", "param:utm_source"): (5, 1),
        ("b.org", "prefix:amp"): (0, 0),
        ("a.com", "www"): (1, 0),
    }
    store.clear()
    assert store.rules.read() == {}


def test_url_rule_counts_are_read_whole_first_then_those_added_to_since(store):
    """A crawl process reads every count once, then the rules added to since its mark, with their totals."""
    store.rules.add({("a.com", "param:utm_source"): (3, 0), ("b.org", "prefix:amp"): (0, 0)})
    everything, mark = store.rules.read_changed(None)
    assert everything == {("a.com", "param:utm_source"): (3, 0), ("b.org", "prefix:amp"): (0, 0)}
    assert store.rules.read_changed(mark) == ({}, mark)
    store.rules.add({("a.com", "param:utm_source"): (2, 1), ("a.com", "www"): (1, 0)})
    store.rules.add({("a.com", "www"): (1, 0)})
    changed, later = store.rules.read_changed(mark)
    assert changed == {("a.com", "param:utm_source"): (5, 1), ("a.com", "www"): (2, 0)} and later > mark
    assert store.rules.read_changed(later) == ({}, later)
    for i in range(3000):  # many changes of few rules: what changed since a mark stays exact
        store.rules.add({("c.net", f"param:p{i % 7}"): (1, 0)})
    changed, last = store.rules.read_changed(later)
    assert changed == {("c.net", f"param:p{k}"): (429 if k < 4 else 428, 0) for k in range(7)}
    store.rules.add({("c.net", "param:p6"): (0, 1)})
    assert store.rules.read_changed(last)[0] == {("c.net", "param:p6"): (428, 1)}


def test_a_change_log_answers_what_changed_since_a_mark_and_none_past_what_it_remembers(monkeypatch):
    """The log behind the in-process parts and a SQLite file's: what changed after a mark, each record once;
    ``None`` (read everything) for a mark older than the changes it still remembers, or from before a clear."""
    from scrapy_neardup.store import parts

    monkeypatch.setattr(parts, "MAX_LOGGED", 8)
    log = parts.ChangeLog()
    log.changed(["a", "b"])
    first = log.number
    log.changed(["b", "c"])
    assert log.since(0) == ["a", "b", "c"] and log.since(first) == ["b", "c"] and log.since(log.number) == []
    for i in range(30):  # past twice what it remembers: the least recently changed are forgotten
        log.changed([f"r{i % 12}"])
    assert log.since(first) is None
    recent = log.number - 5
    assert log.since(recent) == [f"r{i % 12}" for i in range(25, 30)]
    log.clear()
    assert log.since(recent) is None and log.since(log.number) == []
    log.changed(["z"])
    assert log.since(log.number - 1) == ["z"]


@pytest.mark.parametrize("store_kind", PERSISTENT_BACKENDS)
def test_url_rule_counts_outlive_the_process(store_kind, tmp_path):
    s = make_store(store_kind, tmp_path)
    s.open(META)
    s.rules.add({("a.com", "suffix:print"): (7, 1)})
    s.close()
    s = make_store(store_kind, tmp_path)
    s.open(META)
    assert s.rules.read() == {("a.com", "suffix:print"): (7, 1)}
    s.close()


@pytest.mark.parametrize("store_kind", PERSISTENT_BACKENDS)
def test_a_group_budget_admits_the_same_keys_for_good_and_no_more(store_kind, tmp_path):
    """NEARDUP_GROUP_BUDGET: the first keys asked for within a group's budget are admitted, and admitted
    again on every later call, by the next process too; others are refused; groups are counted apart."""
    s = make_store(store_kind, tmp_path)
    s.open(META)
    assert [s.budgets.admit("http://a/", k, 2) for k in ("c1", "c2", "c3", "c1")] == [True, True, False, True]
    assert s.budgets.admit("http://b/", "c3", 2)
    s.close()
    s = make_store(store_kind, tmp_path)
    s.open(META)
    assert [s.budgets.admit("http://a/", k, 2) for k in ("c3", "c2", "c1")] == [False, True, True]
    s.clear()
    assert s.budgets.admit("http://a/", "c3", 2)
    s.close()


@pytest.mark.parametrize("store_kind", PERSISTENT_BACKENDS)
def test_reopen_keeps_documents_and_refuses_other_parameters(store_kind, tmp_path):
    s = make_store(store_kind, tmp_path)
    s.open(META)
    s.add("http://a/", b"sig", [7])
    s.close()
    s = make_store(store_kind, tmp_path)
    s.open(META)
    assert s.count() == 1 and [c.key for c in s.lookup([7])[0]] == ["http://a/"]
    s.close()
    s = make_store(store_kind, tmp_path)
    with pytest.raises(StoreMismatchError) as info:
        s.open({**META, "num_perm": 8})
    message = str(info.value)
    assert "num_perm: stored 4, configured 8" in message and "NEARDUP_RESET" in message
    s.close()
    s = make_store(store_kind, tmp_path)
    s.open({**META, "num_perm": 8}, reset=True)
    assert s.count() == 0
    s.close()


def test_sqlite_second_process_gets_a_clear_error(tmp_path):
    first = SqliteStore(str(tmp_path / "s.sqlite3"))
    first.open(META)
    second = SqliteStore(str(tmp_path / "s.sqlite3"))
    with pytest.raises(StoreLockedError, match="in use by another process"):
        second.open(META)
    first.close()
    second.open(META)  # free again once the first closed
    second.close()


def _corrupt_schema_page(path):
    """Garbage over the first page's b-tree (the schema), leaving SQLite's 100-byte header as it was."""
    import random
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(bytes(random.Random(1).randrange(256) for _ in range(page_size - 100)))


def test_a_corrupted_sqlite_store_says_the_next_step_and_a_reset_moves_it_aside(tmp_path):
    import os

    path = str(tmp_path / "s.sqlite3")
    store = SqliteStore(path)
    store.open(META)
    for i in range(300):
        store.add(f"http://a/{i}", b"sig" * 10, [i, i + 1])
    store.close()
    _corrupt_schema_page(path)
    with open(path, "rb") as f:
        damaged = f.read()
    with pytest.raises(StoreError, match="is corrupted .*Set NEARDUP_RESET = True") as caught:
        SqliteStore(path).open(META)
    assert "malformed" in str(caught.value) or "not a database" in str(caught.value)
    fresh = SqliteStore(path)
    fresh.open(META, reset=True)
    assert fresh.count() == 0
    fresh.add("http://b/", b"sig", [1])
    fresh.close()
    aside = [name for name in os.listdir(tmp_path) if ".corrupt-" in name and not name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1
    with open(tmp_path / aside[0], "rb") as f:
        assert f.read() == damaged  # moved, not rewritten
    again = SqliteStore(path)
    again.open(META)
    assert again.get("http://b/") is not None
    again.close()


def test_a_corrupted_file_of_another_application_is_never_moved(tmp_path):
    import sqlite3

    path = str(tmp_path / "theirs.db")
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.executemany("INSERT INTO users (name) VALUES (?)", [("x" * 200,)] * 300)
    _corrupt_schema_page(path)
    with open(path, "rb") as f:
        before = f.read()
    with pytest.raises(StoreError):
        SqliteStore(path).open(META, reset=True)
    with open(path, "rb") as f:
        assert f.read() == before


def test_sqlite_commits_in_bounded_batches(tmp_path):
    import sqlite3

    path = tmp_path / "b.sqlite3"
    s = SqliteStore(str(path), commit_every=3, commit_secs=3600)
    s.open(META)
    for i in range(7):
        s.add(f"http://{i}/", b"x", [i])
    # Another reader sees only what was committed: two full batches of three.
    reader = sqlite3.connect(str(path))
    assert reader.execute("SELECT COUNT(*) FROM docs").fetchone()[0] == 6
    s.flush()
    assert reader.execute("SELECT COUNT(*) FROM docs").fetchone()[0] == 7
    reader.close()
    s.close()


def test_sqlite_stages_new_documents_then_merges_them_into_the_band_index(tmp_path, monkeypatch):
    import sqlite3

    import scrapy_neardup.store.sqlite.store as sqlite_store

    monkeypatch.setattr(sqlite_store, "_MIN_MERGE_STEP", 1)  # slices of twice the rows each write stages
    path = tmp_path / "staged.sqlite3"
    s = SqliteStore(str(path), merge_min_docs=4, merge_max_docs=4)
    s.open(META)
    for i in range(3):
        s.add(f"http://{i}/", f"sig-{i}".encode(), [i, 100 + i])
    s.add("http://copy/", b"x", [0], canonical="http://0/", similarity=0.9)  # not indexed, not staged
    s.flush()
    reader = sqlite3.connect(str(path))

    def rows(table):
        return reader.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

    def keys(buckets):
        return sorted(c.key for c in s.lookup(buckets)[0])

    assert (rows("staged"), rows("buckets")) == (3, 0)
    assert keys([101]) == ["http://1/"]
    s.close()

    s = SqliteStore(str(path), merge_min_docs=4, merge_max_docs=4)
    s.open(META)  # the staged documents are read back at open
    assert keys([102]) == ["http://2/"]
    s.add("http://3/", b"sig-3", [3, 101])  # the fourth: all four are frozen, and the first slice merged
    s.flush()
    assert (rows("staged"), rows("buckets")) == (4, 4)  # staged rows stay until the merge ends
    assert keys([101]) == ["http://1/", "http://3/"]
    s.close()

    s = SqliteStore(str(path), merge_min_docs=4, merge_max_docs=4)
    s.open(META)  # a merge cut short: everything staged is loaded again
    assert keys([101]) == ["http://1/", "http://3/"]
    assert keys([0, 1, 2, 3]) == ["http://0/", "http://1/", "http://2/", "http://3/"]
    s.add("http://4/", b"sig-4", [101])  # five staged: all frozen again, two rows merged
    s.flush()
    assert (rows("staged"), rows("buckets")) == (5, 4)  # the first two rows were in buckets already
    for i in range(7):  # writes that stage nothing still merge (one row each here)
        s.add(f"http://more-{i}/", b"m", [])
        assert keys([101]) == ["http://1/", "http://3/", "http://4/"]
    s.flush()
    assert (rows("staged"), rows("buckets")) == (0, 9)
    assert keys([101]) == ["http://1/", "http://3/", "http://4/"]
    found = s.lookup_many([("http://new/", b"n", [101, 0])])[0].candidates
    assert sorted(c.key for c in found) == ["http://0/", "http://1/", "http://3/", "http://4/"]
    s.close()

    s = SqliteStore(str(path), merge_min_docs=4, merge_max_docs=4)
    s.open(META)  # all in the band index now, nothing staged: read from there
    assert keys([101]) == ["http://1/", "http://3/", "http://4/"]
    reader.close()
    s.close()


def test_sqlite_reads_the_band_index_once_a_merge_of_this_session_wrote_to_it(tmp_path):
    """A new store's band index holds no row, and its lookups do not read it; the first merge writes it, and
    from then on they do: a document merged and no longer staged is still found."""
    import sqlite3

    path = tmp_path / "merged.sqlite3"
    s = SqliteStore(str(path), merge_min_docs=2, merge_max_docs=2)
    s.open(META)
    s.add("http://0/", b"sig-0", [7, 100])
    s.add("http://1/", b"sig-1", [8, 101])  # the second: both frozen, to be merged by the writes that follow
    for i in range(4):
        s.add(f"http://more-{i}/", b"m", [])
    s.flush()
    reader = sqlite3.connect(str(path))
    assert reader.execute("SELECT COUNT(*) FROM staged").fetchone()[0] == 0
    assert reader.execute("SELECT COUNT(*) FROM buckets").fetchone()[0] == 4
    reader.close()
    assert [c.key for c in s.lookup([7])[0]] == ["http://0/"]
    assert [c.key for c in s.lookup_many([("http://new/", b"n", [101])])[0].candidates] == ["http://1/"]
    s.close()


def test_sqlite_layout_is_recorded_and_checked(tmp_path):
    """The file records its layout; a file of another (a development version's: none recorded, or 2) is
    refused at open with what to do, and left as it is."""
    import sqlite3

    path = tmp_path / "layout.sqlite3"
    s = SqliteStore(str(path))
    s.open(META)
    s.add("http://old/", b"o", [1])
    s.close()
    db = sqlite3.connect(str(path), isolation_level=None)
    assert db.execute("SELECT value FROM meta WHERE name = 'sqlite_layout'").fetchone() == ("4",)
    for layout in ("2", None, "9"):
        if layout is None:
            db.execute("DELETE FROM meta WHERE name = 'sqlite_layout'")
        else:
            db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('sqlite_layout', ?)", (layout,))
        with pytest.raises(StoreError, match=f"has layout {layout}; this version of scrapy-neardup reads layout 4"):
            s.open(META)
        s.close()
    assert db.execute("SELECT count(*) FROM docs").fetchone() == (1,)
    db.close()


def test_a_sqlite_store_of_layout_3_is_upgraded_at_open_and_keeps_its_documents(tmp_path):
    """Layout 3 had no body digests: its file opens, gains the column, and its documents read with none."""
    import sqlite3

    path = tmp_path / "layout3.sqlite3"
    s = SqliteStore(str(path))
    s.open(META)
    s.add("http://old/", b"o", [1])
    s.close()
    db = sqlite3.connect(str(path), isolation_level=None)  # the file as layout 3 wrote it
    db.executescript(
        """
        BEGIN;
        CREATE TABLE docs3 (id INTEGER PRIMARY KEY, key_hash INTEGER NOT NULL, key TEXT NOT NULL,
                            canonical INTEGER, similarity REAL NOT NULL, sig BLOB, seen INTEGER);
        INSERT INTO docs3 SELECT id, key_hash, key, canonical, similarity, sig, seen FROM docs;
        DROP TABLE docs;
        ALTER TABLE docs3 RENAME TO docs;
        CREATE INDEX docs_key_hash ON docs (key_hash);
        UPDATE meta SET value = '3' WHERE name = 'sqlite_layout';
        COMMIT;
        """
    )
    s = SqliteStore(str(path))
    s.open(META)
    old = s.get("http://old/")
    assert old is not None and old.signature == b"o" and old.body is None
    s.add_many([Filing("http://new/", b"n", [2], body=b"12345678")])
    s.close()
    assert db.execute("SELECT value FROM meta WHERE name = 'sqlite_layout'").fetchone() == ("4",)
    db.close()
    s = SqliteStore(str(path))
    s.open(META)
    assert s.get("http://new/").body == b"12345678" and s.get("http://old/").body is None
    s.close()


def test_store_urls(tmp_path):
    assert sqlite_path("sqlite:///rel/x.db") == "rel/x.db"
    assert sqlite_path("sqlite:////abs/x.db") == "/abs/x.db"
    assert type(store_from_url("memory://")).__name__ == "MemoryStore"
    assert isinstance(store_from_url(f"sqlite:///{tmp_path}/x.db"), SqliteStore)
    with pytest.raises(ValueError, match="Unknown store URL scheme 'mongodb'.*allowed: memory://, sqlite://"):
        store_from_url("mongodb://x")


def test_sqlite_keeps_32_bits_of_bucket_keys_and_verification_rejects_the_collisions(tmp_path):
    """Bucket keys that agree in their low 32 bits meet in SQLite (4-byte rows); the detector's verification
    against the signature, not the bucket, decides."""
    from scrapy_neardup.engine.algorithms.minhash import MinHashLSH
    from scrapy_neardup.engine.detector import Detector

    store = SqliteStore(str(tmp_path / "narrow.sqlite"))
    store.open(META)
    store.add("http://a/", b"sig-a", [(7 << 32) + 5])
    assert [c.key for c in store.lookup([(9 << 32) + 5])[0]] == ["http://a/"]  # a spurious candidate
    assert store.lookup([(7 << 32) + 6])[0] == []
    store.close()

    algorithm = MinHashLSH(0.8)
    detector = Detector(algorithm, SqliteStore(str(tmp_path / "verify.sqlite")))
    detector.open()
    one = algorithm.fingerprint("the first page talks about rivers and the boats that sail on them " * 3)
    other = algorithm.fingerprint("a second page is about mountains, snow and the people who climb them " * 3)
    detector.check_fingerprint("http://one/", one.signature, one.buckets)
    # The other page's bucket keys, forced to collide with the first page's in their low 32 bits.
    colliding = (one.buckets & 0xFFFFFFFF) + (np.int64(3) << 32)
    verdict = detector.check_fingerprint("http://other/", other.signature, colliding)
    assert verdict.status == "unique"
    detector.close()


@pytest.mark.parametrize("same_batch", [False, True])
def test_a_batch_never_files_a_page_ahead_of_an_earlier_near_duplicate(store_kind, tmp_path, same_batch):
    """Decided in one batch as one by one: A shares a bucket with an unrelated filed page X, so it waits
    for verification; B, a near-duplicate of A sharing none of X's buckets, must wait for A's verdict
    rather than be filed alone ahead of it (found with one-permutation MinHash on the demo site)."""
    from scrapy_neardup.engine.algorithms.minhash import MinHashLSH
    from scrapy_neardup.engine.detector import Detector

    words = [f"w{i}" for i in range(300)]
    algorithm = MinHashLSH(0.5, shingle_size=2)
    sig = {
        name: algorithm.fingerprint(text).signature
        for name, text in [
            ("x", " ".join(reversed(words))),
            ("a", " ".join(words)),
            ("b", " ".join(words[:-3] + ["u", "v", "z"])),
        ]
    }
    assert algorithm.similarity(sig["a"], sig["b"]) >= 0.5 > algorithm.similarity(sig["a"], sig["x"])
    buckets = {"x": [100], "a": [100, 200, 300], "b": [200, 300, 400]}
    detector = Detector(algorithm, make_store(store_kind, tmp_path))
    detector.open()
    try:
        items = [(f"http://{n}/", sig[n], np.array(buckets[n], dtype=np.int64)) for n in ("x", "a", "b")]
        if not same_batch:
            assert detector.check_fingerprint(*items[0]).status == "unique"
        verdicts = detector.check_many(items if same_batch else items[1:])
        by_key = {v.key: v for v in verdicts}
        assert by_key["http://a/"].status == "unique"
        assert (by_key["http://b/"].status, by_key["http://b/"].canonical) == ("duplicate", "http://a/")
    finally:
        detector.close()


def test_redact_url_hides_every_credential_and_leaves_other_urls_as_given():
    from scrapy_neardup.store import redact_url

    assert redact_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("redis://u:pw@h/0") == "redis://u:***@h/0"
    assert redact_url("redis://h/0?password=x&db=1") == "redis://h/0?password=***&db=1"
    for url in ("sqlite:///relative/s.sqlite3", "sqlite:////abs/s.sqlite3", "memory://", "redis://h:6379/0"):
        assert redact_url(url) == url


# -- recurring crawls: last-seen times, removal, expiry (every backend) -----------------------------------
@pytest.fixture
def clock(monkeypatch):
    """``time.time`` moved by ``clock.shift(seconds)``: the stores stamp records with it."""
    import time

    real = time.time

    class Clock:
        offset = 0.0

        def shift(self, seconds):
            self.offset += seconds

    c = Clock()
    monkeypatch.setattr(time, "time", lambda: real() + c.offset)
    return c


def test_lookups_of_known_keys_set_their_last_seen_time_and_get_does_not(store, clock):
    import time

    store.add("http://a/", b"a", [1])
    filed = store.get("http://a/").seen
    assert abs(filed - time.time()) < 2
    clock.shift(1000)
    assert store.get("http://a/").seen == filed  # reading a record (store show) is not a fetch
    (found,) = store.lookup_many([("http://a/", b"a", [1])])
    assert found.known is not None and store.get("http://a/").seen >= filed + 999
    clock.shift(1000)
    store.touch(["http://a/", "http://unknown/"])
    assert store.get("http://a/").seen >= filed + 1999
    assert store.get("http://unknown/") is None


def test_remove_forgets_documents_and_orphans_their_near_duplicates(store):
    store.add("http://a/", b"a", [1, 2])
    store.add("http://a-copy/", None, [], canonical="http://a/", similarity=0.9)
    store.add("http://b/", b"b", [2])
    dup = store.get("http://a-copy/")
    assert dup.canonical == "http://a/" and dup.reference == b"a" and not dup.orphaned
    assert store.remove(["http://a/", "http://never-filed/"]) == 1
    assert store.count() == 2 and store.get("http://a/") is None
    assert [c.key for c in store.lookup([1, 2])[0]] == ["http://b/"]  # stale bucket entries are skipped
    orphan = store.lookup_many([("http://a-copy/", None, [])])[0].known
    assert orphan.orphaned and orphan.canonical is None and orphan.reference is None
    assert {r.key for r in store.iter_records()} == {"http://b/"}  # exports skip orphans
    # The removed key can be filed again, as a new document, and is found through its new buckets only.
    assert store.add("http://a/", b"a2", [7])
    assert store.get("http://a/").signature == b"a2"
    assert [c.key for c in store.lookup([7])[0]] == ["http://a/"] and store.lookup([1])[0] == []
    # purge deletes the orphan (and what the removal left in the index); nothing else changes.
    assert store.purge() == 1
    assert store.get("http://a-copy/") is None and store.count() == 2
    assert sorted(c.key for c in store.lookup([1, 2, 7])[0]) == ["http://a/", "http://b/"]


def test_expire_removes_documents_not_seen_since(store, clock):
    import time

    store.add("http://old/", b"o", [1])
    store.add("http://old-copy/", None, [], canonical="http://old/", similarity=0.9)
    store.add("http://refetched/", b"r", [2])
    clock.shift(10 * 86400)
    store.lookup_many([("http://refetched/", b"r", [2])])  # fetched again ten days later
    store.add("http://new/", b"n", [3])
    assert store.expire(time.time() - 86400) == 2  # the two filed ten days ago and not fetched since
    assert sorted(r.key for r in store.iter_records()) == ["http://new/", "http://refetched/"]
    assert store.lookup([1])[0] == [] and store.count() == 2
    assert store.expire(time.time() - 86400) == 0


@pytest.mark.parametrize("store_kind", PERSISTENT_BACKENDS)
def test_removals_outlive_the_process_and_ids_are_never_reused(store_kind, tmp_path):
    s = make_store(store_kind, tmp_path)
    s.open(META)
    for i in range(5):
        s.add(f"http://{i}/", f"s{i}".encode(), [i, 100])
    assert s.remove(["http://4/", "http://3/"]) == 2  # the newest: their ids must not come back
    s.close()
    s = make_store(store_kind, tmp_path)
    s.open(META)
    assert s.count() == 3 and s.get("http://4/") is None
    s.add("http://new/", b"n", [50])
    assert sorted(c.key for c in s.lookup([100])[0]) == ["http://0/", "http://1/", "http://2/"]
    assert [c.key for c in s.lookup([3, 4, 50])[0]] == ["http://new/"]
    s.close()


def test_repoint_makes_a_group_reach_its_better_copy_and_keeps_its_members(store):
    """A group first filed under a tracking URL is re-pointed to the plain URL filed after it: the old
    canonical becomes its near-duplicate, keeps its signature (its own near-duplicates are compared with it)
    and leaves the candidates; its members name it still, marked chained."""
    store.add("http://e/a?utm=x", b"sig-t", [1, 2])
    store.add("http://e/amp/a?utm=x", None, [], canonical="http://e/a?utm=x", similarity=0.9)
    store.add("http://e/a", b"sig-p", [2, 3])
    assert store.repoint("http://e/a?utm=x", "http://e/a", 0.95)
    old = store.get("http://e/a?utm=x")
    assert old.canonical == "http://e/a" and old.similarity == pytest.approx(0.95) and not old.chained
    assert old.reference == b"sig-p"
    member = store.get("http://e/amp/a?utm=x")
    assert member.canonical == "http://e/a?utm=x" and member.chained and member.reference == b"sig-t"
    assert [c.key for c in store.lookup([1, 2, 3])[0]] == ["http://e/a"]  # the old canonical is no candidate
    # Not twice, not from a near-duplicate, not to an unknown page.
    assert not store.repoint("http://e/a?utm=x", "http://e/a", 0.95)
    assert not store.repoint("http://e/a", "http://e/amp/a?utm=x", 0.9)
    assert not store.repoint("http://e/a", "http://e/unknown", 0.9)
    assert store.get("http://e/a").canonical is None
    # A near-duplicate may still be filed under the new canonical; the chain survives purge.
    assert store.add("http://e/print/a", None, [], canonical="http://e/a", similarity=0.9)
    assert store.purge() == 0
    records = {r.key: r for r in store.iter_records()}
    assert set(records) == {"http://e/a?utm=x", "http://e/amp/a?utm=x", "http://e/a", "http://e/print/a"}
    assert records["http://e/amp/a?utm=x"].chained
    # The new canonical removed: the old one is an orphan, and so (after purge) its member.
    store.remove(["http://e/a"])
    assert store.lookup_many([("http://e/a?utm=x", None, [])])[0].known.orphaned
    assert store.purge() == 3
    assert store.count() == 0


def test_selectors_are_kept_by_name_replaced_and_cleared(store):
    """Learned templates' selectors (scrapy_neardup.engine.learned): JSON by name, the last saved kept."""
    assert store.selectors.read() == {}
    store.selectors.save({"a.com\t1f": '{"v": 1}', "b.org\t2e": '{"v": 1, "x": 2}'})
    store.selectors.save({"a.com\t1f": '{"v": 1, "state": "retired"}'})
    assert store.selectors.read() == {"a.com\t1f": '{"v": 1, "state": "retired"}', "b.org\t2e": '{"v": 1, "x": 2}'}
    store.clear()
    assert store.selectors.read() == {}


def test_selectors_are_read_whole_first_then_what_changed_since(store):
    """A crawl reads every selector once, then only those saved since its mark."""
    store.selectors.save({"a.com\t1f": '{"v": 1}'})
    everything, mark = store.selectors.read_changed(None)
    assert everything == {"a.com\t1f": '{"v": 1}'}
    assert store.selectors.read_changed(mark) == ({}, mark)
    store.selectors.save({"b.org\t2e": '{"v": 2}'})
    changed, later = store.selectors.read_changed(mark)
    assert changed == {"b.org\t2e": '{"v": 2}'} and later > mark
    assert store.selectors.read_changed(later) == ({}, later)


@pytest.mark.parametrize("store_kind", PERSISTENT_BACKENDS)
def test_selectors_outlive_the_process(store_kind, tmp_path):
    s = make_store(store_kind, tmp_path)
    s.open(META)
    s.selectors.save({"a.com\t1f": '{"v": 1}'})
    s.close()
    s = make_store(store_kind, tmp_path)
    s.open(META)
    assert s.selectors.read() == {"a.com\t1f": '{"v": 1}'}
    s.close()


def test_a_crawl_begins_with_its_first_process_and_ends_when_the_last_leaves(store_kind, tmp_path):
    """``Store.running``: when the crawl a process joins began (what "fetched in this crawl" is measured from).
    On every backend a process alone begins a crawl, and one that left leaves none running (nor on the roll)."""
    store = make_store(store_kind, tmp_path)
    store.open(META)
    try:
        assert store.running.members() == []
        assert store.running.join("a", 1000.0) == 1000.0
        store.running.beat("a", 1010.0)
        assert store.running.members() == ["a"]
        store.running.leave("a")
        assert store.running.members() == []
        assert store.running.join("a", 2000.5) == 2000.5
        store.running.leave("a")
    finally:
        store.close()


@pytest.mark.parametrize("store_kind", [k for k in STORE_BACKENDS if k.startswith("redis")])
def test_processes_crawling_on_one_shared_store_share_when_their_crawl_began(store_kind, tmp_path):
    """Processes that crawl on one Redis store at once are one crawl: a process that joins late takes the
    crawl's start; the crawl ends when the last leaves, or when the last beat of every process left is older
    than :data:`~scrapy_neardup.store.parts.STALE_SECS` (they died without leaving); clearing the store
    forgets it."""
    from scrapy_neardup.store.parts import STALE_SECS

    one, two = make_store(store_kind, tmp_path), make_store(store_kind, tmp_path)
    for store in (one, two):
        store.open(META)
    try:
        assert one.running.join("a", 1000.0) == 1000.0
        assert two.running.join("b", 1030.0) == 1000.0
        assert sorted(one.running.members()) == ["a", "b"]
        one.running.leave("a")
        assert two.running.members() == ["b"]
        two.running.beat("b", 1000.0 + STALE_SECS)
        assert one.running.join("c", 1000.0 + 1.5 * STALE_SECS) == 1000.0  # b is still crawling
        one.running.leave("c")
        two.running.leave("b")
        assert one.running.join("d", 1200.0 + 2 * STALE_SECS) == 1200.0 + 2 * STALE_SECS  # a new crawl
        # d dies without leaving: its crawl is over once its last beat is older than STALE_SECS.
        assert two.running.join("e", 1200.0 + 3 * STALE_SECS - 1) == 1200.0 + 2 * STALE_SECS
        two.running.leave("e")
        assert two.running.join("f", 1200.0 + 3 * STALE_SECS + 1) == 1200.0 + 3 * STALE_SECS + 1
        one.clear()
        assert two.running.join("g", 5000.0) == 5000.0
    finally:
        one.close()
        two.close()
