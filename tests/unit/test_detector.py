import random
import time

import pytest
from helpers.stores import make_store

from scrapy_neardup.engine.algorithms.minhash import MinHashLSH
from scrapy_neardup.engine.algorithms.simhash import SimHashHamming
from scrapy_neardup.engine.detector import Detector
from scrapy_neardup.store import StoreMismatchError

WORDS = [f"word{i}" for i in range(5000)]


def article(seed, n=300):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def edit(text, changes, seed=0):
    rng = random.Random(seed)
    words = text.split()
    for i in rng.sample(range(len(words)), changes):
        words[i] = "edited"
    return " ".join(words)


@pytest.fixture(params=["minhash", "simhash"])
def algorithm(request):
    if request.param == "minhash":
        return MinHashLSH(threshold=0.5, num_perm=128)
    return SimHashHamming(max_distance=8, shingle_size=1)


def test_unique_duplicate_seen(algorithm, store_kind, tmp_path):
    detector = Detector(algorithm, make_store(store_kind, tmp_path))
    detector.open()
    text = article(1)
    first = detector.check("http://a/", text)
    assert (first.status, first.canonical) == ("unique", "http://a/")
    copy = detector.check("http://mirror/a", edit(text, 2))
    assert copy.status == "duplicate" and copy.canonical == "http://a/" and copy.similarity >= algorithm.threshold
    assert copy.is_duplicate
    other = detector.check("http://b/", article(2))
    assert other.status == "unique"
    again = detector.check("http://a/", text)
    assert again.status == "seen" and again.canonical == "http://a/" and not again.is_duplicate
    again_copy = detector.check("http://mirror/a", text)
    assert again_copy.status == "seen" and again_copy.canonical == "http://a/" and again_copy.is_duplicate
    detector.close()


def test_near_is_found_far_is_not(algorithm):
    detector = Detector(algorithm, make_store("memory", None))
    detector.open()
    detector.check("orig", article(10, 600))
    # Ordinal: a 1% edit is a duplicate, a different article is not.
    assert detector.check("near", edit(article(10, 600), 6)).status == "duplicate"
    assert detector.check("far", article(11, 600)).status == "unique"


def test_verdict_is_the_most_similar_canonical():
    algorithm = MinHashLSH(threshold=0.2)
    detector = Detector(algorithm, make_store("memory", None))
    detector.open()
    base = article(20, 400)
    a, b = edit(base, 40, seed=1), edit(base, 40, seed=2)
    assert detector.check("a", a).status == "unique"
    detector.check("x", article(21, 400))
    probe = edit(b, 3, seed=3)
    sim_a = algorithm.similarity(algorithm.fingerprint(probe).signature, algorithm.fingerprint(a).signature)
    assert detector.check("probe-a", probe).canonical == "a"  # only "a" is filed yet
    assert detector.check("b", b).status == "duplicate"  # b ~ a as well: recorded, not indexed
    detector2 = Detector(algorithm, make_store("memory", None))
    detector2.open()
    detector2.check("a", a)
    detector2.store.add("b", algorithm.fingerprint(b).signature, algorithm.fingerprint(b).buckets)
    verdict = detector2.check("probe", probe)
    assert verdict.canonical == "b" and verdict.similarity > sim_a >= 0.2


def test_fingerprints_are_reproducible_in_another_store(tmp_path):
    path = tmp_path / "s.sqlite3"
    from scrapy_neardup.store import SqliteStore

    d1 = Detector(MinHashLSH(0.5), SqliteStore(str(path)))
    d1.open()
    d1.check("a", article(30))
    d1.close()
    d2 = Detector(MinHashLSH(0.5), SqliteStore(str(path)))
    d2.open()
    assert d2.check("b", edit(article(30), 3)).canonical == "a"
    d2.close()
    d3 = Detector(MinHashLSH(0.5, seed=2), SqliteStore(str(path)))
    with pytest.raises(StoreMismatchError, match="seed: stored 1, configured 2"):
        d3.open()


def _copies(n, seed):
    rng = random.Random(seed)
    base = [f"w{rng.randrange(10**6)}" for _ in range(300)]
    out = []
    for i in range(n):
        words = list(base)
        for j in rng.sample(range(300), 12 * i):
            words[j] = f"x{rng.randrange(10**6)}"
        out.append(" ".join(words))
    return out


