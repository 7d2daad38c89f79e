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

Record layout (version 2), little-endian::

    u8 version | u64 canonical id (0: canonical itself) | f32 similarity | u32 last seen (Unix seconds) |
    u16 signature length | signature bytes | key (UTF-8, to the end)

Version 1 records (written before last-seen times existed) lack the ``u32``; they are read as seen when the
store was first opened by a version that knows them (``P:meta`` field ``records_seen_since``), and are
rewritten as version 2 when they are next fetched. Nothing is pickled; a record that does not parse is an
error, never code.

Removal deletes a document's ``P:keys`` field and record; its id stays in the bucket strings it was filed
in, where lookups skip it (the id has no record), until :meth:`RedisStore.purge` rewrites them. Ids come
from ``INCR`` and are never reused.

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
from urllib.parse import unquote, urlsplit

import numpy as np

from .base import Added, Candidate, DocRecord, Filing, Lookup, Query, Store, StoreError, check_meta, redact_url

logger = logging.getLogger(__name__)

RECORD_VERSION = 2
_HEADER = struct.Struct("<BQfIH")
_HEADER_V1 = struct.Struct("<BQfH")
#: ``P:meta`` field: when version 1 records count as last seen (not one of the parameters checked at open).
_SEEN_SINCE = "records_seen_since"
_U32 = struct.Struct("<I")
_CANDIDATE = struct.Struct("<qI")
_BUCKETS = np.dtype("<i8")

# Lua: a record with its last-seen time set to ``now`` (4 bytes), a version 1 record rewritten as version 2.
_WITH_SEEN = """
local function with_seen(record, now)
  if string.byte(record, 1) == 1 then
    return string.char(2) .. string.sub(record, 2, 13) .. now .. string.sub(record, 14)
  end
  return string.sub(record, 1, 13) .. now .. string.sub(record, 18)
end
"""

# ARGV: prefix, n, file_alone ('1' or '0'), now (4 bytes; empty: leave last-seen times alone), then per
# document: key, buckets (8 bytes each), record. A known document's last-seen time is set to now.
# A document is filed alone only if no bucket of it is filed nor shared with an earlier document of the
# call that was not filed (it waits for its verdict and may be a near-duplicate of that one).
# Reply per document, one string: 'K' u32 len, record, canonical record | 'F' | 'C' u32 nb, nb x u32 lengths,
# then per candidate: i8 id, u32 len, record.
_LOOKUP = _WITH_SEEN + """
local p, n, file_alone, now = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4]
local keys, docs = p .. ':keys', p .. ':docs'
local out, waiting = {}, {}
for item = 1, n do
  local base = 5 + (item - 1) * 3
  local key, buckets, record = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local nb = string.len(buckets) / 8
  local id = redis.call('HGET', keys, key)
  if id then
    local known = redis.call('HGET', docs, id) or ''
    if string.len(known) >= 15 and string.len(now) == 4 then
      redis.call('HSET', docs, id, with_seen(known, now))  -- the reply keeps the record as it was
    end
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
# Reply: one character per document: '1' filed, '0' a bucket changed since the lookup or the canonical is
# gone, '-' key already filed.
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
    if canonical ~= '0' then
      -- a near-duplicate: its canonical must still be filed, and canonical (the one rule for a missing one)
      local crec = redis.call('HGET', docs, canonical)
      fresh = crec ~= false and string.len(crec) >= 9 and struct.unpack('<i8', string.sub(crec, 2, 9)) == 0
    end
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

# ARGV: prefix, then keys. Reply: how many were filed (and are now removed).
_REMOVE = """
local p, removed = ARGV[1], 0
for i = 2, #ARGV do
  local id = redis.call('HGET', p .. ':keys', ARGV[i])
  if id then
    redis.call('HDEL', p .. ':keys', ARGV[i])
    redis.call('HDEL', p .. ':docs', id)
    removed = removed + 1
  end
