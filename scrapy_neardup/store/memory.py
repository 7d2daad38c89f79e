"""In-process store: dictionaries, gone when the process ends. For tests, one-off jobs and the batch CLI."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .base import Candidate, DocRecord, Store


class MemoryStore(Store):
    location = "memory"

    def __init__(self) -> None:
        self._meta: dict[str, str] | None = None
        self._ids: dict[str, int] = {}
        self._keys: list[str] = []
        self._signatures: list[bytes | None] = []
        self._canonical: list[int] = []
        self._similarity: list[float] = []
        self._buckets: dict[int, list[int]] = {}

    def _connect(self) -> None:
        pass

    def _clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _read_meta(self) -> dict[str, str] | None:
        return self._meta

    def _write_meta(self, meta: Mapping[str, str]) -> None:
        self._meta = dict(meta)

    def count(self) -> int:
        return len(self._keys)

    def get(self, key: str) -> DocRecord | None:
        doc = self._ids.get(key)
        if doc is None:
            return None
        canonical = self._canonical[doc]
        return DocRecord(
            key,
            None if canonical < 0 else self._keys[canonical],
            self._similarity[doc],
            self._signatures[doc],
        )

    def lookup(self, buckets: Sequence[int]) -> tuple[list[Candidate], Any]:
        seen: set[int] = set()
        out = []
        for bucket in buckets:
            for doc in self._buckets.get(bucket, ()):
                if doc not in seen:
                    seen.add(doc)
                    out.append(Candidate(self._keys[doc], self._signatures[doc]))  # type: ignore[arg-type]
        return out, None

    def add(
        self,
        key: str,
        signature: bytes | None,
        buckets: Sequence[int],
        canonical: str | None = None,
        similarity: float = 1.0,
        token: Any = None,
    ) -> bool:
        if key in self._ids:
            return True
        doc = len(self._keys)
        self._ids[key] = doc
        self._keys.append(key)
        self._signatures.append(signature)
        self._canonical.append(-1 if canonical is None else self._ids[canonical])
        self._similarity.append(similarity)
        if canonical is None:
            for bucket in buckets:
                self._buckets.setdefault(int(bucket), []).append(doc)
        return True

    def iter_records(self) -> Iterator[DocRecord]:
        for key in self._keys:
            record = self.get(key)
            assert record is not None
            yield record
