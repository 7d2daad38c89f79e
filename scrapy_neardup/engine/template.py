"""Detecting extraction that returns a site's template instead of the article.

Main-content extraction fails quietly on some sites: every article of the site extracts to the same block
of template text (a sidebar, a cookie notice, an "about us" box). Trusted, that text makes every page of
the site an exact duplicate of the first, and a crawl in drop mode would keep one article per site.

Copies of one article on one site (``/a/123``, ``/amp/123``, ``/print/123``, ``?page=`` aliases) *also*
repeat one main text under several paths, so a repeat alone proves nothing. What tells them apart is the
rest of the page: on a template site the main text repeats while the page around it differs from article
to article (each page carries its own article, which extraction missed); on copies both repeat. Hence the
rule of :class:`TemplateGuard`, per host and identical main text:

* a page whose main text is more than half of its page text is article-dominated: it never counts;
* otherwise its page text is compared with the page texts already seen with that main text; it counts as
  a new, *different* page only when it is below ``PAGE_TEXTS_DIFFER`` (estimated Jaccard of word
  2-shingles) against every one of them;
* ``repeats`` mutually different pages make the main text the host's template. From then on, pages with
  that main text are fingerprinted on their page text, and the pages counted before are *re-filed* on
  their page text, so that every member of the group is compared on the same kind of text (a copy of the
  first article, met later, still finds it).

Measured on neardup-dev (``python bench/template_pairs.py ../shared/neardup-dev``): page texts of different
articles around one template block are 0.13–0.17 similar; page texts of copies on one host, where the
main text is at most half of the page, are 0.36–0.98 similar (noise copies with ads and related links
added are the lowest). The cut of 0.25 sits between. The comparison is an estimated Jaccard of word
2-shingles whatever algorithm fingerprints pages: the page fingerprint itself with the default MinHash,
else a fixed sketch of the guard's own (MinHash, 64 permutations).

**By template knowledge.** When templates are learned (:mod:`.learned`), a page carries its template's key,
and only pages of one template count together: text repeated across different articles of one template is
that template's; one article shown in two templates of a host (a story under two sections, a feature page
and its article page) is an article, and its pages are near-duplicates, which a count of page texts around
one main text would take for a template. A page whose template is not known (not parsed for it) counts with
any. A host whose extractor returns its navigation or a cookie wall for every page still trips the guard:
its pages share a template as well as that text.

State lives in the process that makes the decisions (the crawler, or the batch CLI's main process) and is
bounded: the least recently used groups are forgotten.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .algorithms.base import Fingerprint
from .prepare import Prepared, page_sketcher

if TYPE_CHECKING:
    import numpy as np

    from .algorithms.base import Algorithm

#: Page texts less similar than this (estimated Jaccard of word 2-shingles) are different pages.
PAGE_TEXTS_DIFFER = 0.25


#: A page counted in a group: ``(key, page sketch, page signature, page buckets, template)``.
_Member = tuple[str, bytes, bytes, "np.ndarray", "int | None"]
#: A group: pages of one host with one main text, whose page texts differ from each other (``_Member``), and
#: the templates the main text was found to be template text of (``None`` among them: of a page whose
#: template was not known). Both plain tuples of strings, bytes, numbers and arrays, which the garbage
#: collector stops tracking: the guard keeps up to ``max_groups`` of them, one for nearly every page of a
#: crawl, and every object it tracked would be visited by each full collection of the crawler process.
_Group = tuple[tuple[_Member, ...], tuple["int | None", ...]]
_EMPTY: _Group = ((), ())


def _fired_for(templates: tuple[int | None, ...], template: int | None) -> bool:
    """Whether a group's main text is template text for a page of ``template``: it was found so in that
    template, or either template is not known."""
    if not templates:
        return False
    return template is None or None in templates or template in templates


def _compatible(a: int | None, b: int | None) -> bool:
    """Two pages may be of one template: the same one, or either not known."""
    return a is None or b is None or a == b


class TemplateGuard:
    """Decides, page by page and in order, which text a main-text page is filed on.

    ``repeats``: how many mutually different pages around one main text make it the host's template (at
    least 2; pages of two known templates never count together). ``max_groups`` bounds memory: about 700
    bytes a group that holds a page text's fingerprint (MinHash-128), far less for one that does not. Not
    thread-safe: call it from the deciding thread.
    """

    def __init__(self, repeats: int = 2, max_groups: int = 50_000, algorithm: Algorithm | None = None) -> None:
        if repeats < 2:
            raise ValueError("repeats must be at least 2")
        self.repeats = repeats
        self.max_groups = max_groups
        self._sketcher = page_sketcher(algorithm)  # the same choice as the pipeline that made the sketches
        self._groups: OrderedDict[tuple[str, int], _Group] = OrderedDict()
        self.fired = 0

    def decide(self, key: str, url: str | None, prepared: Prepared) -> tuple[Prepared, list[tuple[str, Fingerprint]]]:
        """The document to file for ``prepared`` (its page text instead, when its main text is its host's
        template), and the earlier pages to re-file on their page text, as ``(key, fingerprint)``."""
        if prepared.main_key is None or not url:
            return prepared, []
        host = (urlsplit(url).hostname or "").lower()
        if not host:
            return prepared, []
        group_key = (host, prepared.main_key)
        group = self._groups.get(group_key)
        if group is None:
            group = self._groups[group_key] = _EMPTY
            if len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(group_key)
        members, templates = group
        page, template = prepared.page_fingerprint, prepared.template
        if _fired_for(templates, template):
            return (replace(prepared, fingerprint=page, method="template") if page is not None else prepared), []
        if page is None or prepared.page_sketch is None:
            return prepared, []
        for member_key, sketch, *_ in members:
            if member_key == key or self._sketcher.similarity(prepared.page_sketch, sketch) >= PAGE_TEXTS_DIFFER:
                return prepared, []  # the same page again, or a copy of one already seen
        members += ((key, prepared.page_sketch, page.signature, page.buckets, template),)
        alike = [m for m in members if _compatible(m[4], template)]
        if len(alike) < self.repeats:
            self._groups[group_key] = (members, templates)
            return prepared, []
        self.fired += 1
        self._groups[group_key] = (
            tuple(m for m in members if not _compatible(m[4], template)),
            tuple(dict.fromkeys((*templates, *(m[4] for m in alike)))),
        )
        refile = [(m[0], Fingerprint(m[2], m[3])) for m in alike[:-1]]
        return replace(prepared, fingerprint=page, method="template"), refile
