"""The ``mark://`` URL: where to dial, what to request, and the name a document goes by.

Choices, following the reference client's parser (Go ``url.Parse`` plus its own checks) where it
has one:

* The scheme is case-insensitive; any scheme but ``mark`` is refused.
* The host is lowercased (DNS names are case-insensitive, and identity must not split on case);
  it is a DNS name or IP literal of ``A-Z a-z 0-9 . - _ ~`` (internationalized names go in their
  ASCII form), or an IPv6 address in brackets. IPv6 zone identifiers are refused.
* The port is decimal digits in 1..65535; absent or empty (``host:``) means 6309.
* The authority alone (``host[:port]``, as pools, pins and token stores key on it) is read and
  written by :func:`parse_authority` and :func:`format_authority`, the same rules without a URL.
* The path is percent-decoded, as Go's ``URL.Path`` is, because the decoded path is what the
  request line carries; it must decode to UTF-8 without control characters other than TAB. The
  path keeps its case and defaults to ``/``.
* ``#anchor`` is kept (percent-decoded): clients cut that section out of the fetched document.
* ``?query`` is dropped, as the reference does: no request carries one.
* User info (``user:pass@``) is refused rather than silently dropped: a secret typed there would
  otherwise travel nowhere while the request goes out unauthenticated. The error message never
  repeats it.
* Surrounding whitespace is ignored, so a value pasted with a trailing newline still parses.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, replace
from urllib.parse import quote, unquote_to_bytes

from markproto.protocol.chars import has_control
from markproto.protocol.errors import InvalidURL
from markproto.protocol.limits import DEFAULT_PORT, SCHEME
from markproto.protocol.paths import atoi

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_DIGITS = re.compile(r"[0-9]+")
_HOST = re.compile(r"[A-Za-z0-9._~-]+")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_AUTHORITY_END = re.compile(r"[/?#]")
_PATH_SAFE = "$&+,/:;=@"  # with quote's own A-Za-z0-9_.-~: Go's path escaping
_ANCHOR_SAFE = "$&+,/:;=?@!()*"  # Go's fragment escaping


@dataclass(frozen=True, slots=True)
class MarkURL:
    """A parsed ``mark://`` URL: lowercase ``host`` (IPv6 without brackets), decoded ``path``."""

    host: str
    port: int
    path: str
    anchor: str = ""

    @property
    def authority(self) -> str:
        """The dial form ``host:port``, IPv6 in brackets: pools and token stores key on it."""
        return format_authority(self.host, self.port)

    @property
    def identity(self) -> str:
        """``mark://host[:port]``, default port omitted: the server's name in links and graphs."""
        port = "" if self.port == DEFAULT_PORT else f":{self.port}"
        return f"{SCHEME}://{_bracket(self.host)}{port}"

    def with_path(self, path: str) -> MarkURL:
        """The same server, another document (the anchor does not carry over)."""
        return replace(self, path=_check_path(path), anchor="")

    def __str__(self) -> str:
        anchor = f"#{quote(self.anchor, safe=_ANCHOR_SAFE)}" if self.anchor else ""
        return f"{self.identity}{quote(self.path, safe=_PATH_SAFE)}{anchor}"


def parse_url(text: str, *, default_host: str | None = None) -> MarkURL:
    """Parse ``mark://host[:port]/path[#anchor]``, or a bare ``/path[#anchor]`` on ``default_host``.

    ``default_host`` is ``mark://host[:port]`` or just ``host[:port]`` (the CLI's ``MARK_HOST``,
    the MCP bridge's ``-host``); it is only consulted for bare paths. Raises InvalidURL with a
    message meant for the person who typed the URL.
    """
    text = text.strip()
    if has_control(text):
        raise InvalidURL("URL contains a control character")
    scheme = _SCHEME.match(text)
    if scheme is None:
        if not text.startswith("/") or text.startswith("//"):
            raise InvalidURL(f"{text!r} is not a mark:// URL (write mark://host[:port]/path)")
        if default_host is None:
            raise InvalidURL(
                f"{text!r} names no server: write mark://host[:port]{text} or set a default host"
            )
        server = _parse_default(default_host)
        path, anchor = _split_tail(text)
        return MarkURL(server.host, server.port, path, anchor)
    name, rest = scheme.group(1), text[scheme.end() :]
    if not rest.startswith("//"):
        what = "names no server" if name.lower() == SCHEME else "is not a mark:// URL"
        raise InvalidURL(f"{text!r} {what} (write mark://host[:port]/path)")
    if name.lower() != SCHEME:
        raise InvalidURL(f"unsupported scheme {name!r}: only mark:// URLs are supported")
    authority = _AUTHORITY_END.split(rest[2:], maxsplit=1)[0]
    host, port = parse_authority(authority)
    path, anchor = _split_tail(rest[2 + len(authority) :])
    return MarkURL(host, port, path, anchor)