@pytest.mark.parametrize(
    "algorithm, old, new, adopted",
    [
        ("minhash", 0.45, 0.6, True),
        ("minhash", 0.45, 0.3, True),
        ("simhash", 0.96, 0.97, True),
        ("simhash", 0.97, 0.9, False),
    ],
)
def test_a_store_made_for_another_threshold_is_kept_when_its_index_can_serve(tmp_path, algorithm, old, new, adopted):
    from scrapy_neardup.assembly import build_algorithm, open_detector
    from scrapy_neardup.settings import Config
    from scrapy_neardup.store import SqliteStore

    path = str(tmp_path / "s.sqlite3")
    texts = _copies(4, 1)
    before = Config.from_settings({"NEARDUP_ENABLED": True, "NEARDUP_ALGORITHM": algorithm, "NEARDUP_THRESHOLD": old})
    _, detector, note = open_detector(before, SqliteStore(path))
    assert note == ""
    detector.check("http://a/0", texts[0])
    detector.close()
    after = Config.from_settings({"NEARDUP_ENABLED": True, "NEARDUP_ALGORITHM": algorithm, "NEARDUP_THRESHOLD": new})
    if not adopted:
        with pytest.raises(StoreMismatchError, match=r"max_distance: stored 3, configured 6 \(NEARDUP_THRESHOLD"):
            open_detector(after, SqliteStore(path))
        return
    config, detector, note = open_detector(after, SqliteStore(path))
    assert "indexed for another threshold" in note and f"compared at threshold {new:g}" in note
    assert detector.algorithm.threshold == build_algorithm(after).threshold  # verified at the new threshold
    assert detector.store.count() == 1
    # The stored page is still found, through its own index, by a copy of it.
    assert detector.check("http://a/copy", texts[0]).canonical == "http://a/0"
    assert build_algorithm(config).params() == detector.algorithm.params()  # what the workers will use
    detector.close()


# -- recurring crawls: a known URL is *seen* only while its record still stands for the page ------------------
def test_a_known_url_whose_content_changed_is_checked_afresh(algorithm, store_kind, tmp_path):
    detector = Detector(algorithm, make_store(store_kind, tmp_path))
    detector.open()
    old, new = article(1), article(2)
    assert detector.check("http://a/", old).status == "unique"
    assert detector.check("http://a-print/", edit(old, 2)).canonical == "http://a/"
    assert detector.check("http://b/", new).status == "unique"
    # Lightly edited (a counter, a date): still the page that was filed, so seen, record untouched.
    again = detector.check("http://a/", edit(old, 3, seed=5))
    assert (again.status, again.rechecked) == ("seen", None)
    # Rewritten as a copy of another page: its record is replaced, and the page judged on what it is now.
    changed = detector.check("http://a/", edit(new, 2))
    assert (changed.status, changed.canonical, changed.rechecked) == ("duplicate", "http://b/", "changed")
    assert detector.store.get("http://a/").canonical == "http://b/"
    assert detector.check("http://a/", edit(new, 2)).status == "seen"
    # Its old copy lost its ground (its canonical's record is gone): checked afresh when fetched again.
    orphan = detector.check("http://a-print/", edit(old, 2))
    assert (orphan.status, orphan.rechecked) == ("unique", "orphaned")
    # With re-checking off, a changed page stays what it was filed as.
    keep = Detector(algorithm, detector.store, recheck_changed=False)
    assert keep.check("http://b/", article(3)).status == "seen"


