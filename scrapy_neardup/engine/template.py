"""Detecting extraction that returns a site's template instead of the article.

Main-content extraction fails quietly on some sites: every article of the site extracts to the same block
of template text (a sidebar, a cookie notice, an "about us" box). Trusted, that text makes every page of
the site an exact duplicate of the first, and a crawl in drop mode would keep one article per site. The
signal is cheap and needs no per-site rule: one host yielding the *same* extracted text under several
*different paths*. A copy of one article under one path (``?utm_source=...``, ``?sessionid=...``) does not
count, nor does one print version (``/print/...``) beside its article — two paths — but from a third
distinct path on the text is suspect. Suspect is not yet template: one site may carry one article under
several paths (``/amp/``, ``/print/``, a mirror folder), and then the repeated text is most of each page.
So :meth:`DocumentPipeline.guard <scrapy_neardup.engine.pipeline.DocumentPipeline.guard>` also reads the
page's whole visible text, and only when the repeated main text is at most half of it is the page
fingerprinted on its page text instead (where its own article, not the shared block, dominates).

Measured on the neardup-dev set (docs/quality.md): with three paths the guard fires exactly on the two
sites whose extraction returns template text (main text 2-21% of the page text), and on no legitimate
page; with two paths it would fire on 30 pages, most of them print versions. State is per process and
bounded (least recently used hosts/texts forgotten).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from urllib.parse import urlsplit

import mmh3

#: mmh3 seed of the text hash; fixed so the guard behaves the same in every process.
_SEED = 0x7E3A


def _text_key(text: str) -> int:
    return mmh3.hash128(" ".join(text.casefold().split()), _SEED)


class TemplateGuard:
    """Remembers, per host and extracted text, the distinct URL paths it came from.

    ``repeats`` is the number of distinct paths of one host with identical extracted text from which that
    text is suspected of being template (the first ``repeats - 1`` pages with it are trusted: they cannot
    be told from an article and its print version). ``max_entries`` bounds memory (about 200 bytes an
    entry).
    Thread-safe: the Scrapy plugin calls it from its extraction threads.
    """

    def __init__(self, repeats: int = 3, max_entries: int = 200_000) -> None:
        if repeats < 2:
            raise ValueError("repeats must be at least 2")
        self.repeats = repeats
        self.max_entries = max_entries
        self._paths: OrderedDict[tuple[str, int], set[str]] = OrderedDict()
        self._templates: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def is_template(self, url: str | None, text: str) -> bool:
        """Record that ``url`` extracted to ``text``; True when this host has repeated it too often."""
        if not url:
            return False
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if not host:
            return False
        key = (host, _text_key(text))
        path = parts.path or "/"
        with self._lock:
            if key in self._templates:
                return True
            paths = self._paths.get(key)
            if paths is None:
                paths = self._paths[key] = set()
                if len(self._paths) > self.max_entries:
                    self._paths.popitem(last=False)
            else:
                self._paths.move_to_end(key)
            paths.add(path)
            if len(paths) < self.repeats:
                return False
            del self._paths[key]
            if len(self._templates) >= self.max_entries:
                self._templates.pop()
            self._templates.add(key)
            return True
