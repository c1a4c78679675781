"""What a new user trips over (issue 17), driven as that user would: the installed `mark` and
`mark-server` commands as processes, against a real `mark-server` on loopback.

Every failure a user can cause must end in one clear line on stderr and its documented exit
status, never a traceback; `-json` must print one JSON object whatever happens.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.server import WRITE_TOKEN, ServerProcess, TokenSpec, server_process, write_tokens

from markproto.server import devcert

BIN = Path(sys.executable).parent
MARK, MARK_SERVER = str(BIN / "mark"), str(BIN / "mark-server")
READER = "reader-token"
DOCS = "docs-token"
OLD = "old-token"
TOKENS = {
    "writer": TokenSpec(WRITE_TOKEN),
    "reader": TokenSpec(READER, paths=("/private/**",), ops=("read",)),
    "docs": TokenSpec(DOCS, paths=("/docs/**",)),
    "old": TokenSpec(OLD, expires="2020-01-01T00:00:00Z"),
}


@dataclass
class Site:
    server: ServerProcess
    tokens: Path

    @property
    def url(self) -> str:
        return self.server.url

    def log(self) -> str:
        return "".join(self.server.stderr_lines)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("site")
    (base / "root").mkdir()
    tokens = write_tokens(base / "tokens.toml", TOKENS)
    with server_process(base / "root", base / "state", tokens_file=tokens) as server:
        yield Site(server, tokens)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MARK_", "XDG_"))}
    env.update(HOME=str(home), **extra)
    return env


@pytest.fixture
def env(tmp_path: Path, site: Site) -> dict[str, str]:
    """A user whose MARK_HOME already pins the site's certificate."""
    home = tmp_path / "mark-home"
    home.mkdir()
    fingerprint = devcert.fingerprint(site.server.cert.read_bytes())
    (home / "known_hosts").write_text(f"127.0.0.1:{site.server.port} {fingerprint}\n")
    return clean_env(tmp_path, MARK_HOME=str(home))


def run(
    command: Sequence[str], env: dict[str, str], stdin: str = "", timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command), input=stdin, capture_output=True, text=True, env=env, timeout=timeout
    )