def test_a_page_fetched_again_with_the_bytes_it_was_filed_with_keeps_its_verdict(store_kind, tmp_path):
    """A near-duplicate filed near the threshold, fetched again with the same bytes but its text found
    another way (a learned template's replay where trafilatura ran before) that falls below the bar: its
    verdict stands. The same text with other bytes, or with none known, is checked afresh; an orphan still
    is, whatever its bytes."""
    from scrapy_neardup.engine.detector import Check

    algorithm = MinHashLSH(threshold=0.45, shingle_size=2)
    detector = Detector(algorithm, make_store(store_kind, tmp_path))
    detector.open()

    def check(key, text, body):
        fp = algorithm.fingerprint(text)
        return detector.check_many([Check(key, fp.signature, fp.buckets, body=body)])[0]

    base = article(7)
    near = edit(base, 40)  # a near-duplicate a little above the threshold
    far = edit(base, 120)  # well under the threshold: what the other extraction gives
    assert algorithm.similarity(algorithm.fingerprint(far).signature, algorithm.fingerprint(base).signature) < 0.4
    assert check("http://a/", base, b"A" * 8).status == "unique"
    assert check("http://near/", near, b"N" * 8).canonical == "http://a/"
    assert check("http://bare/", near, None).canonical == "http://a/"
    same_bytes = check("http://near/", far, b"N" * 8)
    assert (same_bytes.status, same_bytes.canonical, same_bytes.rechecked) == ("seen", "http://a/", None)
    assert detector.store.get("http://near/").canonical == "http://a/"
    assert check("http://bare/", far, b"N" * 8).rechecked == "changed"  # filed without a digest
    other_bytes = check("http://near/", far, b"M" * 8)
    assert (other_bytes.canonical, other_bytes.rechecked) == ("http://bare/", "changed")  # what it is now
    assert detector.store.get("http://near/").body == b"M" * 8  # filed again, with its new bytes
    assert check("http://copy/", near, b"C" * 8).canonical == "http://a/"
    assert detector.store.remove(["http://a/"]) == 1
    orphan = check("http://copy/", near, b"C" * 8)
    assert (orphan.status, orphan.rechecked) == ("unique", "orphaned")
    detector.close()


def test_a_record_older_than_the_age_limit_is_checked_afresh(algorithm, tmp_path, monkeypatch):
    import time

    detector = Detector(algorithm, make_store("sqlite", tmp_path), max_age_secs=3600)
    detector.open()
    text = article(1)
    detector.check("http://a/", text)
    assert detector.check("http://a/", text).status == "seen"
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 2 * 3600)
    verdict = detector.check("http://a/", text)
    assert (verdict.status, verdict.rechecked) == ("unique", "expired")
    assert detector.check("http://a/", text).status == "seen"  # filed again just now


def test_one_threshold_means_one_jaccard_similarity_for_minhash_and_simhash():
    """Issue #14, point 1: NEARDUP_THRESHOLD is a Jaccard similarity of word 2-shingle sets whatever the
    algorithm. Pairs of real-length texts at known exact Jaccard: both algorithms estimate it, and both
    decide alike at a threshold of 0.7 for pairs clearly on either side (the scale SimHash had before,
    1 - distance/64, read a Jaccard of 0.5 as about 0.75 and accepted such pairs)."""
    from scrapy_neardup.assembly import build_algorithm
    from scrapy_neardup.engine.text import shingle_set
    from scrapy_neardup.settings import Config

    def algorithm(name):
        return build_algorithm(
            Config.from_settings({"NEARDUP_ENABLED": True, "NEARDUP_ALGORITHM": name, "NEARDUP_THRESHOLD": 0.7})
        )

    minhash, simhash = algorithm("minhash"), algorithm("simhash")
    errors = {"minhash": [], "simhash": []}
    for seed in range(12):
        base = article(seed, 600)
        for changes in (10, 40, 90, 160):
            other = edit(base, changes, seed)
            a, b = set(shingle_set(base, 2).tolist()), set(shingle_set(other, 2).tolist())
            exact = len(a & b) / len(a | b)
            for name, algo in (("minhash", minhash), ("simhash", simhash)):
                estimate = algo.similarity(algo.fingerprint(base).signature, algo.fingerprint(other).signature)
                errors[name].append(estimate - exact)
                if abs(exact - 0.7) >= 0.15:
                    assert (estimate >= algo.threshold) == (exact >= 0.7), (name, exact, estimate)
    for name, errs in errors.items():
        mean = sum(errs) / len(errs)
        assert abs(mean) < 0.05, (name, mean)  # unbiased estimates of the same quantity


def test_a_threshold_raised_since_a_page_was_filed_is_not_a_change_of_content(tmp_path):
    """A near-duplicate filed at similarity 0.6 under threshold 0.45, fetched again unchanged after the
    threshold became 0.8: seen, as it was filed; a real change still counts."""
    store = make_store("sqlite", tmp_path)
    detector = Detector(MinHashLSH(threshold=0.45, shingle_size=2), store)
    detector.open()
    base = article(7)
    copy = edit(base, 45)
    assert detector.check("http://a/", base).status == "unique"
    filed = detector.check("http://copy/", copy)
    assert filed.status == "duplicate" and filed.similarity < 0.8
    stricter = Detector(MinHashLSH(threshold=0.8, shingle_size=2), store)
    again = stricter.check("http://copy/", copy)
    assert (again.status, again.rechecked) == ("seen", None)
    assert stricter.check("http://a/", base).status == "seen"
    rewritten = stricter.check("http://copy/", article(8))
    assert rewritten.rechecked == "changed"


