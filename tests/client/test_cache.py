"""The conditional-request cache: exact round trips, what it keeps, damage as a miss, the bound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from markproto.client.cache import Cache, conditions
from markproto.protocol.wire import Response

ETAG = "a" * 64
DOC = Response(
    "ok",
    {"etag": ETAG, "modified": "2026-01-01T00:00:00Z", "version": "3", "tags": "a,b"},
    b"# Alpha\n\nFirst body.\n",
)


def entries(cache: Cache) -> list[Path]:
    return sorted(cache.directory.iterdir())


def test_round_trip_and_keys(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    assert cache.get("FETCH", "h:1", "/a.md") is None
    cache.put("FETCH", "h:1", "/a.md", DOC)
    assert cache.get("FETCH", "h:1", "/a.md") == DOC
    assert cache.get("FETCH", "H:1", "/a.md") == DOC
    assert cache.get("LIST", "h:1", "/a.md") is None
    assert cache.get("FETCH", "h:2", "/a.md") is None
    assert cache.get("FETCH", "h:1", "/A.md") is None
    assert [p.suffix for p in entries(cache)] == [".entry"]
    assert oct(cache.directory.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize(
    "response",
    [
        Response("not-found", {}, b"\n# Not found\n\n/a.md not found\n"),
        Response("archived", {"etag": ETAG}, b""),
        Response("ok", {"entries": "1", "complete": "true"}, b"\n# Index of /\n\n- [a](a)\n"),
    ],
    ids=["error", "not-ok", "no-validator"],
)
def test_only_revalidatable_ok_responses_are_kept(tmp_path: Path, response: Response) -> None:
    cache = Cache(tmp_path)
    cache.put("FETCH", "h:1", "/a.md", response)
    assert cache.get("FETCH", "h:1", "/a.md") is None
    assert entries(cache) == []


def test_conditions_prefer_the_exact_etag() -> None:
    assert conditions(DOC) == {"if-none-match": ETAG}
    dated = Response("ok", {"modified": "2026-01-01T00:00:00Z"}, b"x")
    assert conditions(dated) == {"if-modified-since": "2026-01-01T00:00:00Z"}
    assert conditions(Response("ok", {}, b"x")) == {}


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-3],
        lambda data: data.replace(b"First", b"Forst"),
        lambda data: b"garbage",
        lambda data: b"",
        lambda data: data.replace(b"/a.md", b"/b.md"),
    ],
    ids=["truncated", "flipped", "garbage", "empty", "other-key"],
)
def test_damaged_entries_are_misses(tmp_path: Path, damage: object) -> None:
    cache = Cache(tmp_path)
    cache.put("FETCH", "h:1", "/a.md", DOC)
    (file,) = entries(cache)
    file.write_bytes(damage(file.read_bytes()))  # type: ignore[operator]
    assert cache.get("FETCH", "h:1", "/a.md") is None


def test_filesystem_failures_are_warnings(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    warnings: list[str] = []
    cache = Cache(blocker / "cache", warn=warnings.append)
    cache.put("FETCH", "h:1", "/a.md", DOC)
    assert cache.get("FETCH", "h:1", "/a.md") is None
    assert len(warnings) == 2
    assert warnings[0].startswith("cache: cannot write ")
    assert warnings[1].startswith("cache: cannot read ")


def test_least_recently_used_entries_go_first(tmp_path: Path) -> None:
    probe = Cache(tmp_path / "probe")
    probe.put("FETCH", "h:1", "/00.md", DOC)
    size = entries(probe)[0].stat().st_size
    cache = Cache(tmp_path / "cache", max_bytes=10 * size)
    (tmp_path / "cache").mkdir()
    for n in range(10):
        before = set(entries(cache))
        cache.put("FETCH", "h:1", f"/{n:02}.md", DOC)
        (new,) = set(entries(cache)) - before
        os.utime(new, (1000 + n, 1000 + n))
    assert cache.get("FETCH", "h:1", "/00.md") == DOC  # used now: the newest
    cache.put("FETCH", "h:1", "/10.md", DOC)
    assert len(entries(cache)) == 10
    assert cache.get("FETCH", "h:1", "/01.md") is None
    assert cache.get("FETCH", "h:1", "/00.md") == DOC
    assert cache.get("FETCH", "h:1", "/10.md") == DOC


def test_entries_too_large_for_the_bound_are_not_kept(tmp_path: Path) -> None:
    cache = Cache(tmp_path, max_bytes=8 * 100)
    cache.put("FETCH", "h:1", "/a.md", Response("ok", {"etag": ETAG}, b"x" * 200))
    assert entries(cache) == []


values = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1, max_size=30
)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    meta=st.dictionaries(st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True), values, max_size=6),
    body=st.binary(max_size=300),
    path=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cc",)), max_size=30),
)
def test_any_response_round_trips(
    tmp_path: Path, meta: dict[str, str], body: bytes, path: str
) -> None:
    meta.pop("status", None)
    response = Response("ok", {**meta, "etag": ETAG}, body)
    cache = Cache(tmp_path)
    cache.put("FETCH", "h:1", "/" + path, response)
    assert cache.get("FETCH", "h:1", "/" + path) == response


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_any_file_content_is_an_entry_or_a_miss(tmp_path: Path, data: bytes) -> None:
    cache = Cache(tmp_path)
    cache.put("FETCH", "h:1", "/a.md", DOC)
    (entry,) = entries(cache)
    entry.write_bytes(data)
    assert cache.get("FETCH", "h:1", "/a.md") in (None, DOC)