def mark(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return run([MARK, *args], env, stdin)


def ends(result: subprocess.CompletedProcess[str], code: int, *parts: str) -> str:
    """The result exited ``code`` with no traceback; its last stderr line holds ``parts``."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == code, (result.returncode, result.stderr)
    last = result.stderr.splitlines()[-1]
    for part in parts:
        assert part in last, (part, result.stderr)
    return last


def publish(env: dict[str, str], url: str, body: str, *options: str) -> None:
    result = mark(env, "publish", "-auth", WRITE_TOKEN, "-force", *options, "-body", body, url)
    assert result.returncode == 0, result.stderr


# --- the client's endings -------------------------------------------------------------------------


def test_typos_get_a_suggestion_and_exit_2(env: dict[str, str], site: Site) -> None:
    doc = f"{site.url}/a.md"
    assert ends(mark(env, "fetch", "-o", doc), 2) == (
        "mark: no such option -o; did you mean -outline? (see 'mark fetch --help')"
    )
    ends(mark(env, "lookup", "-qeury", "x", doc), 2, "did you mean -query?")
    ends(mark(env, "fetc", doc), 2, "no such command 'fetc'; did you mean fetch?")


def test_json_is_one_object_whatever_happens(env: dict[str, str], site: Site) -> None:
    doc = f"{site.url}/json/a.md"
    publish(env, doc, "# A\n\n## Part\n\nText.\n")
    down = mark(env, "fetch", "-json", "mark://127.0.0.1:1/a.md")
    ends(down, 1, "mark: 127.0.0.1:1: unreachable (connection refused)")
    assert json.loads(down.stdout) == {
        "status": "error",
        "error": "unreachable",
        "message": "127.0.0.1:1: unreachable (connection refused)",
        "exit_code": 1,
    }
    anchor = mark(env, "fetch", "-json", doc + "#nope")
    ends(anchor, 1, "no section #nope (sections: #a, #part)")
    assert json.loads(anchor.stdout)["error"] == "anchor-not-found"
    usage = mark(env, "publish", "-json", "-body", "x", doc)
    ends(usage, 2, "publish needs -expected-version N")
    assert json.loads(usage.stdout)["exit_code"] == 2
    listed = json.loads(mark(env, "list", "-json", f"{site.url}/json/").stdout)
    assert listed["entries"] == [{"name": "a.md", "type": "document", "url": doc}]
    versions = json.loads(mark(env, "versions", "-json", doc).stdout)["versions"]
    assert [(v["version"], v["url"]) for v in versions] == [(1, doc + "/v1")]
    rows = json.loads(mark(env, "lookup", "-json", "-query", "*", f"{site.url}/json/").stdout)
    assert [row["url"] for row in rows["rows"]] == [doc]


def test_a_no_op_edit_says_so_in_json(env: dict[str, str], site: Site, tmp_path: Path) -> None:
    doc = f"{site.url}/edit/a.md"
    publish(env, doc, "# A\n")
    unchanged = mark({**env, "EDITOR": "true"}, "edit", "-json", "-auth", WRITE_TOKEN, doc)
    ends(unchanged, 0, "mark: no changes, nothing published")
    assert json.loads(unchanged.stdout) == {
        "status": "unchanged",
        "message": "no changes, nothing published",
        "exit_code": 0,
    }


def test_version_links_paste_into_fetch(env: dict[str, str], site: Site) -> None:
    doc = f"{site.url}/notes/quic.md"
    publish(env, doc, "# One\n")
    publish(env, doc, "# Two\n")
    listed = mark(env, "versions", doc)
    assert listed.returncode == 0, listed.stderr
    links = re.findall(r"\]\((\S+)\)", listed.stdout)
    assert links == [doc + "/v2", doc + "/v1"]
    assert "%2F" not in listed.stdout
    assert mark(env, "fetch", links[1]).stdout == "# One\n"


def test_destructive_writes_are_guarded(env: dict[str, str], site: Site) -> None:
    doc = f"{site.url}/guard/a.md"
    for body in ("# 1\n", "# 2\n", "# 3\n"):
        publish(env, doc, body)
    write = ("publish", "-auth", WRITE_TOKEN, "-force", "-body", "# 4\n")
    ends(mark(env, *write, "-meta", "retention=1", doc), 2, "add -yes to confirm")
    ends(mark(env, *write, doc + "#section"), 2, "not one section: drop #section")
    ends(mark(env, *write, "-meta", "importance=2", doc), 2, 'from 0 to 1, got "2"')
    ends(mark(env, *write, "-meta", "importance=high", doc), 2, "from 0 to 1")
    history = json.loads(mark(env, "versions", "-json", doc).stdout)
    assert history["metadata"]["total"] == "3"  # none of those reached the server
    pruned = mark(env, *write, "-meta", "retention=1", "-yes", doc)
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(mark(env, "versions", "-json", doc).stdout)["metadata"]["total"] == "1"


def test_a_wrong_kind_of_path_is_named(env: dict[str, str], site: Site) -> None:
    doc, folder = f"{site.url}/kinds/a.md", f"{site.url}/kinds"
    publish(env, doc, "# A\n")
    ends(
        mark(env, "lookup", "-query", "alpha", doc),
        1,
        "mark: not-found: /kinds/a.md is a document, not a folder: lookup searches a folder,"
        f" such as {site.url}/kinds/",
    )
    ends(mark(env, "list", doc), 1, "/kinds/a.md is a document, not a folder", f"fetch {doc}")
    ends(mark(env, "versions", folder), 1, "/kinds is a folder, not a document", "mark list")
    as_json = json.loads(mark(env, "versions", "-json", folder).stdout)
    assert as_json["status"] == "not-found"
    assert as_json["message"].startswith("/kinds is a folder, not a document")
    ends(mark(env, "versions", f"{site.url}/kinds/none.md"), 1, "mark: not-found")


def test_client_state_follows_xdg_unless_dot_mark_exists(site: Site, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    pinged = mark(env, "ping", site.url)
    assert pinged.returncode == 0, pinged.stderr
    pins = tmp_path / ".config/markproto/known_hosts"
    assert "pinned certificate sha256:" in pinged.stderr
    assert str(pins) in pinged.stderr
    assert pins.is_file()
    (tmp_path / ".mark").mkdir()
    again = mark(env, "ping", site.url)
    assert str(tmp_path / ".mark/known_hosts") in again.stderr  # the reference's home wins
    custom = clean_env(tmp_path / "other", XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    assert str(tmp_path / "cfg/markproto/known_hosts") in mark(custom, "ping", site.url).stderr


def test_ctrl_c_exits_130(env: dict[str, str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:  # swallows every datagram
        sink.bind(("127.0.0.1", 0))
        url = f"mark://127.0.0.1:{sink.getsockname()[1]}/a.md"
        proc = subprocess.Popen(
            [MARK, "fetch", "-timeout", "20", url],
            env=env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.5)  # interpreter up, dialing
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == "mark: interrupted"


def own_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server reached on a non-loopback address, whose self-signed certificate does not name
    it: the first contact cannot pin silently."""
    address = own_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    base = tmp_path_factory.mktemp("remote")
    (base / "root").mkdir()
    with server_process(base / "root", base / "state", args=["--host", "0.0.0.0"]) as server:
        yield f"mark://{address}:{server.port}"


def test_a_hostname_mismatch_is_said_in_words(remote: str, tmp_path: Path) -> None:
    result = mark(clean_env(tmp_path), "ping", remote)
    host = remote.split("//")[1].rpartition(":")[0]
    line = ends(result, 1, f"not {host}); it presents sha256:", "-trust-new", "-insecure")
    assert "certificate not trusted (the certificate is for localhost" in line
    assert "Pattern" not in line and "b'" not in line


def test_ctrl_c_at_the_first_contact_prompt_exits_at_once(remote: str, tmp_path: Path) -> None:
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [MARK, "ping", remote],
        env=clean_env(tmp_path),
        stdin=child,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(child)
    try:
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 20
        while b"Pin it and connect? [y/N]: " not in seen and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 0.5)[0]:
                seen += os.read(proc.stderr.fileno(), 4096)
        assert b"Pin it and connect?" in seen, seen
        asked = time.monotonic()
        proc.send_signal(signal.SIGINT)  # no Enter follows
        code = proc.wait(timeout=5)
        assert time.monotonic() - asked < 3
        rest = proc.stderr.read().decode()
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    assert code == 130
    assert "Traceback" not in rest
    assert rest.splitlines()[-1] == "mark: interrupted"


