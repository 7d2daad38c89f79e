"""The Redis store against real redis-server processes: atomicity across processes, layout, faults."""

import multiprocessing
import os
import random
import shutil
import time
import uuid
import zlib

import pytest
from helpers.racing import assert_racing_processes_keep_one_canonical_per_group, group_texts
from helpers.stores import expand_backends, make_store

from scrapy_neardup.engine.algorithms.minhash import MinHashLSH
from scrapy_neardup.engine.detector import Detector
from scrapy_neardup.store import Filing, StoreError, store_from_url
from scrapy_neardup.store.redis import CLUSTER_SLOTS, KeyLayout, RedisStore, pack_record, unpack_record


@pytest.mark.parametrize("read_bins_upto", [128, -1], ids=["bins read whole", "bins scanned by Redis"])
def test_concurrent_processes_keep_exactly_one_canonical_per_group(redis_server, read_bins_upto):
    assert_racing_processes_keep_one_canonical_per_group(redis_server.url, read_bins_upto=read_bins_upto)


@pytest.mark.parametrize("store_kind", expand_backends(["memory", "redis", "redis-scan"]))
def test_batches_decide_as_one_by_one(store_kind, tmp_path):
    """A batch decides as one page at a time would; on Redis with either way of reading bucket bins (whole,
    or scanned by Redis as once they are big)."""
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
    base, _, server = store_kind.partition("@")
    store = make_store(base.partition("-")[0] + (f"@{server}" if server else ""), tmp_path, "batch")
    if base == "redis-scan":
        store.read_bins_upto = -1
    batch = Detector(algorithm, store)
    batch.open()
    got = batch.check_many(items)
    assert [(v.status, v.canonical) for v in got] == [(v.status, v.canonical) for v in expected]
    assert got[-1].status == "seen"


def test_record_layout_roundtrip_and_malformed_records():
    record = pack_record("http://ä.example/", b"\x01\x02\x03", 42, 0.75, seen=1_700_000_000)
    assert record[0] == 3 and len(record) == 1 + 4 + 4 + 4 + 2 + 3 + len("http://ä.example/".encode())
    assert unpack_record(record) == ("http://ä.example/", b"\x01\x02\x03", 42, 0.75, 1_700_000_000.0, None)
    with pytest.raises(StoreError, match="too short"):
        unpack_record(b"\x03\x00")
    with pytest.raises(StoreError, match="version 2"):
        unpack_record(b"\x02" + record[1:])
    # With the digest of the page's bytes: version 4, the header as before (the scripts patch it in place).
    with_body = pack_record("http://ä.example/", b"\x01\x02\x03", 42, 0.75, seen=1_700_000_000, body=b"D" * 8)
    assert with_body[0] == 4 and with_body[1:15] == record[1:15] and len(with_body) == len(record) + 9
    assert unpack_record(with_body) == ("http://ä.example/", b"\x01\x02\x03", 42, 0.75, 1_700_000_000.0, b"D" * 8)
    with pytest.raises(StoreError, match="version 4"):
        unpack_record(with_body[:15] + b"\x20" + with_body[16:])  # a digest longer than the record holds


