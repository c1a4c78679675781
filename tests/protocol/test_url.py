"""The mark:// URL: defaults, identity and dial forms, IPv6, anchors, decoding, refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol.errors import InvalidURL
from markproto.protocol.limits import DEFAULT_PORT
from markproto.protocol.url import MarkURL, format_authority, parse_authority, parse_url


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mark://example.com/docs/a.md", MarkURL("example.com", 6309, "/docs/a.md", "")),
        ("mark://example.com", MarkURL("example.com", 6309, "/", "")),
        ("mark://example.com/", MarkURL("example.com", 6309, "/", "")),
        ("mark://example.com:", MarkURL("example.com", 6309, "/", "")),
        ("mark://Example.COM:7000/Docs/A.md", MarkURL("example.com", 7000, "/Docs/A.md", "")),
        ("MARK://host/x", MarkURL("host", 6309, "/x", "")),
        ("mark://host:06309/x", MarkURL("host", 6309, "/x", "")),
        ("mark://host/a.md#Problem-Statement", MarkURL("host", 6309, "/a.md", "Problem-Statement")),
        ("mark://host/a.md#", MarkURL("host", 6309, "/a.md", "")),
        ("mark://host/a.md?x=1&y#sec", MarkURL("host", 6309, "/a.md", "sec")),
        ("mark://host?x", MarkURL("host", 6309, "/", "")),
        ("mark://host#top", MarkURL("host", 6309, "/", "top")),
        ("mark://host/a.md#b?c", MarkURL("host", 6309, "/a.md", "b?c")),
        ("mark://[::1]/x", MarkURL("::1", 6309, "/x", "")),
        ("mark://[::1]:7000/x", MarkURL("::1", 7000, "/x", "")),
        ("mark://[FE80::AB]/", MarkURL("fe80::ab", 6309, "/", "")),
        ("mark://127.0.0.1:1/", MarkURL("127.0.0.1", 1, "/", "")),
        ("mark://h:65535/", MarkURL("h", 65535, "/", "")),
        ("mark://h/sub/c%20d.md", MarkURL("h", 6309, "/sub/c d.md", "")),
        ("mark://h/a%2Fb", MarkURL("h", 6309, "/a/b", "")),
        ("mark://h/a+b.md", MarkURL("h", 6309, "/a+b.md", "")),
        ("mark://h/%C3%BCber.md", MarkURL("h", 6309, "/über.md", "")),
        ("mark://h/über.md", MarkURL("h", 6309, "/über.md", "")),
        ("mark://h/a%09b", MarkURL("h", 6309, "/a\tb", "")),
        ("mark://h/a.md#%C3%BCber", MarkURL("h", 6309, "/a.md", "über")),
        ("  mark://h/a.md\n", MarkURL("h", 6309, "/a.md", "")),
    ],
)
def test_parse(text: str, expected: MarkURL) -> None:
    assert parse_url(text) == expected


@pytest.mark.parametrize(
    ("text", "authority", "identity", "string"),
    [
        ("mark://Host/x", "host:6309", "mark://host", "mark://host/x"),
        ("mark://host:6309/x", "host:6309", "mark://host", "mark://host/x"),
        ("mark://HOST:7000/X#A", "host:7000", "mark://host:7000", "mark://host:7000/X#A"),
        ("mark://[::1]/", "[::1]:6309", "mark://[::1]", "mark://[::1]/"),
        ("mark://[::1]:7000/a b", "[::1]:7000", "mark://[::1]:7000", "mark://[::1]:7000/a%20b"),
        ("mark://h/a%3Fb%23c%25", "h:6309", "mark://h", "mark://h/a%3Fb%23c%25"),
        ("mark://h/$&+,:;=@", "h:6309", "mark://h", "mark://h/$&+,:;=@"),
        ("mark://h/über#x y", "h:6309", "mark://h", "mark://h/%C3%BCber#x%20y"),
    ],
)
def test_forms(text: str, authority: str, identity: str, string: str) -> None:
    url = parse_url(text)
    assert url.authority == authority
    assert url.identity == identity
    assert str(url) == string


def test_default_host_resolves_bare_paths() -> None:
    expected = MarkURL("host", 7000, "/docs/a.md", "sec")
    assert parse_url("/docs/a.md#sec", default_host="mark://HOST:7000") == expected
    assert parse_url("/docs/a.md#sec", default_host="Host:7000") == expected
    assert parse_url("/docs/a.md#sec", default_host="mark://host:7000/") == expected
    assert parse_url("/", default_host="[::1]") == MarkURL("::1", 6309, "/", "")


def test_default_host_is_ignored_for_full_urls() -> None:
    assert parse_url("mark://a/x", default_host="b:1") == MarkURL("a", 6309, "/x", "")


def test_with_path_keeps_server_and_drops_anchor() -> None:
    url = parse_url("mark://h:7000/a.md#sec")
    assert url.with_path("/b.md") == MarkURL("h", 7000, "/b.md", "")
    with pytest.raises(InvalidURL, match="must start with /"):
        url.with_path("b.md")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("http://host/x", "unsupported scheme 'http': only mark:// URLs are supported"),
        ("https://host", "unsupported scheme 'https': only mark:// URLs are supported"),
        ("localhost:6309/a.md", "'localhost:6309/a.md' is not a mark:// URL"),
        ("docs/a.md", "'docs/a.md' is not a mark:// URL"),
        ("//host/a.md", "'//host/a.md' is not a mark:// URL"),
        ("", "'' is not a mark:// URL"),
        ("mark:/a.md", "'mark:/a.md' names no server"),
        ("mark:host", "'mark:host' names no server"),
        ("mark:///a.md", "the URL names no host"),
        ("mark://:7000/a.md", "the URL names no host"),
        ("mark://h:0/", "port '0' must be a number between 1 and 65535"),
        ("mark://h:65536/", "port '65536' must be a number between 1 and 65535"),
        ("mark://h:+1/", "port '\\+1' must be a number between 1 and 65535"),
        ("mark://h:x/", "port 'x' must be a number between 1 and 65535"),
        ("mark://h:1:2/", "IPv6 addresses go in brackets"),
        ("mark://[::1]x/", "unexpected 'x' after \\[::1\\]"),
        ("mark://[::1/", "missing \\] after IPv6 address"),
        ("mark://[nope]/", "\\[nope\\] is not an IPv6 address"),
        ("mark://[fe80::1%25eth0]/", "zone identifiers are not supported"),
        ("mark://::1/", "IPv6 addresses go in brackets"),
        ("mark://bad host/", "host 'bad host' contains characters"),
        ("mark://bücher.de/", "host 'bücher.de' contains characters"),
        ("mark://h/%zz", "invalid percent-escape '%zz'"),
        ("mark://h/a%", "invalid percent-escape '%'"),
        ("mark://h/%ff", "not UTF-8 text"),
        ("mark://h/a%0Ab", "path contains a control character"),
        ("mark://h/a%00", "path contains a control character"),
        ("mark://h/a\tb", "URL contains a control character"),
        ("/a.md", "'/a.md' names no server: write mark://host\\[:port\\]/a.md or set a default"),
    ],
)
def test_refusals_explain_themselves(text: str, message: str) -> None:
    with pytest.raises(InvalidURL, match=message):
        parse_url(text)


def test_user_info_is_refused_without_echoing_it() -> None:
    with pytest.raises(InvalidURL) as caught:
        parse_url("mark://alice:s3cret@host/a.md")
    assert "s3cret" not in str(caught.value)
    assert "user name or password" in str(caught.value)


def test_default_host_with_a_path_is_refused() -> None:
    with pytest.raises(InvalidURL, match="must be mark://host\\[:port\\] without a path"):
        parse_url("/a.md", default_host="mark://h/docs")


HOSTS = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True) | st.sampled_from(
    ["::1", "fe80::ab", "2001:db8::1", "127.0.0.1"]
)
PATHS = st.text(
    st.characters(codec="utf-8", exclude_characters="\x7f").filter(
        lambda c: ord(c) >= 32 or c == "\t"
    ),
    max_size=30,
).map(lambda s: "/" + s)
ANCHORS = st.text(st.characters(codec="utf-8"), max_size=20)


@settings(max_examples=300)
@given(HOSTS, st.integers(1, 65535), PATHS, ANCHORS)
def test_str_round_trips(host: str, port: int, path: str, anchor: str) -> None:
    url = MarkURL(host, port, path, anchor)
    assert parse_url(str(url)) == url


@settings(max_examples=300)
@given(st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_invalid_url(text: str) -> None:
    try:
        url = parse_url("mark://" + text)
    except InvalidURL:
        return
    assert url.path.startswith("/")
    assert url.host == url.host.lower()
    assert 1 <= url.port <= 65535


# --- the authority alone: pools, pins and token stores key on it ------------------------------


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("localhost:6309", ("localhost", 6309)),
        ("LocalHost:7000", ("localhost", 7000)),
        ("[::1]:7000", ("::1", 7000)),
        ("[2001:DB8::1]", ("2001:db8::1", DEFAULT_PORT)),
        ("10.0.0.1:1", ("10.0.0.1", 1)),
        ("localhost", ("localhost", DEFAULT_PORT)),
        ("localhost:", ("localhost", DEFAULT_PORT)),
    ],
)
def test_parse_authority(authority: str, expected: tuple[str, int]) -> None:
    assert parse_authority(authority) == expected


@pytest.mark.parametrize(
    ("authority", "message"),
    [
        (":6309", "names no host"),
        ("::1:6309", "IPv6 addresses go in brackets"),
        ("h:0", "port '0' must be a number"),
        ("h:65536", "port '65536' must be a number"),
        ("h:x", "port 'x' must be a number"),
        ("a b:1", "contains characters"),
        ("[::1", "missing \\]"),
        ("u@h:1", "no user name or password"),
    ],
)
def test_parse_authority_refuses(authority: str, message: str) -> None:
    with pytest.raises(InvalidURL, match=message):
        parse_authority(authority)


@given(HOSTS, st.integers(1, 65535))
def test_format_authority_inverts_parse(host: str, port: int) -> None:
    written = format_authority(host, port)
    assert parse_authority(written) == (host, port)
    assert written == MarkURL(host, port, "/").authority
