"""The store contract: what every backend (memory, SQLite, Redis) provides to the detector.

A store holds two things, as both index families need (MinHash LSH bands and SimHash permuted tables):

* documents: key (the URL) → signature bytes, and for a near-duplicate the key of its canonical page;
* buckets: a 64-bit bucket key → the canonical documents filed under it.

The detector does the algorithm; the store only files and finds. Check-and-insert is made atomic by
optimistic concurrency: :meth:`Store.lookup` returns the candidates together with a *token* describing
what it saw, and :meth:`Store.add` refuses (returns ``False``) when another writer has filed a document
in one of those buckets since. The detector then looks again, and so finds the other writer's page.
Single-writer backends (memory, SQLite under its file lock) can ignore the token.

Signatures are opaque bytes to the store. Nothing read from a store is ever unpickled or evaluated.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NamedTuple

import mmh3

from .parts import (
    BookShelf,
    GroupBudgets,
    InProcessBooks,
    InProcessBudgets,
    InProcessRuleCounts,
    InProcessRunning,
    InProcessSelectors,
    RunningCrawl,
    SelectorRecords,
    UrlRuleCounts,
)

if TYPE_CHECKING:  # the contract is read without numpy; backends take numpy arrays of bucket keys too
    import numpy as np

#: Version of the layout of records in every store; bumped on any incompatible change.
FORMAT_VERSION = 2
#: Bytes of a page's body digest kept with its record (:attr:`DocRecord.body`): the first bytes of a SHA-256.
#: It is compared only with the digest of the same key's next fetch, so finding other bytes that keep a
#: record's verdict means a second preimage of 64 bits, not a collision of any two pages.
BODY_DIGEST_BYTES = 8
#: Seed of the 64-bit MurmurHash3 of a document's key that every store indexes keys by: part of the format.
KEY_SEED = 0x4B45_5953


def key_hash(key: str) -> int:
    """The signed 64-bit MurmurHash3 of a document's key (``KEY_SEED``), as every store indexes it."""
    return mmh3.hash64(key, KEY_SEED, signed=True)[0]


class StoreError(Exception):
    """A store cannot be opened or used. Every backend raises this, and only this, for its driver's
    failures (I/O errors, a full disk, a corrupted file, a malformed record, a refused login), so that a
    caller can follow ``NEARDUP_ON_STORE_ERROR`` whatever the backend."""


class StoreUnavailableError(StoreError):
    """The store's server did not answer (down, restarting, loading its data): a later try may succeed."""


class StoreWriteError(StoreError):
    """A write failed and was rolled back. ``unsaved``: documents that had been given their verdict since
    the store's last durable commit and whose fingerprints were lost with it (a batching backend, SQLite,
    counts them; the others lose none)."""

    def __init__(self, message: str, unsaved: int = 0) -> None:
        super().__init__(message)
        self.unsaved = unsaved


