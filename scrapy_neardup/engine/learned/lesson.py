"""What one page teaches about its template (:func:`lesson`), and the replay of the decisions learned
(:func:`replay_element`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .page import (
    DECISION_DEPTH,
    SILENT,
    WORD,
    UndecidedBlock,
    agreement,
    block_text,
    child_elements,
    path_step,
    word_pairs,
    words,
)

#: The article element is the deepest that holds at least this share of trafilatura's word pairs.
COVERS = 0.9
#: A block whose word pairs are at least this share in trafilatura's text is kept (split into its children's
#: decisions when one of them was dropped); at most ``DROPPED``, dropped; in between it is decided by its
#: children (or kept, at ``DECISION_DEPTH``).
KEPT, DROPPED = 0.9, 0.1
#: A lesson, or a replay checked against trafilatura, must reproduce its text to this word-pair Jaccard.
AGREEMENT = 0.95
#: A block at a path that trafilatura kept on some pages and dropped on others (a subheading, a category
#: label) is kept when it has at most this many words: whichever trafilatura would choose, the text's word
#: pairs change by at most as many; a longer one makes the selector refuse the page.
SHORT_CONFLICT_WORDS = 12


@dataclass(frozen=True)
class Locator:
    """Where a template's article element is: a CSS path from ``<body>``, which match it is, of how many."""

    css: str
    index: int
    matches: int

    def find(self, tree: Any) -> Any:
        from selectolax.lexbor import SelectolaxError

        try:
            found = tree.css(self.css)
        except SelectolaxError:  # a path lexbor cannot read is not this page's template
            return None
        return found[self.index] if len(found) == self.matches else None


@dataclass(frozen=True)
class Lesson:
    """What one page teaches: where its article element is, each block path below it kept (``True``) or
    dropped, and how well replaying just this lesson reproduces trafilatura's text on the page."""

    locator: Locator
    decisions: Mapping[str, bool]
    agreement: float
    kept: float = 1.0

    def to_wire(self) -> tuple:
        return (
            self.locator.css,
            self.locator.index,
            self.locator.matches,
            dict(self.decisions),
            self.agreement,
            self.kept,
        )

    @classmethod
    def from_wire(cls, wire: tuple) -> Lesson:
        css, index, matches, decisions, agreed, kept = wire
        return cls(Locator(css, index, matches), decisions, agreed, kept)


def _counts(
    node: Any, pairs: set[tuple[str, ...]], main_words: set[str], out: dict[int, tuple[int, int]]
) -> tuple[int, int]:
    """One walk of the page: for each element, how many word pairs of its text (a word, for a one-word
    text) are in trafilatura's text, and how many it has: ``out[mem_id] = (in main, all)``."""
    main = total = 0
    child = node.child
    while child is not None:
        tag = child.tag
        if tag == "-text":
            text = child.text_content
            found = WORD.findall(text.casefold()) if text and not text.isspace() else ()
            if len(found) >= 2:
                total += len(found) - 1
                main += sum(1 for pair in zip(found, found[1:]) if pair in pairs)
            elif found:
                total += 1
                main += found[0] in main_words
        elif tag and tag[0] not in "-_" and tag not in SILENT:
            in_main, all_ = _counts(child, pairs, main_words, out)
            main += in_main
            total += all_
        child = child.next
    out[node.mem_id] = (main, total)
    return main, total


def _article_elements(tree: Any, counts: dict[int, tuple[int, int]]) -> list[tuple[Any, str]]:
    """The candidates for the article element, each with its CSS path from body, outermost first: the
    deepest element holding ``COVERS`` of the page's word pairs that are in trafilatura's text, then its
    ancestors as long as each adds at least as many of those pairs as others (a heading above the
    paragraphs belongs to the article; a header that repeats its title among the navigation does not).
    The outermost is the article element; the ones inside it are tried when its blocks do not reproduce
    trafilatura's text (a block trafilatura keeps on some pages of the template and drops on others)."""
    in_body = counts[tree.body.mem_id][0]
    path = [(tree.body, "body")]
    while True:
        node = path[-1][0]
        best = next((c for c in child_elements(node) if counts.get(c.mem_id, (0, 0))[0] >= COVERS * in_body), None)
        if best is None:
            break
        path.append((best, path[-1][1] + " > " + path_step(best)))
    top = len(path) - 1
    while top > 1:
        (inner, _), (outer, _) = (path[top], path[top - 1])
        (inner_main, inner_all), (outer_main, outer_all) = counts[inner.mem_id], counts[outer.mem_id]
        gained = outer_main - inner_main
        if not gained or (outer_all - outer_main) - (inner_all - inner_main) > gained:
            break
        top -= 1
    return path[top:] if top >= 1 else []


def lesson(tree: Any, main: str, bound: float = AGREEMENT) -> Lesson | None:
    """What this page, whose trafilatura text is ``main``, teaches about its template; ``None`` when its
    text is not found in one element. The lesson is taken at the article element, or at the outermost
    element inside it whose replay reproduces trafilatura's text to ``bound`` (else at the one that came
    closest, which the learner refuses)."""
    tokens = words(main)
    pairs = word_pairs(tokens)
    if len(pairs) < 8:
        return None
    counts: dict[int, tuple[int, int]] = {}
    if _counts(tree.body, pairs, set(tokens), counts)[0] < COVERS * len(pairs) / 2:
        return None  # most of trafilatura's text is not in the page as lexbor reads it
    best: Lesson | None = None
    for article, css in _article_elements(tree, counts):
        taught = _lesson_at(tree, article, css, counts, pairs)
        if taught is not None and (best is None or taught.agreement > best.agreement):
            best = taught
        if best is not None and best.agreement >= bound:
            break
    return best


