"""The status vocabulary, error titles and fixed messages (SPEC §3.3, §3.4)."""

from __future__ import annotations

import pytest

from markproto.protocol import status
from markproto.protocol.status import SUCCESS, Status, title


def test_the_thirteen_statuses_and_no_others() -> None:
    assert [s.value for s in Status] == [
        "ok",
        "created",
        "not-modified",
        "not-found",
        "archived",
        "unauthorized",
        "not-permitted",
        "conflict",
        "bad-request",
        "server-error",
        "rate-limited",
        "resync",
        "closing",
    ]
    assert "too-large" not in set(Status)
    assert "unavailable" not in set(Status)


def test_statuses_are_plain_strings_on_the_wire() -> None:
    assert Status("not-found") is Status.NOT_FOUND
    assert "not-found" in set(Status)
    assert f"{Status.BAD_REQUEST}" == "bad-request"


def test_success_is_ok_created_not_modified() -> None:
    assert {"ok", "created", "not-modified"} == SUCCESS
    assert "conflict" not in SUCCESS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not-found", "Not found"),
        ("bad-request", "Bad request"),
        ("server-error", "Server error"),
        ("not-permitted", "Not permitted"),
        ("unauthorized", "Unauthorized"),
        ("archived", "Archived"),
        ("rate-limited", "Rate limited"),
        ("conflict", "Conflict"),
        ("", ""),
    ],
)
def test_title(value: str, expected: str) -> None:
    assert title(value) == expected


def test_fixed_messages_match_the_reference_text() -> None:
    assert status.BAD_REQUEST_MESSAGE == "bad request"
    assert status.READ_FAILED == "could not read request"
    assert status.AUTH_REQUIRED == "authentication required"
    assert status.INSUFFICIENT == "insufficient permissions"
    assert status.READ_ONLY == "server is read-only"
    assert status.TOO_LARGE == "content exceeds size limit"
    assert status.INTERNAL == "internal error"
    assert status.HASH_PATH_RESERVED == "paths matching /sha256-<hash> are reserved"
    assert status.PUBLISH_NEEDS_AUTH == "publishing requires auth configuration"
    assert status.ARCHIVE_NEEDS_AUTH == "archiving requires auth configuration"
    assert status.APPEND_NEEDS_AUTH == "appending requires auth configuration"


def test_templated_messages() -> None:
    assert status.not_found("/docs/a.md/v9") == "/docs/a.md/v9 not found"
    assert status.is_archived("/docs/b.md") == "/docs/b.md is archived"
    assert status.hash_not_found("sha256-ab") == "content not found for hash sha256-ab"
    assert status.unsupported_verb("WATCH") == "unsupported verb: WATCH"