def deciding(store):
    """A detector on ``store`` with the one decision loop over it, and a pipeline for plain texts."""
    from scrapy_neardup.engine.decisions import DecisionLoop
    from scrapy_neardup.engine.prepare import DocumentPipeline

    algorithm = MinHashLSH(threshold=0.5, num_perm=128)
    detector = Detector(algorithm, store)
    detector.open()
    return detector, DecisionLoop(detector, None), DocumentPipeline(algorithm, min_text_length=10)


def test_a_better_copy_met_after_its_group_takes_it_and_its_members_follow(store_kind, tmp_path):
    """The decision loop re-points a group to a better copy (bestcopy) on every store: the tracking URL met
    first becomes the plain URL's near-duplicate; its own near-duplicates reach the plain URL through it.
    The page's verdict says whether the group reached the spider already in this session."""
    detector, loop, pipeline = deciding(make_store(store_kind, tmp_path))
    text = article(1)

    def decide(url):
        return loop.decide(url, url, pipeline.from_text(edit(text, 3, seed=len(url))))[-1].verdict

    tracked = decide("http://a.com/x?utm_source=feed")
    amp = decide("http://a.com/amp/x?utm_source=feed")
    plain = decide("http://a.com/x")
    assert (tracked.status, amp.status) == ("unique", "duplicate")
    # The group reached the spider through the tracking URL in this session: the plain page is its
    # near-duplicate now, but the group's page from here on.
    assert (plain.status, plain.canonical, plain.displaced) == ("duplicate", tracked.key, tracked.key)
    assert detector.group_of("http://a.com/amp/x?utm_source=feed") == "http://a.com/x"
    assert detector.group_of("http://a.com/x?utm_source=feed") == "http://a.com/x"
    # A later session: the members are seen as near-duplicates of the plain page.
    detector.session_started += 3600
    again = decide("http://a.com/amp/x?utm_source=feed")
    assert (again.status, again.canonical) == ("seen", "http://a.com/x")
    # A copy of another host never takes the group; nor one no better.
    assert decide("http://b.com/x").status == "duplicate"
    assert decide("http://a.com/y").status == "duplicate"
    assert detector.group_of("http://a.com/x") == "http://a.com/x"
    detector.close()


def test_a_better_copy_whose_group_was_not_fetched_in_this_session_reaches_the_spider(tmp_path):
    from scrapy_neardup.store import MemoryStore

    detector, loop, pipeline = deciding(MemoryStore())
    loop.decide("http://a.com/x?utm_source=feed", None, pipeline.from_text(article(1)))
    detector.session_started += 3600  # the next crawl: its rewrite of the tracking URL fetches the plain one
    (made,) = loop.decide("http://a.com/x", None, pipeline.from_text(article(1)))
    assert (made.verdict.status, made.verdict.displaced) == ("unique", "http://a.com/x?utm_source=feed")
    assert detector.group_of("http://a.com/x?utm_source=feed") == "http://a.com/x"


def test_a_session_begun_in_the_second_the_one_before_it_saw_a_page_in_does_not_take_that_page_for_its_own(
    store_kind, tmp_path, monkeypatch
):
    """Last-seen times are whole seconds: a session that began within the second the session before it last
    saw a page in would count that page as fetched in it, and a better copy of it would be dropped as a
    near-duplicate of a page this session never delivered. A session on a store that holds pages begins at
    the next whole second (and a page it sees from then on is its own)."""
    from scrapy_neardup.engine.decisions import DecisionLoop

    store = make_store(store_kind, tmp_path)
    first, loop, pipeline = deciding(store)
    loop.decide("http://a.com/x?utm_source=feed", None, pipeline.from_text(article(1)))
    filed = time.time()
    second = Detector(first.algorithm, store)
    second.begin_session()
    assert second.session_started == int(second.session_started) and filed < second.session_started <= time.time()
    assert not second.fetched_now("http://a.com/x?utm_source=feed")
    (made,) = DecisionLoop(second, None).decide("http://a.com/x", None, pipeline.from_text(article(1)))
    assert (made.verdict.status, made.verdict.displaced) == ("unique", "http://a.com/x?utm_source=feed")
    assert second.fetched_now("http://a.com/x")
    store.close()
    # On an empty store a session begins at once: no page was seen before it.
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)
    empty = Detector(first.algorithm, make_store("memory", None))
    before = time.time()
    empty.begin_session()
    assert before <= empty.session_started <= time.time() and waits == []


