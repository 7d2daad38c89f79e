"""Pages the tests serve: articles of their own random words, and copies of them."""

from __future__ import annotations

import random

WORDS = [
    f"{a}{b}"
    for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "tu", "ve", "zo")
    for b in ("ban", "cor", "dil", "fen", "gut", "hos", "jar", "kel", "mun", "pil", "ros", "tav")
]


def story(seed: int) -> str:
    r = random.Random(seed)
    return " ".join(f"w{r.randrange(50_000)}" for _ in range(300))


def html(text: str, head: str = "", chrome: str = "") -> str:
    return (
        f"<html><head><title>t</title>{head}</head><body>{chrome}<article><h1>A story</h1><p>{text}</p>"
        "</article></body></html>"
    )


def article(seed: int, words: int = 220) -> str:
    r = random.Random(seed)
    text = " ".join(r.choice(WORDS) for _ in range(words))
    return (
        f"<html><head><title>a{seed}</title></head><body><article><h1>Story {seed}</h1><p>{text}</p>"
        "</article></body></html>"
    )


def distinct_pages(n: int, copies_every: int = 0) -> dict[str, str]:
    """``n`` pages of their own text; with ``copies_every``, every such page is a copy of the one before."""
    pages = {}
    for i in range(n):
        seed = i - 1 if copies_every and i % copies_every == 0 and i else i
        pages[f"/a/{i}"] = article(seed)
    return pages


#: A small site crawled twice by the recurring-crawl tests: two copies of /a/1 (one under /print/).
PATHS = ["/a/1", "/a/3", "/a/2", "/print/1", "/b/9"]


def first_pages() -> dict[str, str]:
    return {
        "/a/1": html(story(1)),
        "/a/2": html(story(2)),
        "/a/3": html(story(3)),
        "/print/1": html(story(1)),
        "/b/9": html(story(9)),
    }