def _parse_default(default_host: str) -> MarkURL:
    text = default_host.strip()
    server = parse_url(text if "://" in text else f"{SCHEME}://{text}")
    if server.path != "/" or server.anchor:
        raise InvalidURL(f"default host {default_host!r} must be mark://host[:port] without a path")
    return server


def _split_tail(tail: str) -> tuple[str, str]:
    """Path and anchor of what follows the authority; the query between them is dropped."""
    tail, _, anchor = tail.partition("#")
    path = tail.partition("?")[0] or "/"
    return _check_path(_unescape(path)), _unescape(anchor)


def _check_path(path: str) -> str:
    if not path.startswith("/"):
        raise InvalidURL(f"path {path!r} must start with /")
    if has_control(path, tab_ok=True):
        raise InvalidURL("path contains a control character")
    try:
        path.encode()
    except UnicodeEncodeError:
        raise InvalidURL("path is not valid UTF-8 text") from None
    return path


def _unescape(text: str) -> str:
    """Decode ``%XX`` escapes (``+`` stays ``+``) and require the result to be UTF-8."""
    bad = _BAD_ESCAPE.search(text)
    if bad:
        raise InvalidURL(f"invalid percent-escape {text[bad.start() : bad.start() + 3]!r} in URL")
    try:
        return unquote_to_bytes(text).decode()
    except UnicodeError:
        raise InvalidURL("the URL is not UTF-8 text once its %-escapes are decoded") from None


def parse_authority(authority: str) -> tuple[str, int]:
    """``host[:port]`` -> ``(host, port)``: the host lowercased and without IPv6 brackets, the
    port 6309 when absent. Raises InvalidURL naming what is wrong."""
    if "@" in authority:
        raise InvalidURL(
            "mark:// URLs carry no user name or password: send a token as auth metadata instead"
        )
    if authority.startswith("["):
        inner, bracket, port = authority[1:].partition("]")
        if not bracket:
            raise InvalidURL(f"missing ] after IPv6 address in {authority!r}")
        if "%" in inner:
            raise InvalidURL("IPv6 zone identifiers are not supported in mark:// URLs")
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            raise InvalidURL(f"[{inner}] is not an IPv6 address") from None
        if port and not port.startswith(":"):
            raise InvalidURL(f"unexpected {port!r} after [{inner}]")
        host, port = inner, port[1:]
    else:
        if authority.count(":") > 1:
            raise InvalidURL("IPv6 addresses go in brackets, as in mark://[::1]:6309/path")
        host, _, port = authority.partition(":")
        if not host:
            raise InvalidURL("the URL names no host (write mark://host[:port]/path)")
        if not _HOST.fullmatch(host):
            raise InvalidURL(f"host {host!r} contains characters a host name cannot have")
    return host.lower(), _parse_port(port)


def _parse_port(port: str) -> int:
    if not port:
        return DEFAULT_PORT
    number = atoi(port) if _DIGITS.fullmatch(port) else None
    if number is None or not 1 <= number <= 65535:
        raise InvalidURL(f"port {port!r} must be a number between 1 and 65535")
    return number


def format_authority(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets: the inverse of :func:`parse_authority`."""
    return f"{_bracket(host)}:{port}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
