"""The Redis store against real redis-server processes: atomicity across processes, layout, faults."""

import multiprocessing
import random
import time
import uuid

import pytest
from conftest import make_store

from scrapy_neardup.engine.algorithms.minhash import MinHashLSH
from scrapy_neardup.engine.detector import Detector
from scrapy_neardup.store import StoreError, store_from_url
from scrapy_neardup.store.redis import RedisStore, pack_record, unpack_record

WORDS = [f"w{i}" for i in range(4000)]


def group_texts(groups, variants, seed=0):
    rng = random.Random(seed)
    texts = []
    for g in range(groups):
        base = [rng.choice(WORDS) for _ in range(300)]
        row = []
        for v in range(variants):
            words = list(base)
            for i in rng.sample(range(300), 3):
                words[i] = f"v{v}"
            row.append(" ".join(words))
        texts.append(row)
    return texts


def _worker(url, prefix, worker, groups, barrier, queue):
    algorithm = MinHashLSH(0.5)
    detector = Detector(algorithm, RedisStore(url, prefix=prefix))
    detector.open()
    texts = group_texts(groups, 4)
    items = []
    for g in range(groups):
        fp = algorithm.fingerprint(texts[g][worker])
        items.append((f"g{g}-w{worker}", fp.signature, fp.buckets))
    barrier.wait()
    verdicts = []
    for start in range(0, len(items), 5):  # small batches, so the processes interleave
        verdicts += detector.check_many(items[start : start + 5])
    detector.close()
    queue.put([(v.key, v.status, v.canonical) for v in verdicts])