def test_a_group_a_declaration_chose_is_not_taken_by_a_better_copy(tmp_path):
    from scrapy_neardup.engine.decisions import Declared
    from scrapy_neardup.store import MemoryStore

    detector, loop, pipeline = deciding(MemoryStore())
    loop.decide("http://a.com/news/x", None, pipeline.from_text(article(1)))
    # /x declares /news/x, its original: the declaration outranks the shorter path.
    (made,) = loop.decide("http://a.com/x", None, pipeline.from_text(article(1)), Declared("http://a.com/news/x"))
    assert (made.verdict.status, made.verdict.canonical) == ("duplicate", "http://a.com/news/x")
    assert detector.group_of("http://a.com/news/x") == "http://a.com/news/x"


def test_a_batch_whose_documents_all_share_buckets_is_decided_whole():
    """SimHash searching 13 bits keys its tables on about 8.5 bits, so unrelated pages share buckets all the
    time: in one batch each round can file only the documents no earlier one of the batch collides with.
    Rounds go on while they decide documents (the limit counts rounds that decide none), so the batch is
    decided whole, with the verdicts the documents one at a time give."""
    from scrapy_neardup.store import MemoryStore

    algorithm = SimHashHamming(max_distance=13)
    texts = [article(5000 + i) for i in range(400)]
    fps = [algorithm.fingerprint(t) for t in texts]
    together = Detector(algorithm, MemoryStore())
    together.open()
    verdicts = together.check_many([(f"u{i}", fp.signature, fp.buckets) for i, fp in enumerate(fps)])
    alone = Detector(algorithm, MemoryStore())
    alone.open()
    expected = [alone.check_fingerprint(f"u{i}", fp.signature, fp.buckets) for i, fp in enumerate(fps)]
    assert [(v.status, v.canonical) for v in verdicts] == [(v.status, v.canonical) for v in expected]


def test_simhash_says_when_its_tables_do_not_scale_and_its_default_scales():
    """13 bits (threshold 0.65) key the tables on 8.5 bits: a lookup meets about a third of the store, said
    with the figures and what to do; the default (0.9, 6 bits) meets a few hundred at a million pages."""
    wide = SimHashHamming(threshold=0.65)
    assert wide.max_distance == 13 and "13 of its 64 bits" in wide.scale_warning()
    assert "306,641 at a million" in wide.scale_warning() and "minhash" in wide.scale_warning()
    default = SimHashHamming()
    assert default.max_distance == 6 and default.scale_warning() == ""
    assert default.tables.random_candidates(1_000_000) < 500


def test_a_batch_with_better_copies_gives_the_verdicts_of_one_page_at_a_time(store_kind, tmp_path):
    """A page of a batch filed after a better copy took its group (or after a new canonical sharing its
    buckets) in the same round looks again, as it would one page at a time: it joins the better copy, never
    the group's former page."""
    from scrapy_neardup.engine.decisions import DecisionLoop

    pages = []
    for k in range(12):
        text = article(700 + k)
        pages += [
            (f"http://a.com/x{k}?utm_source=feed", text),
            (f"http://a.com/x{k}", text),  # the better copy: the group moves to it
            (f"http://a.com/x{k}?utm_source=mail&utm_medium=email", edit(text, 6, seed=k)),
        ]
    made = {}
    for batch in (1, 64):
        detector, _, pipeline = deciding(make_store(store_kind, tmp_path / f"b{batch}"))
        loop = DecisionLoop(detector, None, batch=batch)
        decisions = [d for url, text in pages for d in loop.decide(url, url, pipeline.from_text(text))]
        decisions += loop.flush()
        made[batch] = [(d.key, d.verdict.status, d.verdict.canonical) for d in decisions]
        detector.close()
    assert made[64] == made[1]
    assert ("http://a.com/x3?utm_source=mail&utm_medium=email", "duplicate", "http://a.com/x3") in made[1]
