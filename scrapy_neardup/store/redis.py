"""Redis store: one fingerprint index shared by many crawler processes and machines.

Key design (``P`` is the prefix from ``NEARDUP_REDIS_KEY``, by default ``neardup:{<spider>}``)::

    P:meta        hash    name -> value       format version and algorithm parameters (JSON strings)
    P:seq         string  last document id (INCR)
    P:keys        hash    key (URL) -> document id (decimal)
    P:docs        hash    document id -> record (binary, below)
    P:b:<hex16>   string  the ids (8 bytes each, little-endian) of the canonical documents in one bucket

The braces in the default prefix are a Redis Cluster *hash tag*: every key of one spider maps to the same
slot, so the Lua scripts below can touch them all atomically on a cluster too. (One spider's index then
lives on one shard; spread load across spiders, or across several ``NEARDUP_REDIS_KEY`` prefixes.)

Record layout (version 1), little-endian::

    u8 version | u64 canonical id (0: canonical itself) | f32 similarity | u16 signature length |
    signature bytes | key (UTF-8, to the end)

Nothing is pickled; a record that does not parse is an error, never code.

Atomic check-and-insert: a lookup returns, for each bucket, the candidates and the bucket's length
(``STRLEN``) as the token. The insert script re-reads those lengths and files the document only if none
changed; otherwise another process filed a document in one of the buckets since, and the detector looks
again. Lookups and inserts go in batches, one script call per batch, so a process is not bound by
round-trip latency.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .base import Candidate, DocRecord, Store, StoreError, check_meta

logger = logging.getLogger(__name__)

RECORD_VERSION = 1
_HEADER = struct.Struct("<BQfH")
_ID = struct.Struct("<q")

# KEYS: none (all keys derive from the prefix in ARGV[1], which carries the hash tag).
# ARGV: prefix, n_items, then for each item: key, n_buckets, bucket names...
# Returns for each item: {known_record_or_false, canonical_record_or_false, {lengths}, {id, record, ...}}
_LOOKUP = """
local p = ARGV[1]
local n = tonumber(ARGV[2])
local out = {}
local i = 3
for item = 1, n do
  local key = ARGV[i]
  local nb = tonumber(ARGV[i + 1])
  i = i + 2
  local known, canon = false, false
  local id = redis.call('HGET', p .. ':keys', key)
  if id then
    known = redis.call('HGET', p .. ':docs', id) or false
    if known then
      local cid = struct.unpack('<i8', string.sub(known, 2, 9))
      if cid ~= 0 then canon = redis.call('HGET', p .. ':docs', tostring(cid)) or false end
    end
  end
  local lengths = {}
  local seen = {}
  local cands = {}
  for b = 1, nb do
    local bucket = p .. ':b:' .. ARGV[i]
    i = i + 1
    local ids = redis.call('GET', bucket) or ''
    lengths[b] = string.len(ids)
    if known == false then
      for off = 1, string.len(ids), 8 do
        local cid = tostring(struct.unpack('<i8', string.sub(ids, off, off + 7)))
        if not seen[cid] then
          seen[cid] = true
          cands[#cands + 1] = cid
          cands[#cands + 1] = redis.call('HGET', p .. ':docs', cid) or ''
        end
      end
    end
  end
  out[item] = {known, canon, lengths, cands}
end
return out
"""

# ARGV: prefix, n_items, then for each item:
#   key, record_without_id_fields..., canonical_id ('0' for a canonical), n_buckets, (bucket, length)...
# A canonical item is filed only if every bucket still has the length seen at lookup (-1: not checked).
# Returns per item: 1 filed, 0 stale token (retry), -1 key already known.
_INSERT = """
local p = ARGV[1]
local n = tonumber(ARGV[2])
local out = {}
local i = 3
for item = 1, n do
  local key, record, canonical = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local nb = tonumber(ARGV[i + 3])
  local first = i + 4
  i = first + 2 * nb
  if redis.call('HEXISTS', p .. ':keys', key) == 1 then
    out[item] = -1
  else
    local fresh = true
    if canonical == '0' then
      for b = 0, nb - 1 do
        local bucket = p .. ':b:' .. ARGV[first + 2 * b]
        local seen_length = tonumber(ARGV[first + 2 * b + 1])
        if seen_length >= 0 and redis.call('STRLEN', bucket) ~= seen_length then fresh = false break end
      end
    end
    if fresh then
      local id = redis.call('INCR', p .. ':seq')
      redis.call('HSET', p .. ':keys', key, id)
      redis.call('HSET', p .. ':docs', id, record)
      if canonical == '0' then
        local packed = struct.pack('<i8', id)
        for b = 0, nb - 1 do
          redis.call('APPEND', p .. ':b:' .. ARGV[first + 2 * b], packed)
        end
      end
      out[item] = 1
    else
      out[item] = 0
    end
  end
end
return out
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


def unpack_record(data: bytes) -> tuple[str, bytes, int, float]:
    """``(key, signature, canonical id, similarity)`` of a record; raises :class:`StoreError` if malformed."""
    if len(data) < _HEADER.size:
        raise StoreError("malformed record in the Redis store (too short)")
    version, canonical_id, similarity, sig_len = _HEADER.unpack_from(data)
    if version != RECORD_VERSION or len(data) < _HEADER.size + sig_len:
        raise StoreError(f"unknown or malformed record in the Redis store (version {version})")
    start = _HEADER.size
    return data[start + sig_len :].decode("utf-8"), data[start : start + sig_len], canonical_id, similarity


def bucket_name(bucket: int) -> str:
    return format(int(bucket) & 0xFFFFFFFFFFFFFFFF, "016x")


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
        self.location = _redact(url) + f" (keys {prefix}:*)"
        self.client: Any = None
        self._lookup: Any = None
        self._insert: Any = None
        self._ids: dict[str, int] = {}  # key -> id of candidates seen in the last lookup (canonical ids for add)
        self.retried = 0

    # -- plumbing ----------------------------------------------------------------------------------
    def _connect(self) -> None:
        redis = self._redis_module
        self.client = redis.Redis.from_url(
            self.url, socket_timeout=self.timeout_secs, socket_connect_timeout=self.timeout_secs
        )
        self._lookup = self.client.register_script(_LOOKUP)
        self._insert = self.client.register_script(_INSERT)
        self._call(self.client.ping)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a Redis call with bounded retries and exponential back-off on connection faults."""
        redis = self._redis_module
        delay = self.backoff_secs
        for attempt in range(self.retries + 1):
            try:
                return fn(*args, **kwargs)
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
                if attempt == self.retries:
                    raise StoreError(f"Redis at {self.location} unreachable after {attempt + 1} tries: {exc}") from exc
                self.retried += 1
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
        names = [self._key(n) for n in ("meta", "seq", "keys", "docs")]
        self._call(self.client.delete, *names)
        pattern = self._key("b:*").replace("{", "\\{").replace("}", "\\}")
        batch: list[bytes] = []
        for name in self._call(lambda: list(self.client.scan_iter(match=pattern, count=10_000))):
            batch.append(name)
            if len(batch) >= 10_000:
                self._call(self.client.delete, *batch)
                batch = []
        if batch:
            self._call(self.client.delete, *batch)

    def _read_meta(self) -> dict[str, str] | None:
        raw = self._call(self.client.hgetall, self._key("meta"))
        if not raw:
            return None
        return {k.decode(): v.decode() for k, v in raw.items()}

    def _write_meta(self, meta: Mapping[str, str]) -> None:
        # One script: when several processes open an empty store at once, the first one's meta is
        # written whole, and every other process is checked against it, never against half of it.
        args: list[str] = [self._key("meta")]
        for name, value in meta.items():
            args += [name, value]
        raw = self._call(self.client.eval, _WRITE_META, 0, *args)
        stored = {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)}
        check_meta(stored, meta, self.location)

    # -- documents ---------------------------------------------------------------------------------
    def count(self) -> int:
        return int(self._call(self.client.hlen, self._key("keys")))

    def get(self, key: str) -> DocRecord | None:
        result = self.lookup_many([(key, [])])[0]
        return result[0]

    def lookup(self, buckets: Sequence[int]) -> tuple[list[Candidate], Any]:
        known, candidates, token = self.lookup_many([("", buckets)])[0]
        return candidates, token

    def lookup_many(
        self, items: Sequence[tuple[str, Sequence[int]]]
    ) -> list[tuple[DocRecord | None, list[Candidate], Any]]:
        """For each ``(key, buckets)``: the key's record if known, else the candidates and a token."""
        self._ids.clear()
        args: list[Any] = [self.prefix, len(items)]
        names_per_item = []
        for key, buckets in items:
            names = [bucket_name(b) for b in buckets]
            names_per_item.append(names)
            args += [key, len(names), *names]
        replies = self._call(self._lookup, keys=[], args=args)
        out: list[tuple[DocRecord | None, list[Candidate], Any]] = []
        for (key, _), names, (known, canon, lengths, flat) in zip(items, names_per_item, replies):
            if known:
                _, sig, canonical_id, sim = unpack_record(known)
                canonical_key = unpack_record(canon)[0] if canon else None
                out.append((DocRecord(key, canonical_key, sim, sig or None), [], None))
                continue
            candidates = []
            for j in range(0, len(flat), 2):
                if not flat[j + 1]:
                    continue
                cand_key, sig, _, _ = unpack_record(flat[j + 1])
                self._ids[cand_key] = int(flat[j])
                candidates.append(Candidate(cand_key, sig))
            out.append((None, candidates, list(zip(names, lengths))))
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
                # No token: file unconditionally (length -1 is not checked).
                pairs = token if token is not None else [(bucket_name(b), -1) for b in buckets]
                args += [key, pack_record(key, signature, 0, similarity), "0", len(pairs)]
                for name, length in pairs:
                    args += [name, length]
            else:
                canonical_id = self._ids.get(canonical)
                if canonical_id is None:  # not from the last lookup: one more round trip
                    raw = self._call(self.client.hget, self._key("keys"), canonical)
                    if raw is None:
                        raise StoreError(f"canonical {canonical!r} is not in the store")
                    canonical_id = int(raw)
                args += [key, pack_record(key, None, canonical_id, similarity), str(canonical_id), 0]
        return [int(r) for r in self._call(self._insert, keys=[], args=args)]

    def iter_records(self) -> Iterator[DocRecord]:
        docs = self._key("docs")
        by_id: dict[int, tuple[str, bytes, int, float]] = {}
        for raw_id, record in self._call(lambda: list(self.client.hscan_iter(docs, count=10_000))):
            by_id[int(raw_id)] = unpack_record(record)
        for _, (key, sig, canonical_id, sim) in sorted(by_id.items()):
            canonical = by_id[canonical_id][0] if canonical_id else None
            yield DocRecord(key, canonical, sim, sig or None)


def _redact(url: str) -> str:
    """The URL without its password, for log lines."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = f"{parts.username or ''}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url