def test_mark_mcp_without_the_extra(env: dict[str, str], tmp_path: Path) -> None:
    """The README's `pip install .` has no MCP SDK; a stand-in package that is missing its
    modules plays that environment for the installed command."""
    fake = tmp_path / "no-mcp" / "mcp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n"
    )
    result = run([MARK, "mcp"], {**env, "PYTHONPATH": str(fake.parent)})
    assert ends(result, 2) == (
        "mark: mark mcp needs the mcp extra (the MCP SDK), which is not installed: "
        "pip install 'markproto[mcp]'"
    )


# --- tokens: at once, and refusals logged with their reason ---------------------------------------


def test_a_new_token_works_at_once(env: dict[str, str], site: Site) -> None:
    made = run(
        [MARK_SERVER, "token", "generate", "--label", "fresh", "--tokens", str(site.tokens)], env
    )
    assert made.returncode == 0, made.stderr
    raw = made.stdout.strip()
    published = mark(env, "publish", "-auth", raw, "-force", "-body", "# New\n", site.url + "/n.md")
    assert published.returncode == 0, published.stderr


def test_refused_tokens_are_logged_with_their_reason(env: dict[str, str], site: Site) -> None:
    write = ("publish", "-force", "-body", "# X\n")
    ends(mark(env, *write, "-auth", "no-such-token", site.url + "/x.md"), 1, "mark: unauthorized")
    ends(mark(env, *write, "-auth", OLD, site.url + "/x.md"), 1, "mark: unauthorized")
    ends(mark(env, *write, "-auth", DOCS, site.url + "/x.md"), 1, "mark: not-permitted")
    ends(mark(env, *write, "-auth", READER, site.url + "/private/x.md"), 1, "not-permitted")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and site.log().count("token refused") < 4:
        time.sleep(0.05)
    refusals = [line for line in site.log().splitlines() if "auth: token refused" in line]
    reasons = [re.search(r'reason="?([a-z ]+)"? label=(\S+)', line).groups() for line in refusals]
    assert ("unknown token", "-") in reasons
    assert ("expired", "old") in reasons
    assert ("wrong path", "docs") in reasons
    assert ("wrong operation", "reader") in reasons
    for secret in ("no-such-token", OLD, DOCS, READER):
        assert secret not in site.log()


