"""Every ``mark`` command against real servers on loopback: happy paths, conflicts, tokens,
unreachable and impostor servers, a changed pinned certificate, ``--json`` shapes, exit codes.

The servers run in a background thread's event loop for the whole module; the commands run
in-process through click's runner (plus one real ``mark`` process), each test with its own
``MARK_HOME`` in which the live server's certificate is already pinned.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aioquic.asyncio.server import QuicServer
from aioquic.quic.configuration import QuicConfiguration
from click.testing import CliRunner, Result
from support.echo import start_echo
from support.server import WRITE_TOKEN, RunningServer, TokenSpec, running_server

from markproto.client import Client, Pool, Tokens, Trust
from markproto.client.cli import main
from markproto.client.results import CATALOG_FALLBACK_NOTE
from markproto.protocol import bodies
from markproto.protocol.wire import Response, emit_response
from markproto.server import devcert

READ_TOKEN = "test-read-token"
DOCS_TOKEN = "test-docs-token"
TOKENS = {
    "writer": TokenSpec(WRITE_TOKEN),
    "reader": TokenSpec(READ_TOKEN, paths=("/private/**",), ops=("read",)),
    "docs": TokenSpec(DOCS_TOKEN, paths=("/docs/**",)),
}
MANIFEST = b"# Test site\n\n## Description\n\nA server for the CLI tests.\n"
DOC = b"# Alpha\n\nFirst body.\n\n## Details\n\nThe papaya reverts.\n\n## Other\n\nMore.\n"


@dataclass
class Servers:
    live: RunningServer
    """Tokens as in TOKENS, the manifest published."""
    bare: RunningServer
    """No token store (writes refused) and no manifest."""
    old: str
    """A Mark server that answers every request with a catalog-only LOOKUP table."""
    h3: str
    """A QUIC server that does not speak the Mark Protocol (ALPN h3)."""
    silent: str
    """A UDP port that swallows everything."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    base = tmp_path_factory.mktemp("servers")
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def run() -> None:
        try:
            async with (
                running_server(base / "live", tokens=TOKENS) as live,
                running_server(base / "bare", tokens=None) as bare,
            ):
                cert, key = devcert.ensure(base / "impostors")[:2]
                table = bodies.render_lookup("alpha", "/", [], body_mode=False)
                reply = emit_response(Response("ok", {"matches": "0"}, table))
                old, old_port = await start_echo(cert, key, reply=lambda data: reply)
                config = QuicConfiguration(is_client=False, alpn_protocols=["h3"])
                config.load_cert_chain(cert, key)
                h3_socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                h3_socket.bind(("127.0.0.1", 0))
                h3_port = h3_socket.getsockname()[1]
                _, h3 = await asyncio.get_running_loop().create_datagram_endpoint(
                    lambda: QuicServer(configuration=config), sock=h3_socket
                )
                silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                silent.bind(("127.0.0.1", 0))
                stop = asyncio.Event()
                box.update(
                    loop=asyncio.get_running_loop(),
                    stop=stop,
                    servers=Servers(
                        live,
                        bare,
                        f"mark://127.0.0.1:{old_port}",
                        f"mark://127.0.0.1:{h3_port}",
                        f"mark://127.0.0.1:{silent.getsockname()[1]}",
                    ),
                )
                writer = Client(
                    Pool(Trust(cafile=str(live.cert))),
                    tokens=Tokens(None, {live.authority: WRITE_TOKEN}),
                )
                async with writer:
                    manifest = live.url + "/.well-known/agent-manifest.md"
                    result = await writer.publish(manifest, MANIFEST, expected_version=0)
                    assert result.status == "created"
                ready.set()
                await stop.wait()
                silent.close()
                old.close()
                h3.close()
        except BaseException as exc:
            box["error"] = exc
            ready.set()
            raise

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(30), "servers did not start"
    if "error" in box:
        raise box["error"]
    yield box["servers"]
    box["loop"].call_soon_threadsafe(box["stop"].set)
    thread.join(10)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: Servers) -> Path:
    """A fresh MARK_HOME with the live and bare servers' certificates pinned."""
    home = tmp_path / "home"
    home.mkdir()
    pins = "".join(
        f"{s.authority} {devcert.fingerprint(s.cert.read_bytes())}\n"
        for s in (servers.live, servers.bare)
    )
    (home / "known_hosts").write_text(pins)
    monkeypatch.setenv("MARK_HOME", str(home))
    monkeypatch.delenv("MARK_HOST", raising=False)
    monkeypatch.delenv("MARK_AUTH", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setitem(Client.__init__.__kwdefaults__, "retry_delay", 0.0)
    return home


def mark(*args: str, input: str | bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def ok(*args: str, input: str | bytes | None = None) -> Result:
    result = mark(*args, input=input)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def url(servers: Servers, home: Path, request: pytest.FixtureRequest) -> Callable[[str], str]:
    """URLs on the live server under a folder of this test's own."""
    folder = "t-" + request.node.name.removeprefix("test_").replace("_", "-")
    return lambda path: f"{servers.live.url}/{folder}{path}"


def put(target: str, body: str, *options: str) -> Result:
    """Publish as the writer (``-force`` unless the options say how)."""
    return ok("publish", "-auth", WRITE_TOKEN, *(options or ("-force",)), "-body", body, target)


def fetch_body(target: str) -> bytes:
    return ok("fetch", "-no-cache", target).stdout_bytes


# --- reading ------------------------------------------------------------------------------------


def test_fetch_prints_the_body_and_v_prints_the_status_line(url: Callable[[str], str]) -> None:
    put(url("/a.md"), DOC.decode(), "-expected-version", "0")
    first = ok("fetch", url("/a.md"), "-v")
    assert first.stdout_bytes == DOC
    status, _, rest = first.stderr.partition(" ")
    assert status == "[ok]"
    keys = [pair.split("=")[0] for pair in rest.split()]
    assert keys == ["content-hash", "etag", "modified", "type", "version"]
    assert "version=1" in rest
    second = ok("fetch", "--verbose", url("/a.md"))
    assert second.stdout_bytes == DOC
    assert second.stderr == first.stderr.rstrip("\n") + " (cached)\n"
    assert "(cached)" not in ok("fetch", "-v", "-no-cache", url("/a.md")).stderr


def test_fetch_sections_and_outline(url: Callable[[str], str]) -> None:
    put(url("/a.md"), DOC.decode())
    assert ok("fetch", url("/a.md#details")).stdout == "## Details\n\nThe papaya reverts.\n\n"
    assert ok("fetch", url("/a.md"), "--outline").stdout == (
        "- Alpha (#alpha, 11 lines)\n  - Details (#details, 4 lines)\n  - Other (#other, 3 lines)\n"
    )
    missing = mark("fetch", url("/a.md#nope"))
    assert missing.exit_code == 1
    assert missing.stdout == ""
    assert missing.stderr == (
        f"mark: {url('/a.md#nope')}: no section #nope (sections: #alpha, #details, #other)\n"
    )


def test_fetch_errors_print_the_body_and_exit_1(url: Callable[[str], str]) -> None:
    result = mark("fetch", url("/missing.md"))
    assert result.exit_code == 1
    path = url("/missing.md").split(":", 2)[2].partition("/")[2]
    assert result.stdout == f"\n# Not found\n\n/{path} not found\n"
    assert result.stderr == "mark: not-found\n"


def test_fetch_json(url: Callable[[str], str]) -> None:
    put(url("/a.md"), "# T\n", "-force", "-meta", "tags=a, b")
    document = json.loads(ok("fetch", "--json", url("/a.md")).stdout)
    assert list(document) == ["status", "metadata", "body", "message", "exit_code"]
    assert (document["message"], document["exit_code"]) == ("", 0)
    assert document["status"] == "ok"
    assert document["body"] == "# T\n"
    assert document["metadata"]["tags"] == "a,b"
    assert document["metadata"]["version"] == "1"
    missing = mark("fetch", "-json", url("/nope.md"))
    assert missing.exit_code == 1
    refused = json.loads(missing.stdout)
    assert (refused["status"], refused["exit_code"]) == ("not-found", 1)
    assert refused["message"].endswith("/nope.md not found")
    section = mark("fetch", "-json", url("/a.md#nope"))
    assert section.exit_code == 1
    assert json.loads(section.stdout) == {
        "status": "error",
        "error": "anchor-not-found",
        "message": f"{url('/a.md#nope')}: no section #nope (sections: #t)",
        "anchors": ["t"],
        "exit_code": 1,
    }


def test_list_pages(url: Callable[[str], str]) -> None:
    for name in ("a.md", "b.md", "sub/c.md"):
        put(url(f"/{name}"), "# x\n")
    folder = url("/").split("/", 3)[3]
    assert ok("list", url("/")).stdout == (
        f"\n# Index of /{folder}\n\n- [a.md](a.md)\n- [b.md](b.md)\n- [sub/](sub/)\n"
    )
    first = ok("list", "-page-size", "2", url("/"))
    cursor = first.stderr.removeprefix("mark: more entries: continue with -cursor ").strip()
    assert first.stdout.endswith("- [b.md](b.md)\n\n*...truncated, too many entries*\n")
    rest = ok("list", "-page-size", "2", "-cursor", cursor, url("/"))
    assert rest.stdout.endswith(f"/{folder}\n\n- [sub/](sub/)\n")
    assert rest.stderr == ""
    as_json = json.loads(ok("list", "-json", url("/"), "-page-size", "1").stdout)
    assert as_json["metadata"]["complete"] == "false"
    assert as_json["metadata"]["entries"] == "1"
    ok("archive", "-auth", WRITE_TOKEN, url("/a.md"))
    assert "a.md" not in ok("list", url("/")).stdout
    assert "- [a.md](a.md)" in ok("list", "-include-archived", url("/")).stdout
    bad = mark("list", "-cursor", "AQAA", url("/"))
    assert bad.exit_code == 1
    assert bad.stdout == "\n# Bad request\n\ninvalid LIST cursor\n"


def test_versions(url: Callable[[str], str]) -> None:
    put(url("/a.md"), "# 1\n", "-expected-version", "0")
    put(url("/a.md"), "# 2\n", "-expected-version", "1")
    result = ok("versions", "-v", url("/a.md"))
    links = [line.split("(")[1].split(")")[0] for line in result.stdout.splitlines()[3:]]
    assert links == [url("/a.md/v2"), url("/a.md/v1")]  # pasteable into mark fetch
    assert ok("fetch", links[1]).stdout == "# 1\n"
    assert result.stderr == "[ok] chain-valid=true current=2 total=2\n"
    listed = json.loads(ok("versions", "-json", url("/a.md")).stdout)["versions"]
    assert [(v["version"], v["url"]) for v in listed] == [(2, links[0]), (1, links[1])]
    assert mark("versions", url("/nope.md")).exit_code == 1


def test_lookup_table_rows_and_json(url: Callable[[str], str]) -> None:
    put(url("/a.md"), DOC.decode(), "-force", "-meta", "tags=zebrafish")
    scope = url("/")
    table = ok("lookup", "-query", "zebrafish", scope)
    assert table.stdout.splitlines()[-2:] == [
        "|------|------------|-------|------|",
        f"| /{scope.split('/', 3)[3]}a.md | 0.50 | Alpha | zebrafish |",
    ]
    body = json.loads(ok("lookup", "--json", "-query", "papaya", "-match", "body", scope).stdout)
    assert list(body) == [
        "status",
        "metadata",
        "body",
        "rows",
        "catalog_fallback",
        "message",
        "exit_code",
    ]
    assert body["metadata"] == {"match": "body", "matches": "1"}
    assert body["catalog_fallback"] is False
    (row,) = body["rows"]
    assert list(row) == ["path", "anchor", "importance", "title", "tags", "snippet", "url"]
    assert row["url"] == url("/a.md#details")
    assert row["anchor"] == "details"
    assert (row["title"], row["tags"], row["importance"]) == ("Alpha › Details", ["zebrafish"], 0.5)
    assert "papaya" in row["snippet"]
    none = json.loads(
        ok("lookup", "-json", "-query", "zebrafish", "-filter", "tag=x", scope).stdout
    )
    assert (none["rows"], none["metadata"]["matches"]) == ([], "0")
    limited = ok("lookup", "-query", "*", "-limit", "1", "-json", scope)
    assert len(json.loads(limited.stdout)["rows"]) == 1
    bad = mark("lookup", "-query", "x", scope)
    assert (bad.exit_code, bad.stderr) == (1, "mark: bad-request\n")
    assert "query must be at least 2 characters" in bad.stdout


def test_lookup_says_when_body_match_fell_back_to_the_catalog(servers: Servers, home: Path) -> None:
    result = mark("lookup", "-query", "alpha", "-match", "body", servers.old + "/")
    assert result.exit_code == 0
    assert "pinned certificate" in result.stderr
    assert result.stderr.endswith(f"mark: note: {CATALOG_FALLBACK_NOTE}\n")
    catalog = mark("lookup", "-query", "alpha", "-json", servers.old + "/")
    assert json.loads(catalog.stdout)["catalog_fallback"] is False
    assert "note:" not in catalog.stderr


def test_info(servers: Servers, home: Path) -> None:
    assert ok("info", servers.live.url + "/ignored/path").stdout_bytes == MANIFEST
    assert json.loads(ok("info", "-json", servers.live.url).stdout)["body"] == MANIFEST.decode()
    missing = mark("info", servers.bare.url)
    assert (missing.exit_code, missing.stdout) == (1, "")
    assert missing.stderr == f"mark: {servers.bare.url} publishes no agent manifest\n"


def test_ping(servers: Servers, home: Path) -> None:
    live = ok("ping", servers.live.url)
    assert live.stdout.startswith(f"{servers.live.url}: ok in ")
    assert live.stdout.endswith(" ms\n")
    assert ok("ping", servers.bare.url).stdout.startswith(f"{servers.bare.url}: not-found in ")
    document = json.loads(ok("ping", "--json", servers.live.url).stdout)
    assert list(document) == ["status", "metadata", "body", "elapsed_ms", "message", "exit_code"]
    assert document["elapsed_ms"] > 0
    down = mark("ping", "mark://127.0.0.1:1")
    assert (down.exit_code, down.stdout) == (1, "")
    assert down.stderr == "mark: 127.0.0.1:1: unreachable (connection refused)\n"


def test_mark_host_takes_bare_paths(
    servers: Servers, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARK_HOST", servers.live.url)
    assert ok("fetch", "/.well-known/agent-manifest.md").stdout_bytes == MANIFEST
    assert ok("list").stdout.startswith("\n# Index of /\n\n")
    assert ok("info").stdout_bytes == MANIFEST


# --- writing ------------------------------------------------------------------------------------


def test_publish_bodies_from_flag_file_and_stdin(url: Callable[[str], str], tmp_path: Path) -> None:
    created = ok(
        "publish",
        "-auth",
        WRITE_TOKEN,
        "-expected-version",
        "0",
        "-body",
        "# 1\n",
        url("/a.md"),
        "-v",
    )
    assert created.stdout == ""
    assert created.stderr.startswith("[created] modified=")
    assert created.stderr.endswith(" version=1\n")
    source = tmp_path / "doc.md"
    source.write_bytes("# 2 ü\n".encode())
    ok(
        "publish",
        "--auth",
        WRITE_TOKEN,
        "--expected-version",
        "1",
        "--file",
        str(source),
        url("/a.md"),
    )
    assert fetch_body(url("/a.md")) == "# 2 ü\n".encode()
    ok("publish", "-auth", WRITE_TOKEN, "-expected-version", "2", url("/a.md"), input="# 3\n")
    assert fetch_body(url("/a.md")) == b"# 3\n"
    ok("publish", "-auth", WRITE_TOKEN, "-force", "-file", "-", url("/a.md"), input="# 4\n")
    document = json.loads(ok("fetch", "-json", "-no-cache", url("/a.md")).stdout)
    assert (document["body"], document["metadata"]["version"]) == ("# 4\n", "4")
    same = json.loads(
        ok(
            "publish", "-json", "-auth", WRITE_TOKEN, "-force", "-body", "# 4\n", url("/a.md")
        ).stdout
    )
    assert (same["status"], same["metadata"]["version"], same["body"]) == ("ok", "4", "")


def test_publish_conflicts_print_the_server_body(url: Callable[[str], str]) -> None:
    ok("publish", "-auth", WRITE_TOKEN, "-expected-version", "0", "-body", "# 1\n", url("/a.md"))
    exists = mark(
        "publish", "-auth", WRITE_TOKEN, "-expected-version", "0", "-body", "x", url("/a.md")
    )
    assert exists.exit_code == 1
    assert exists.stdout_bytes == bodies.exists_conflict_body(1)
    assert exists.stderr == "mark: conflict\n"
    stale = mark(
        "publish", "-auth", WRITE_TOKEN, "-expected-version", "7", "-body", "x", url("/a.md")
    )
    assert (stale.exit_code, stale.stdout_bytes) == (1, bodies.conflict_body(7, 1))
    document = json.loads(
        mark(
            "publish",
            "-json",
            "-auth",
            WRITE_TOKEN,
            "-expected-version",
            "7",
            "-body",
            "x",
            url("/a.md"),
        ).stdout
    )
    assert document["metadata"] == {"server-version": "1", "your-version": "7"}
    assert fetch_body(url("/a.md")) == b"# 1\n"


def test_publish_metadata(url: Callable[[str], str]) -> None:
    ok(
        "publish",
        "-auth",
        WRITE_TOKEN,
        "-force",
        "-meta",
        "tags=go, auth",
        "-meta",
        "importance=0.9",
        "-meta",
        "rel-supersedes=/adr/2.md",
        "-body",
        "# M\n",
        url("/a.md"),
    )
    meta = json.loads(ok("fetch", "-json", url("/a.md")).stdout)["metadata"]
    assert (meta["tags"], meta["importance"], meta["rel-supersedes"]) == (
        "go,auth",
        "0.9",
        "/adr/2.md",
    )
    refused = mark(
        "publish",
        "-auth",
        WRITE_TOKEN,
        "-force",
        "-meta",
        "retention=-1",
        "-body",
        "x",
        url("/a.md"),
    )
    assert refused.exit_code == 2
    assert 'retention must be a positive integer, got "-1"' in refused.stderr


def test_append_resolves_the_version_or_checks_it(url: Callable[[str], str]) -> None:
    ok("publish", "-auth", WRITE_TOKEN, "-expected-version", "0", "-body", "# A\n", url("/a.md"))
    ok("append", "-auth", WRITE_TOKEN, "-body", "one\n", url("/a.md"))
    ok("append", url("/a.md"), "-auth", WRITE_TOKEN, "-expected-version", "2", input="two\n")
    assert fetch_body(url("/a.md")) == b"# A\none\ntwo\n"
    stale = mark(
        "append", "-auth", WRITE_TOKEN, "-expected-version", "1", "-body", "x", url("/a.md")
    )
    assert (stale.exit_code, stale.stdout_bytes) == (1, bodies.conflict_body(1, 3, append=True))
    missing = mark("append", "-auth", WRITE_TOKEN, "-body", "x", url("/nope.md"))
    assert (missing.exit_code, missing.stderr) == (1, "mark: not-found\n")


def test_archive_and_unarchive(url: Callable[[str], str]) -> None:
    ok("publish", "-auth", WRITE_TOKEN, "-expected-version", "0", "-body", "# A\n", url("/a.md"))
    archived = ok("archive", "-v", "-auth", WRITE_TOKEN, url("/a.md"))
    assert archived.stderr == "[ok] archived=true version=1\n"
    gone = mark("fetch", url("/a.md"))
    assert (gone.exit_code, gone.stderr) == (1, "mark: archived\n")
    again = mark("publish", "-auth", WRITE_TOKEN, "-force", "-body", "x", url("/a.md"))
    assert (again.exit_code, again.stderr) == (1, "mark: archived\n")
    ok("publish", "-auth", WRITE_TOKEN, "-force", "-body", "", url("/a.md"))
    assert fetch_body(url("/a.md")) == b"# A\n"
    missing = mark("archive", "-auth", WRITE_TOKEN, url("/nope.md"))
    assert (missing.exit_code, missing.stderr) == (1, "mark: not-found\n")


# --- tokens -------------------------------------------------------------------------------------


def test_token_sources_and_their_order(
    url: Callable[[str], str], servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = ("publish", "-force", "-body", "# T\n", url("/a.md"))
    missing = mark(*write)
    assert (missing.exit_code, missing.stderr) == (1, "mark: unauthorized\n")
    assert missing.stdout == "\n# Unauthorized\n\nauthentication required\n"
    wrong = mark(*write, "-auth", "not-a-token")
    assert (wrong.exit_code, wrong.stderr) == (1, "mark: unauthorized\n")
    limited = mark(*write, "-auth", DOCS_TOKEN)
    assert (limited.exit_code, limited.stderr) == (1, "mark: not-permitted\n")

    ok("token", "add", servers.live.url, WRITE_TOKEN)
    ok(*write)  # the stored token
    monkeypatch.setenv("MARK_AUTH", "not-a-token")
    assert mark(*write).stderr == "mark: unauthorized\n"  # the environment beats the file
    ok(*write, "-auth", WRITE_TOKEN)  # the flag beats the environment
    monkeypatch.delenv("MARK_AUTH")
    ok("token", "remove", servers.live.url)
    assert mark(*write).exit_code == 1


def test_a_flag_token_goes_to_the_mark_host_server(
    servers: Servers, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARK_HOST", servers.live.url)
    ok("publish", "-auth", WRITE_TOKEN, "-force", "-body", "# T\n", "/flag-host/a.md")
    monkeypatch.setenv("MARK_AUTH", WRITE_TOKEN)
    ok("append", "-body", "more\n", "/flag-host/a.md")
    assert ok("fetch", "/flag-host/a.md").stdout == "# T\nmore\n"


def test_private_reads_need_a_read_token(servers: Servers, home: Path) -> None:
    target = servers.live.url + "/private/secret.md"
    ok("publish", "-auth", WRITE_TOKEN, "-force", "-body", "# Secret\n", target)
    denied = mark("fetch", target)
    assert (denied.exit_code, denied.stderr) == (1, "mark: unauthorized\n")
    assert ok("fetch", "-auth", READ_TOKEN, target).stdout == "# Secret\n"
    assert not list((home / "cache").glob("*.entry"))  # nothing read with a token is cached


def test_writes_refused_without_a_token_store(servers: Servers, home: Path) -> None:
    result = mark(
        "publish", "-auth", WRITE_TOKEN, "-force", "-body", "x", servers.bare.url + "/a.md"
    )
    assert (result.exit_code, result.stderr) == (1, "mark: not-permitted\n")
    assert result.stdout == "\n# Not permitted\n\npublishing requires auth configuration\n"


# --- transport failures -------------------------------------------------------------------------


def test_unreachable_and_timeouts(servers: Servers, home: Path) -> None:
    refused = mark("fetch", "mark://127.0.0.1:1/a.md")
    assert (refused.exit_code, refused.stdout) == (1, "")
    assert refused.stderr == "mark: 127.0.0.1:1: unreachable (connection refused)\n"
    silent = mark("fetch", "-timeout", "0.3", servers.silent + "/a.md")
    assert silent.exit_code == 1
    port = servers.silent.rpartition(":")[2]
    assert silent.stderr == f"mark: 127.0.0.1:{port}: unreachable (no answer within 0.3 s)\n"


def test_a_server_that_does_not_speak_mark(servers: Servers, home: Path) -> None:
    result = mark("fetch", servers.h3 + "/a.md")
    assert result.exit_code == 1
    port = servers.h3.rpartition(":")[2]
    assert result.stderr == f"mark: 127.0.0.1:{port}: server does not speak mark (ALPN mismatch)\n"


def test_a_changed_certificate_is_refused_loudly(servers: Servers, home: Path) -> None:
    wrong = "sha256:" + "0" * 64
    (home / "known_hosts").write_text(f"{servers.live.authority} {wrong}\n")
    result = mark(
        "publish", "-auth", WRITE_TOKEN, "-force", "-body", "x", servers.live.url + "/pin.md"
    )
    assert (result.exit_code, result.stdout) == (1, "")
    lines = result.stderr.splitlines()
    assert (
        lines[0]
        == f"mark: @@@ WARNING: THE CERTIFICATE OF {servers.live.authority} HAS CHANGED @@@"
    )
    assert "No request was sent." in lines
    assert f"  pinned:    {wrong}" in lines
    assert f"line 1 of {home / 'known_hosts'}" in lines[-1]
    assert mark("fetch", servers.live.url + "/pin.md").exit_code == 1
    ok("info", "-insecure", servers.live.url)


def test_first_contact_with_loopback_pins_and_says_so(servers: Servers, home: Path) -> None:
    (home / "known_hosts").unlink()
    first = ok("info", servers.live.url)
    fingerprint = devcert.fingerprint(servers.live.cert.read_bytes())
    assert first.stderr == (
        f"mark: {servers.live.authority}: pinned certificate {fingerprint} in "
        f"{home / 'known_hosts'} (loopback)\n"
    )
    assert ok("info", servers.live.url).stderr == ""


# --- edit ---------------------------------------------------------------------------------------

EDITOR = """\
import pathlib, subprocess, sys
path = pathlib.Path(sys.argv[-1])
mode = {mode!r}
if mode == "conflict":
    subprocess.run([sys.executable, "-m", "markproto.client.cli", "publish", "-auth", {token!r},
                    "-force", "-body", "# Theirs\\n", {target!r}], check=True)
if mode == "empty":
    path.write_text("  \\n")
elif mode != "unchanged":
    path.write_text(path.read_text() + "Edited.\\n")
sys.exit(3 if mode == "fail" else 0)
"""


def editor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, target: str) -> None:
    script = tmp_path / f"editor-{mode}.py"
    script.write_text(EDITOR.format(mode=mode, token=WRITE_TOKEN, target=target))
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")


def leftovers(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("mark-edit-*.md"))


def test_edit_creates_and_updates_keeping_metadata(
    url: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = url("/a.md")
    editor(tmp_path, monkeypatch, "append", target)
    created = ok("edit", "-auth", WRITE_TOKEN, "-v", target)
    assert created.stderr.startswith("[created] ")
    assert fetch_body(target) == b"Edited.\n"
    ok(
        "publish",
        "-auth",
        WRITE_TOKEN,
        "-expected-version",
        "1",
        "-meta",
        "tags=keep",
        "-body",
        "# A\n",
        target,
    )
    ok("edit", "-auth", WRITE_TOKEN, target)
    document = json.loads(ok("fetch", "-json", target).stdout)
    assert document["body"] == "# A\nEdited.\n"
    assert (document["metadata"]["tags"], document["metadata"]["version"]) == ("keep", "3")
    editor(tmp_path, monkeypatch, "unchanged", target)
    assert (
        ok("edit", "-auth", WRITE_TOKEN, target).stderr == "mark: no changes, nothing published\n"
    )
    assert leftovers(tmp_path) == []


def test_edit_keeps_the_text_when_publishing_fails(
    url: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = url("/a.md")
    ok("publish", "-auth", WRITE_TOKEN, "-expected-version", "0", "-body", "# Mine\n", target)
    editor(tmp_path, monkeypatch, "conflict", target)
    result = mark("edit", "-auth", WRITE_TOKEN, target)
    assert result.exit_code == 1
    assert result.stdout_bytes == bodies.conflict_body(1, 2)
    (kept,) = leftovers(tmp_path)
    assert kept.read_bytes() == b"# Mine\nEdited.\n"
    assert result.stderr == f"mark: your text is kept in {kept}\nmark: conflict\n"
    assert fetch_body(target) == b"# Theirs\n"


def test_edit_failures(
    url: Callable[[str], str], servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = url("/a.md")
    ok("publish", "-auth", WRITE_TOKEN, "-expected-version", "0", "-body", "# A\n", target)
    editor(tmp_path, monkeypatch, "fail", target)
    failed = mark("edit", "-auth", WRITE_TOKEN, target)
    (kept,) = leftovers(tmp_path)
    assert (failed.exit_code, failed.stderr) == (
        1,
        f"mark: the editor exited with status 3; your text is kept in {kept}\n",
    )
    kept.unlink()
    editor(tmp_path, monkeypatch, "empty", target)
    empty = mark("edit", "-auth", WRITE_TOKEN, target)
    assert (empty.exit_code, empty.stderr) == (
        1,
        "mark: the document is empty, nothing published\n",
    )
    editor(tmp_path, monkeypatch, "append", target)
    denied = mark("edit", target)
    assert (denied.exit_code, denied.stdout) == (1, "\n# Unauthorized\n\nauthentication required\n")
    (kept,) = leftovers(tmp_path)
    assert kept.read_bytes() == b"# A\nEdited.\n"
    monkeypatch.setenv("EDITOR", "'unbalanced")
    unquoted = mark("edit", "-auth", WRITE_TOKEN, target)
    assert (unquoted.exit_code, unquoted.stderr) == (
        1,
        "mark: EDITOR is not a command line (No closing quotation)\n",
    )
    assert leftovers(tmp_path) == [kept]
    monkeypatch.setenv("EDITOR", "no-such-editor-anywhere")
    missing = mark("edit", "-auth", WRITE_TOKEN, target)
    assert (
        missing.stderr
        == "mark: cannot run the editor 'no-such-editor-anywhere': No such file or directory\n"
    )
    ok("archive", "-auth", WRITE_TOKEN, target)
    archived = mark("edit", "-auth", WRITE_TOKEN, target)
    assert (archived.exit_code, archived.stderr) == (1, "mark: archived\n")


# --- the installed command ----------------------------------------------------------------------


def test_the_mark_entry_point(servers: Servers, home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
    env["MARK_HOME"] = str(home)
    command = Path(sys.executable).with_name("mark")
    result = subprocess.run(
        [str(command), "fetch", servers.live.url + "/.well-known/agent-manifest.md"],
        capture_output=True,
        env=env,
        timeout=30,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, MANIFEST, b"")
    usage = subprocess.run([str(command), "publish", "-body", "x"], capture_output=True, env=env)
    assert usage.returncode == 2
