"""The books of a crawl: what one crawl process fetched, dropped, avoided and spent, kept in the store beside
the fingerprints so that ``scrapy-neardup report`` and ``store show`` can say what each crawl did (not what all
crawls added up to). A record is JSON with known fields, read back field by field: nothing is unpickled or
evaluated, and a record of a later version with more fields still reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields

#: Crawls a store keeps the books of (the oldest are forgotten).
KEPT_CRAWLS = 200
#: Soft-404 pages, and requests the URL rules kept from the crawl, that a crawl process names in its books
#: (``store show`` finds them; all are counted).
NAMED_SOFT404 = 10_000
NAMED_PREDICTED = 10_000


@dataclass(frozen=True)
class Soft404Page:
    """A page called soft-404: alike (``similarity``) its host's answer for ``answered``, a URL that
    cannot exist."""

    url: str
    answered: str
    similarity: float


@dataclass(frozen=True)
class PredictedPage:
    """A request the URL rules kept from the crawl: ``url`` becomes ``becomes`` by ``rules``; ``group``, the
    page its group reaches the spider through (fetched in its place when it was not fetched yet)."""

    url: str
    becomes: str
    group: str
    rules: tuple[str, ...]


@dataclass(frozen=True)
class CrawlBooks:
    """One crawl process's books. ``started``/``finished``: Unix seconds; ``process``: host and pid.
    ``fetches``/``fetched_bytes``: the responses the crawl downloaded; ``fetches_avoided``: requests the URL rules
    left unfetched, ``bytes_avoided`` their estimated size (the mean response of their host in this crawl);
    ``cpu_seconds``: CPU the plugin spent (extraction and fingerprints in its workers, decisions in the
    crawler process). ``hosts``: per host, ``soft404`` pages and ``avoided`` fetches; the soft-404 pages and the
    requests the rules kept from the crawl, named (the first of each)."""

    started: float
    finished: float
    process: str = ""
    checked: int = 0
    unique: int = 0
    duplicates: int = 0
    seen: int = 0
    soft404: int = 0
    dropped: int = 0
    fetches: int = 0
    fetched_bytes: int = 0
    fetches_avoided: int = 0
    bytes_avoided: int = 0
    cpu_seconds: float = 0.0
    soft404_hosts: int = 0
    hosts: dict[str, dict[str, int]] = field(default_factory=dict)
    soft404_pages: tuple[Soft404Page, ...] = ()
    predicted_pages: tuple[PredictedPage, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> CrawlBooks | None:
        """The books a stored record holds; ``None`` for a record that is not books of this shape."""
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict):
                return None
            known = {f.name for f in fields(cls)}
            values = {k: v for k, v in raw.items() if k in known}
            pages = tuple(
                Soft404Page(str(p["url"]), str(p["answered"]), float(p["similarity"]))
                for p in values.pop("soft404_pages", ())
            )
            predicted = tuple(
                PredictedPage(str(p["url"]), str(p["becomes"]), str(p["group"]), tuple(map(str, p["rules"])))
                for p in values.pop("predicted_pages", ())
            )
            hosts = {
                str(host): {str(k): int(v) for k, v in counts.items()}
                for host, counts in dict(values.pop("hosts", {})).items()
            }
            books = cls(**values, hosts=hosts, soft404_pages=pages, predicted_pages=predicted)
            float(books.started), float(books.finished), int(books.checked)  # the types a reader relies on
            return books
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def crawls_of(books: Iterable[CrawlBooks]) -> list[list[CrawlBooks]]:
    """The books grouped by crawl, oldest first: the processes of one distributed crawl run at the same
    time, so books whose time spans overlap belong to one crawl."""
    runs: list[list[CrawlBooks]] = []
    end = float("-inf")
    for entry in sorted(books, key=lambda b: (b.started, b.finished)):
        if runs and entry.started <= end:
            runs[-1].append(entry)
            end = max(end, entry.finished)
        else:
            runs.append([entry])
            end = entry.finished
    return runs


def added_up(run: Iterable[CrawlBooks]) -> CrawlBooks:
    """One crawl's processes' books as one."""
    run = list(run)
    hosts: dict[str, dict[str, int]] = {}
    for entry in run:
        for host, counts in entry.hosts.items():
            mine = hosts.setdefault(host, {})
            for name, number in counts.items():
                mine[name] = mine.get(name, 0) + number
    numbers = (
        "checked unique duplicates seen soft404 dropped fetches fetched_bytes fetches_avoided bytes_avoided cpu_seconds"
    ).split()
    total: Mapping[str, float] = {name: sum(getattr(entry, name) for entry in run) for name in numbers}
    return CrawlBooks(
        min(entry.started for entry in run),
        max(entry.finished for entry in run),
        f"{len(run)} process{'es' if len(run) != 1 else ''}",
        **{name: (float(v) if name == "cpu_seconds" else int(v)) for name, v in total.items()},  # type: ignore[arg-type]
        soft404_hosts=sum(1 for counts in hosts.values() if counts.get("soft404")),
        hosts=hosts,
        soft404_pages=tuple(page for entry in run for page in entry.soft404_pages),
        predicted_pages=tuple(page for entry in run for page in entry.predicted_pages),
    )