end
return removed
"""

# ARGV: prefix, before (Unix seconds), seen since (for version 1 records), then ids. Removes each of those
# documents still last seen before ``before`` (checked here, atomically: a fetch may have touched it since
# the scan), and near-duplicates whose canonical is gone (orphans) when ``before`` is 'orphans'.
_EXPIRE = """
local p, before, since = ARGV[1], ARGV[2], tonumber(ARGV[3])
local removed = 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local record = redis.call('HGET', p .. ':docs', id)
  if record and string.len(record) >= 15 then
    local gone
    if before == 'orphans' then
      local cid = struct.unpack('<i8', string.sub(record, 2, 9))
      gone = cid ~= 0 and redis.call('HEXISTS', p .. ':docs', tostring(cid)) == 0
    else
      local seen = since
      if string.byte(record, 1) ~= 1 then seen = struct.unpack('<I4', string.sub(record, 14, 17)) end
      gone = seen < tonumber(before)
    end
    if gone then
      local header = string.byte(record, 1) == 1 and 15 or 19
      local key = string.sub(record, header + 1 + struct.unpack('<I2', string.sub(record, header - 1, header)))
      if redis.call('HGET', p .. ':keys', key) == id then redis.call('HDEL', p .. ':keys', key) end
      redis.call('HDEL', p .. ':docs', id)
      removed = removed + 1
    end
  end
