"""The protocol's two spellings of a SHA-256 digest, each written and recognised here only.

* A **hash** (SPEC §1.1) is ``sha256-`` + 64 lowercase hex digits: a content hash, a version's
  ``previous-hash``, a token's hash in ``tokens.toml``, and the path ``/sha256-…`` that fetches
  content by its hash.
* A **fingerprint** (SPEC §1.5) is ``sha256:`` + 64 lowercase hex digits of a certificate's DER
  bytes: what the server prints at startup and what a client pins in ``known_hosts``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

__all__ = [
    "FINGERPRINT_PATTERN",
    "HASH_PREFIX",
    "fingerprint",
    "hash_ref",
    "hash_ref_of_hex",
    "is_fingerprint",
    "is_hash_ref",
]

HASH_PREFIX: Final = "sha256-"
FINGERPRINT_PATTERN: Final = "sha256:[0-9a-f]{64}"
"""A fingerprint as a regular-expression fragment, for line formats that embed one."""
_HASH = re.compile(r"sha256-[0-9a-f]{64}")
_FINGERPRINT = re.compile(FINGERPRINT_PATTERN)


def hash_ref(data: bytes) -> str:
    """``sha256-`` + hex SHA-256 of ``data``."""
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()


def hash_ref_of_hex(hexdigest: str) -> str:
    """The hash whose digest is already known in hex (an etag names the version it hashes)."""
    return HASH_PREFIX + hexdigest


def is_hash_ref(text: str) -> bool:
    """Exactly ``sha256-`` and 64 lowercase hex digits (upper case is not a hash)."""
    return _HASH.fullmatch(text) is not None


def fingerprint(der: bytes) -> str:
    """``sha256:`` + lowercase hex SHA-256 of a certificate's DER bytes."""
    return "sha256:" + hashlib.sha256(der).hexdigest()


def is_fingerprint(text: str) -> bool:
    return _FINGERPRINT.fullmatch(text) is not None
