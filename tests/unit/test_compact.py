"""The compact structures behind the in-memory store, against plain dicts and lists."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_neardup.store.compact import BlobArray, LevelIndex
from scrapy_neardup.store.memory import MemoryStore


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3), max_size=6), max_size=80),
    st.integers(1, 9),
)
def test_level_index_is_a_multimap(docs, buffer_pairs):
    index = LevelIndex(buffer_pairs=buffer_pairs)
    expected: dict[int, list[int]] = {}
    for doc, keys in enumerate(docs):
        index.add(keys, doc)
        for key in keys:
            expected.setdefault(key, []).append(doc)
    queries = sorted({k for keys in docs for k in keys} | {0, 5, -(2**63)})
    positions, ids = index.lookup(np.array(queries, dtype=np.int64))
    got: dict[int, list[int]] = {}
    for pos, doc in zip(positions.tolist(), ids.tolist()):
        got.setdefault(queries[pos], []).append(doc)
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in expected.items()}
    assert len(index) == sum(len(keys) for keys in docs)


def test_level_index_keeps_few_levels():
    index = LevelIndex(buffer_pairs=8)
    for doc in range(5000):
        index.add([doc % 977, 10_000 + doc], doc)
    assert len(index._levels) <= 12  # geometric sizes: O(log n) levels
    positions, ids = index.lookup(np.array([5, 976], dtype=np.int64))
    assert sorted(ids[positions == 0].tolist()) == sorted({5, *range(5, 5000, 977)})


def test_blob_array():
    blobs = BlobArray()
    assert [blobs.append(b) for b in (b"abc", b"", "é".encode())] == [0, 1, 2]
    assert [blobs[i] for i in range(len(blobs))] == [b"abc", b"", "é".encode()]


def test_memory_store_batch_lookup_sees_documents_filed_earlier_in_the_batch():
    store = MemoryStore()
    store.open({"format_version": 1})
    store.add("http://old/", b"old", [1, 2])
    found = store.lookup_many(
        [("http://a/", b"a", [7, 8]), ("http://b/", b"b", [8, 2]), ("http://a/", b"a", [7]), ("http://c/", b"c", [9])],
        file_alone=True,
    )
    assert found[0].filed
    assert sorted(c.key for c in found[1].candidates) == ["http://a/", "http://old/"]
    assert found[2].known is not None and found[2].known.key == "http://a/"
    assert found[3].filed
    assert store.count() == 3  # old, a, c; b has candidates to verify


def test_level_index_with_32_bit_keys_finds_every_true_key():
    index = LevelIndex(buffer_pairs=16, key_bits=32)
    keys = np.random.default_rng(2).integers(-(2**63), 2**63 - 1, size=500, dtype=np.int64)
    for doc, key in enumerate(keys):
        index.add([key], doc)
    collider = np.int64(keys[0] ^ (1 << 40))  # same low 32 bits as keys[0]
    positions, ids = index.lookup(np.array([keys[7], collider], dtype=np.int64))
    assert 7 in ids[positions == 0].tolist()
    assert 0 in ids[positions == 1].tolist()  # a spurious candidate, for the caller to verify


def test_level_index_answers_a_page_and_a_batch_alike():
    """A page's few keys are looked up key by key in the write buffer, a large batch with the buffer made a
    level: the same pairs either way, whatever part of the index holds them."""
    rng = np.random.default_rng(5)
    index = LevelIndex(buffer_pairs=64, key_bits=32)
    keys = rng.integers(0, 400, size=(1000, 5), dtype=np.int64)  # few distinct keys: many ids a key
    for doc, page in enumerate(keys):
        index.add(page, doc)
        if doc % 97 == 0:  # pages looked up while the buffer holds part of the index
            one, ids = index.lookup(page)
            for position, key in enumerate(page.tolist()):
                expected = [d for d in range(doc + 1) for k in keys[d].tolist() if k == key]
                assert sorted(ids[one == position].tolist()) == expected
    batch = np.arange(0, 400, dtype=np.int64)
    positions, ids = index.lookup(batch)
    for position in range(0, 400, 37):
        single_positions, single_ids = index.lookup(batch[position : position + 1])
        assert sorted(ids[positions == position].tolist()) == sorted(single_ids.tolist())
        assert sorted(single_ids.tolist()) == [d for d in range(1000) for k in keys[d].tolist() if k == position]


def test_level_index_buffer_leaves_the_collector_nothing_to_visit():
    """A crawl keeps thousands of keys in the write buffer: once collected, none of them holds an object the
    garbage collector goes on visiting (an id alone is an int, several a tuple of ints)."""
    import gc

    index = LevelIndex(buffer_pairs=10_000, key_bits=32)
    keys = np.random.default_rng(7).integers(0, 3_000, size=(200, 29), dtype=np.int64)  # repeated keys too
    for doc, page in enumerate(keys):
        index.add(page, doc)
    held = list(index._buffer.values())
    assert any(isinstance(ids, tuple) for ids in held) and any(isinstance(ids, int) for ids in held)
    gc.collect()
    assert not any(gc.is_tracked(ids) for ids in held)
    positions, ids = index.lookup(keys[3])
    assert 3 in ids.tolist() and len(positions) == len(ids)