end
return removed
"""

# ARGV: prefix, then bucket fields. Drops from each bucket the ids that have no record; an empty bucket goes.
_PURGE_BUCKETS = """
local p, dropped = ARGV[1], 0
for i = 2, #ARGV do
  local ids = redis.call('HGET', p .. ':b', ARGV[i]) or ''
  local kept = {}
  for off = 1, string.len(ids), 8 do
    local raw = string.sub(ids, off, off + 7)
    if redis.call('HEXISTS', p .. ':docs', tostring(struct.unpack('<i8', raw))) == 1 then
      kept[#kept + 1] = raw
    else
      dropped = dropped + 1
    end
  end
  if #kept == 0 then
    redis.call('HDEL', p .. ':b', ARGV[i])
  elseif #kept * 8 < string.len(ids) then
    redis.call('HSET', p .. ':b', ARGV[i], table.concat(kept))
  end
end
return dropped
"""

# ARGV: prefix, now (4 bytes), then keys: their last-seen times set to now.
_TOUCH = _WITH_SEEN + """
local p, now = ARGV[1], ARGV[2]
for i = 3, #ARGV do
  local id = redis.call('HGET', p .. ':keys', ARGV[i])
  local record = id and redis.call('HGET', p .. ':docs', id)
  if record and string.len(record) >= 15 then redis.call('HSET', p .. ':docs', id, with_seen(record, now)) end
end
return 0
"""

_WRITE_META = """
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then
  for i = 1, #ARGV, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
end
return redis.call('HGETALL', key)
"""


def _now() -> bytes:
    return _U32.pack(int(time.time()))


def pack_record(key: str, signature: bytes | None, canonical_id: int, similarity: float,
                seen: float | None = None) -> bytes:
    sig = signature or b""
    seen = time.time() if seen is None else seen
    return _HEADER.pack(RECORD_VERSION, canonical_id, similarity, int(seen), len(sig)) + sig + key.encode("utf-8")


def unpack_record(data: bytes, where: str = "") -> tuple[str, bytes, int, float, float | None]:
    """``(key, signature, canonical id, similarity, last seen)`` of a record (last seen ``None`` for a
    version 1 record); raises :class:`StoreError` naming ``where`` (the hash and field it was read from)
    if it is malformed in any way."""
    version = data[0] if data else 0
    header = _HEADER_V1 if version == 1 else _HEADER
    if len(data) < header.size:
        raise StoreError(f"malformed record in the Redis store{where} (too short: {len(data)} bytes)")
    if version == 1:
        _, canonical_id, similarity, sig_len = _HEADER_V1.unpack_from(data)
        seen: float | None = None
    else:
        version, canonical_id, similarity, seen_secs, sig_len = _HEADER.unpack_from(data)
        seen = float(seen_secs)
    if version not in (1, RECORD_VERSION) or len(data) < header.size + sig_len:
        raise StoreError(f"unknown or malformed record in the Redis store{where} (version {version})")
    start = header.size
    try:
        key = data[start + sig_len :].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreError(f"malformed record in the Redis store{where} (its key is not UTF-8: {exc})") from None
    return key, data[start : start + sig_len], canonical_id, similarity, seen


def pack_buckets(buckets: Sequence[int] | np.ndarray) -> bytes:
    return np.asarray(buckets, dtype=np.int64).astype(_BUCKETS, copy=False).tobytes()


class RedisStore(Store):
    """A store on a Redis server (``redis://``, ``rediss://`` for TLS, ``unix://``), via redis-py."""


    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        wanted = ("prefix", "retries", "backoff_secs", "timeout_secs")
        return cls(url, **{k: v for k, v in options.items() if k in wanted})

    def __init__(self, url: str, prefix: str = "neardup:{spider}", retries: int = 3, backoff_secs: float = 0.2,
                 timeout_secs: float = 5.0) -> None:
        try:
            import redis
        except ImportError as exc:
            raise StoreError("The Redis store requires redis-py: pip install 'scrapy-neardup[redis]'") from exc
        self._redis_module = redis
        errors = redis.exceptions
        #: A refused login (redis-py files it under ConnectionError): never retried.
        self._refused = (errors.AuthenticationError, getattr(errors, "AuthorizationError", errors.AuthenticationError))
        #: Replies of a cluster in failover: retried like a lost connection.
        self._transient = tuple(getattr(errors, name) for name in ("ClusterDownError", "TryAgainError",
                                                                     "MasterDownError") if hasattr(errors, name))
        self.url = url
        self.prefix = prefix
        self.retries = retries
        self.backoff_secs = backoff_secs
        self.timeout_secs = timeout_secs
        self.location = redact_url(url) + f" (keys {prefix}:*)"
        #: ``redis+cluster://host:port[,host:port...]/``: a Redis Cluster through redis-py's cluster client.
        #: Every key of a spider shares the prefix's hash tag, so one slot (one shard) holds its index.
        self.cluster = url.lower().startswith("redis+cluster://")
        #: The key every script declares: a cluster client sends the script to the node of its slot.
        self._slot_key = [f"{prefix}:meta"]
        self.client: Any = None
        self._lookup: Any = None
        self._insert: Any = None
        self._seen_since = 0.0  # when version 1 records count as last seen

    # -- plumbing ----------------------------------------------------------------------------------
    def _connect(self) -> None:
        redis = self._redis_module
        if self.cluster:
            from redis.cluster import ClusterNode, RedisCluster

            parts = urlsplit(self.url)
            user, _, password = parts.netloc.rpartition("@")[0].partition(":")
            nodes = []
            for address in parts.netloc.rpartition("@")[2].split(","):
                host, _, port = address.rpartition(":")
                nodes.append(ClusterNode(host or "127.0.0.1", int(port or 6379)))
            self.client = RedisCluster(
                startup_nodes=nodes, username=unquote(user) or None, password=unquote(password) or None,
                socket_timeout=self.timeout_secs, socket_connect_timeout=self.timeout_secs,
            )
        else:
            self.client = redis.Redis.from_url(
                self.url, socket_timeout=self.timeout_secs, socket_connect_timeout=self.timeout_secs
            )
        self._lookup = self.client.register_script(_LOOKUP)
        self._insert = self.client.register_script(_INSERT)
        self._refile = self.client.register_script(_REFILE)
        self._remove = self.client.register_script(_REMOVE)
        self._expire = self.client.register_script(_EXPIRE)
        self._purge_buckets = self.client.register_script(_PURGE_BUCKETS)
        self._touch = self.client.register_script(_TOUCH)
        self._call(self.client.ping)
        if self.cluster:
            return  # the cluster client sends writes to the masters
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
        delay = self.backoff_secs
        for attempt in range(self.retries + 1):
            try:
                return fn(*args, **kwargs)
            except self._refused as exc:
                # redis-py files a refused login under ConnectionError: retrying cannot help, say what it is.
                raise StoreError(f"Redis at {self.location} refused the credentials: {exc}") from exc
            except redis.ResponseError as exc:
                if str(exc).startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
                    raise StoreError(f"Redis at {self.location} refused the credentials: {exc}") from exc
                if not isinstance(exc, self._transient):
                    raise StoreError(f"Redis error at {self.location}: {exc}") from exc
                failure, state = exc, "unavailable"  # a cluster in failover: a master down, slots moving
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
                failure, state = exc, "unreachable"
            except redis.RedisError as exc:
                raise StoreError(f"Redis error at {self.location}: {exc}") from exc
            if attempt == self.retries:
                raise StoreError(f"Redis at {self.location} {state} after {attempt + 1} tries: {failure}") from failure
            logger.debug("Redis call failed (%s); retrying in %.2fs", failure, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
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
        meta = self._decode_meta(raw.items())
        since = meta.pop(_SEEN_SINCE, None)
        try:
            self._seen_since = float(since) if since is not None else time.time()
        except ValueError:
            raise StoreError(f"malformed {_SEEN_SINCE} in {self._key('meta')}: {since!r}") from None
        return meta

    def _opened(self) -> None:
        # Version 1 records (from before last-seen times) count as seen now: the first time a version that
        # keeps the times opened the store. HSETNX: the first process to get here sets it for all.
        self._call(self.client.hsetnx, self._key("meta"), _SEEN_SINCE, str(int(time.time())))
        self._seen_since = float(self._call(self.client.hget, self._key("meta"), _SEEN_SINCE))

    def _decode_meta(self, pairs: Any) -> dict[str, str]:
        try:
            return {k.decode(): v.decode() for k, v in pairs}
        except UnicodeDecodeError:
            raise StoreError(f"malformed parameters in the Redis store ({self._key('meta')} is not UTF-8)") from None

    def _write_meta(self, meta: Mapping[str, str]) -> None:
        # One script: when several processes open an empty store at once, the first one's meta is
        # written whole, and every other process is checked against it, never against half of it.
        args: list[str] = []
        for name, value in meta.items():
            args += [name, value]
        raw = self._call(self.client.eval, _WRITE_META, 1, self._key("meta"), *args)
        stored = self._decode_meta(zip(raw[0::2], raw[1::2]))
        stored.pop(_SEEN_SINCE, None)
        check_meta(stored, meta, self.location)

    # -- documents ---------------------------------------------------------------------------------
    def count(self) -> int:
        return int(self._call(self.client.hlen, self._key("keys")))

    def get(self, key: str) -> DocRecord | None:
        return self._lookup_many([Query(key, None, [])], False, touch=False)[0].known

    def lookup_many(self, queries: Sequence[Query], file_alone: bool = False) -> list[Lookup]:
        return self._lookup_many(queries, file_alone, touch=True)

    def _lookup_many(self, items: Sequence[Query], file_alone: bool, touch: bool) -> list[Lookup]:
        args: list[Any] = [self.prefix, len(items), "1" if file_alone else "0", _now() if touch else b""]
        packed = []
        for key, signature, buckets in items:
            blob = pack_buckets(buckets)
            packed.append(blob)
            args += [key, blob, pack_record(key, signature, 0, 1.0) if file_alone else b""]
        replies = self._call(self._lookup, keys=self._slot_key, args=args)
        out: list[Lookup] = []
        for (key, _, _), blob, reply in zip(items, packed, replies):
            kind = reply[:1]
            if kind == b"F":
                out.append(Lookup(None, [], None, filed=True))
            elif kind == b"K":
                (size,) = _U32.unpack_from(reply, 1)
                where = f" ({self._key('docs')}, the record of {key!r})"
                _, sig, canonical_id, sim, seen = unpack_record(reply[5 : 5 + size], where)
                seen = self._seen_since if seen is None else seen
                canon = reply[5 + size :]
                if not canonical_id:
                    record = DocRecord(key, None, sim, sig or None, seen)
                elif not canon:
                    record = DocRecord(key, None, sim, None, seen, orphaned=True)
                else:
                    canonical, canonical_sig, *_ = unpack_record(
                        canon, f" ({self._key('docs')}, the canonical of {key!r})")
                    record = DocRecord(key, canonical, sim, None, seen, canonical_sig or None)
                out.append(Lookup(record))
            else:
                (nb,) = _U32.unpack_from(reply, 1)
                lengths = reply[5 : 5 + 4 * nb]
                pos, candidates = 5 + 4 * nb, []
                while pos < len(reply):
                    cand_id, size = _CANDIDATE.unpack_from(reply, pos)
                    pos += _CANDIDATE.size
                    if size:
                        cand_key, sig, *_ = unpack_record(reply[pos : pos + size],
                                                            f" ({self._key('docs')} field {cand_id})")
                        candidates.append(Candidate(cand_key, sig, cand_id))
                    pos += size
                out.append(Lookup(None, candidates, (blob, lengths)))
        return out

    def add_many(self, filings: Sequence[Filing]) -> list[Added]:
        """File several documents in one round trip (see :meth:`Store.add_many`)."""
        args: list[Any] = [self.prefix, len(filings)]
        for key, signature, buckets, canonical, similarity, token, canonical_ref in filings:
            if canonical is None:
                blob, lengths = token if token is not None else (pack_buckets(buckets), b"")
                args += [key, "0", blob, lengths, pack_record(key, signature, 0, similarity)]
            else:
                canonical_id = canonical_ref if canonical_ref is not None else self._id_of(canonical)
                args += [key, str(canonical_id or -1), b"", b"", pack_record(key, None, canonical_id or 0, similarity)]
        reply = self._call(self._insert, keys=self._slot_key, args=args)
        return [{49: Added.FILED, 48: Added.STALE, 45: Added.KNOWN}[c] for c in reply]

    def _id_of(self, key: str) -> int | None:
        """The id of a filed key (one round trip), ``None`` when it is not filed."""
        raw = self._call(self.client.hget, self._key("keys"), key)
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError:
            raise StoreError(f"malformed document id {raw!r} in the Redis store "
                             f"({self._key('keys')} field {key!r})") from None

    def refile(self, key: str, signature: bytes, buckets: Sequence[int] | np.ndarray) -> bool:
        record = pack_record(key, signature, 0, 1.0)
        args = [self.prefix, key, record, pack_buckets(buckets)]
        return bool(self._call(self._refile, keys=self._slot_key, args=args))

    def _records(self) -> dict[int, tuple[str, bytes, int, float, float | None]]:
        """Every record by id (one pass over ``P:docs``)."""
        docs = self._key("docs")
        return {int(raw_id): unpack_record(record, f" ({docs} field {raw_id!r})")
                for raw_id, record in self._call(lambda: list(self.client.hscan_iter(docs, count=10_000)))}

    def iter_records(self) -> Iterator[DocRecord]:
        by_id = self._records()
        for _, (key, sig, canonical_id, sim, seen) in sorted(by_id.items()):
            seen = self._seen_since if seen is None else seen
            if not canonical_id:
                yield DocRecord(key, None, sim, sig or None, seen)
            elif canonical_id in by_id:  # an orphan (its canonical removed) is skipped
                yield DocRecord(key, by_id[canonical_id][0], sim, None, seen, by_id[canonical_id][1] or None)

    # -- ageing --------------------------------------------------------------------------------------
    _BATCH = 1_000  # ids or fields per script call in a maintenance pass

    def touch(self, keys: Sequence[str]) -> None:
        if keys:
            self._call(self._touch, keys=self._slot_key, args=[self.prefix, _now(), *keys])

    def remove(self, keys: Sequence[str]) -> int:
        return sum(int(self._call(self._remove, keys=self._slot_key, args=[self.prefix, *keys[i : i + self._BATCH]]))
                   for i in range(0, len(keys), self._BATCH))

    def _expire_ids(self, before: str, ids: list[int]) -> int:
        return sum(int(self._call(self._expire, keys=self._slot_key,
                                  args=[self.prefix, before, int(self._seen_since), *ids[i : i + self._BATCH]]))
                   for i in range(0, len(ids), self._BATCH))

    def expire(self, before: float) -> int:
        since = self._seen_since
        old = [doc for doc, (*_, seen) in self._records().items() if (since if seen is None else seen) < before]
        return self._expire_ids(str(before), old)

    def purge(self) -> int:
        by_id = self._records()
        orphans = self._expire_ids("orphans", [doc for doc, (_, _, cid, _, _) in by_id.items()
                                               if cid and cid not in by_id])
        buckets = self._key("b")
        fields = [field for field, _ in self._call(lambda: list(self.client.hscan_iter(buckets, count=10_000)))]
        for i in range(0, len(fields), self._BATCH):
            self._call(self._purge_buckets, keys=self._slot_key, args=[self.prefix, *fields[i : i + self._BATCH]])
        return orphans

