"""The tokens file: strict loading, live reload, and the atomic edits of ``mark-server token``."""

from __future__ import annotations

import logging
import os
import stat
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from markproto.protocol.grants import Decision, hash_token
from markproto.server import tokens
from markproto.server.tokens import TokenFile, TokensError

NOW = datetime(2026, 6, 1, tzinfo=UTC)
RAW_A, RAW_B = "a" * 64, "b" * 64
GOOD = f"""# the team's tokens
[tokens.ci]
hash = "{hash_token(RAW_A)}"
paths = ["/docs/**"]
operations = ["publish"]

[tokens."phone reader"]
hash = "{hash_token(RAW_B)}"
paths = ["/private/**", "/team/"]
operations = ["read"]
expires = "2026-12-31T23:59:59Z"
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


# --- loading ---------------------------------------------------------------------------------


def test_load_labelled_file(tmp_path: Path) -> None:
    grants = tokens.load(write(tmp_path / "tokens.toml", GOOD))
    assert len(grants) == 2
    assert grants.authorize(RAW_A, "/docs/a.md", "publish", NOW) is Decision.ALLOW
    assert grants.authorize(RAW_A, "/other.md", "publish", NOW) is Decision.NOT_PERMITTED
    assert grants.authorize_read("", "/team", NOW) is Decision.NO_TOKEN
    assert grants.authorize_read(RAW_B, "/private/x.md", NOW) is Decision.ALLOW
    late = datetime(2027, 1, 1, tzinfo=UTC)
    assert grants.authorize_read(RAW_B, "/private/x.md", late) is Decision.EXPIRED


def test_empty_file_has_no_grants(tmp_path: Path) -> None:
    assert len(tokens.load(write(tmp_path / "t.toml", ""))) == 0


def entry(label: str, body: str) -> str:
    return f"[tokens.{label}]\n{body}\n"


OK_A = f'hash = "{hash_token(RAW_A)}"\npaths = ["/**"]\noperations = ["publish"]'


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (entry("one", OK_A) + entry("two", OK_A), "tokens 'one' and 'two' have the same hash"),
        (entry("blank", 'hash = ""\npaths = ["/**"]'), "token 'blank': hash must be"),
        (entry("old", OK_A + '\nexpires = "tomorrow"'), "token 'old': expires 'tomorrow'"),
        (entry("glob", OK_A.replace("/**", "/a/**/b/**")), "token 'glob': '/a/**/b/**'"),
        (entry("typo", OK_A + '\npath = ["/x"]'), "token 'typo': unknown key 'path'"),
        (entry("syntax", OK_A + "\npaths = [/x]"), "in token 'syntax'"),
        (entry("flat", "") + "[tokens.other]\nhash =", "in token 'other'"),
        ('"sha256-00" = { paths = ["/**"] }\n', "unknown top-level key 'sha256-00'"),
        ('tokens = "no"\n', "'tokens' must be a table"),
        ("[tokens]\nci = 3\n", "token 'ci': must be a [tokens.ci] table"),
    ],
)
def test_load_errors_name_file_and_label(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path / "tokens.toml", text)
    with pytest.raises(TokensError) as info:
        tokens.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert needle in message
    assert "\n" not in message


def test_load_missing_or_binary_file(tmp_path: Path) -> None:
    with pytest.raises(TokensError, match="cannot read: No such file"):
        tokens.load(tmp_path / "absent.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(TokensError, match="not UTF-8"):
        tokens.load(tmp_path / "bin.toml")


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.text(alphabet='[]tokens.=" hash/*\n', max_size=80))
def test_arbitrary_files_raise_only_tokens_error(tmp_path: Path, data: bytes | str) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    message = f"{path}: "
    try:
        tokens.load(path)
    except TokensError as exc:
        message = str(exc)
    assert message.startswith(f"{path}: ")


# --- TokenFile: startup, SIGHUP reload, change detection ---------------------------------------


def test_missing_file_is_an_error_only_when_configured(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    with pytest.raises(TokensError, match="cannot read"):
        TokenFile(path, required=True)
    current = TokenFile(path, required=False)
    assert len(current.grants) == 0
    assert not current.check_changed()
    write(path, GOOD)
    assert current.check_changed()
    assert len(current.grants) == 2


def test_bad_file_at_startup_is_an_error_even_when_optional(tmp_path: Path) -> None:
    with pytest.raises(TokensError, match="in token 'x'"):
        TokenFile(write(tmp_path / "t.toml", "[tokens.x]\nhash = \n"), required=False)


def test_reload_keeps_old_grants_on_a_bad_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)
    current = TokenFile(path, required=True)
    before = current.grants
    write(path, GOOD + "\n[tokens.broken]\nhash = 'sha256-nope'\n")
    with caplog.at_level(logging.ERROR, logger="markproto.auth"):
        assert not current.reload()
    assert current.grants is before
    assert "tokens not reloaded, keeping the previous ones" in caplog.text
    assert "token 'broken'" in caplog.text
    path.unlink()
    assert not current.reload()
    assert current.grants is before


def test_reload_replaces_grants(tmp_path: Path) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)
    current = TokenFile(path, required=True)
    write(path, entry("ci", OK_A.replace("/**", "/other/**")))
    assert current.reload()
    assert len(current.grants) == 1
    assert current.grants.authorize(RAW_A, "/docs/a.md", "publish", NOW) is Decision.NOT_PERMITTED


def test_check_changed_sees_edits_and_renames(tmp_path: Path) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)
    current = TokenFile(path, required=True)
    assert not current.check_changed()
    write(path, entry("ci", OK_A))  # different size
    assert current.check_changed()
    assert len(current.grants) == 1
    assert not current.check_changed()
    tokens.revoke(path, "ci")  # atomic rename: a new inode
    assert current.check_changed()
    assert len(current.grants) == 0


def test_check_changed_does_not_retry_a_bad_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)
    current = TokenFile(path, required=True)
    write(path, "[tokens.x")
    with caplog.at_level(logging.ERROR, logger="markproto.auth"):
        assert not current.check_changed()
        assert not current.check_changed()
    assert caplog.text.count("tokens not reloaded") == 1
    assert len(current.grants) == 2


# --- editing ------------------------------------------------------------------------------------


def test_generate_creates_a_private_file_the_server_loads(tmp_path: Path) -> None:
    path = tmp_path / "state" / "tokens.toml"
    raw = tokens.generate(path, "ci", ["/docs/**"], ["publish"], None)
    assert len(raw) == 64
    assert int(raw, 16) >= 0
    assert mode(path) == 0o600
    text = path.read_text()
    assert raw not in text
    assert text == (
        f'[tokens.ci]\nhash = "{hash_token(raw)}"\npaths = ["/docs/**"]\noperations = ["publish"]\n'
    )
    grants = tokens.load(path)
    assert grants.authorize(raw, "/docs/x.md", "publish", NOW) is Decision.ALLOW


def test_generate_appends_and_keeps_comments(tmp_path: Path) -> None:
    path = write(tmp_path / "tokens.toml", GOOD.rstrip("\n"))
    os.chmod(path, 0o644)
    expires = datetime(2030, 1, 2, 3, 4, 5, 678, tzinfo=UTC)
    raw = tokens.generate(path, "new", ["/a/*", "/b/**"], ["read", "publish"], expires)
    text = path.read_text()
    assert text.startswith(GOOD)
    assert text.endswith(
        f'\n\n[tokens.new]\nhash = "{hash_token(raw)}"\npaths = ["/a/*", "/b/**"]\n'
        'operations = ["read", "publish"]\nexpires = "2030-01-02T03:04:05Z"\n'
    )
    assert mode(path) == 0o600
    assert [g.label for g in tokens.entries(path)] == ["ci", "new", "phone reader"]


def test_generate_tokens_are_distinct(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    raws = {tokens.generate(path, f"t{i}", ["/**"], ["publish"], None) for i in range(5)}
    assert len(raws) == 5
    assert len(tokens.load(path)) == 5


@pytest.mark.parametrize(
    ("label", "paths", "ops", "needle"),
    [
        ("ci", ["/**"], ["publish"], "token 'ci' already exists"),
        ("phone reader", ["/**"], ["publish"], "label 'phone reader': use 1 to 64"),
        ("a.b", ["/**"], ["publish"], "label 'a.b'"),
        ("x" * 65, ["/**"], ["publish"], "use 1 to 64"),
        ("new", ["/**"], ["write"], "operations must be among read, publish, not 'write'"),
        ("new", ["/**"], [], "not none"),
        ("new", [], ["read"], "at least one path pattern"),
        ("new", ["/a/**/b/**"], ["read"], "only one ** wildcard"),
    ],
)
def test_generate_refusals_leave_the_file_alone(
    tmp_path: Path, label: str, paths: list[str], ops: list[str], needle: str
) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)
    with pytest.raises(TokensError) as info:
        tokens.generate(path, label, paths, ops, None)
    assert needle in str(info.value)
    assert path.read_text() == GOOD
    assert leftovers(tmp_path) == []


def test_generate_refuses_a_broken_file(tmp_path: Path) -> None:
    path = write(tmp_path / "tokens.toml", "[tokens.x]\nhash = 'bad'\n")
    with pytest.raises(TokensError, match="token 'x': hash must be"):
        tokens.generate(path, "y", ["/**"], ["publish"], None)
    with pytest.raises(TokensError, match="expires needs a time zone"):
        tokens.generate(tmp_path / "n.toml", "y", ["/**"], ["publish"], datetime(2030, 1, 1))


def test_entries_of_a_missing_file() -> None:
    assert tokens.entries(Path("/nonexistent/tokens.toml")) == []


def test_revoke_round_trip(tmp_path: Path) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)
    before = tomllib.loads(GOOD)["tokens"]
    assert tokens.revoke(path, "ci")
    assert tomllib.loads(path.read_text()) == {"tokens": {"phone reader": before["phone reader"]}}
    assert mode(path) == 0o600
    grants = tokens.load(path)
    assert grants.authorize(RAW_A, "/docs/a.md", "publish", NOW) is Decision.INVALID_TOKEN
    assert grants.authorize_read(RAW_B, "/private/x.md", NOW) is Decision.ALLOW
    assert tokens.revoke(path, "phone reader")
    assert path.read_text() == ""
    assert len(tokens.load(path)) == 0


def test_revoke_absent_label_or_file(tmp_path: Path) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)
    with pytest.raises(TokensError, match="no token 'nope'"):
        tokens.revoke(path, "nope")
    assert not tokens.revoke(path, "nope", if_present=True)
    assert path.read_text() == GOOD
    with pytest.raises(TokensError, match="no such file"):
        tokens.revoke(tmp_path / "absent.toml", "ci")
    assert not tokens.revoke(tmp_path / "absent.toml", "ci", if_present=True)
    assert not (tmp_path / "absent.toml").exists()


def test_revoke_keeps_native_datetimes_and_odd_labels(tmp_path: Path) -> None:
    text = (
        entry('"a.b \\"q\\""', OK_A + "\nexpires = 2030-01-01T00:00:00Z")
        + "\n"
        + entry("gone", OK_A.replace(hash_token(RAW_A), hash_token(RAW_B)))
    )
    path = write(tmp_path / "tokens.toml", text)
    tokens.revoke(path, "gone")
    kept = tomllib.loads(text)["tokens"]
    del kept["gone"]
    assert tomllib.loads(path.read_text()) == {"tokens": kept}


def test_revoke_refuses_what_it_cannot_rewrite(tmp_path: Path) -> None:
    path = write(tmp_path / "tokens.toml", entry("a", OK_A + "\nnote = 1") + entry("b", OK_A))
    with pytest.raises(TokensError, match="cannot rewrite: token 'a': unknown key 'note'"):
        tokens.revoke(path, "b")


def test_edits_follow_a_symlink(tmp_path: Path) -> None:
    target = write(tmp_path / "real.toml", GOOD)
    link = tmp_path / "tokens.toml"
    link.symlink_to(target)
    tokens.revoke(link, "ci")
    assert link.is_symlink()
    assert "[tokens.ci]" not in target.read_text()


def test_a_failed_write_leaves_the_old_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)

    def crash(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        tokens.generate(path, "new", ["/**"], ["publish"], None)
    with pytest.raises(OSError, match="disk full"):
        tokens.revoke(path, "ci")
    assert path.read_text() == GOOD
    assert leftovers(tmp_path) == []


def test_the_new_file_is_complete_and_private_before_it_appears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "tokens.toml", GOOD)
    seen: list[tuple[str, int, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str, **dir_fds: None) -> None:
        seen.append((Path(src).read_text(), mode(Path(src)), path.read_text()))
        real_replace(src, dst, **dir_fds)

    monkeypatch.setattr(os, "replace", spy)
    tokens.revoke(path, "ci")
    ((new, new_mode, old),) = seen
    assert old == GOOD  # readers still see the whole old file
    assert new == path.read_text()
    assert new_mode == 0o600


def test_raw_tokens_never_reach_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tokens.toml"
    with caplog.at_level(logging.DEBUG):
        raw = tokens.generate(path, "ci", ["/**"], ["publish"], None)
        current = TokenFile(path, required=True)
        tokens.generate(path, "ci2", ["/**"], ["publish"], None)
        current.check_changed()
        current.reload()
    assert caplog.records
    assert raw not in caplog.text
    assert hash_token(raw) not in caplog.text


labels = st.text(min_size=1, max_size=12)
strings = st.text(max_size=12)


@settings(max_examples=200)
@given(
    label=labels,
    fields=st.fixed_dictionaries(
        {"hash": strings, "paths": st.lists(strings, max_size=3)},
        optional={"operations": st.lists(strings, max_size=3), "expires": strings},
    ),
)
def test_emitter_round_trips_through_tomllib(label: str, fields: dict[str, object]) -> None:
    text = tokens._emit_table(label, fields)
    assert tomllib.loads(text) == {"tokens": {label: fields}}
