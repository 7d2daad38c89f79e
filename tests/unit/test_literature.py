"""The literature algorithms on the shared contract: each finds near copies and rejects unrelated text."""

import random

import numpy as np
import pytest
from helpers.stores import make_store

from scrapy_neardup.engine.algorithms.bottomk import BottomK
from scrapy_neardup.engine.algorithms.exact import ExactHash
from scrapy_neardup.engine.algorithms.imatch import IMatch
from scrapy_neardup.engine.algorithms.spotsigs import STOP_WORDS, SpotSigs
from scrapy_neardup.engine.algorithms.supershingle import SuperShingles
from scrapy_neardup.engine.detector import Detector

WORDS = [f"w{i}" for i in range(5000)]
STOPS = sorted(STOP_WORDS)


def prose(seed, n=600):
    """Text with stop words in it, as running text has (SpotSigs anchors on them)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(STOPS) if rng.random() < 0.35 else rng.choice(WORDS) for _ in range(n))


def edit(text, changes, seed=0):
    rng = random.Random(seed)
    words = text.split()
    for i in rng.sample(range(len(words)), changes):
        words[i] = "edited"
    return " ".join(words)


def algorithms():
    texts = [prose(s) for s in range(30)]
    return [ExactHash(), BottomK(0.5), SuperShingles(), SpotSigs(0.5), IMatch(IMatch.build_lexicon(texts))]


@pytest.mark.parametrize("algorithm", algorithms(), ids=lambda a: a.name)
def test_near_copies_found_unrelated_rejected(algorithm):
    detector = Detector(algorithm, make_store("memory", None))
    detector.open()
    assert detector.check("orig", prose(1)).status == "unique"
    assert detector.check("copy", prose(1)).status == "duplicate"  # identical: every algorithm
    assert detector.check("other", prose(2)).status == "unique"
    near = detector.check("near", edit(prose(1), 3)).status
    assert near == ("unique" if algorithm.name == "exact" else "duplicate")


def test_spotsigs_ignore_boilerplate_without_stop_words():
    algorithm = SpotSigs(0.5)
    article = prose(3)
    navigation = " ".join(f"Menu{i} Login Shop Cart Contact Imprint" for i in range(40))
    a = algorithm.fingerprint(article + " " + navigation).signature
    b = algorithm.fingerprint("Other Site Header Subscribe " * 30 + article).signature
    assert algorithm.similarity(a, b) > 0.9  # the templates add no spot signatures
    spots = algorithm.spot_signatures("the cat sat on the mat and the dog")
    assert len(spots) == 3  # the:cat+sat, on:mat+dog, the:mat+dog; 'and' and the last 'the' lack 2 followers


def test_spotsigs_length_pruning():
    algorithm = SpotSigs(0.6)
    short = algorithm.fingerprint(prose(4, 100)).signature
    long = algorithm.fingerprint(prose(4, 100) + " " + prose(5, 900)).signature
    assert algorithm.similarity(short, long) == 0.0


def test_supershingles_share_at_least_min_shared_exactly_when_buckets_collide():
    algorithm = SuperShingles()
    rng = random.Random(3)
    for _ in range(40):
        a = prose(rng.randrange(10**6))
        b = edit(a, rng.randrange(0, 60), seed=rng.randrange(100))
        fa, fb = algorithm.fingerprint(a), algorithm.fingerprint(b)
        shared = algorithm.similarity(fa.signature, fb.signature) * algorithm.groups
        collide = bool(set(fa.buckets.tolist()) & set(fb.buckets.tolist()))
        assert collide == (round(shared) >= algorithm.min_shared)


def test_imatch_randomized_lexicons_survive_a_changed_lexicon_term():
    texts = [prose(s) for s in range(30)]
    algorithm = IMatch(IMatch.build_lexicon(texts), extra_lexicons=6)
    a = algorithm.fingerprint(texts[0]).signature
    words = texts[0].split()
    lexicon_words = [i for i, w in enumerate(words) if w not in STOP_WORDS]
    words[lexicon_words[0]] = words[lexicon_words[1]]  # drop one lexicon term
    b = algorithm.fingerprint(" ".join(words)).signature
    assert a[:20] != b[:20]  # the plain I-Match signature breaks
    assert algorithm.similarity(a, b) >= algorithm.threshold  # a randomized lexicon without that term holds


def test_imatch_lexicon_is_part_of_the_stored_parameters(tmp_path):
    first = IMatch(["alpha", "beta"])
    second = IMatch(["alpha", "gamma"])
    assert first.params()["lexicon"] != second.params()["lexicon"]


def test_exact_hash_ignores_case_and_spacing_only():
    algorithm = ExactHash()
    a = algorithm.fingerprint("Hello   World!").signature
    assert a == algorithm.fingerprint("hello world").signature
    assert a != algorithm.fingerprint("hello worlds").signature
    assert np.asarray(algorithm.fingerprint("x").buckets).dtype == np.int64
