import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_neardup.engine.text import (
    hash_tokens,
    jaccard,
    normalize,
    shingle_hashes,
    shingle_set,
    token_hashes,
    tokenize,
)


def test_normalize_nfkc_casefold():
    assert normalize("Straße\u00a0ＡＢＣ ﬁne") == "strasse abc fine"
    assert normalize("ASCII Only") == "ascii only"


def test_tokenize_words_and_unsegmented_scripts():
    assert tokenize("Hello, World! It's 2026.") == ["hello", "world", "it", "s", "2026"]
    assert tokenize("東京都に住む") == ["東", "京", "都", "に", "住", "む"]
    assert tokenize("ภาษาไทย") == list("ภาษาไทย")
    assert tokenize("Zürich 北京 Kraków") == ["zürich", "北", "京", "kraków"]
    assert tokenize("שלום עולם مرحبا بالعالم") == ["שלום", "עולם", "مرحبا", "بالعالم"]
    assert tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # vowel signs (combining marks) do not split words
    assert tokenize("a_b c-d 😀 𠀀𠀁") == ["a_b", "c", "d", "𠀀", "𠀁"]


def test_shingle_hashes_are_stable_golden_values():
    # Pinned: changing any of these changes every fingerprint ever stored (bump FORMAT_VERSION then).
    got = shingle_hashes(token_hashes("the quick brown fox"), 3)
    assert [int(x) for x in got] == GOLDEN_SHINGLES
    cjk = shingle_hashes(token_hashes("東京都"), 2)
    assert [int(x) for x in cjk] == GOLDEN_CJK


GOLDEN_SHINGLES = [13841676035303900043, 14414733835145477763]
GOLDEN_CJK = [14744817539139496927, 15346123279364538864]


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


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_tokenizer_never_fails_and_agrees_with_itself(text):
    tokens = tokenize(text)
    assert all(tokens)
    assert list(token_hashes(text)) == list(hash_tokens(tokens))
    # Tokens separated by spaces tokenize back to themselves (unless normalisation changes them further).
    if all(normalize(t) == t for t in tokens):
        assert tokenize(" ".join(tokens)) == tokens


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=8), max_size=60), st.integers(1, 6))
def test_shingle_count(tokens, k):
    got = shingle_hashes(hash_tokens(tokens), k)
    assert len(got) == (max(len(tokens) - k + 1, 1) if tokens else 0)
    assert got.dtype == np.uint64


def test_page_text_separates_words_of_adjacent_blocks():
    from scrapy_neardup.engine.extract import page_text

    html = (
        "<html><head><title>T</title><style>p{}</style></head><body><nav><ul><li>Home</li><li>News</li></ul>"
        "</nav><div>Skip</div><div>Heavenlynn</div><!-- hidden --><p>in<b>line</b> stays<br>one</p>"
        "<script>var x</script>tail</body></html>"
    )
    assert page_text(html).split() == ["Home", "News", "Skip", "Heavenlynn", "inline", "stays", "one", "tail"]


def test_page_text_keeps_the_text_after_comments():
    """React pages put ``<!-- -->`` between words: the text after a comment is visible text (it was lost
    once). A control character in the markup (lxml refuses to set one in a tree) is read as it is."""
    from scrapy_neardup.engine.extract import page_text

    html = (
        "<html><body><p>\u00a9 <!-- -->2020<!-- --> Cond\u00e9 Nast.</p><p>WWF\x07 (2020)<?pi x?> report</p>"
        "<noscript>no</noscript><svg><text>drawn</text></svg><template>later</template></body></html>"
    )
    assert page_text(html).split() == ["\u00a9", "2020", "Cond\u00e9", "Nast.", "WWF\x07", "(2020)", "report"]


def test_extraction_reads_the_page_text_from_the_tree_it_extracts_from():
    """With the page text asked for, the page is parsed once: the main text is trafilatura's own, as from the
    markup, and the page text is the one :func:`page_text` reads."""
    from scrapy_neardup.engine.extract import extract, main_text, page_text

    article = " ".join(f"Sentence {i} of the article tells the reader something new about the port." for i in range(30))
    links = "".join(f"<li><a href='/s/{i}'>Section {i} of the site with a long name</a></li>" for i in range(120))
    html = (
        f"<html><head><title>T</title></head><body><nav><ul>{links}</ul></nav>"
        f"<article><h1>Harbour</h1><p>{article}</p></article>"
        "<footer>\u00a9 <!-- -->2020 Site</footer></body></html>"
    )
    got = extract(html, "https://example.org/a", with_page_text=True)
    assert got.method == "main"
    assert got.text == main_text(html, "https://example.org/a")
    assert got.page_text == page_text(html)
    assert got.page_text.endswith("\u00a9 2020 Site") and "Section 119" in got.page_text
    assert extract(html, "https://example.org/a").page_text == ""


