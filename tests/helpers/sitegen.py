"""Generated pages for crawl tests: articles, copies, print versions, a template-failure site, a slow page."""

import random

ABOUT = (
    "About this magazine. We are an independent publication covering gardening, cooking and local life "
    "since 1998. Our editors live in the valley and write about what grows there. Subscribe to our "
    "newsletter to receive every new issue, and follow us on the usual networks for daily updates. "
) * 2
WORDS = "river stone harvest lantern orchard meadow copper whistle garden market bread winter".split()


def story(seed, n=400):
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) + str(r.randint(0, 999)) for _ in range(n))


def template_page(seed):
    """trafilatura takes the <article> (the site's About box) and drops the story: a quiet failure."""
    return (
        f"<html><head><title>Story {seed}</title></head><body><div class='comments' id='comments'>"
        f"<div class='comment'>{story(seed)}</div></div><article><h1>About</h1><p>{ABOUT}</p></article>"
        "</body></html>"
    )


def chrome(seed=0, links=80):
    """A heavy site template: navigation and footer text longer than the article itself."""
    r = random.Random(1000 + seed)
    nav = "".join(f"<li><a href='/c/{i}'>Section {r.choice(WORDS)} {i}</a></li>" for i in range(links))
    foot = " ".join(f"{r.choice(WORDS)}{r.randint(0, 99)}" for _ in range(150))
    return f"<nav><ul>{nav}</ul></nav>", f"<footer><p>{foot}</p></footer>"


def article_page(seed, extra=""):
    """An article (what trafilatura finds) on a heavy template: main text well under half of the page."""
    head, foot = chrome()
    paragraphs = "".join(f"<p>{story(seed * 10 + k, 60)}.</p>" for k in range(3))
    return (
        f"<html><head><title>Article {seed}</title></head><body>{head}<main><article><h1>Article {seed}</h1>"
        f"{paragraphs}</article></main>{extra}{foot}</body></html>"
    )


def print_page(seed):
    return (
        f"<html><body><h1>Article {seed}</h1>"
        + "".join(f"<p>{story(seed * 10 + k, 60)}.</p>" for k in range(3))
        + "</body></html>"
    )


def slow_page(paragraphs=6000):
    """About 1.5 MB of linked paragraphs: trafilatura needs most of a second for it."""
    r = random.Random(5)
    return (
        "<html><body>"
        + "".join(
            f"<div><p>{' '.join(r.choice(WORDS) for _ in range(30))}</p><a href='/x{i}'>link {i}</a></div>"
            for i in range(paragraphs)
        )
        + "</body></html>"
    )