def _lesson_at(
    tree: Any, article: Any, css: str, counts: dict[int, tuple[int, int]], pairs: set[tuple[str, ...]]
) -> Lesson | None:
    """The lesson with ``article`` (at ``css``) as the article element: the decision on each block below it
    by its share of trafilatura's word pairs, and how well their replay reproduces them."""
    from selectolax.lexbor import SelectolaxError

    try:
        matches = tree.css(css)
    except SelectolaxError:  # a path lexbor's selector reader refuses: no lesson at this element
        return None
    index = next((i for i, m in enumerate(matches) if m.mem_id == article.mem_id), -1)
    if index < 0:
        return None

    def decide(node: Any, path: str, depth: int, decisions: dict[str, bool]) -> None:
        for child in child_elements(node):
            child_path = path + ">" + path_step(child)
            in_main, all_ = counts.get(child.mem_id, (0, 0))
            if not all_:
                continue
            share = in_main / all_
            last = depth + 1 >= DECISION_DEPTH
            if share >= KEPT or (last and share > DROPPED):
                if share < 1.0 and not last and split(child, child_path, depth + 1, decisions):
                    continue
                _decided(decisions, child_path, True)
            elif share <= DROPPED:
                _decided(decisions, child_path, False)
            else:
                before = len(decisions)
                decide(child, child_path, depth + 1, decisions)
                if len(decisions) == before:  # a mixed block whose text is its own, not its children's
                    _decided(decisions, child_path, True)

    def split(node: Any, path: str, depth: int, decisions: dict[str, bool]) -> bool:
        """Decide a block trafilatura kept nearly whole by its children, when it dropped one of them: kept
        whole, the block keeps that child's text, which weighs enough on a short article to take the
        lesson under the bound. Whether it did is known once they are decided."""
        inner: dict[str, bool] = {}
        decide(node, path, depth, inner)
        if all(inner.values()):
            return False
        for inner_path, keep in inner.items():
            _decided(decisions, inner_path, keep)
        return True

    decisions: dict[str, bool] = {}
    decide(article, "", 0, decisions)
    text = replay_element(article, decisions)
    if text is None:
        return None
    return Lesson(Locator(css, index, len(matches)), decisions, agreement(text, pairs), _kept(text, article))


def _kept(text: str, article: Any) -> float:
    """The share of the article element's words (runs between white space) a replay kept."""
    return len(text.split()) / max(1, len(article.text(separator=" ").split()))


def _decided(decisions: dict[str, bool], path: str, keep: bool) -> None:
    """One page's decision for a path: a path met twice on one page (two lists of one class) is kept if
    either is, so that no text is lost on the strength of one page."""
    decisions[path] = decisions.get(path, False) or keep


def _prefixes(decisions: Mapping[str, bool]) -> set[str]:
    """The paths above the decided ones (``>a>b`` for ``>a>b>c``): mixed blocks, decided by their children."""
    out: set[str] = set()
    for path in decisions:
        cut = path.find(">", 1)
        while cut > 0:
            out.add(path[:cut])
            cut = path.find(">", cut + 1)
    return out


def replay_element(
    article: Any,
    decisions: Mapping[str, bool],
    kept_low: float = 0.0,
    conflicts: frozenset[str] = frozenset(),
    bound: float = AGREEMENT,
) -> str | None:
    """The article element's text with the dropped blocks left out; ``None`` when a block with text is at
    a path no lesson decided, when the blocks at ``conflicts`` (paths lessons decided both ways) with more
    than ``SHORT_CONFLICT_WORDS`` words (a shorter one is kept) hold more than ``1 - bound`` of the text's
    words, and when the text keeps less than half of ``kept_low``, the smallest share of the element's words
    a lesson kept (the article moved into a block the template used to drop).

    A block at a conflicting path is one trafilatura keeps on some pages and drops on others (an author's
    note, a teaser it takes for part of the article when the article is short). Kept, it adds at most its
    words' pairs to the text that trafilatura might not have: when they are at most ``ε = 1 - bound`` of
    the text, the replay's Jaccard with trafilatura's text stays at least ``1 / (1 + ε)``, near ``bound``,
    whichever trafilatura chose; a larger one makes the page trafilatura's."""
    prefixes = _prefixes(decisions)
    wobbly: list[int] = []

    def skip(path: str, element: Any) -> bool | None:
        keep = decisions.get(path)
        if keep is not None:
            return not keep
        if path in prefixes:
            return None  # a mixed block: its children are decided
        text = element.text(separator=" ")
        if not WORD.search(text):
            return True
        if path in conflicts:
            found = len(WORD.findall(text))
            if found > SHORT_CONFLICT_WORDS:
                wobbly.append(found)
            return False
        raise UndecidedBlock(path)

    try:
        text = block_text(article, skip)
    except UndecidedBlock:
        return None
    if wobbly and sum(wobbly) > (1.0 - bound) * len(WORD.findall(text)):
        return None
    if kept_low and _kept(text, article) < kept_low / 2:
        return None
    return text