# --- the server's endings -------------------------------------------------------------------------


def serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run([MARK_SERVER, "serve", *args], env, timeout=60)


def test_the_server_names_an_address_it_cannot_listen_on(site: Site, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    root = ["--root", str(site.server.root), "--state-dir", str(tmp_path / "state")]
    taken = serve(env, *root, "--host", "127.0.0.1", "--port", str(site.server.port))
    ends(
        taken,
        1,
        f"mark-server: cannot listen on udp 127.0.0.1:{site.server.port}: the port (set by "
        "--port) is in use",
        "choose a free port with --port or MARK_PORT",
    )
    foreign = serve(env, *root, "--host", "198.51.100.7", "--port", "0")
    ends(foreign, 1, "198.51.100.7 (set by --host) is not an address of this machine")
    unknown = serve(env, *root, "--host", "no-such-host.invalid", "--port", "0")
    ends(unknown, 1, "'no-such-host.invalid' (set by --host) is no address or resolvable name")
    for result in (taken, foreign, unknown):
        assert "Errno" not in result.stderr


def test_a_bad_tls_pair_is_refused_in_words(site: Site, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    other_key = devcert.ensure(tmp_path / "other")[1]
    cert = site.server.cert
    base = ["--root", str(site.server.root), "--host", "127.0.0.1", "--port", "0"]
    ends(
        serve(env, *base, "--tls-cert", str(junk), "--tls-key", str(other_key)),
        1,
        f"mark-server: --tls-cert: '{junk}' holds no PEM certificate",
    )
    ends(
        serve(env, *base, "--tls-cert", str(cert), "--tls-key", str(junk)),
        1,
        f"mark-server: --tls-key: '{junk}' holds no PEM private key",
    )
    ends(
        serve(env, *base, "--tls-cert", str(cert), "--tls-key", str(other_key)),
        1,
        f"'{other_key}' is not the private key of the certificate in '{cert}'",
    )


def test_a_failed_first_start_shows_no_token_and_the_next_one_does(
    site: Site, tmp_path: Path
) -> None:
    env = clean_env(tmp_path / "user")
    state = tmp_path / "user/.local/state/markproto"
    failed = serve(env, "--host", "127.0.0.1", "--port", str(site.server.port))
    ends(failed, 1, "the port (set by --port) is in use")
    assert failed.stdout == ""  # no "shown once" token that could never work
    assert not (state / "tokens.toml").exists()
    assert not (tmp_path / "user/.local/share/markproto/root").exists()
    proc = subprocess.Popen(
        [MARK_SERVER, "serve", "--host", "127.0.0.1", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "A publish token for this server (shown once, keep it):\n"
        assert re.fullmatch(r"[0-9a-f]{64}\n", proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130  # Ctrl-C drains, then exits as interrupted