def test_concurrent_processes_keep_exactly_one_canonical_per_group(redis_server):
    groups, workers = 40, 4
    prefix = f"race:{{{uuid.uuid4().hex}}}"
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(redis_server.url, prefix, w, groups, barrier, queue))
             for w in range(workers)]
    for p in procs:
        p.start()
    results = [v for _ in procs for v in queue.get(timeout=120)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    for g in range(groups):
        mine = [r for r in results if r[0].startswith(f"g{g}-")]
        unique = [r for r in mine if r[1] == "unique"]
        assert len(unique) == 1, mine
        assert all(r[2] == unique[0][0] for r in mine if r[1] == "duplicate"), mine
    store = RedisStore(redis_server.url, prefix=prefix)
    store._connect()
    assert store.count() == groups * workers


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
def test_batches_decide_as_one_by_one(store_kind, tmp_path):
    algorithm = MinHashLSH(0.5)
    texts = [t for row in group_texts(15, 3, seed=4) for t in row]
    random.Random(1).shuffle(texts)
    items = []
    for i, text in enumerate(texts):
        fp = algorithm.fingerprint(text)
        items.append((f"k{i}", fp.signature, fp.buckets))
    items.append(items[3])  # a key twice in one batch: the second is "seen"
    one = Detector(algorithm, make_store("memory", tmp_path, "one"))
    one.open()
    expected = [one.check_fingerprint(*item) for item in items]
    batch = Detector(algorithm, make_store(store_kind, tmp_path, "batch"))
    batch.open()
    got = batch.check_many(items)
    assert [(v.status, v.canonical) for v in got] == [(v.status, v.canonical) for v in expected]
    assert got[-1].status == "seen"


def test_record_layout_roundtrip_and_malformed_records():
    record = pack_record("http://ä.example/", b"\x01\x02\x03", 42, 0.75, seen=1_700_000_000)
    assert record[0] == 2 and len(record) == 1 + 8 + 4 + 4 + 2 + 3 + len("http://ä.example/".encode())
    assert unpack_record(record) == ("http://ä.example/", b"\x01\x02\x03", 42, 0.75, 1_700_000_000.0)
    version_1 = b"\x01" + record[1:13] + record[17:]  # as written before last-seen times: no u32
    assert unpack_record(version_1) == ("http://ä.example/", b"\x01\x02\x03", 42, 0.75, None)
    with pytest.raises(StoreError, match="malformed"):
        unpack_record(b"\x01\x00")
    with pytest.raises(StoreError, match="version 9"):
        unpack_record(b"\x09" + record[1:])


def test_all_keys_of_a_spider_share_one_cluster_slot(tmp_path):
    from redis.crc import key_slot

    store = make_store("redis", tmp_path)
    store.open({"format_version": 1})
    for i in range(20):
        store.add(f"http://x/{i}", b"s", [i * 7919, -i])
    keys = list(store.client.scan_iter(match=store.prefix.replace("{", "\\{").replace("}", "\\}") + ":*"))
    assert {k.rsplit(b":", 1)[1] for k in keys} == {b"meta", b"seq", b"keys", b"docs", b"b"}
    assert len({key_slot(k) for k in keys}) == 1
    store.close()


def test_default_prefix_has_the_spider_as_hash_tag():
    from scrapy.settings import Settings

    from scrapy_neardup import Config

    config = Config.from_settings(Settings({}))
    assert config.redis_key % {"spider": "news"} == "neardup:{news}"


def test_password_is_not_logged():
    store = store_from_url("redis://user:secret@127.0.0.1:1/0")
    assert "secret" not in store.location and "***" in store.location


def test_unreachable_redis_fails_in_bounded_time():
    from redis_server import free_port

    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", retries=2, backoff_secs=0.05, timeout_secs=0.5)
    started = time.monotonic()
    with pytest.raises(StoreError, match="unreachable after 3 tries"):
        store.open({"format_version": 1})
    assert time.monotonic() - started < 5


def test_meta_mismatch_is_refused(tmp_path):
    a = make_store("redis", tmp_path, "m")
    a.open({"format_version": 1, "num_perm": 128})
    a.add("k", b"s", [1])
    b = make_store("redis", tmp_path, "m")
    from scrapy_neardup.store import StoreMismatchError

    with pytest.raises(StoreMismatchError, match="num_perm: stored 128, configured 64"):
        b.open({"format_version": 1, "num_perm": 64})


def test_restart_keeps_acknowledged_documents(redis_server):
    store = RedisStore(redis_server.url, prefix="restart:{x}", retries=8, backoff_secs=0.1)
    store.open({"format_version": 1})
    for i in range(50):
        store.add(f"k{i}", b"sig", [i])
    redis_server.stop()
    redis_server.start()
    assert store.count() == 50  # reconnects by itself
    assert [c.key for c in store.lookup([7])[0]] == ["k7"]
    store.close()


def test_records_written_before_last_seen_times_are_read_touched_and_expired(tmp_path):
    """A store written by a version without last-seen times (records of version 1, no ``records_seen_since``):
    its records count as seen when this version first opened the store, a fetch rewrites them as version 2
    with the time, and expiry reads both kinds."""
    import time

    import redis
    from conftest import shared_redis

    server = shared_redis(tmp_path.parent)
    prefix = "old:{v1}"
    store = RedisStore(server.url, prefix=prefix)
    store.open({"format_version": 2, "algorithm": "x"})
    store.add("http://a/", b"sig-a", [1])
    store.add("http://b/", b"sig-b", [2])
    store.close()
    client = redis.Redis.from_url(server.url)
    for doc_id, raw in client.hgetall(f"{prefix}:docs").items():  # rewrite as the older version wrote them
        client.hset(f"{prefix}:docs", doc_id, b"\x01" + raw[1:13] + raw[17:])
    client.hdel(f"{prefix}:meta", "records_seen_since")
    opened_at = time.time()
    store = RedisStore(server.url, prefix=prefix)
    store.open({"format_version": 2, "algorithm": "x"})
    old = store.get("http://a/")
    assert old.signature == b"sig-a" and opened_at - 2 <= old.seen <= time.time() + 1
    store.lookup_many([("http://b/", b"sig-b", [2])])  # fetched again: rewritten as version 2
    raw_b = client.hget(f"{prefix}:docs", client.hget(f"{prefix}:keys", "http://b/"))
    assert raw_b[0] == 2 and unpack_record(raw_b)[:2] == ("http://b/", b"sig-b")
    assert client.hget(f"{prefix}:docs", client.hget(f"{prefix}:keys", "http://a/"))[0] == 1
    assert store.expire(time.time() + 10) == 2  # both kinds are read by expiry
    assert store.count() == 0
    store.close()
