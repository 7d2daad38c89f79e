"""The store's Lua scripts, read from the package's ``lua/`` folder, and the wrapper that runs a group script
for several groups in one call."""

from __future__ import annotations

# --- Lua ---------------------------------------------------------------------------------------------
# The scripts are files of this package (scrapy_neardup/store/lua/*.lua), shipped with the wheel. A group
# script's body sees the group's tag '{B:g}' as ARGV[1] (see _for_groups: a call runs it for several
# groups); KEYS[1] is a key of the first group, what a cluster routes the call by. Blobs pack fixed-size
# entries; struct is Redis's Lua struct library.


def lua_script(name: str) -> str:
    """The text of script ``name`` (``lua/<name>.lua`` beside this module)."""
    from importlib.resources import files

    return files(__package__).joinpath("lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")


_FIND = lua_script("find")

# ARGV: tag, key queries (10 bytes each: u16 key bin, 8-byte key hash), bucket queries (5 bytes each: u16
# bin, 3-byte rest). Reply: {u32 id per key query (0: none), per bucket query u32 bin length and u16 number
# of ids found, the ids found (u32 each, query after query)}.
_LOOKUP = lua_script("lookup")

# ARGV: tag, now (4 bytes; empty: no touch), queries (5 bytes each: u32 id, u8 touch). Reply: per query u32
# length and the record (length 0: no record). A touched record's last-seen time is set to now in place
# (the reply has the record as it was).
_RECORDS = lua_script("records")

# KEYS[1]: P:meta. ARGV: P, n, now (ms), lease (ms). Reply: {first id, the first ids of the batches with
# lower ids in flight that have not appended to their buckets yet}. A batch in flight is "last deadline",
# then " a" once it has appended; "void expiry" once a waiter took it for dead (dropped after expiry).
_ALLOC = lua_script("alloc")

# KEYS[1]: P:meta. ARGV: P, now (ms), what ('appended': until they have appended; 'done': until they have
# left), then first ids of batches. Reply: those still to wait for. One past its lease deadline is marked
# void (its owner's commit will fail) and no longer waited for.
_WAIT = lua_script("wait")

# KEYS[1]: P:meta. ARGV: P, first id. The batch has appended to its buckets (waiters for that may go on).
_APPENDED = lua_script("appended")

# KEYS[1]: P:meta. ARGV: P, then ids. Reply: the first ids of the batches in flight that hold any of them.
_HOLDERS = lua_script("holders")

# KEYS[1]: P:meta. ARGV: P, first id, documents filed. Reply: 1 committed (or committed by an earlier try
# whose reply was lost), 0 the batch was made void.
_COMMIT = lua_script("commit")

# ARGV: tag, claims (18 bytes each: u16 key bin, 8-byte hash, u32 id, u32 id it may replace (0: none)),
# appends (13 bytes each: u16 bin, 3-byte rest, u32 id, u32 bin length seen at lookup or 0xFFFFFFFF), checks (u32 ids of
# canonicals that must still be canonical). Reply: {per claim '1' claimed | 'K' held by another id, the
# appends whose bins others appended to since the lookup (changed bins, below), per check '1' | '0'}.
# Entries are APPENDed, not rewritten: one native call per entry (a retried step whose first reply was lost
# appends an entry twice: 7 bytes, read once as a candidate).
_CLAIM = lua_script("claim")

# Changed bins, what _CLAIM's appends and _DELTA reply: what other documents appended to bins since a
# lookup, as one string: for each append (or read) whose bin has more, in order, its u32 index (0-based),
# the u32 length of the bytes appended since (0xFFFFFFFF: the bin shrank since the lookup, none follow),
# those bytes. Most have none.

# ARGV: tag, reads (6 bytes each: u16 bin, u32 length seen at lookup). Reply: changed bins (above).
_DELTA = lua_script("delta")

# ARGV: tag, records to write (u32 id, u32 length, record: each replaces the id's record, if any), ids whose
# records are deleted (u32 each), key entries to release (14 bytes each: u16 key bin, 8-byte hash, u32 id:
# deleted if that id still holds it). Reply: {records deleted, key entries released}.
_WRITE = lua_script("write")

# ARGV: tag, before (Unix seconds), record bin numbers (u32 each). Deletes the records last seen before
# `before`, atomically (a fetch may have touched one since it was listed). Reply: their ids and records.
_EXPIRE = lua_script("expire")

# ARGV: tag, a u16 bin number and the ids (u32 each) whose entries go, as one string. Reply: entries
# dropped. A bin left empty is deleted.
_PURGE = lua_script("purge")

# ARGV: tag, u32 id, u32 id of its new canonical, f32 similarity (12 bytes). Reply: 1 re-pointed, 0 not
# (the record is gone or no longer canonical).
_REPOINT = lua_script("repoint")

WRITE_META = lua_script("write_meta")

# KEYS[1]: P:budget. ARGV: group, key, budget. Run with EVAL (its body sent whole: no script cache needed).
ADMIT = lua_script("admit")
# KEYS[1]: P:selectors, KEYS[2]: P:selectors_changed. ARGV: name, JSON, ... Run with EVAL, as ADMIT.
SAVE_SELECTORS = lua_script("save_selectors")
# KEYS[1]: P:urlrules, KEYS[2]: P:urlrules_changed. ARGV: host<TAB>rule, successes, failures, ... Run with EVAL.
ADD_RULE_COUNTS = lua_script("add_rule_counts")
# KEYS[1]: P:running. ARGV: process, now (ms), stale (ms). Run with EVAL, as ADMIT.
JOIN_CRAWL = lua_script("join_crawl")


def _for_groups(body: str) -> str:
    """A group script run for several groups in one call: ARGV is the number of groups, then for each its
    tag and arguments (``width`` values in all, the same for every group); the reply has one reply per
    group. One server gets a whole step in one call; a cluster master, the groups it serves."""
    return (
        _FIND
        + "local function run(ARGV)\n"
        + body
        + """
end
local n, width, out = tonumber(ARGV[1]), tonumber(ARGV[2]), {}
for j = 0, n - 1 do
  local args = {}
  for i = 1, width do args[i] = ARGV[2 + j * width + i] end
  out[j + 1] = run(args)
end
return out
"""
    )


_GROUP_SCRIPTS = {
    "lookup": _LOOKUP,
    "records": _RECORDS,
    "claim": _CLAIM,
    "delta": _DELTA,
    "write": _WRITE,
    "expire": _EXPIRE,
    "purge": _PURGE,
    "repoint": _REPOINT,
}
SCRIPTS = {
    "alloc": _ALLOC,
    "wait": _WAIT,
    "commit": _COMMIT,
    "appended": _APPENDED,
    "holders": _HOLDERS,
    **{name: _for_groups(body) for name, body in _GROUP_SCRIPTS.items()},
}
