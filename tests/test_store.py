"""The store contract, run against every backend."""

import numpy as np
import pytest

from conftest import PERSISTENT_BACKENDS, make_store
from scrapy_neardup.store import StoreMismatchError, store_from_url, sqlite_path
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
    from scrapy_neardup.engine.algorithms import MinHashLSH
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
