"""Certificate trust: the known_hosts file, the first-contact decisions, and real handshakes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.echo import start_echo

from markproto.client import (
    CertificateChanged,
    KnownHostsError,
    Pool,
    TrustError,
    Untrusted,
)
from markproto.client.trust import (
    HEADER,
    FirstContact,
    Trust,
    Verification,
    first_contact_action,
    format_known_hosts,
    is_loopback,
    parse_known_hosts,
    system_ca,
    write_private,
)
from markproto.protocol.digests import fingerprint
from markproto.server import devcert

FP_A = "sha256:" + "a" * 64
FP_B = "sha256:" + "b" * 64

# known_hosts: pure parts

hosts = st.one_of(
    st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
)
authorities = st.builds(lambda h, p: f"{h}:{p}", hosts, st.integers(1, 65535))
fingerprints = st.binary(min_size=32, max_size=32).map(lambda b: "sha256:" + b.hex())


@settings(max_examples=200)
@given(st.dictionaries(authorities, fingerprints, max_size=8))
def test_known_hosts_round_trip(pins: dict[str, str]) -> None:
    assert parse_known_hosts(format_known_hosts(pins)) == pins


@settings(max_examples=300)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_known_hosts_parser_raises_only_its_own_error(text: str) -> None:
    try:
        pins = parse_known_hosts(text)
    except KnownHostsError:
        return
    assert all(fp.startswith("sha256:") for fp in pins.values())


def test_known_hosts_format_is_exact() -> None:
    text = format_known_hosts({"localhost:6309": FP_A, "[::1]:7000": FP_B})
    assert text == HEADER + f"localhost:6309 {FP_A}\n[::1]:7000 {FP_B}\n"
    assert all(line.startswith("# ") for line in HEADER.splitlines())


def test_known_hosts_skips_comments_and_blanks() -> None:
    text = f"# mine\n\n   \nexample.org:6309 {FP_A}\n  # indented\n10.0.0.1:1\t{FP_B}  \n"
    assert parse_known_hosts(text) == {"example.org:6309": FP_A, "10.0.0.1:1": FP_B}


@pytest.mark.parametrize(
    "line",
    [
        "example.org:6309",
        f"example.org {FP_A}",
        f"Example.org:6309 {FP_A}",
        f"example.org:6309 {FP_A.upper()}",
        f"example.org:6309 {FP_A[:-1]}",
        f"example.org:6309 {FP_A} extra",
        f"::1:6309 {FP_A}",
        f"example.org:6309 md5:{'a' * 64}",
    ],
)
def test_known_hosts_refuses_malformed_lines(line: str) -> None:
    with pytest.raises(KnownHostsError, match=r"^kh:2: expected 'host:port sha256:<64 hex>'$"):
        parse_known_hosts(f"# header\n{line}\n", "kh")


def test_known_hosts_refuses_a_second_pin() -> None:
    text = f"a.example:1 {FP_A}\na.example:1 {FP_B}\n"
    with pytest.raises(KnownHostsError, match=r"^kh:2: a.example:1 is pinned twice$"):
        parse_known_hosts(text, "kh")


def test_write_private_is_atomic_and_0600(tmp_path: Path) -> None:
    path = tmp_path / "new" / "known_hosts"
    write_private(path, "one\n")
    assert path.read_text() == "one\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    inode = path.stat().st_ino
    os.chmod(path, 0o644)
    write_private(path, "two\n")
    assert path.read_text() == "two\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["known_hosts"]


# decisions


@pytest.mark.parametrize(
    ("loopback", "trust_new", "can_ask", "action"),
    [
        (True, False, False, FirstContact.AUTO_PIN),
        (True, True, True, FirstContact.AUTO_PIN),
        (False, True, False, FirstContact.ACCEPT_NEW),
        (False, True, True, FirstContact.ACCEPT_NEW),
        (False, False, True, FirstContact.ASK),
        (False, False, False, FirstContact.REFUSE),
    ],
)
def test_first_contact_table(
    loopback: bool, trust_new: bool, can_ask: bool, action: FirstContact
) -> None:
    assert first_contact_action(loopback=loopback, trust_new=trust_new, can_ask=can_ask) is action


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost.example", False),
        ("10.0.0.1", False),
        ("::2", False),
        ("example.org", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_fingerprint_matches_the_server_devcert() -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    cert_pem, _ = devcert.generate([])
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(Encoding.DER)
    assert fingerprint(der) == devcert.fingerprint(cert_pem)


def test_plans(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(format_known_hosts({"pinned.example:6309": FP_A}))
    trust = Trust(known_hosts=kh)
    assert trust.plan("pinned.example:6309").verification is Verification.PINNED
    assert trust.plan("pinned.example:6309").pin == FP_A
    plan = trust.plan("other.example:6309")
    assert (plan.verification, plan.pin) == (Verification.SYSTEM, None)
    assert (plan.cafile, plan.capath) == system_ca()
    assert Trust(known_hosts=kh, cafile=str(kh)).plan("x:1").cafile == str(kh)
    with pytest.raises(ValueError, match="no such CA file"):
        Trust(cafile=str(tmp_path / "missing.pem"))
    assert Trust(known_hosts=kh, insecure=True).plan("pinned.example:6309").pin is None


def test_pin_appends_and_keeps_the_rest(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(f"# my own note\nold.example:1 {FP_A}")
    trust = Trust(known_hosts=kh)
    trust.pin("new.example:2", FP_B)
    trust.pin("new.example:2", FP_B)
    assert kh.read_text() == f"# my own note\nold.example:1 {FP_A}\nnew.example:2 {FP_B}\n"
    with pytest.raises(CertificateChanged):
        trust.pin("old.example:1", FP_B)


def test_unusable_known_hosts_path_is_a_known_hosts_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    trust = Trust(known_hosts=tmp_path / "a-file" / "known_hosts")
    with pytest.raises(KnownHostsError, match=r"/a-file/known_hosts: "):
        trust.first_contact("localhost:6309", FP_A, "self-signed certificate")


def test_check_passes_the_pin_and_is_loud_on_a_change(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    pinned = fingerprint(b"the pinned certificate")
    kh.write_text(format_known_hosts({"a.example:1": FP_B, "host.example:6309": pinned}))
    trust = Trust(known_hosts=kh)
    plan = trust.plan("host.example:6309")
    trust.check("host.example:6309", plan, b"the pinned certificate")
    trust.check("a.example:7", trust.plan("a.example:7"), b"anything: not pinned")
    with pytest.raises(CertificateChanged) as caught:
        trust.check("host.example:6309", plan, b"another certificate")
    assert str(caught.value).splitlines() == [
        "@@@ WARNING: THE CERTIFICATE OF host.example:6309 HAS CHANGED @@@",
        "Someone may be intercepting the connection, or the server got a new certificate.",
        "No request was sent.",
        f"  pinned:    {pinned}",
        f"  presented: {fingerprint(b'another certificate')}",
        f"If the change is expected, remove line 4 of {kh} and connect again.",
    ]


def test_first_contact_decisions(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    notes: list[str] = []
    asked: list[tuple[str, str]] = []
    Trust(known_hosts=kh, note=notes.append).first_contact("127.0.0.1:6309", FP_A, "self-signed")
    assert notes == [f"127.0.0.1:6309: pinned certificate {FP_A} in {kh} (loopback)"]
    with pytest.raises(Untrusted) as refused:
        Trust(known_hosts=kh).first_contact("far.example:6309", FP_B, "self-signed certificate")
    assert str(refused.value) == (
        f"far.example:6309: certificate not trusted (self-signed certificate); it presents {FP_B}."
        " Pin it on first use with -trust-new, or skip verification with -insecure"
    )

    def decline(authority: str, presented: str) -> bool:
        asked.append((authority, presented))
        return False

    no = Trust(known_hosts=kh, confirm=decline)
    with pytest.raises(Untrusted):
        no.first_contact("far.example:6309", FP_B, "r")
    assert asked == [("far.example:6309", FP_B)]
    Trust(
        known_hosts=kh, trust_new=True, confirm=lambda a, fp: False, note=notes.append
    ).first_contact("new.example:6309", FP_B, "r")
    assert parse_known_hosts(kh.read_text()) == {"127.0.0.1:6309": FP_A, "new.example:6309": FP_B}
    assert notes[-1].endswith("(accepted)")


# real handshakes against the echo server (self-signed devcert: SANs localhost, 127.0.0.1, ::1)


@pytest.fixture
def certs(tmp_path: Path) -> tuple[Path, Path]:
    cert, key, _ = devcert.ensure(tmp_path / "server")
    return cert, key


def pinned(kh: Path) -> dict[str, str]:
    return parse_known_hosts(kh.read_text()) if kh.exists() else {}


async def test_verified_with_the_certificate_as_ca(
    certs: tuple[Path, Path], tmp_path: Path
) -> None:
    server, port = await start_echo(*certs)
    kh = tmp_path / "known_hosts"
    try:
        async with Pool(Trust(cafile=str(certs[0]), known_hosts=kh)) as pool:
            assert await pool.request(f"localhost:{port}", b"hi") == b"hi"
        assert not kh.exists()
    finally:
        server.close()


async def test_loopback_first_contact_pins_then_uses_the_pin(
    certs: tuple[Path, Path], tmp_path: Path
) -> None:
    server, port = await start_echo(*certs)
    kh = tmp_path / "mark" / "known_hosts"
    notes: list[str] = []
    authority = f"localhost:{port}"
    expected = devcert.fingerprint(certs[0].read_bytes())
    try:
        trust = Trust(known_hosts=kh, note=notes.append)
        async with Pool(trust) as pool:
            assert await pool.request(authority, b"first") == b"first"
        assert pinned(kh) == {authority: expected}
        assert stat.S_IMODE(kh.stat().st_mode) == 0o600
        assert notes == [f"{authority}: pinned certificate {expected} in {kh} (loopback)"]
        assert trust.plan(authority).verification is Verification.PINNED
        async with Pool(Trust(known_hosts=kh, note=notes.append)) as pool:
            assert await pool.request(authority, b"second") == b"second"
        assert len(notes) == 1
        assert pinned(kh) == {authority: expected}
    finally:
        server.close()


async def test_changed_certificate_sends_nothing(certs: tuple[Path, Path], tmp_path: Path) -> None:
    received: list[bytes] = []

    def record(data: bytes) -> bytes:
        received.append(data)
        return data

    server, port = await start_echo(*certs, reply=record)
    kh = tmp_path / "known_hosts"
    authority = f"127.0.0.1:{port}"
    old = fingerprint(b"the certificate the server used to have")
    kh.write_text(format_known_hosts({authority: old}))
    try:
        async with Pool(Trust(known_hosts=kh)) as pool:
            with pytest.raises(CertificateChanged) as caught:
                await pool.request(authority, b"PUBLISH /secret.md\n")
        assert caught.value.sent is False
        message = str(caught.value)
        assert message.startswith(f"@@@ WARNING: THE CERTIFICATE OF {authority} HAS CHANGED @@@\n")
        assert f"pinned:    {old}" in message
        assert f"presented: {devcert.fingerprint(certs[0].read_bytes())}" in message
        assert f"remove line 3 of {kh}" in message
        assert received == []
        assert pinned(kh) == {authority: old}
    finally:
        server.close()


async def test_non_loopback_first_contact(certs: tuple[Path, Path], tmp_path: Path) -> None:
    """A name that is not loopback but is dialed on 127.0.0.1 (``endpoints``): what a remote
    self-signed server looks like to the trust policy."""
    server, port = await start_echo(*certs)
    kh = tmp_path / "known_hosts"
    authority = f"mark.test:{port}"
    endpoints = {authority: f"127.0.0.1:{port}"}
    expected = devcert.fingerprint(certs[0].read_bytes())
    asked: list[tuple[str, str]] = []

    def answer(yes: bool) -> Trust:
        def confirm(authority: str, presented: str) -> bool:
            asked.append((authority, presented))
            return yes

        return Trust(known_hosts=kh, confirm=confirm)

    try:
        for trust in (Trust(known_hosts=kh), answer(False)):
            async with Pool(trust, endpoints=endpoints) as pool:
                with pytest.raises(Untrusted) as caught:
                    await pool.request(authority, b"x")
            assert caught.value.sent is False
            assert str(caught.value).startswith(f"{authority}: certificate not trusted (")
            assert "-trust-new" in str(caught.value)
            assert "-insecure" in str(caught.value)
            assert "\n" not in str(caught.value)
            assert not kh.exists()
        assert asked == [(authority, expected)]
        async with Pool(answer(True), endpoints=endpoints) as pool:
            assert await pool.request(authority, b"yes") == b"yes"
        assert asked == [(authority, expected)] * 2
        assert pinned(kh) == {authority: expected}
    finally:
        server.close()


async def test_trust_new_pins_without_asking(certs: tuple[Path, Path], tmp_path: Path) -> None:
    server, port = await start_echo(*certs)
    kh = tmp_path / "known_hosts"
    authority = f"mark.test:{port}"
    try:
        trust = Trust(known_hosts=kh, trust_new=True, note=lambda _: None)
        async with Pool(trust, endpoints={authority: f"127.0.0.1:{port}"}) as pool:
            assert await pool.request(authority, b"x") == b"x"
        assert pinned(kh) == {authority: devcert.fingerprint(certs[0].read_bytes())}
    finally:
        server.close()


async def test_insecure_connects_to_anything(certs: tuple[Path, Path], tmp_path: Path) -> None:
    server, port = await start_echo(*certs)
    kh = tmp_path / "known_hosts"
    kh.write_text(format_known_hosts({f"mark.test:{port}": FP_A}))  # even a stale pin is ignored
    try:
        trust = Trust(known_hosts=kh, insecure=True)
        async with Pool(trust, endpoints={f"mark.test:{port}": f"127.0.0.1:{port}"}) as pool:
            assert await pool.request(f"mark.test:{port}", b"x") == b"x"
            assert await pool.request(f"localhost:{port}", b"y") == b"y"
        assert pinned(kh) == {f"mark.test:{port}": FP_A}
    finally:
        server.close()


async def test_broken_known_hosts_is_a_trust_failure(
    certs: tuple[Path, Path], tmp_path: Path
) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("garbage\n")
    async with Pool(Trust(known_hosts=kh)) as pool:
        with pytest.raises(KnownHostsError) as caught:
            await pool.request("localhost:6309", b"x")
    assert isinstance(caught.value, TrustError)
    assert caught.value.sent is False
    assert str(caught.value) == (f"localhost:6309: {kh}:1: expected 'host:port sha256:<64 hex>'")


def test_a_hostname_mismatch_names_the_certificate_s_names_not_python_reprs() -> None:
    from markproto.client.quic import readable

    phrase = (
        "hostname '192.0.2.2' doesn't match either of DNSPattern(pattern=b'localhost'), "
        "DNSPattern(pattern=b'vm'), IPAddressPattern(pattern=IPv4Address('127.0.0.1')), "
        "IPAddressPattern(pattern=IPv6Address('::1'))"
    )
    assert (
        readable(phrase) == "the certificate is for localhost, vm, 127.0.0.1 and ::1, not 192.0.2.2"
    )
    single = "hostname 'a.example' doesn't match DNSPattern(pattern=b'b.example')"
    assert readable(single) == "the certificate is for b.example, not a.example"
    assert readable("unable to get local issuer certificate") == (
        "unable to get local issuer certificate"
    )
