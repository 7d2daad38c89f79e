"""Redis store: one fingerprint index shared by many crawler processes and machines.

Key design (``P`` is the prefix from ``NEARDUP_REDIS_KEY``, by default ``neardup:{<spider>}``)::

    P:meta        hash    name -> value       format version and algorithm parameters (JSON strings)
    P:seq         string  last document id (INCR)
    P:keys        hash    key (URL) -> document id (decimal)
    P:docs        hash    document id -> record (binary, below)
    P:b           hash    bucket (its 8-byte key, little-endian) -> ids of its canonical documents
                          (8 bytes each, little-endian)

One hash holds every bucket, so a document's buckets are read with one HMGET and extended with one HSET.

The braces in the default prefix are a Redis Cluster *hash tag*: every key of one spider maps to the same
slot, so the Lua scripts below can touch them all atomically on a cluster too. (One spider's index then
lives on one shard; spread load across spiders, or across several ``NEARDUP_REDIS_KEY`` prefixes.)

Record layout (version 1), little-endian::

    u8 version | u64 canonical id (0: canonical itself) | f32 similarity | u16 signature length |
    signature bytes | key (UTF-8, to the end)

Nothing is pickled; a record that does not parse is an error, never code.

Atomic check-and-insert, in at most two script calls per batch of documents:

1. ``_LOOKUP`` answers each document: *known* (its key is filed: the record and its canonical's), *filed*
   (no document at all shares a bucket with it, so it was filed as canonical right there, atomically), or
   *candidates* (their records, and each bucket's length, ``STRLEN``, as the token).
2. The client verifies the candidates; ``_INSERT`` files the near-duplicates, and files a canonical only
   if its buckets still have the lengths seen in step 1. Otherwise another process filed a document there
   meanwhile, and the detector looks again.

Most documents of a crawl are settled in step 1. Arguments and replies travel as one binary string per
document (bucket keys packed 8 bytes each), so a batch costs a few large messages, not thousands of small
ones.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .base import Candidate, DocRecord, Lookup, Store, StoreError, check_meta, redact_url

logger = logging.getLogger(__name__)

RECORD_VERSION = 1
_HEADER = struct.Struct("<BQfH")
_U32 = struct.Struct("<I")
_CANDIDATE = struct.Struct("<qI")
_BUCKETS = np.dtype("<i8")

# ARGV: prefix, n, file_alone ('1' or '0'), then per document: key, buckets (8 bytes each), record.
# A document is filed alone only if no bucket of it is filed nor shared with an earlier document of the
# call that was not filed (it waits for its verdict and may be a near-duplicate of that one).
# Reply per document, one string: 'K' u32 len, record, canonical record | 'F' | 'C' u32 nb, nb x u32 lengths,
# then per candidate: i8 id, u32 len, record.
_LOOKUP = """
local p, n, file_alone = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local keys, docs = p .. ':keys', p .. ':docs'
local out, waiting = {}, {}
for item = 1, n do
  local base = 4 + (item - 1) * 3
  local key, buckets, record = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local nb = string.len(buckets) / 8
  local id = redis.call('HGET', keys, key)
  if id then
    local known = redis.call('HGET', docs, id) or ''
    local canon = ''
    if string.len(known) >= 9 then
      local cid = struct.unpack('<i8', string.sub(known, 2, 9))
      if cid ~= 0 then canon = redis.call('HGET', docs, tostring(cid)) or '' end
    end
    out[item] = 'K' .. struct.pack('<I4', string.len(known)) .. known .. canon
  else
    local fields = {}
    for b = 1, nb do fields[b] = string.sub(buckets, b * 8 - 7, b * 8) end
    local contents = nb > 0 and redis.call('HMGET', p .. ':b', unpack(fields)) or {}
    local lengths, total = {}, 0
    for b = 1, nb do
      local ids = contents[b] or ''
      contents[b] = ids
      lengths[b] = struct.pack('<I4', string.len(ids))
      total = total + string.len(ids)
    end
    local free = true
    for b = 1, nb do
      if waiting[fields[b]] then free = false end
    end
    if total == 0 and file_alone and free then
      local new = redis.call('INCR', p .. ':seq')
      redis.call('HSET', keys, key, new)
      redis.call('HSET', docs, new, record)
      if nb > 0 then
        local packed, update = struct.pack('<i8', new), {}
        for b = 1, nb do update[2 * b - 1] = fields[b]; update[2 * b] = packed end
        redis.call('HSET', p .. ':b', unpack(update))
      end
      out[item] = 'F'
    else
      for b = 1, nb do waiting[fields[b]] = true end
      local parts, seen = {'C', struct.pack('<I4', nb), table.concat(lengths)}, {}
      for b = 1, nb do
        local ids = contents[b]
        for off = 1, string.len(ids), 8 do
          local raw = string.sub(ids, off, off + 7)
          if not seen[raw] then
            seen[raw] = true
            local cand = redis.call('HGET', docs, tostring(struct.unpack('<i8', raw))) or ''
            parts[#parts + 1] = raw .. struct.pack('<I4', string.len(cand)) .. cand
          end
        end
      end
      out[item] = table.concat(parts)
    end
  end
end
return out
"""

# ARGV: prefix, n, then per document: key, canonical id ('0': file as canonical), buckets (8 bytes each),
# lengths seen at lookup (4 bytes each; empty: do not check), record.
# Reply: one character per document: '1' filed, '0' a bucket changed since the lookup, '-' key already filed.
_INSERT = """
local p, n = ARGV[1], tonumber(ARGV[2])
local keys, docs = p .. ':keys', p .. ':docs'
local out = {}
for item = 1, n do
  local base = 3 + (item - 1) * 5
  local key, canonical, buckets = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local lengths, record = ARGV[base + 3], ARGV[base + 4]
  local nb = string.len(buckets) / 8
  if redis.call('HEXISTS', keys, key) == 1 then
    out[item] = '-'
  else
    local fresh, fields, contents = true, {}, {}
    if canonical == '0' and nb > 0 then
      for b = 1, nb do fields[b] = string.sub(buckets, b * 8 - 7, b * 8) end
      contents = redis.call('HMGET', p .. ':b', unpack(fields))
      if string.len(lengths) > 0 then
        for b = 1, nb do
          if string.len(contents[b] or '') ~= struct.unpack('<I4', string.sub(lengths, b * 4 - 3, b * 4)) then
            fresh = false
            break
          end
        end
      end
    end
    if fresh then
      local new = redis.call('INCR', p .. ':seq')
      redis.call('HSET', keys, key, new)
      redis.call('HSET', docs, new, record)
      if canonical == '0' and nb > 0 then
        local packed, update = struct.pack('<i8', new), {}
        for b = 1, nb do update[2 * b - 1] = fields[b]; update[2 * b] = (contents[b] or '') .. packed end
        redis.call('HSET', p .. ':b', unpack(update))
      end
      out[item] = '1'
    else
      out[item] = '0'
    end
  end
end
return table.concat(out)
"""

# ARGV: prefix, key, record, buckets (8 bytes each). Reply: 1 re-filed, 0 unknown key or a near-duplicate.
_REFILE = """
local p, key, record, buckets = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local id = redis.call('HGET', p .. ':keys', key)
if not id then return 0 end
local old = redis.call('HGET', p .. ':docs', id) or ''
if string.len(old) < 9 or struct.unpack('<i8', string.sub(old, 2, 9)) ~= 0 then return 0 end
redis.call('HSET', p .. ':docs', id, record)
local packed = struct.pack('<i8', tonumber(id))
for b = 1, string.len(buckets) / 8 do
  local field = string.sub(buckets, b * 8 - 7, b * 8)
  local ids = redis.call('HGET', p .. ':b', field) or ''
  local present = false
  for off = 1, string.len(ids), 8 do
    if string.sub(ids, off, off + 7) == packed then present = true; break end
  end
  if not present then redis.call('HSET', p .. ':b', field, ids .. packed) end
end
return 1
"""

_WRITE_META = """
local key = ARGV[1]
if redis.call('EXISTS', key) == 0 then
  for i = 2, #ARGV, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
end
return redis.call('HGETALL', key)
"""


def pack_record(key: str, signature: bytes | None, canonical_id: int, similarity: float) -> bytes:
    sig = signature or b""
    return _HEADER.pack(RECORD_VERSION, canonical_id, similarity, len(sig)) + sig + key.encode("utf-8")


def unpack_record(data: bytes, where: str = "") -> tuple[str, bytes, int, float]:
    """``(key, signature, canonical id, similarity)`` of a record; raises :class:`StoreError` naming
    ``where`` (the hash and field it was read from) if it is malformed in any way."""
    if len(data) < _HEADER.size:
        raise StoreError(f"malformed record in the Redis store{where} (too short: {len(data)} bytes)")
    version, canonical_id, similarity, sig_len = _HEADER.unpack_from(data)
    if version != RECORD_VERSION or len(data) < _HEADER.size + sig_len:
        raise StoreError(f"unknown or malformed record in the Redis store{where} (version {version})")
    start = _HEADER.size
    try:
        key = data[start + sig_len :].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreError(f"malformed record in the Redis store{where} (its key is not UTF-8: {exc})") from None
    return key, data[start : start + sig_len], canonical_id, similarity


def pack_buckets(buckets: Sequence[int] | np.ndarray) -> bytes:
    return np.asarray(buckets, dtype=np.int64).astype(_BUCKETS, copy=False).tobytes()


class RedisStore(Store):
    """A store on a Redis server (``redis://``, ``rediss://`` for TLS, ``unix://``), via redis-py."""

    def __init__(self, url: str, prefix: str = "neardup:{spider}", retries: int = 3, backoff_secs: float = 0.2,
                 timeout_secs: float = 5.0) -> None:
        try:
            import redis
        except ImportError as exc:
            raise StoreError("The Redis store requires redis-py: pip install 'scrapy-neardup[redis]'") from exc
        self._redis_module = redis
        self.url = url
        self.prefix = prefix
        self.retries = retries
        self.backoff_secs = backoff_secs
        self.timeout_secs = timeout_secs
        self.location = redact_url(url) + f" (keys {prefix}:*)"
        self.client: Any = None
        self._lookup: Any = None
        self._insert: Any = None
        self._ids: dict[str, int] = {}  # candidate key -> id, from the last lookup (for near-duplicates)

    # -- plumbing ----------------------------------------------------------------------------------
    def _connect(self) -> None:
        redis = self._redis_module
        self.client = redis.Redis.from_url(
            self.url, socket_timeout=self.timeout_secs, socket_connect_timeout=self.timeout_secs
        )
        self._lookup = self.client.register_script(_LOOKUP)
        self._insert = self.client.register_script(_INSERT)
        self._refile = self.client.register_script(_REFILE)
        self._call(self.client.ping)
        # A store that cannot be written is found now, not after pages were given verdicts it cannot keep.
        replication = self._call(self.client.info, "replication")
        if replication.get("role") in ("slave", "replica"):
            raise StoreError(f"Redis at {self.location} is a read-only replica (of "
                             f"{replication.get('master_host')}:{replication.get('master_port')}): point "
                             "NEARDUP_STORE_URL at the master")

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a Redis call with bounded retries and exponential back-off on connection faults.

        Retrying a script is safe: a lookup changes nothing but what it files, and a document filed by an
        attempt whose reply was lost is then *known* to the next attempt, never filed twice.
        """
        redis = self._redis_module
        refused = (redis.exceptions.AuthenticationError,
                   getattr(redis.exceptions, "AuthorizationError", redis.exceptions.AuthenticationError))
        delay = self.backoff_secs
        for attempt in range(self.retries + 1):
            try:
                return fn(*args, **kwargs)
            except refused as exc:
                # redis-py files a refused login under ConnectionError: retrying cannot help, say what it is.
                raise StoreError(f"Redis at {self.location} refused the credentials: {exc}") from exc
            except redis.ResponseError as exc:
                if str(exc).startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
                    raise StoreError(f"Redis at {self.location} refused the credentials: {exc}") from exc
                raise StoreError(f"Redis error at {self.location}: {exc}") from exc
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
                if attempt == self.retries:
                    raise StoreError(f"Redis at {self.location} unreachable after {attempt + 1} tries: {exc}") from exc
                logger.debug("Redis call failed (%s); retrying in %.2fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
            except redis.RedisError as exc:
                raise StoreError(f"Redis error at {self.location}: {exc}") from exc
        raise AssertionError("unreachable")

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # -- meta --------------------------------------------------------------------------------------
    def _clear(self) -> None:
        self._call(self.client.delete, *(self._key(n) for n in ("meta", "seq", "keys", "docs", "b")))

    def _read_meta(self) -> dict[str, str] | None:
        raw = self._call(self.client.hgetall, self._key("meta"))
        if not raw:
            return None
        return self._decode_meta(raw.items())

    def _decode_meta(self, pairs: Any) -> dict[str, str]:
        try:
            return {k.decode(): v.decode() for k, v in pairs}
        except UnicodeDecodeError:
            raise StoreError(f"malformed parameters in the Redis store ({self._key('meta')} is not UTF-8)") from None

    def _write_meta(self, meta: Mapping[str, str]) -> None:
        # One script: when several processes open an empty store at once, the first one's meta is
        # written whole, and every other process is checked against it, never against half of it.
        args: list[str] = [self._key("meta")]
        for name, value in meta.items():
            args += [name, value]
        raw = self._call(self.client.eval, _WRITE_META, 0, *args)
        stored = self._decode_meta(zip(raw[0::2], raw[1::2]))
        check_meta(stored, meta, self.location)

    # -- documents ---------------------------------------------------------------------------------
    def count(self) -> int:
        return int(self._call(self.client.hlen, self._key("keys")))

    def get(self, key: str) -> DocRecord | None:
        return self.lookup_many([(key, None, [])])[0].known

    def lookup(self, buckets: Sequence[int]) -> tuple[list[Candidate], Any]:
        result = self.lookup_many([("", None, buckets)])[0]
        return result.candidates, result.token

    def lookup_many(self, items: Sequence[tuple[str, bytes | None, Sequence[int]]], file_alone: bool = False,
                    ) -> list[Lookup]:
        self._ids.clear()
        args: list[Any] = [self.prefix, len(items), "1" if file_alone else "0"]
        packed = []
        for key, signature, buckets in items:
            blob = pack_buckets(buckets)
            packed.append(blob)
            args += [key, blob, pack_record(key, signature, 0, 1.0) if file_alone else b""]
        replies = self._call(self._lookup, keys=[], args=args)
        out: list[Lookup] = []
        for (key, _, _), blob, reply in zip(items, packed, replies):
            kind = reply[:1]
            if kind == b"F":
                out.append(Lookup(None, [], None, filed=True))
            elif kind == b"K":
                (size,) = _U32.unpack_from(reply, 1)
                where = f" ({self._key('docs')}, the record of {key!r})"
                _, sig, _, sim = unpack_record(reply[5 : 5 + size], where)
                canon = reply[5 + size :]
                canonical = (unpack_record(canon, f" ({self._key('docs')}, the canonical of {key!r})")[0]
                             if canon else None)
                out.append(Lookup(DocRecord(key, canonical, sim, sig or None)))
            else:
                (nb,) = _U32.unpack_from(reply, 1)
                lengths = reply[5 : 5 + 4 * nb]
                pos, candidates = 5 + 4 * nb, []
                while pos < len(reply):
                    cand_id, size = _CANDIDATE.unpack_from(reply, pos)
                    pos += _CANDIDATE.size
                    if size:
                        cand_key, sig, _, _ = unpack_record(reply[pos : pos + size],
                                                            f" ({self._key('docs')} field {cand_id})")
                        self._ids[cand_key] = cand_id
                        candidates.append(Candidate(cand_key, sig))
                    pos += size
                out.append(Lookup(None, candidates, (blob, lengths)))
        return out

    def add(
        self,
        key: str,
        signature: bytes | None,
        buckets: Sequence[int],
        canonical: str | None = None,
        similarity: float = 1.0,
        token: Any = None,
    ) -> bool:
        return self.add_many([(key, signature, buckets, canonical, similarity, token)])[0] != 0

    def add_many(self, items: Sequence[tuple[str, bytes | None, Sequence[int], str | None, float, Any]]) -> list[int]:
        """File several documents in one round trip. Per item: 1 filed, 0 stale token, -1 key known."""
        args: list[Any] = [self.prefix, len(items)]
        for key, signature, buckets, canonical, similarity, token in items:
            if canonical is None:
                blob, lengths = token if token is not None else (pack_buckets(buckets), b"")
                args += [key, "0", blob, lengths, pack_record(key, signature, 0, similarity)]
            else:
                canonical_id = self._ids.get(canonical)
                if canonical_id is None:  # not from the last lookup: one more round trip
                    raw = self._call(self.client.hget, self._key("keys"), canonical)
                    if raw is None:
                        raise StoreError(f"canonical {canonical!r} is not in the store")
                    try:
                        canonical_id = int(raw)
                    except ValueError:
                        raise StoreError(f"malformed document id {raw!r} in the Redis store "
                                         f"({self._key('keys')} field {canonical!r})") from None
                args += [key, str(canonical_id), b"", b"", pack_record(key, None, canonical_id, similarity)]
        reply = self._call(self._insert, keys=[], args=args)
        return [{49: 1, 48: 0, 45: -1}[c] for c in reply]

    def refile(self, key: str, signature: bytes, buckets: Sequence[int] | np.ndarray) -> bool:
        record = pack_record(key, signature, 0, 1.0)
        args = [self.prefix, key, record, pack_buckets(buckets)]
        return bool(self._call(self._refile, keys=[], args=args))

    def iter_records(self) -> Iterator[DocRecord]:
        docs = self._key("docs")
        by_id: dict[int, tuple[str, bytes, int, float]] = {}
        for raw_id, record in self._call(lambda: list(self.client.hscan_iter(docs, count=10_000))):
            by_id[int(raw_id)] = unpack_record(record, f" ({docs} field {raw_id!r})")
        for _, (key, sig, canonical_id, sim) in sorted(by_id.items()):
            canonical = by_id[canonical_id][0] if canonical_id else None
            yield DocRecord(key, canonical, sim, sig or None)