_PIECES = st.sampled_from(
    [
        "word",
        " ",
        "\n",
        "\u00e9",
        "e\u0301",
        "\u0301",
        "\u00bc",
        "\u2026",
        "\ufb01",
        "\uff45",
        "\u1100\u1161",
        "\u212b",
        "\u00df",
        "\u0130",
        "\u3000",
        "\u00a0",
        "  ",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECES, min_size=200, max_size=900))
def test_piecewise_normalisation_equals_nfkc_of_the_whole(parts):
    """Long texts are normalised piece by piece, cut before ASCII spaces and newlines: exactly as a whole."""
    import unicodedata

    text = "".join(parts)
    assert normalize(text) == unicodedata.normalize("NFKC", text).casefold()


def test_a_short_main_text_is_not_judged_on_its_template_and_no_main_text_falls_back_to_the_page():
    from demo_site import _gazette

    from scrapy_neardup.engine.extract import extract

    about = _gazette("About us", ["The Riverside Gazette is an independent newspaper founded in 1921."])
    got = extract(about, "http://x/about.html")  # trafilatura finds its own two lines: too short to judge
    assert got.method == "none" and got.reason == "too_little_text"
    words = " ".join(f"word{i}" for i in range(100))
    # No main text found: the page text. trafilatura's full mode (the product's) falls back on every text it
    # finds, so it is its fast mode (NEARDUP_EXTRACT_FAST) that leaves a page of links without a main text.
    got = extract(f"<html><body><footer>{words}</footer></body></html>", "http://x/", fast=True)
    assert got.method == "page" and "word99" in got.text


def test_content_blocks_keep_long_blocks_and_the_short_ones_between_them():
    """boilerpipe's shallow text features (Kohlschütter et al. 2010): a long block is content, a short one
    only beside or between content; a lone short block (a link, a byline, a teaser) is dropped."""
    from scrapy_neardup.engine.extract import content_blocks

    long_a, long_b = " ".join(["alpha"] * 30), " ".join(["beta"] * 20)
    heading, between, lone = "A headline of six words here", "A short aside", "Share this"
    text = content_blocks(["Home News Sport", "", heading + " of it", long_a, between, long_b, "", lone, "Login"])
    assert text.split("\n") == [heading + " of it", long_a, between, long_b]
    assert content_blocks([]) == ""
    assert content_blocks(["Menu", "Login"]) == ""


def test_resiliparse_main_text_leaves_the_template_out():
    from scrapy_neardup.engine.extract import extract

    body = " ".join(f"w{i}" for i in range(300))
    page = (
        "<html><head><title>t</title></head><body><nav><a href='/'>Home</a> <a href='/n'>News</a></nav>"
        f"<article><h1>A story</h1><p>{body}</p></article><footer>Copyright footer text</footer></body></html>"
    )
    for extractor in ("resiliparse", "resiliparse-blocks"):
        got = extract(page, "http://example.com/a", extractor=extractor, with_page_text=True)
        assert got.method == "main" and "w0 w1 w2" in got.text and "w299" in got.text, (extractor, got)
        assert "Copyright" not in got.text and "Home" not in got.text.split(), (extractor, got.text[:80])


def test_short_not_found_pages_are_alike_whatever_path_they_repeat():
    from scrapy_neardup.engine.text import short_text_similarity

    probe = "http://a.com/neardup-no-such-page-1f2e"
    answer = "Page not found. Sorry, /neardup-no-such-page-1f2e does not exist."
    dead = "Page not found. Sorry, /news/2024/old-story does not exist."
    assert short_text_similarity(dead, "http://a.com/news/2024/old-story", answer, probe) == 1.0
    contact = "Contact us: desk 7, open Monday to Friday."
    assert short_text_similarity(contact, "http://a.com/contact", answer, probe) == 0.0
    assert short_text_similarity("", "http://a.com/x", answer, probe) == 0.0