def test_one_spiders_keys_spread_over_groups_of_their_own_slots(tmp_path, redis_kind):
    """Buckets, keys and records sit in 64 hash-tagged groups (one slot each, spread by a cluster over its
    masters); only the four small keys of the prefix share the spider's own slot."""
    from redis.crc import key_slot

    store = make_store("redis", tmp_path, redis_kind=redis_kind)
    store.open({"format_version": 1})
    rng = random.Random(3)
    for i in range(300):
        store.add(f"http://x/{i}", b"s" * 16, [rng.getrandbits(63) for _ in range(8)])
    base = store.prefix.replace("{", "").replace("}", "")
    keys = [
        k
        for k in store.client.scan_iter(count=10_000)
        if k.startswith((store.prefix.encode(), b"{" + base.encode() + b":"))
    ]
    own = [k for k in keys if k.startswith(store.prefix.encode() + b":")]
    assert {k.rsplit(b":", 1)[1] for k in own} == {b"meta", b"seq", b"count"}  # P:flight is empty between batches
    assert len({key_slot(k) for k in own}) == 1
    grouped = [k for k in keys if k not in own]
    kinds = {k.split(b"}:")[1][:1] for k in grouped}
    assert kinds == {b"b", b"k", b"r"}, (kinds, sorted(k for k in grouped if k.split(b"}:")[1][:1] not in b"bkr")[:5])
    assert len({k.split(b"}:")[0] for k in grouped}) == 64  # every group used
    # Group g's keys sit at the start of the g-th 64th of the slots, whatever the (random) prefix.
    tags = {tag.encode(): g for g, tag in enumerate(store.layout.tags)}
    by_group = {tags[k[: k.index(b"}") + 1]]: key_slot(k) for k in grouped}
    assert sorted(by_group) == list(range(64))
    assert all(0 <= slot - g * CLUSTER_SLOTS // 64 < 16 for g, slot in by_group.items()), by_group
    assert store.count() == 300
    store.close()


@pytest.mark.parametrize("masters", [2, 3, 5, 7])
def test_masters_serving_runs_of_slots_serve_as_many_groups_as_their_share(masters):
    """What ``redis-cli --cluster create`` makes: each master serves one run of slots. Every master holds its
    share of the 64 groups rounded up or down, for any prefix (layout 3's tags put 30/36/34% on three)."""
    from redis.crc import key_slot

    for prefix in ("neardup:{books}", "neardup:{news}", f"test:{{{uuid.uuid4().hex}}}"):
        tags = KeyLayout(prefix).tags
        starts = [m * CLUSTER_SLOTS // masters for m in range(1, masters)]
        held = [0] * masters
        for tag in tags:
            held[sum(key_slot(f"{tag}:r:x".encode()) >= s for s in starts)] += 1
        assert all(abs(h - 64 / masters) < 1 for h in held), (prefix, held)


def test_default_prefix_has_the_spider_as_hash_tag():
    from scrapy.settings import Settings

    from scrapy_neardup import Config

    config = Config.from_settings(Settings({}))
    assert config.redis_key % {"spider": "news"} == "neardup:{news}"


def test_password_is_not_logged():
    store = store_from_url("redis://user:secret@127.0.0.1:1/0")
    assert "secret" not in store.location and "***" in store.location


def test_unreachable_redis_fails_in_bounded_time():
    from helpers.redis_server import free_port

    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", retries=2, backoff_secs=0.05, timeout_secs=0.5)
    started = time.monotonic()
    with pytest.raises(StoreError, match="unreachable after 3 tries"):
        store.open({"format_version": 1})
    assert time.monotonic() - started < 5


def test_meta_mismatch_is_refused(tmp_path, redis_kind):
    a = make_store("redis", tmp_path, "m", redis_kind=redis_kind)
    a.open({"format_version": 1, "num_perm": 128})
    a.add("k", b"s", [1])
    b = make_store("redis", tmp_path, "m", redis_kind=redis_kind)
    from scrapy_neardup.store import StoreMismatchError

    with pytest.raises(StoreMismatchError, match="num_perm: stored 128, configured 64"):
        b.open({"format_version": 1, "num_perm": 64})


def _file_texts(detector, algorithm, keys):
    """Check-and-insert a distinct text per key (the same key, the same text, in every process: a seed from
    ``hash`` of the key moved with the process's hash seed, and about one in 2,400 gave two of 50 keys one
    text)."""
    texts = [group_texts(1, 1, seed=zlib.crc32(key.encode()))[0] for key in keys]
    items = []
    for key, row in zip(keys, texts):
        fp = algorithm.fingerprint(row[0])
        items.append((key, fp.signature, fp.buckets))
    return detector.check_many(items)


def test_restart_keeps_acknowledged_documents_and_the_scripts_come_back(redis_server):
    """Redis 7+ and Valkey keep no scripts across a restart (6.2 kept them in its AOF): the store loads them
    again on the NOSCRIPT error, which redis-py raises as NoScriptError without the code in its text."""
    algorithm = MinHashLSH(0.5)
    store = RedisStore(redis_server.url, prefix="restart:{x}", retries=8, backoff_secs=0.1)
    detector = Detector(algorithm, store)
    detector.open()
    before = _file_texts(detector, algorithm, [f"k{i}" for i in range(50)])
    assert {v.status for v in before} == {"unique"}
    redis_server.stop()
    redis_server.start()
    assert store.count() == 50  # reconnects by itself
    after = _file_texts(detector, algorithm, [f"n{i}" for i in range(20)])  # the scripts run again
    assert {v.status for v in after} == {"unique"} and store.count() == 70
    again = _file_texts(detector, algorithm, [f"k{i}" for i in range(50)])
    assert {v.status for v in again} == {"seen"}  # every acknowledged document is still there
    detector.close()


@pytest.mark.parametrize("fault", ["script flush", "client kill", "restart without persistence", "kill -9 with aof"])
def test_the_store_rides_out_each_fault_and_checks_every_document_after_it(redis_server, fault):
    algorithm = MinHashLSH(0.5)
    store = RedisStore(redis_server.url, prefix=f"fault:{{{uuid.uuid4().hex}}}", retries=8, backoff_secs=0.1)
    detector = Detector(algorithm, store)
    detector.open()
    _file_texts(detector, algorithm, [f"a{i}" for i in range(30)])
    if fault == "script flush":
        redis_server.cli("SCRIPT", "FLUSH")
    elif fault == "client kill":
        assert int(redis_server.cli("CLIENT", "KILL", "TYPE", "normal").strip() or 0) >= 1
    elif fault == "restart without persistence":
        redis_server.stop()
        redis_server.persistent = False
        for name in os.listdir(redis_server.directory):  # what the AOF kept is gone as well
            path = os.path.join(redis_server.directory, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        redis_server.start()
    else:
        redis_server.kill()
        redis_server.start()
    if fault == "restart without persistence":
        # The index is gone with the server's memory: checking goes on in an empty one, the documents met
        # again are filed anew, and the next open finds a store of the same parameters.
        after = _file_texts(detector, algorithm, [f"a{i}" for i in range(30)])
        assert [v.status for v in after] == ["unique"] * 30 and store.count() == 30
        detector.close()
        reopened = Detector(algorithm, RedisStore(redis_server.url, prefix=store.prefix))
        reopened.open()
        assert reopened.store.count() == 30
        reopened.close()
        return
    after = _file_texts(detector, algorithm, [f"b{i}" for i in range(30)])
    assert [v.status for v in after] == ["unique"] * 30
    assert {v.status for v in _file_texts(detector, algorithm, [f"a{i}" for i in range(30)])} == {"seen"}
    assert store.count() == 60
    # Redis 6.2 replays its scripts from the AOF after a restart; Redis 7+ and Valkey do not.
    kept_by_aof = fault == "kill -9 with aof" and redis_server.kind.name.startswith("redis-6.")
    assert store.scripts_reloaded == (0 if fault == "client kill" or kept_by_aof else 1)
    detector.close()


def test_errors_are_told_by_their_class_not_their_text():
    import redis.exceptions as errors

    from scrapy_neardup.store.redis import RedisErrors

    classify = RedisErrors(errors).classify
    assert classify(errors.NoScriptError("No matching script. Please use EVAL."), False) == "noscript"
    assert classify(errors.AuthenticationError("invalid username-password pair"), False) == "refused"
    assert classify(errors.NoPermissionError("this user has no permissions"), False) == "refused"
    assert classify(errors.BusyLoadingError("Redis is loading the dataset in memory"), False) == "unreachable"
    assert classify(errors.ReadOnlyError("You can't write against a read only replica."), False) == "readonly"
    assert classify(errors.ReadOnlyError("You can't write against a read only replica."), True) == "transient"
    for cls in (
        errors.ClusterDownError,
        errors.TryAgainError,
        errors.MovedError,
        errors.AskError,
        errors.MasterDownError,
    ):
        assert (
            classify(cls("3999 127.0.0.1:6381" if cls in (errors.MovedError, errors.AskError) else "x"), True)
            == "transient"
        )
    assert classify(errors.ConnectionError("Connection reset by peer"), False) == "unreachable"
    assert classify(errors.TimeoutError("Timeout reading from socket"), False) == "unreachable"
    assert classify(errors.ResponseError("BUSY Redis is busy running a script."), False) == "transient"
    assert classify(errors.ResponseError("WRONGTYPE Operation against a key"), False) == "fatal"
    # The old text test would have read these as NOSCRIPT / credentials: not so.
    assert classify(errors.ResponseError("ERR NOSCRIPT-like text in a value"), False) == "fatal"


def test_a_store_of_another_layout_is_refused_with_what_to_do(tmp_path, redis_kind):
    """A store written by a development version (no layout recorded, or layout 3) is refused at open in one
    message naming NEARDUP_RESET; nothing is changed."""
    import redis
    from helpers.stores import shared_redis

    server = shared_redis(tmp_path.parent, redis_kind)
    client = redis.Redis.from_url(server.url)
    for layout in (None, '{"version": 3, "group_bits": 6, "bucket_bin_bits": 12, "key_bin_bits": 8}'):
        prefix = f"old:{{{uuid.uuid4().hex}}}"
        client.hset(
            f"{prefix}:meta",
            mapping={"format_version": "2", "algorithm": '"x"', **({"redis_layout": layout} if layout else {})},
        )
        client.hset(f"{prefix}:keys", "http://a/", 1)
        store = RedisStore(server.url, prefix=prefix)
        with pytest.raises(StoreError, match="NEARDUP_RESET"):
            store.open({"format_version": 2, "algorithm": "x"})
        assert client.hlen(f"{prefix}:keys") == 1
    client.close()


def _file_and_die(url, prefix, signature, buckets):
    """A writer that dies in the middle of a batch: ids given, key claimed, buckets appended, no record."""
    import os
    import signal

    from scrapy_neardup.store.base import Filing

    store = RedisStore(url, prefix=prefix)
    store.open({"format_version": 1})
    store.lease_secs = 1.0
    first, lower = store._meta_script("alloc", 1, int(time.time() * 1000), 1000)
    store._write = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # dies before its records
    store._file([Filing("http://a/", signature, buckets)], int(first), [])


def test_a_writer_killed_mid_batch_holds_others_up_to_its_lease_and_leaves_nothing_in_the_way(redis_server):
    """A process SIGKILLed between its claims and its records: the next writer's lookup finds its ids
    without records and waits for its batch until the lease runs out, marks it void and goes on; the dead
    claim on the key is taken over and its bucket entries are skipped, then purged."""
    prefix = f"lease:{{{uuid.uuid4().hex}}}"
    algorithm = MinHashLSH(0.5)
    a, b = (algorithm.fingerprint(" ".join(row[0].split()[:200])) for row in group_texts(2, 1, seed=9))
    ctx = multiprocessing.get_context("fork")
    dead = ctx.Process(target=_file_and_die, args=(redis_server.url, prefix, a.signature, a.buckets))
    dead.start()
    dead.join(30)
    assert dead.exitcode == -9
    store = RedisStore(redis_server.url, prefix=prefix)
    store.open({"format_version": 1})
    started = time.monotonic()
    detector = Detector(algorithm, store)
    verdicts = detector.check_many([("http://a/", a.signature, a.buckets), ("http://b/", b.signature, b.buckets)])
    waited = time.monotonic() - started
    assert 0.3 <= waited < 10  # held up by the dead batch until its 1 s lease ran out, not forever
    assert [v.status for v in verdicts] == ["unique", "unique"] and store.get("http://a/").signature == a.signature
    flight = store.client.hgetall(f"{prefix}:flight")
    assert list(flight.values()) and all(v.startswith(b"void") for v in flight.values())
    assert store.count() == 2

    def entries_of_a():
        groups, bins, rests = store.layout.buckets(a.buckets)
        found = 0
        for g, n, rest in zip(groups.tolist(), bins.tolist(), rests):
            value = store.client.get(store.layout.bin_name(g, b"b", n)) or b""
            found += sum(value[i : i + 3] == int(rest).to_bytes(4, "little")[:3] for i in range(0, len(value), 7))
        return found

    # The dead batch's (its lookup waited for that batch, found it dead, and took its claim over) and its own.
    assert entries_of_a() == 2 * len(a.buckets)
    store.purge()
    assert entries_of_a() == len(a.buckets)
    assert [c.key for c in store.lookup(a.buckets)[0]] == ["http://a/"]
    store.close()


def test_a_new_store_takes_its_bucket_bins_from_the_setting_and_an_existing_one_keeps_its_own(tmp_path, redis_kind):
    from helpers.stores import shared_redis

    server = shared_redis(tmp_path.parent, redis_kind)
    prefix = f"bins:{{{uuid.uuid4().hex}}}"
    small = RedisStore(server.url, prefix=prefix, bucket_bins=4096)
    small.open({"format_version": 1})
    small.add("http://a/", b"sig-a", [1, 2, 3])
    assert small.layout.bucket_bin_bits == 6
    small.close()
    big = RedisStore(server.url, prefix=prefix, bucket_bins=1 << 20)
    big.open({"format_version": 1})
    assert big.layout.bucket_bin_bits == 6  # the store's own, as recorded
    assert [c.key for c in big.lookup([2])[0]] == ["http://a/"]
    big.close()


def test_a_filing_overtaken_by_a_near_duplicate_filed_since_its_lookup_is_stale_and_then_found(redis_server):
    """Check-and-insert across writers, step by step: a page looked up before another writer filed its
    near-duplicate is refused (STALE), whether its appends found the other's bucket entries at once or only
    after waiting for a batch with lower ids still in flight; checked again, it is that page's duplicate."""
    import threading

    from scrapy_neardup.store.base import Added, Filing, Query

    prefix = f"overtaken:{{{uuid.uuid4().hex}}}"
    algorithm = MinHashLSH(0.5)
    (a, b), (c, d) = ([algorithm.fingerprint(t) for t in row] for row in group_texts(2, 2, seed=5))
    mine, other = (RedisStore(redis_server.url, prefix=prefix) for _ in range(2))
    for store in (mine, other):
        store.open({"format_version": 1})
    steps: list[str] = []
    scripts = mine._scripts
    mine._scripts = lambda name, calls: steps.append(name) or scripts(name, calls)  # type: ignore[method-assign]
    try:
        # Appends find the other's entries: it filed b after this store looked a up.
        looked = mine.lookup_many([Query("http://a/", a.signature, a.buckets)])[0]
        assert looked.known is None and not looked.candidates
        assert other.add_many([Filing("http://b/", b.signature, b.buckets)]) == [Added.FILED]
        assert mine.add_many([Filing("http://a/", a.signature, a.buckets, token=looked.token)]) == [Added.STALE]
        assert "delta" not in steps

        # A batch with lower ids, in flight and not yet appended when this one got its ids: waited for, then
        # the buckets are read again since the lookup.
        looked = mine.lookup_many([Query("http://c/", c.signature, c.buckets)])[0]
        assert not looked.candidates
        now = int(time.time() * 1000)
        first_lower, _ = other._meta_script("alloc", 1, now, 60_000)
        first, lower = mine._meta_script("alloc", 1, now, 60_000)
        assert [int(x) for x in lower] == [int(first_lower)]
        late = threading.Timer(0.3, other._file, ([Filing("http://d/", d.signature, d.buckets)], int(first_lower), []))
        late.start()
        verdict = mine._file(
            [Filing("http://c/", c.signature, c.buckets, token=looked.token)], int(first), [int(first_lower)]
        )
        late.join()
        assert verdict == [Added.STALE] and "delta" in steps
        mine._meta_script("commit", first, 0)

        detector = Detector(algorithm, mine)
        again = detector.check_many([("http://a/", a.signature, a.buckets), ("http://c/", c.signature, c.buckets)])
        assert [(v.status, v.canonical) for v in again] == [("duplicate", "http://b/"), ("duplicate", "http://d/")]
    finally:
        mine.close()
        other.close()


def test_rounds_that_another_writer_overtakes_each_time_pause_longer_and_longer_then_decide(redis_server):
    """A check-and-insert whose rounds another writer overtakes each time (it files a page in the same buckets
    between the lookup and the filing: refused, STALE, on the real server) pauses after each fruitless round,
    a random while under a bound that doubles, so that writers colliding in step fall out of step; once the
    other writer stops, the page is decided. Writers that never stop give up after MAX_RETRIES rounds."""
    from scrapy_neardup.engine import detector as detector_module
    from scrapy_neardup.store.base import Added

    prefix = f"backoff:{{{uuid.uuid4().hex}}}"
    algorithm = MinHashLSH(0.5)
    (page,), *others = ([algorithm.fingerprint(t) for t in row] for row in group_texts(7, 1, seed=11))
    mine, other = (RedisStore(redis_server.url, prefix=prefix) for _ in range(2))
    for store in (mine, other):
        store.open({"format_version": 1})
    rivals = iter(range(5))
    add_many = mine.add_many

    def overtaken(filings):
        turn = next(rivals, None)
        if turn is not None:  # another writer files an unrelated page in this page's buckets first
            rival = Filing(f"http://rival/{turn}", others[turn % 5][0].signature, filings[0].buckets)
            assert other.add_many([rival]) == [Added.FILED]
        return add_many(filings)

    mine.add_many = overtaken  # type: ignore[method-assign]
    detector = Detector(algorithm, mine)
    pauses: list[float] = []
    detector.pause = pauses.append
    try:
        verdict = detector.check_fingerprint("http://a/", page.signature, page.buckets)
        assert (verdict.status, verdict.canonical) == ("unique", "http://a/")
        assert len(pauses) == 5
        first, most = detector_module.FIRST_BACKOFF_SECS, detector_module.MAX_BACKOFF_SECS
        assert all(0 <= p <= min(most, first * 2 ** (i + 1)) for i, p in enumerate(pauses)), pauses
        assert len(set(pauses)) == 5  # random, not in step with another writer's
        rivals = iter(range(5, 10**6))
        pauses.clear()
        with pytest.raises(StoreError, match="kept colliding"):
            detector.check_fingerprint("http://b/", others[5][0].signature, page.buckets)
        assert len(pauses) == detector_module.MAX_RETRIES - 1
    finally:
        mine.close()
        other.close()


def _parts_shared(one: RedisStore, two: RedisStore) -> None:
    """What one process saves (selectors) or adds (URL rules' counts), another reads as changed since its
    mark, once; a store cleared and written to again is read whole."""
    one.selectors.save({"a.com\t1f": '{"v": 1}'})
    first, mark = two.selectors.read_changed(None)
    assert first == {"a.com\t1f": '{"v": 1}'} and mark == 1
    one.selectors.save({"b.org\t2e": '{"v": 2}', "a.com\t1f": '{"v": 1, "state": "retired"}'})
    one.selectors.save({"c.net\t3d": '{"v": 3}'})
    changed, mark = two.selectors.read_changed(mark)
    assert changed == {"a.com\t1f": '{"v": 1, "state": "retired"}', "b.org\t2e": '{"v": 2}', "c.net\t3d": '{"v": 3}'}
    assert mark == 3 and two.selectors.read_changed(mark) == ({}, 3)
    two.selectors.save({"c.net\t3d": '{"v": 4}'})
    assert one.selectors.read_changed(3) == ({"c.net\t3d": '{"v": 4}'}, 4)
    # The URL rules' counts alike: what each process added, read by the other with its totals.
    one.rules.add({("a.com", "param:utm_source"): (3, 0)})
    counts, mark = two.rules.read_changed(None)
    assert counts == {("a.com", "param:utm_source"): (3, 0)}
    two.rules.add({("a.com", "param:utm_source"): (1, 1), ("b.org", "prefix:amp"): (0, 0)})
    one.rules.add({("c.net", "www"): (2, 0)})
    changed, later = one.rules.read_changed(mark)
    assert changed == {("a.com", "param:utm_source"): (4, 1), ("b.org", "prefix:amp"): (0, 0), ("c.net", "www"): (2, 0)}
    assert later == mark + 2 and two.rules.read_changed(later) == ({}, later)
    one.clear()
    one.selectors.save({"d.io\t4c": '{"v": 5}'})
    assert two.selectors.read_changed(4) == ({"d.io\t4c": '{"v": 5}'}, 1)  # numbered anew: read whole
    one.rules.add({("d.io", "slash"): (1, 0)})
    assert two.rules.read_changed(later) == ({("d.io", "slash"): (1, 0)}, 1)


def test_selectors_and_rule_counts_saved_by_one_process_are_read_by_another_as_changed(tmp_path, redis_kind):
    """On each server kind of the matrix (the script is sent whole: a server that lost its script cache needs
    nothing)."""
    from helpers.stores import shared_redis

    _parts_shared_by_two(shared_redis(tmp_path.parent, redis_kind).url)


def test_selectors_and_rule_counts_changed_on_a_redis_cluster(shared_cluster):
    """The selectors, the rules' counts and their numbering live in the prefix's slot: the scripts that write
    them run there."""
    _parts_shared_by_two(shared_cluster.url)


def _two_stores(url: str, name: str) -> tuple[RedisStore, RedisStore]:
    """Two stores (two processes) of one fresh prefix of ``url``, open."""
    prefix = f"{name}:{{{uuid.uuid4().hex}}}"
    one, two = RedisStore(url, prefix=prefix), RedisStore(url, prefix=prefix)
    for store in (one, two):
        store.open({"format_version": 1, "algorithm": "minhash"})
    return one, two


def _parts_shared_by_two(url: str) -> None:
    """:func:`_parts_shared` on two stores (two processes) of one prefix of ``url``."""
    one, two = _two_stores(url, "sel")
    try:
        _parts_shared(one, two)
    finally:
        one.close()
        two.close()


def test_url_rule_counts_on_a_redis_cluster(shared_cluster):
    """The URL rules' counts of a spider live in one hash of its key prefix's slot: processes add to it on a
    cluster as on one server."""
    url = shared_cluster.url
    one, two = _two_stores(url, "rules")
    one.rules.add({("a.com", "param:utm_source"): (4, 0)})
    two.rules.add({("a.com", "param:utm_source"): (1, 1), ("b.org", "prefix:amp"): (0, 0)})
    assert one.rules.read() == {("a.com", "param:utm_source"): (5, 1), ("b.org", "prefix:amp"): (0, 0)}
    for store in (one, two):
        store.close()


def test_a_group_is_re_pointed_and_books_kept_on_a_redis_cluster(shared_cluster):
    """Re-pointing changes the former canonical's record in its group's slot, wherever the cluster keeps it;
    another process sees the group's page through it. The books of crawls live in the prefix's slot."""
    from scrapy_neardup.store.base import group_of
    from scrapy_neardup.store.books import CrawlBooks

    url = shared_cluster.url
    one, two = _two_stores(url, "repoint")
    for i in range(40):  # groups on every master
        one.add(f"http://a.com/{i}?utm_source=x", f"sig-t{i}".encode(), [i * 7919 + 1, i * 7919 + 2])
        one.add(f"http://a.com/amp/{i}", None, [], canonical=f"http://a.com/{i}?utm_source=x", similarity=0.9)
        one.add(f"http://a.com/{i}", f"sig-p{i}".encode(), [i * 7919 + 2, i * 7919 + 3])
        assert one.repoint(f"http://a.com/{i}?utm_source=x", f"http://a.com/{i}", 0.95)
    for i in range(40):
        assert group_of(two, f"http://a.com/amp/{i}") == f"http://a.com/{i}"
        assert [c.key for c in two.lookup([i * 7919 + 1, i * 7919 + 2])[0]] == [f"http://a.com/{i}"]
    assert not two.repoint("http://a.com/0?utm_source=x", "http://a.com/0", 0.95)  # done already
    one.books.add(CrawlBooks(1.0, 2.0, "one", checked=3))
    two.books.add(CrawlBooks(1.5, 2.5, "two", checked=4))
    assert [b.process for b in one.books.read()] == ["one", "two"]
    for store in (one, two):
        store.close()


def test_body_digests_on_a_redis_cluster_survive_touch_repoint_and_expire(shared_cluster):
    """Records with a body digest (version 4) in every master's groups: another process reads the digests;
    the scripts that patch records in place (last seen, re-pointing) and expiry read their header as before."""
    import time

    url = shared_cluster.url
    one, two = _two_stores(url, "bodies")
    for i in range(40):  # groups on every master
        body = i.to_bytes(8, "little")
        one.add_many([Filing(f"http://a.com/{i}?utm=x", f"sig-t{i}".encode(), [i * 7919 + 1], body=body)])
        one.add_many([Filing(f"http://a.com/{i}", f"sig-p{i}".encode(), [i * 7919 + 3], body=body[::-1])])
        assert one.repoint(f"http://a.com/{i}?utm=x", f"http://a.com/{i}", 0.95)
    filed = time.time()
    time.sleep(2.1)  # last-seen times are whole seconds
    two.touch([f"http://a.com/{i}" for i in range(40)])
    for i in range(40):
        body = i.to_bytes(8, "little")
        tracked, canonical = two.get(f"http://a.com/{i}?utm=x"), two.get(f"http://a.com/{i}")
        assert (tracked.canonical, tracked.body, canonical.body) == (f"http://a.com/{i}", body, body[::-1])
        assert canonical.seen >= filed + 1 > tracked.seen
    assert two.expire(filed + 1) == 40  # the untouched tracking copies, read through their headers
    assert all(two.get(f"http://a.com/{i}").body == i.to_bytes(8, "little")[::-1] for i in range(40))
    for store in (one, two):
        store.close()


def test_processes_on_a_redis_cluster_join_one_crawl(shared_cluster):
    """The crawl running on a store lives in its prefix's slot: a process joining late on another connection
    takes its start; once the last has left, the next begins a crawl of its own."""
    one, two = _two_stores(shared_cluster.url, "running")
    try:
        assert one.running.join("a", 1000.0) == 1000.0
        assert two.running.join("b", 1002.5) == 1000.0
        one.running.beat("a", 1010.0)
        one.running.leave("a")
        two.running.leave("b")
        assert two.running.join("c", 1020.0) == 1020.0
    finally:
        one.close()
        two.close()
