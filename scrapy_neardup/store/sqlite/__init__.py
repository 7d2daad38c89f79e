"""SQLite store: the embedded, on-disk default (one file per spider).

Layout (``FORMAT_VERSION`` 2, ``sqlite_layout`` 4)::

    meta(name TEXT PRIMARY KEY, value TEXT)                 -- format version and algorithm parameters (JSON)
    docs(id INTEGER PRIMARY KEY, key_hash INTEGER, key TEXT, canonical INTEGER, similarity REAL, sig BLOB,
         seen INTEGER,                                      -- seen: last filed or fetched again, Unix seconds
         body BLOB)                                         -- the digest of the page's bytes when filed
    buckets(bucket INTEGER, doc INTEGER, PRIMARY KEY (bucket, doc)) WITHOUT ROWID
    staged(doc INTEGER PRIMARY KEY, buckets BLOB)           -- bucket keys of documents not yet in ``buckets``

``key_hash`` is the 64-bit MurmurHash3 of the key, indexed instead of the URL text to keep the index small.
``bucket`` keeps the low 32 bits of the 64-bit bucket key, as a signed integer, which SQLite stores in 4
bytes instead of 8: with ~29 rows per document that is a tenth of the file. Two bucket keys that agree in
32 bits only add a candidate, which verification against its signature then rejects (at 10 million pages,
about one spurious candidate per 15 lookups).
A store of layout 3 (before ``body``) is upgraded at open by adding the column; its rows keep no digest.
``canonical`` is the ``id`` of the canonical document for a near-duplicate, NULL for a canonical one; only
canonical documents are filed in ``buckets``, and near-duplicates keep no signature.

Removal (:meth:`SqliteStore.remove`, :meth:`~SqliteStore.expire`) deletes rows of ``docs`` only: the
removed documents' rows in ``buckets`` and ``staged`` are skipped by every lookup (they join no canonical
document) until :meth:`~SqliteStore.purge` deletes them in one pass. Ids are never reused (the highest id
handed out is kept in ``meta`` as ``doc_id_high_water``), so a stale bucket row never points at another
document.

Why ``staged``: bucket keys are hashes, so a document's 29 rows land at random places of the ``buckets``
B-tree. Once the tree is larger than a commit, every row dirties a page of its own, written once to the
write-ahead log and once more into the file: ~200 KB of disk writes per document, which capped inserts
below 1,000 documents per second at 3 million documents. New documents are therefore *staged*: their keys
are appended to ``staged`` (one row per document, in id order, so appends are sequential) and held in
memory in a :class:`~scrapy_neardup.store.compact.LevelIndex`; lookups search both (``buckets`` only once
it holds a row: a store smaller than ``merge_min_docs`` never reads it). When the staged
documents reach an eighth of the store (at least ``merge_min_docs``, at most ``merge_max_docs``), they are
frozen, sorted by key, and merged into ``buckets`` a slice of consecutive keys at a time, by the writes that
follow (twice as many rows as each write stages, so one merge ends before the next is due): a slice falls on
a few neighbouring pages of the B-tree, each written once for many rows — the log-structured merge of
O'Neil et al. (1996) with one level on disk, spread out so that no write waits for a whole merge. The rows
of ``staged`` are deleted in the transaction that merges the last slice; at open, every row still in
``staged`` is loaded again, and rows of an interrupted merge that already reached ``buckets`` are ignored
when they are merged again, so a crash at any point loses nothing beyond the last batch.

The database runs in WAL mode. Writes are committed in batches of at most ``commit_every`` documents or
``commit_secs`` seconds, whichever comes first, so a crash loses at most the last batch and a kill never
corrupts the file (SQLite's journal guarantees that). One process at a time: the store takes an exclusive
lock on ``<file>.lock`` at open (beside the real file, symbolic links resolved, so that two paths to one
file share one lock), and a second process gets a :class:`StoreLockedError` that says so (several
processes share a Redis store instead).

Other people's data is never touched. The file carries the plugin's mark, ``PRAGMA application_id`` =
:data:`APPLICATION_ID` (the place SQLite reserves for it). Only an empty database, a database with that
mark, or one of an older version of this plugin (exactly its tables, with its ``format_version``) is
opened; anything else is refused before a single byte is written, ``NEARDUP_RESET`` included, which in
any case empties only the plugin's own tables. At open the store also writes its mark and commits, so a
file that cannot be written (read-only, on a read-only or full file system) is found before any page is
filed.

Every failure of SQLite or of the file system becomes a :class:`~.base.StoreError`. A failed write rolls
the open transaction back; the documents filed since the last commit are then lost, and the
:class:`~.base.StoreWriteError` counts them, so that no page is ever reported as filed when it is not.
"""

from .file import APPLICATION_ID, CorruptStoreError, ForeignDatabaseError, SqliteFile, StoreLockedError
from .store import SqliteStore

__all__ = [
    "APPLICATION_ID",
    "CorruptStoreError",
    "ForeignDatabaseError",
    "SqliteFile",
    "SqliteStore",
    "StoreLockedError",
]
