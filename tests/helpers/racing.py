"""Processes that file copies of one text into one Redis store at the same instant: exactly one must end
canonical (check-and-insert is atomic)."""

from __future__ import annotations

import multiprocessing
import random
import uuid

from scrapy_neardup.engine.algorithms.minhash import MinHashLSH
from scrapy_neardup.engine.detector import Detector
from scrapy_neardup.store.redis import RedisStore

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


def _worker(url, prefix, worker, groups, barrier, queue, read_bins_upto):
    algorithm = MinHashLSH(0.5)
    store = RedisStore(url, prefix=prefix)
    store.read_bins_upto = read_bins_upto
    detector = Detector(algorithm, store)
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


def assert_racing_processes_keep_one_canonical_per_group(url, prefix=None, groups=40, workers=4, read_bins_upto=128):
    """``workers`` processes file one copy each of ``groups`` texts at the same instant, in small batches so
    that they interleave: each text ends with exactly one canonical, the other copies its near-duplicates.
    ``read_bins_upto`` -1: the processes' lookups let Redis scan the bins (as for a big store)."""
    prefix = prefix or f"race:{{{uuid.uuid4().hex}}}"
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(workers), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(url, prefix, w, groups, barrier, queue, read_bins_upto))
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    results = [v for _ in procs for v in queue.get(timeout=180)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    for g in range(groups):
        mine = [r for r in results if r[0].startswith(f"g{g}-")]
        unique = [r for r in mine if r[1] == "unique"]
        assert len(unique) == 1, mine
        assert all(r[2] == unique[0][0] for r in mine if r[1] == "duplicate"), mine
    store = RedisStore(url, prefix=prefix)
    store.connect()
    assert store.count() == groups * workers
    store.close()
