"""Redis store: one fingerprint index shared by many crawler processes and machines, one Redis server or
a Redis Cluster, in about 570 bytes of Redis memory per page (MinHash-128 at a million pages).

Layout 4. ``P`` is the prefix from ``NEARDUP_REDIS_KEY`` (by default ``neardup:{<spider>}``; its braces are a
Redis Cluster *hash tag*), ``B`` the same prefix without its braces. Four small keys share ``P``'s slot::

    P:meta     hash    name -> value: the algorithm parameters (JSON), the layout (below)
    P:seq      string  the last document id given out (INCRBY)
    P:count    string  documents filed
    P:flight   hash    first id of a batch being filed -> "last id, lease deadline (ms)[, a]", or "void ..."

Everything else lives in *groups*, 64 hash tags ``{B:g}`` or ``{B:g.n}`` (``group_tags``: group ``g`` has a
slot of its own in the ``g``-th 64th of the slots, so a cluster's masters share the groups as they share the
slots), in strings packed end to end (bins). A bin's
name ends in its number as raw little-endian bytes (u16; u32 for records), so the scripts cut names from
their arguments without formatting numbers::

    {B:g}:b:<bin>   buckets: 7-byte entries, 3 bytes of the bucket key (below) and the u32 id of a document
    {B:g}:k:<bin>   keys: 12-byte entries, the 64-bit MurmurHash3 of a key (the URL) and its u32 id
    {B:g}:r:<n>     records of ids 64n … 64n+63 (group n mod 64): u8 id mod 64, u16 length, the record

A bucket key is spread by Fibonacci hashing (``m = key * 0x9E3779B97F4A7C15 mod 2^64``): its top 6 bits pick
the group, the next ones the bin (12 by default: ``NEARDUP_REDIS_BUCKET_BINS``), the next 24 are the entry's
3 bytes. Two bucket keys that share those bits share entries; a candidate is always verified against its
signature, so that costs a comparison, never a verdict. A record (little-endian)::

    u8 version (3) | u32 canonical id (0: canonical itself) | f32 similarity | u32 last seen (Unix seconds) |
    u16 signature length | signature bytes | key (UTF-8, to the end)

Version 4 is the record of a page filed with the digest of its bytes: after the header, u8 digest length and
the digest, then the signature and the key as in version 3. The scripts read and patch the header only.

Measured at a million pages (``bench/redis_layouts.py``): Redis keeps a hash field in 82 bytes of overhead
and a string key in ~70, a byte of a string in one; hence bins. Record bins, most of the bytes, are written
whole at their exact size (``APPEND`` grows a string by doubling it); bucket and key entries are appended,
one native call each, whose slack costs a few bytes a page. Nothing is pickled; a record that does not
parse is an error, never code.

**Check-and-insert across shards.** What is atomic is one command, and one script on one server, so a
batch goes in steps. A step is one call per server (on a cluster, one per master for the groups it serves,
sent to every master at once; a script without a shebang may touch any slot its server holds):

1. *Lookup*: the key bins and bucket bins the batch needs, read whole by plain MGETs (atomic per group)
   and matched here, or, once bins average over 128 bytes, scanned by Redis (``_LOOKUP``, atomic per
   call): each key's id; each bucket's entries and the length of its bin (the *token*). Then
   the records of the known ids and of the candidates (``_RECORDS``). Ids met without a record belong to a
   batch still filing (waited for, ``_HOLDERS``, then read again) or were left behind (skipped).
2. *Ids* (``_ALLOC``, ``P``'s slot): INCRBY gives the batch consecutive ids, and the batch is entered in
   ``P:flight`` with a lease. The reply names the batches with lower ids in flight that have not appended.
3. *Claim and append* (``_CLAIM``): each key claims its key entry (refused if another id holds it: KNOWN);
   each canonical document APPENDs its entry to its buckets' bins and gets back what other documents
   appended there since its lookup (APPEND is atomic per bin, which is all the argument below needs);
   near-duplicates check that their canonical is still canonical. Then the batch is marked as having
   appended (``_APPENDED``).
4. *Wait* (``_WAIT``): if step 2 named batches, until each has appended (or is past its lease: then marked
   void), then the buckets are read again since the lookup (``_DELTA``).
5. *Verdicts*: a canonical document with an entry of a *lower* id in one of its buckets that its lookup did
   not see is STALE (the detector looks again and finds that document); otherwise it is filed. Higher ids
   are not its business: their owners wait for this batch to append and will see it.
6. *Records* (``_WRITE``): the records of the filed documents; the claims of the others are released.
7. *Commit* (``_COMMIT``, ``P``'s slot): the batch leaves ``P:flight``. If a waiter had marked it void (its
   lease ran out), its records are deleted again and every document is STALE.

Why one canonical survives two processes filing near-duplicates ``d`` (id i) and ``e`` (id j < i) at the
same instant: they share a bucket. If ``e``'s batch had not appended when ``d`` got its ids, ``d`` waits
until it has and reads the bucket again, finding j; if it had, j was in the bucket before ``d`` appended, so
``d``'s append returns j, unless ``d``'s lookup saw j already, and then j was a candidate, verified (its
record read after waiting for ``e``'s batch if need be). Either way ``d`` does not become a second
canonical: STALE, its next lookup waits for ``e``'s batch and verifies ``e``. Ids come from one counter, so
every pair is decided like this, without a lock.

What a crash leaves: a batch that dies between steps 2 and 7 stays in ``P:flight`` until its lease runs out
(``lease_secs``, 30 s by default); a waiter then marks it void and goes on. Its bucket entries and key
claims stay behind: bucket entries without a record are skipped by every lookup, a claim without a record
is taken over by the next writer of that key (whose lookup waited for the dead batch), and :meth:`purge`
deletes both. Every step may be retried whole when its reply was lost: the claims and writes find their
own work, and an append made twice leaves a duplicate 7-byte entry, read as one candidate.

Removal deletes a document's key entry and record; its bucket entries stay (skipped) until :meth:`purge`.
Ids are never reused. A store of another layout is refused at open, with what to do.
"""

from .codec import RECORD_VERSION, pack_record, unpack_record
from .layout import CLUSTER_SLOTS, LAYOUT, KeyLayout, cluster_slot, group_tags
from .scripts import lua_script
from .store import RedisStore
from .transport import RedisErrors

__all__ = [
    "CLUSTER_SLOTS",
    "LAYOUT",
    "RECORD_VERSION",
    "RedisErrors",
    "RedisStore",
    "KeyLayout",
    "lua_script",
    "cluster_slot",
    "group_tags",
    "pack_record",
    "unpack_record",
]
