"""The two digest spellings: ``sha256-<hex>`` hashes and ``sha256:<hex>`` fingerprints."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from markproto.protocol.digests import (
    fingerprint,
    hash_ref,
    hash_ref_of_hex,
    is_fingerprint,
    is_hash_ref,
)

HEX = "d303ac20bae997a124b4c11a7965c058deb699024dc2a62de2ddf2de56fa3e93"


def test_hash_ref_and_fingerprint_spell_one_digest_two_ways() -> None:
    assert hash_ref(b"storetest-write-token") == f"sha256-{HEX}"
    assert hash_ref_of_hex(HEX) == f"sha256-{HEX}"
    assert fingerprint(b"storetest-write-token") == f"sha256:{HEX}"


@pytest.mark.parametrize(
    ("text", "is_hash"),
    [
        (f"sha256-{HEX}", True),
        (f"sha256-{HEX.upper()}", False),
        (f"SHA256-{HEX}", False),
        (f"sha256-{HEX[:-1]}", False),
        (f"sha256-{HEX}0", False),
        (f"sha256-{HEX}\n", False),
        (f"/sha256-{HEX}", False),
        ("", False),
    ],
)
def test_is_hash_ref(text: str, is_hash: bool) -> None:
    assert is_hash_ref(text) is is_hash
    assert is_fingerprint(text.replace("sha256-", "sha256:", 1)) is is_hash
    assert not is_fingerprint(text) and not is_hash_ref(text.replace("sha256-", "sha256:", 1))


@given(st.binary())
def test_what_is_written_is_recognised(data: bytes) -> None:
    assert is_hash_ref(hash_ref(data))
    assert is_fingerprint(fingerprint(data))
    assert hash_ref(data) == hash_ref_of_hex(hashlib.sha256(data).hexdigest())
