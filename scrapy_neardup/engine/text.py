"""Text normalisation, tokenisation and hashed shingles, vectorised over a document's code points.

Everything a sketch sees passes through here, so every choice is fixed and stable across processes and
machines: Unicode NFKC, case folding, and hashes built from fixed constants. Python's ``hash()`` is never
used (it is salted per process).

Tokens are runs of word characters (letters, digits, combining marks, underscore) where a script separates
words with spaces, and single characters for the scripts that do not (Chinese, Japanese, Thai, Lao, Khmer,
Myanmar; Hangul too, whose short words match better as characters); a k-shingle of those characters is a
character k-gram, as Broder's shingling would use on unsegmented text (Broder et al., "Syntactic clustering
of the Web", 1997). Combining marks count as word characters, so Devanagari or Thai vowel signs do not split
words (Python's ``\\w`` would).

Speed: no per-token Python objects. The text becomes one array of code points; a lookup table classifies
them; token boundaries come from comparing neighbours; and every token's hash comes at once from prefix
sums: with ``c_j`` the code points and ``M`` odd, a token ``s..e`` hashes to
``sum c_j M^(e-j) = M^e (Q_e - Q_(s-1))`` where ``Q_i = sum_(j<=i) c_j M^-j`` (mod 2^64), finished with
MurmurHash3's fmix64.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Sequence

import numpy as np

_U64 = np.uint64
# Constants of MurmurHash3's 64-bit finaliser (fmix64): a bijection that spreads every input bit.
_FMIX_C1 = _U64(0xFF51AFD7ED558CCD)
_FMIX_C2 = _U64(0xC4CEB9FE1A85EC53)
# Odd multiplier for combining consecutive token hashes into one shingle hash (the 64-bit golden ratio).
_SHINGLE_MULT = _U64(0x9E3779B97F4A7C15)
# Odd base of the token polynomial, its inverse mod 2^64, and a salt mixing in the token length.
_TOKEN_MULT = 0x100000001B3
_TOKEN_MULT_INV = pow(_TOKEN_MULT, -1, 2**64)
_LENGTH_SALT = _U64(0xD6E8FEB86659FD93)

WORD, UNSEGMENTED = 1, 2
_UNSEGMENTED_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0x20000, 0x2FA1F),  # CJK extensions B-F, compatibility supplement
)

_lock = threading.Lock()
_bmp_table: np.ndarray | None = None
_ascii_table: np.ndarray | None = None
_powers: tuple[np.ndarray, np.ndarray] = (np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.uint64))


def _classify(cp: int) -> int:
    for lo, hi in _UNSEGMENTED_RANGES:
        if lo <= cp <= hi:
            return UNSEGMENTED
    ch = chr(cp)
    if ch.isalnum() or ch == "_" or unicodedata.category(ch)[0] == "M":
        return WORD
    return 0


def _table() -> np.ndarray:
    """Class of every code point of the Basic Multilingual Plane (built once, ~10 ms)."""
    global _bmp_table
    if _bmp_table is None:
        with _lock:
            if _bmp_table is None:
                _bmp_table = np.fromiter((_classify(cp) for cp in range(0x10000)), dtype=np.uint8, count=0x10000)
    return _bmp_table


def _ascii_words() -> np.ndarray:
    """Whether each ASCII code point is a word character (the first 128 entries of the full table)."""
    global _ascii_table
    if _ascii_table is None:
        _ascii_table = _table()[:128] == WORD
    return _ascii_table


def _power_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``M^i`` and ``M^-i`` (mod 2^64) for ``i < n``, grown on demand and shared."""
    global _powers
    pows, inv = _powers
    if len(pows) < n:
        with _lock:
            pows, inv = _powers
            if len(pows) < n:
                size = max(n, 2 * len(pows), 4096)
                pows = np.full(size, _TOKEN_MULT, dtype=np.uint64)
                inv = np.full(size, _TOKEN_MULT_INV, dtype=np.uint64)
                pows[0] = inv[0] = 1
                np.cumprod(pows, out=pows)
                np.cumprod(inv, out=inv)
                _powers = (pows, inv)
    return pows, inv


def build_tables() -> None:
    """Build the tables :func:`token_spans` and :func:`token_hashes` build on first use: the class of every
    code point of the Basic Multilingual Plane (about 20 ms of one core), and the first powers of the
    token multiplier. A process that forks workers builds them once, and each worker starts with them."""
    _ascii_words()
    _power_tables(4096)


#: Characters of at most this many are normalised in one call; longer texts piece by piece.
_NFKC_PIECE = 512


