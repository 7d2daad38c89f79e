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


#: A site's templates: each its own skeleton (classes, sidebars), the article inside a body element with a
#: share bar, a related list and a comment thread that trafilatura drops.
TEMPLATE_CLASSES = ("news", "sport", "culture")


def templated_page(template, seed, article_seed=None, article_class="entry-content", extra_block="", footer_words=60):
    """A page of template ``template`` (0, 1, 2) of one site, carrying article ``article_seed`` (default
    ``seed``): navigation, a sidebar, a footer longer than the article's teaser lists, and inside the
    article's element blocks that are not the article (trafilatura drops them). ``extra_block``: HTML put
    inside the article's element, after its paragraphs (a template changed mid-crawl); ``footer_words``: the
    footer's length (a long one makes the article under half of the page's text)."""
    name = TEMPLATE_CLASSES[template]
    r = random.Random(7000 + template)
    nav = "".join(f"<li><a href='/{name}/{i}'>{name.title()} {r.choice(WORDS)} {i}</a></li>" for i in range(30))
    side = "".join(f"<li><a href='/{name}/top/{i}'>Top {r.choice(WORDS)} {r.choice(WORDS)}</a></li>" for i in range(12))
    foot = " ".join(f"{r.choice(WORDS)}{r.randint(0, 99)}" for _ in range(footer_words))
    article = seed if article_seed is None else article_seed
    paragraphs = "".join(f"<p>{story(article * 10 + k, 70)}.</p>" for k in range(4))
    related = "".join(
        f"<li><a href='/{name}/r{seed}-{k}'>Read also {story(seed * 7 + k, 5)}</a></li>" for k in range(4)
    )
    return (
        f"<html><head><title>{name} {article}</title></head><body class='{name}-site'>"
        f"<header class='top-{name}'><nav><ul>{nav}</ul></nav></header>"
        f"<div class='layout-{name}'><aside class='sidebar'><ul>{side}</ul></aside>"
        f"<main class='main-{name}'><article class='post-{seed} post'><h1 class='headline'>Story {article}</h1>"
        f"<div class='{article_class}'>{paragraphs}"
        f"<div class='share-bar'><a href='/s/{seed}'>Share</a> <a href='/t/{seed}'>Tweet</a></div>"
        f"<ul class='related'>{related}</ul>{extra_block}</div>"
        f"<section class='comments'><h3>Comments</h3><p>Be the first to comment on {name} {seed}.</p></section>"
        f"</article></main></div><footer class='foot-{name}'><p>{foot}</p></footer></body></html>"
    )