class StoreMismatchError(StoreError):
    """The store was written with another format version or other algorithm parameters.

    ``location`` and ``differences`` (``"name: stored X, configured Y"``) let each front end say what to do
    in its own terms (a Scrapy setting, a CLI option)."""

    def __init__(
        self, message: str, location: str = "", differences: Sequence[str] = (), stored: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.location = location
        self.differences = tuple(differences)
        #: What the store recorded, name -> JSON value (for a caller that can adapt to it).
        self.stored = dict(stored or {})


@dataclass(frozen=True)
class DocRecord:
    """One filed document. A canonical one has ``canonical`` None and its ``signature``; a near-duplicate
    has the key of its ``canonical`` and, read for a lookup, that page's signature as
    ``canonical_signature`` (what a new fetch of the key is compared with: near-duplicates keep no
    signature of their own).

    ``body``: the digest of the bytes the page had when it was filed (:data:`BODY_DIGEST_BYTES`; ``None``
    where the caller gave none, or the record is of an older version of the plugin): a page fetched again
    with the same bytes is the page its verdict was made on, and keeps it.

    The one missing-canonical rule: a near-duplicate whose canonical has been removed is *orphaned*. Its
    verdict has lost its ground, so every backend reports it as such (``orphaned``, ``canonical`` None)
    and the detector treats its key as unknown: the page is checked afresh when it is fetched again, and
    its record replaced. Exports skip orphans; :meth:`Store.purge` deletes them.
    """

    key: str
    canonical: str | None
    similarity: float
    signature: bytes | None
    #: When the key was last filed or fetched again (Unix seconds); ``None`` where the store does not know.
    seen: float | None = None
    canonical_signature: bytes | None = None
    orphaned: bool = False
    #: Its canonical is itself a near-duplicate now: that group was re-pointed to a better copy
    #: (:meth:`Store.repoint`), and the group's page is found by following ``canonical`` on.
    chained: bool = False
    body: bytes | None = None

    @property
    def reference(self) -> bytes | None:
        """The signature a new fetch of this key is compared with: its own, or its canonical's."""
        return self.signature if self.canonical is None else self.canonical_signature


@dataclass(frozen=True)
class Candidate:
    """A canonical document sharing a bucket with a query. ``ref`` is the backend's own handle of it (Redis:
    its id), handed back in :attr:`Filing.canonical_ref` when a document is filed as its near-duplicate:
    what the caller needs travels with the candidate, no state is kept between calls."""

    key: str
    signature: bytes
    ref: Any = None


class Query(NamedTuple):
    """A document to look up: its key, signature and the bucket keys it is filed under, and the digest of
    its bytes (``body``, kept when the lookup files it at once)."""

    key: str
    signature: bytes | None
    buckets: Sequence[int] | np.ndarray
    body: bytes | None = None


class Filing(NamedTuple):
    """A document to file: canonical (``canonical`` None) or a near-duplicate of ``canonical`` (the
    :class:`Candidate`'s key, and its ``ref``) with ``similarity``; either with the ``token`` of its lookup,
    and the digest of its bytes (``body``, :attr:`DocRecord.body`)."""

    key: str
    signature: bytes | None
    buckets: Sequence[int] | np.ndarray
    canonical: str | None = None
    similarity: float = 1.0
    token: Any = None
    canonical_ref: Any = None
    body: bytes | None = None


class Added(IntEnum):
    """What became of a :class:`Filing`.

    ``STALE``: nothing was filed because what the lookup saw has changed: another writer filed a document
    in one of its buckets, or an earlier filing of the same batch did, or its canonical has been removed
    meanwhile (the one rule for a missing canonical). The caller looks again. ``KNOWN``: the key was filed
    meanwhile (by another writer or earlier in the batch); nothing changed."""

    FILED = 1
    STALE = 0
    KNOWN = -1


class BatchFiling:
    """The rules of filing a batch in order, for a backend that files it alone (memory, SQLite; the Redis
    store's scripts apply the same rules across processes): a key filed before, or earlier in the batch, is
    ``KNOWN``; a canonical filing that shares a bucket with an earlier canonical filing of the batch is
    ``STALE`` (that document may be its near-duplicate: the detector looks again and finds it); a
    near-duplicate whose canonical is gone is ``STALE``; anything else is ``FILED``."""

    def __init__(self) -> None:
        self._keys: set[str] = set()
        self._buckets: set[int] = set()

    def decide(self, key: str, known: bool, buckets: Sequence[int], canonical_alive: bool | None) -> Added:
        """What becomes of one filing: ``canonical_alive`` is ``None`` for a canonical filing, else whether its
        canonical is still filed as a canonical page. A ``FILED`` answer counts the filing as made."""
        if known or key in self._keys:
            return Added.KNOWN
        if canonical_alive is None:
            if not self._buckets.isdisjoint(buckets):
                return Added.STALE
            self._buckets.update(buckets)
        elif not canonical_alive:
            return Added.STALE
        self._keys.add(key)
        return Added.FILED


@dataclass(frozen=True)
class Lookup:
    """What :meth:`Store.lookup_many` found for one document.

    ``known``: the key is already filed (its record). ``filed``: nothing shared a bucket with the document,
    so it was filed as canonical at once. Otherwise ``candidates`` to verify, and the ``token`` to pass
    to :meth:`Store.add` when filing it as canonical after all.
    """

    known: DocRecord | None = None
    candidates: list[Candidate] = field(default_factory=list)
    token: Any = None
    filed: bool = False


class Store(ABC):
    """Abstract store. Backends are built from a URL by :func:`scrapy_neardup.store.store_from_url`, which
    finds them by the URL's scheme (:data:`scrapy_neardup.store.BACKENDS`) or takes ``NEARDUP_STORE_CLASS``;
    :meth:`from_url` builds one.

    A backend implements the batch calls (:meth:`lookup_many`, :meth:`add_many`), :meth:`get`,
    :meth:`count`, the ageing calls (:meth:`touch`, :meth:`remove`, :meth:`expire`) and the meta plumbing;
    :meth:`lookup` and :meth:`add` are one-document conveniences over the batch calls.
    """

    #: Human-readable location for log lines (path, URL without password, "memory").
    location: str = ""
    #: What the store keeps beside the fingerprints (:mod:`.parts`): the URL rules' counts, the groups'
    #: budgets, the learned selectors, the crawls' books and the processes crawling on it now. A backend
    #: shared by processes sets its own in its ``__init__``, after the base class's, which keeps them in this
    #: process only.
    rules: UrlRuleCounts
    budgets: GroupBudgets
    selectors: SelectorRecords
    books: BookShelf
    running: RunningCrawl

    def __init__(self) -> None:
        self.rules = InProcessRuleCounts()
        self.budgets = InProcessBudgets()
        self.selectors = InProcessSelectors()
        self.books = InProcessBooks()
        self.running = InProcessRunning()

    #: Whether every call returns within local I/O time (memory, a local file): such a store may be called
    #: on the thread that receives a worker's result. A networked one (Redis, which retries for seconds)
    #: gets a thread of its own, so that a slow store never holds up the workers' results.
    local: bool = False

    def open(self, meta: Mapping[str, Any], reset: bool = False) -> None:
        """Open the backend, then check ``meta`` against what the store recorded (or record it)."""
        self.connect()
        if reset:
            self.clear()
        stored = self.read_meta()
        wanted = {k: json.dumps(v, sort_keys=True) for k, v in meta.items()}
        if stored is None or (not stored and self.count() == 0):
            self.write_meta(wanted)
        else:
            check_meta(stored, wanted, self.location)
        self._opened()

    def open_existing(self) -> dict[str, Any]:
        """Open a store for maintenance (count, show, remove, expire) whatever parameters it was written
        with, and return them. Nothing is created: a location holding no store is a :class:`StoreError`."""
        self._create = False
        self.connect()
        stored = self.read_meta()
        if not stored:
            raise StoreError(f"{self.location} holds no scrapy-neardup store")
        self._opened()
        try:
            return {name: json.loads(value) for name, value in stored.items()}
        except ValueError as exc:
            raise StoreError(f"malformed parameters in the store at {self.location}: {exc}") from None

    #: Whether :meth:`connect` may create the store (not when it is opened for maintenance).
    _create = True

    def _opened(self) -> None:
        """Called once the store is open and its parameters accepted (a backend's own checks go here)."""

    @abstractmethod
    def connect(self) -> None: ...

    @abstractmethod
    def clear(self) -> None:
        """Delete every document, bucket and the recorded meta."""

    @abstractmethod
    def read_meta(self) -> dict[str, str] | None: ...

    @abstractmethod
    def write_meta(self, meta: Mapping[str, str]) -> None: ...

    @abstractmethod
    def count(self) -> int:
        """Number of documents stored (canonical and near-duplicate)."""

    @abstractmethod
    def get(self, key: str) -> DocRecord | None:
        """The record of a document by key, or ``None``."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Store:
        """The store ``url`` names (not yet open), with the options it takes of ``options`` (the others are
        ignored: one call builds any backend). ``options`` come from the settings: ``commit_every``,
        ``commit_secs`` (SQLite), ``prefix``, ``retries``, ``backoff_secs``, ``timeout_secs`` (Redis)."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from a URL")

    def lookup(self, buckets: Sequence[int]) -> tuple[list[Candidate], Any]:
        """Canonical documents filed under any of ``buckets`` (each once), and a concurrency token."""
        found = self.lookup_many([Query("", None, buckets)])[0]
        return found.candidates, found.token

    def add(
        self,
        key: str,
        signature: bytes | None,
        buckets: Sequence[int],
        canonical: str | None = None,
        similarity: float = 1.0,
        token: Any = None,
    ) -> bool:
        """File one document (see :meth:`add_many`); ``False`` when nothing was filed because the lookup
        the ``token`` came from is stale."""
        return self.add_many([Filing(key, signature, buckets, canonical, similarity, token)])[0] != Added.STALE

    @abstractmethod
    def lookup_many(self, queries: Sequence[Query], file_alone: bool = False) -> list[Lookup]:
        """For each query, in order: the key's record if it is known (and its last-seen time set to now, a
        lookup being a fetch; the record returned is the one before), else its candidates and a token. With
        ``file_alone``, a document that shares no bucket with any filed document, nor with an earlier
        document of the batch still waiting for its verdict, is filed as canonical on the spot (the common
        case, settled in one step): the batch is decided as its documents would be one by one, so a page is
        never filed ahead of an earlier near-duplicate of it. Backends with round-trip costs (Redis) answer a
        whole batch at once."""

    @abstractmethod
    def add_many(self, filings: Sequence[Filing]) -> list[Added]:
        """File documents, in order: a canonical one goes into its buckets, unless another document was
        filed there since its lookup (its token) or earlier in this batch; a near-duplicate is only
        recorded, unless its canonical is gone. See :class:`Added`."""

    def refile(self, key: str, signature: bytes, buckets: Sequence[int] | np.ndarray) -> bool:
        """Give the canonical document ``key`` a new signature and file it under ``buckets`` too.

        For the template guard: pages filed on a main text that turned out to be their host's template are
        re-filed on their page text. Old bucket entries may stay: every candidate is verified against its
        current signature, so a stale entry costs one comparison, never a wrong verdict. Returns ``False``
        (changing nothing) when ``key`` is unknown or is a near-duplicate.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot re-file documents")

    def repoint(self, old: str, new: str, similarity: float) -> bool:
        """Make the canonical document ``old`` a near-duplicate of the canonical document ``new`` (a better copy
        of its group, filed just before), atomically: ``old`` keeps its signature, so that its own
        near-duplicates, which still name it, are compared with what they were judged against, and it leaves
        the candidates of every lookup. Its group's pages are then found through it (:attr:`DocRecord.chained`).
        Returns ``False``, changing nothing, when either is unknown or not canonical any more (another process
        re-pointed it first). A backend that cannot re-point keeps every group's first canonical (the default).
        """
        return False

    def iter_records(self) -> Any:
        """Every document record but orphans (for clustering and export at the end of a crawl)."""
        raise NotImplementedError

    # -- ageing: recurring crawls ------------------------------------------------------------------
    @abstractmethod
    def touch(self, keys: Sequence[str]) -> None:
        """Set the last-seen time of the known ``keys`` to now (a re-crawl fetched them again)."""

    @abstractmethod
    def remove(self, keys: Sequence[str]) -> int:
        """Forget the documents ``keys`` (those filed); how many were. Near-duplicates of a removed
        canonical become orphans (see :class:`DocRecord`). The removed documents' bucket entries may stay
        until :meth:`purge`: every candidate is looked up by its record, so a stale entry is skipped, never
        a wrong verdict."""

    @abstractmethod
    def expire(self, before: float) -> int:
        """Remove every document last seen before ``before`` (Unix seconds); how many were."""

    def purge(self) -> int:
        """Delete what removals left behind: orphaned near-duplicates and bucket entries of removed
        documents (one pass over the store; a maintenance step, not per page). Returns the orphans
        deleted."""
        return 0

    def flush(self) -> None:
        """Make every write so far durable."""

    def close(self) -> None:
        """Flush and release the backend."""


#: How many re-pointed canonicals are followed to find a group's page (each re-point goes to a better copy
#: of a total order, so chains are short; a longer one is a damaged store).
MAX_CHAIN = 32


def group_of(store: Store, key: str) -> str | None:
    """The page of the group ``key`` is filed in: itself when it is canonical, else its canonical, followed
    through the canonicals whose groups were re-pointed to a better copy (:meth:`Store.repoint`); ``None``
    when it is not filed, or the chain ends in an orphan."""
    for _ in range(MAX_CHAIN):
        record = store.get(key)
        if record is None or record.orphaned:
            return None
        if record.canonical is None:
            return key
        key = record.canonical
    raise StoreError(f"the group of {key!r} is re-pointed more than {MAX_CHAIN} times")


#: Query parameters of a store URL whose values are secrets (redis-py reads ``?password=``).
_SECRET_PARAMS = ("password", "passwd", "pass", "pwd", "secret", "token", "auth", "ssl_password")


def redact_url(url: str) -> str:
    """``url`` with every credential replaced by ``***``: the password of its user part and the value of
    any secret query parameter (``?password=...``). Every log line, stat and message that shows a store
    URL shows it through this function."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        userinfo, _, host = netloc.rpartition("@")
        if userinfo:
            user, colon, _ = userinfo.partition(":")
            netloc = f"{user}:***@{host}" if colon else f"***@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(name.lower() in _SECRET_PARAMS for name, _ in pairs):
                query = urlencode([(n, "***" if n.lower() in _SECRET_PARAMS else v) for n, v in pairs], safe="*")
        if netloc == parts.netloc and query == parts.query:
            return url  # nothing secret: as given (urlunsplit would turn sqlite:///x into sqlite:/x)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:  # not parseable as a URL: show none of it rather than risk a secret
        return "(an unparseable URL)"


def check_meta(stored: Mapping[str, str], wanted: Mapping[str, str], location: str) -> None:
    """Refuse a store whose recorded format or parameters differ from the configured ones."""
    diffs = []
    for name in sorted(set(stored) | set(wanted)):
        if stored.get(name) != wanted.get(name):
            diffs.append(f"{name}: stored {stored.get(name, '(none)')}, configured {wanted.get(name, '(none)')}")
    if diffs:
        raise StoreMismatchError(mismatch_message(location, diffs), location, diffs, stored)


def mismatch_message(location: str, differences: Sequence[str]) -> str:
    """What a crawl is told about a store written with other parameters (``differences``)."""
    return (
        f"The near-duplicate store at {location} was written with other parameters ({'; '.join(differences)}). "
        "Its fingerprints cannot be compared with new ones. Set NEARDUP_RESET = True to empty it and start "
        "fresh, or set NEARDUP_STORE_URL to another location."
    )