def normalize(text: str) -> str:
    """``text`` in NFKC and case-folded (for ASCII, simply lower-cased: the same result, faster).

    Most web text is already in NFKC except for a few characters (an ellipsis, a ¼, a superscript), and
    ``unicodedata.normalize`` then rewrites the whole text, at ten times the cost of checking it. So a
    long text is cut into pieces just before an ASCII space or newline and only the pieces that fail the
    check are rewritten (a text that passes the check whole is not cut at all). That is exact: a space or
    newline is a starter that composes with nothing and that no decomposition ends with, so NFKC never acts
    across it (UAX #15, "Stable Code Points").
    """
    if text.isascii():
        return text.lower()
    if len(text) <= _NFKC_PIECE:
        return unicodedata.normalize("NFKC", text).casefold()
    if unicodedata.is_normalized("NFKC", text):  # most texts: one check, no pieces
        return text.casefold()
    pieces = []
    start, end = 0, len(text)
    while start < end:
        cut = text.find(" ", start + _NFKC_PIECE)
        if cut == -1:
            cut = text.find("\n", start + _NFKC_PIECE)
            if cut == -1:
                cut = end
        piece = text[start:cut]
        pieces.append(piece if unicodedata.is_normalized("NFKC", piece) else unicodedata.normalize("NFKC", piece))
        start = cut
    return "".join(pieces).casefold()


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def token_spans(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(code points, starts, ends)`` of the tokens of already normalised ``text``."""
    if text.isascii():  # most text on the web: one byte per code point, no unsegmented scripts
        cp = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        if len(cp) == 0:
            empty = np.empty(0, dtype=np.intp)
            return cp, empty, empty
        return (cp, *_word_runs(_ascii_words()[cp]))
    cp = _codepoints(text)
    classes = _table().take(cp, mode="clip")  # U+FFFF and above read the table's last entry, fixed below
    if len(cp) and cp.max() >= 0xFFFF:
        for value in np.unique(cp[cp >= 0xFFFF]):
            classes[cp == value] = _classify(int(value))
    word = classes == WORD
    single = classes == UNSEGMENTED
    if not single.any():
        return (cp, *_word_runs(word))
    before = np.empty_like(word)
    before[0] = False
    before[1:] = word[:-1]
    after = np.empty_like(word)
    after[-1] = False
    after[:-1] = word[1:]
    starts = (word & ~before) | single
    ends = (word & ~after) | single
    return cp, np.flatnonzero(starts), np.flatnonzero(ends) + 1


def _word_runs(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the runs of ``True`` in ``word``: its changes alternate start, end, start, ..."""
    if len(word) == 0:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty
    changes = np.flatnonzero(word[1:] != word[:-1]) + 1
    if word[0]:
        changes = np.concatenate(([0], changes))
    if word[-1]:
        changes = np.concatenate((changes, [len(word)]))
    return changes[0::2], changes[1::2]


def span_hashes(cp: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """64-bit hashes of the tokens ``cp[starts[i]:ends[i]]`` (a polynomial of their code points)."""
    if len(starts) == 0:
        return np.empty(0, dtype=np.uint64)
    pows, inv = _power_tables(len(cp) + 1)
    with np.errstate(over="ignore"):
        prefix = np.empty(len(cp) + 1, dtype=np.uint64)
        prefix[0] = 0
        np.add(cp, 1, out=prefix[1:], dtype=np.uint64)
        np.multiply(prefix[1:], inv[: len(cp)], out=prefix[1:])
        np.cumsum(prefix, out=prefix)
        value = prefix[ends]
        value -= prefix[starts]
        value *= pows[ends - 1]
        value ^= (ends - starts).astype(np.uint64) * _LENGTH_SALT
    return fmix64(value, copy=False)


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` (normalised first), as strings."""
    normal = normalize(text)
    _, starts, ends = token_spans(normal)
    return [normal[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def token_hashes(text: str) -> np.ndarray:
    """Hashes of the tokens of ``text`` (normalised first), in order; equal to ``hash_tokens(tokenize(text))``."""
    return span_hashes(*token_spans(normalize(text)))


def hash_tokens(tokens: Sequence[str]) -> np.ndarray:
    """Hashes of given token strings, with the same function :func:`token_hashes` uses."""
    if not tokens:
        return np.empty(0, dtype=np.uint64)
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.intp, count=len(tokens))
    ends = np.cumsum(lengths)
    return span_hashes(_codepoints("".join(tokens)), ends - lengths, ends)


def fmix64(values: np.ndarray, copy: bool = True) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser applied element-wise (a stable, invertible bit mixer); in place on a
    ``uint64`` array with ``copy=False``."""
    h = values.astype(np.uint64, copy=copy)
    with np.errstate(over="ignore"):
        h ^= h >> _U64(33)
        h *= _FMIX_C1
        h ^= h >> _U64(33)
        h *= _FMIX_C2
        h ^= h >> _U64(33)
    return h


def shingle_hashes(token_hashes: np.ndarray, k: int) -> np.ndarray:
    """Hashes of the contiguous k-shingles of a token-hash sequence, as a ``uint64`` array.

    A shingle's hash is a polynomial of its token hashes (position-dependent, so word order counts)
    finished with fmix64. Computed for all shingles at once with numpy; a text shorter than ``k`` tokens
    yields one shingle of all its tokens, so short texts still have a fingerprint.
    """
    n = len(token_hashes)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    k = min(k, n)
    count = n - k + 1
    acc = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            acc *= _SHINGLE_MULT
            acc += token_hashes[j : j + count]
    return fmix64(acc ^ _U64(k))


def shingle_set(text: str, k: int) -> np.ndarray:
    """Sorted distinct k-shingle hashes of ``text`` (the set Jaccard similarity is defined on)."""
    return np.unique(shingle_hashes(token_hashes(text), k))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted distinct hash arrays."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def short_text_similarity(text: str, url: str, other: str, other_url: str) -> float:
    """The Jaccard similarity of the word sets of two short texts (a "not found" page, too short to
    fingerprint), leaving out the words of either page's URL: such pages often repeat the URL they were
    asked for ("The page /a/b-c was not found"), which would make two of them differ by the URL alone."""
    from urllib.parse import unquote, urlsplit

    def words(value: str) -> set[str]:
        return set(tokenize(value.casefold()))

    def url_words(value: str) -> set[str]:
        parts = urlsplit(value)
        return words(unquote(f"{parts.path} {parts.query}"))

    masked = url_words(url) | url_words(other_url)
    mine, theirs = words(text) - masked, words(other) - masked
    if not mine or not theirs:
        return 0.0
    return len(mine & theirs) / len(mine | theirs)
