"""An exact content hash of the normalised token sequence: identical text only. The baseline every crawler has."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .base import Algorithm, AlgorithmSettings, Fingerprint, words


class ExactHash(Algorithm):
    """Identical normalised text. Signature: 16 bytes (two 64-bit halves of a hash of the token hashes)."""

    name = "exact"
    FIXED_THRESHOLD = True
    DEFAULT_THRESHOLD = 1.0
    DEFAULT_SHINGLE_SIZE = 1

    @classmethod
    def from_settings(cls, settings: AlgorithmSettings) -> ExactHash:
        return cls()

    def __init__(self) -> None:
        self.threshold = 1.0

    def params(self) -> dict[str, Any]:
        return {"algorithm": self.name}

    def fingerprint(self, text: str) -> Fingerprint:
        digest = hashlib.blake2b(words(text).astype("<u8").tobytes(), digest_size=16).digest()
        return Fingerprint(digest, np.frombuffer(digest[:8], dtype="<i8").astype(np.int64))

    def similarity(self, a: bytes, b: bytes) -> float:
        return 1.0 if a == b else 0.0
