import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_neardup.engine.text import (
    hash_tokens,
    jaccard,
    normalize,
    shingle_hashes,
    shingle_set,
    tokenize,
)


def test_normalize_nfkc_casefold_whitespace():
    assert normalize("  Straße\u00a0 ＡＢＣ\n\tﬁne ") == "strasse abc fine"


def test_tokenize_words_and_unsegmented_scripts():
    assert tokenize("Hello, World! It's 2026.") == ["hello", "world", "it", "s", "2026"]
    assert tokenize("東京都に住む") == ["東", "京", "都", "に", "住", "む"]
    assert tokenize("ภาษาไทย") == list("ภาษาไทย")
    assert tokenize("Zürich 北京 Kraków") == ["zürich", "北", "京", "kraków"]
    assert tokenize("שלום עולם مرحبا بالعالم") == ["שלום", "עולם", "مرحبا", "بالعالم"]


def test_shingle_hashes_are_stable_golden_values():
    # Pinned: changing any of these changes every fingerprint ever stored (bump FORMAT_VERSION then).
    got = shingle_hashes(hash_tokens(tokenize("the quick brown fox")), 3)
    assert [int(x) for x in got] == GOLDEN_SHINGLES
    cjk = shingle_hashes(hash_tokens(tokenize("東京都")), 2)
    assert [int(x) for x in cjk] == GOLDEN_CJK


GOLDEN_SHINGLES = [17549955346205110330, 16056541157569282955]
GOLDEN_CJK = [13998110997901873988, 15064647489950240667]


def test_shingles_depend_on_order():
    a = shingle_set("one two three four", 2)
    b = shingle_set("four three two one", 2)
    assert len(np.intersect1d(a, b)) == 0


def test_short_text_has_one_shingle():
    assert len(shingle_hashes(hash_tokens(["only"]), 3)) == 1
    assert len(shingle_hashes(hash_tokens([]), 3)) == 0


def test_jaccard_exact():
    a = shingle_set("a b c d e f", 1)
    b = shingle_set("a b c x y z", 1)
    assert jaccard(a, b) == 3 / 9
    assert jaccard(a, a) == 1.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_tokenizer_never_fails_and_is_idempotent_on_normalized_text(text):
    tokens = tokenize(text)
    assert all(tokens)
    assert all(t == normalize(t) for t in tokens)
    assert tokenize(" ".join(tokens)) == tokens


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=8), max_size=60), st.integers(1, 6))
def test_shingle_count(tokens, k):
    got = shingle_hashes(hash_tokens(tokens), k)
    assert len(got) == (max(len(tokens) - k + 1, 1) if tokens else 0)
    assert got.dtype == np.uint64
