"""The QUIC transport over real QUIC on loopback: each decision of the stream assembler carried out
(the assembler itself is tested without a socket in test_streams.py), connection lifetime, drain,
certificate reload and addresses. What the server holds is read through `MarkServer.usage`."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.quicclient import QuicClient, StreamResetError, connect

from markproto.protocol.limits import MAX_REQUEST_LINE
from markproto.server import devcert, transport
from markproto.server.transport import MarkServer, Peer, Responses, Usage

RESPONSES = Responses(
    oversize=b"OVERSIZE", rate_limited=b"LIMITED", timeout=b"TIMEOUT", internal=b"INTERNAL"
)


def echo(request: bytes, peer: Peer) -> bytes:
    return request


async def until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait for a condition the server reaches on its own (no timing assertion: just a bound)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def holds_nothing(server: MarkServer) -> bool:
    """No request bytes, no request in progress, no stream being discarded."""
    usage = server.usage()
    held = (usage.buffered, usage.partial, usage.queued, usage.running, usage.discarding)
    return held == (0, 0, 0, 0, 0)


class Net:
    """Servers and clients started by one test, all closed when it ends."""

    def __init__(self, cert: tuple[Path, Path]) -> None:
        self.cert = cert
        self.servers: list[MarkServer] = []
        self.clients: list[QuicClient] = []

    async def serve(
        self, handler: transport.Handler = echo, host: str = "127.0.0.1", **options: object
    ) -> MarkServer:
        certfile, keyfile = self.cert
        server = await transport.serve(
            handler,
            host=host,
            port=0,
            certfile=certfile,
            keyfile=keyfile,
            responses=RESPONSES,
            **options,  # type: ignore[arg-type]
        )
        self.servers.append(server)
        return server

    async def dial(
        self, server: MarkServer, host: str = "127.0.0.1", **options: object
    ) -> QuicClient:
        client = await connect(host, server.port, **options)  # type: ignore[arg-type]
        self.clients.append(client)
        return client


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    certfile, keyfile, _ = devcert.ensure(tmp_path / "tls")
    return certfile, keyfile


@pytest.fixture
async def net(cert: tuple[Path, Path]) -> AsyncIterator[Net]:
    net = Net(cert)
    yield net
    for client in net.clients:
        client.hang_up()
    for server in net.servers:
        server.close()


class Gate:
    """An async handler that holds every request until released and counts how many it holds."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.entered = asyncio.Event()
        self.inside = 0
        self.most = 0
        self.cancelled = 0

    async def __call__(self, request: bytes, peer: Peer) -> bytes:
        self.inside += 1
        self.most = max(self.most, self.inside)
        self.entered.set()
        try:
            await self.open.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.inside -= 1
        return b"done " + request


# --- exchanges ------------------------------------------------------------------------------------


async def test_round_trip_sync_and_async_handlers(net: Net) -> None:
    async def later(request: bytes, peer: Peer) -> bytes:
        await asyncio.sleep(0)
        return b"async " + request

    sync_server = await net.serve()
    assert sync_server.addresses == (("127.0.0.1", sync_server.port),)
    client = await net.dial(sync_server)
    assert await client.request(b"FETCH /a.md\n") == b"FETCH /a.md\n"
    assert await client.request(b"") == b""

    client = await net.dial(await net.serve(later))
    assert await client.request(b"FETCH /b.md\n") == b"async FETCH /b.md\n"


async def test_many_sequential_requests_on_one_connection(net: Net) -> None:
    peers: set[Peer] = set()

    def handler(request: bytes, peer: Peer) -> bytes:
        peers.add(peer)
        return request[::-1]

    client = await net.dial(await net.serve(handler))
    for i in range(300):
        request = f"FETCH /doc-{i}.md\n".encode()
        assert await client.request(request) == request[::-1]
    assert peers == {Peer("127.0.0.1", client.local_port)}

    await client.rebind()  # the peer follows the client to its new address
    assert await client.request(b"FETCH /moved\n") == b"\ndevom/ HCTEF"
    assert Peer("127.0.0.1", client.local_port) in peers
    assert len(peers) == 2


async def test_300_concurrent_streams_on_one_connection(net: Net) -> None:
    client = await net.dial(await net.serve())
    requests = [f"FETCH /{i}.md\n".encode() * (i % 7 + 1) for i in range(300)]
    assert await client.many(requests) == requests


async def test_stream_credit_holds_handlers_to_the_cap_while_clients_wait(net: Net) -> None:
    gate = Gate()

    async def handler(request: bytes, peer: Peer) -> bytes:
        if gate.inside + 1 == 8:  # the eighth concurrent request opens the gate for good
            gate.open.set()
        return await gate(request, peer)

    server = await net.serve(handler, max_streams=8)
    client = await net.dial(server)
    requests = [f"LIST /{i}/\n".encode() for i in range(300)]
    assert await client.many(requests) == [b"done " + r for r in requests]
    assert gate.most == 8  # and the credit was re-granted as streams finished, or 300 would hang
    assert holds_nothing(server)


async def test_one_mebibyte_request_and_response(net: Net) -> None:
    client = await net.dial(await net.serve())
    body = bytes(range(256)) * 4096
    request = b"PUBLISH /big.md\n" + body
    assert len(body) == 1 << 20
    assert await client.request(request) == request
    longest = b"FETCH /" + b"b" * (MAX_REQUEST_LINE - 7) + b"\n" + b"body" * 1000
    assert await client.request(longest, chunk=1000) == longest  # a 4096-byte line is allowed


# --- caps while bytes arrive ----------------------------------------------------------------------


async def test_oversize_request_gets_exactly_the_oversize_bytes(net: Net) -> None:
    calls: list[bytes] = []

    def handler(request: bytes, peer: Peer) -> bytes:
        calls.append(request)
        return b"ok"

    server = await net.serve(handler, max_request=100)
    client = await net.dial(server)
    assert await client.request(b"x" * 100) == b"ok"
    assert await client.request(b"x" * 101) == b"OVERSIZE"
    assert calls == [b"x" * 100]
    assert holds_nothing(server)


async def test_oversize_stream_is_answered_early_stopped_and_discarded(net: Net) -> None:
    calls: list[bytes] = []

    def handler(request: bytes, peer: Peer) -> bytes:
        calls.append(request)
        return b"ok"

    server = await net.serve(handler, max_request=2000)
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"y" * 3500, fin=False, chunk=500)  # no FIN: the answer cannot wait for it
    assert await client.response(sid) == b"OVERSIZE"
    await until(lambda: sid in client.stopped)  # STOP_SENDING asks the client to stop
    await until(lambda: server.usage().discarding == 0)  # the client reset its side
    assert calls == []
    assert await client.request(b"next\n") == b"ok"
    assert holds_nothing(server)


async def test_global_buffer_cap_resets_the_stream_that_passes_it(net: Net) -> None:
    server = await net.serve(max_buffered=3000)
    client = await net.dial(server)
    first = client.open()
    client.send(first, b"a" * 2000, fin=False)
    await until(lambda: server.usage().buffered == 2000)
    second = client.open()
    client.send(second, b"b" * 2000, fin=False)
    with pytest.raises(StreamResetError):
        await client.response(second)
    assert server.usage().buffered == 2000
    client.send(first, b"\n", fin=True)
    assert await client.response(first) == b"a" * 2000 + b"\n"
    await until(lambda: holds_nothing(server))


async def test_incomplete_request_is_reset_after_the_request_timeout(net: Net) -> None:
    server = await net.serve(request_timeout=0.3)
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"PUBLISH /half.md\n", fin=False)
    with pytest.raises(StreamResetError):
        await client.response(sid)
    await until(lambda: holds_nothing(server))
    assert await client.request(b"FETCH /after.md\n") == b"FETCH /after.md\n"


async def test_handler_past_the_request_timeout_gets_the_timeout_bytes(net: Net) -> None:
    gate = Gate()
    server = await net.serve(gate, request_timeout=0.3)
    client = await net.dial(server)
    assert await client.request(b"FETCH /slow.md\n") == b"TIMEOUT"
    await until(lambda: gate.cancelled == 1)
    assert holds_nothing(server)


async def test_a_handler_cancelled_at_the_timeout_may_say_what_it_managed(net: Net) -> None:
    async def handler(request: bytes, peer: Peer) -> bytes:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return b"NOT APPLIED"  # what a write still waiting for the writer answers
        return b"never"

    server = await net.serve(handler, request_timeout=0.3)
    client = await net.dial(server)
    assert await client.request(b"PUBLISH /slow.md\n") == b"NOT APPLIED"
    assert holds_nothing(server)


async def test_raising_handler_gets_the_internal_bytes_and_is_logged(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(request: bytes, peer: Peer) -> bytes:
        raise RuntimeError("sync boom")

    async def broken_later(request: bytes, peer: Peer) -> bytes:
        raise RuntimeError("async boom")

    def neither(request: bytes, peer: Peer) -> bytes:
        return "not bytes"  # type: ignore[return-value]

    caplog.set_level(logging.ERROR, logger="markproto.server.transport")
    for handler in (broken, broken_later, neither):
        client = await net.dial(await net.serve(handler))
        assert await client.request(b"FETCH /x\n") == b"INTERNAL"
    logged = [r.exc_info[1] for r in caplog.records if r.exc_info]
    assert [type(e) for e in logged] == [RuntimeError, RuntimeError, TypeError]
    assert [str(e) for e in logged[:2]] == ["sync boom", "async boom"]


async def test_a_peer_that_stops_reading_cancels_its_handler(net: Net) -> None:
    gate = Gate()
    server = await net.serve(gate)
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"LOOKUP /\n")
    await gate.entered.wait()
    client.stop(sid)
    await until(lambda: gate.cancelled == 1)
    assert holds_nothing(server)
    gate.open.set()
    assert await client.request(b"FETCH /\n") == b"done FETCH /\n"


async def test_a_burst_leaves_nothing_behind(net: Net) -> None:
    server = await net.serve()
    client = await net.dial(server)
    requests = [b"FETCH /%d\n" % i for i in range(500)]
    assert await client.many(requests) == requests
    # aioquic drops a stream once its answer is acknowledged
    await until(lambda: server.usage() == Usage(1, 0, 0, 0, 0, 0, 0, 1, 0))


# --- sources: rate, credit, budget, turns ---------------------------------------------------------


class Tokens:
    """A rate limiter the test fills by hand: ``n`` tokens for 127.0.0.1, none spent by others."""

    def __init__(self) -> None:
        self.n = 0
        self.spent: list[str] = []

    def __call__(self, host: str, now: float) -> bool:
        if host == "127.0.0.1" and not self.n:
            return False
        if host == "127.0.0.1":
            self.n -= 1
        self.spent.append(host)
        return True


async def test_a_source_over_its_rate_is_refused_at_the_first_byte(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[bytes] = []

    def handler(request: bytes, peer: Peer) -> bytes:
        calls.append(request)
        return request

    tokens = Tokens()
    server = await net.serve(handler, allow=tokens)
    client = await net.dial(server)
    assert await client.request(b"FETCH /a\n") == b"LIMITED"
    sid = client.open()
    client.send(sid, b"PUBLISH /b\n" + b"y" * 5000, fin=False, chunk=1000)
    assert await client.response(sid) == b"LIMITED"  # answered before its FIN, never buffered
    await until(lambda: sid in client.stopped)
    other = await net.dial(server, source="127.0.0.2")
    assert await other.request(b"FETCH /c\n") == b"FETCH /c\n"  # another address: its own rate
    assert calls == [b"FETCH /c\n"]
    assert tokens.spent == ["127.0.0.2"]  # one token a stream, not one a packet
    await until(lambda: holds_nothing(server))
    caplog.set_level(logging.INFO, logger="markproto.server.transport")
    server.log_refusals()
    server.log_refusals()  # nothing new: no record
    [record] = [r for r in caplog.records if r.getMessage() == "requests refused for their rate"]
    assert (record.requests, record.addresses, record.busiest) == (2, 1, "127.0.0.1")


async def test_credit_a_limited_source_used_comes_back_as_its_bucket_refills(net: Net) -> None:
    tokens = Tokens()
    server = await net.serve(allow=tokens, max_streams=4)
    client = await net.dial(server)
    assert await client.many([b"FETCH /%d\n" % i for i in range(4)]) == [b"LIMITED"] * 4
    later = [b"FETCH /later-%d\n" % i for i in range(3)]
    sids = [client.open() for _ in later]
    for sid, request in zip(sids, later, strict=True):
        client.send(sid, request)
    with pytest.raises(TimeoutError):  # no credit: they never reach the server, never answered
        await client.response(sids[0], timeout=1.0)
    tokens.n = 3  # the bucket refills: one stream of credit for each token, spent as it is given
    assert [await client.response(sid) for sid in sids] == later  # admitted: paid already
    assert tokens.spent == ["127.0.0.1"] * 3


async def test_each_source_has_its_own_byte_budget(net: Net) -> None:
    server = await net.serve(source_buffered=3000)
    one, two = await net.dial(server), await net.dial(server)  # one address, two connections
    other = await net.dial(server, source="127.0.0.2")
    first = one.open()
    one.send(first, b"a" * 2000, fin=False)
    await until(lambda: server.usage().buffered == 2000)
    second = two.open()
    two.send(second, b"b" * 2000, fin=False)
    with pytest.raises(StreamResetError):
        await two.response(second)
    third = other.open()
    other.send(third, b"c" * 2000, fin=False)
    await until(lambda: server.usage().buffered == 4000)  # the other address had room
    one.send(first, b"\n", fin=True)
    other.send(third, b"\n", fin=True)
    assert await one.response(first) == b"a" * 2000 + b"\n"
    assert await other.response(third) == b"c" * 2000 + b"\n"
    await until(lambda: holds_nothing(server))


async def test_a_busy_source_delays_another_by_a_turn_not_by_its_backlog(net: Net) -> None:
    order: list[bytes] = []

    def handler(request: bytes, peer: Peer) -> bytes:
        order.append(request)
        return request

    server = await net.serve(handler, max_streams=128)
    busy = await net.dial(server)
    other = await net.dial(server, source="127.0.0.2")
    flood = [b"FETCH /busy-%d\n" % i for i in range(128)]
    sids = [busy.open() for _ in flood]
    for sid, request in zip(sids, flood, strict=True):
        busy.send(sid, request)
    honest = await other.request(b"FETCH /honest\n")  # sent after the whole flood
    assert honest == b"FETCH /honest\n"
    assert [await busy.response(sid) for sid in sids] == flood
    # First come, first served would put it last; in turns it overtakes most of the backlog.
    assert order.index(b"FETCH /honest\n") < len(flood) - transport.TURN


# --- connection lifetime --------------------------------------------------------------------------


async def test_idle_timeout_closes_a_silent_connection(net: Net) -> None:
    server = await net.serve(idle_timeout=0.5)
    client = await net.dial(server)
    assert await client.request(b"FETCH /\n") == b"FETCH /\n"
    assert server.usage().connections == 1
    await until(lambda: server.usage().connections == 0)


async def test_drain_finishes_requests_in_flight_and_refuses_new_connections(net: Net) -> None:
    gate = Gate()
    server = await net.serve(gate)
    early = await net.dial(server)
    idle = await net.dial(server)
    sid = early.open()
    early.send(sid, b"PUBLISH /slow.md\n")
    await gate.entered.wait()

    drain = asyncio.create_task(server.drain(timeout=30.0))
    await until(lambda: server.draining)
    await asyncio.wait_for(idle.terminated, 10)  # nothing in flight: closed at once
    with pytest.raises((ConnectionError, TimeoutError)):
        await net.dial(server, idle_timeout=1.0, timeout=5.0)
    assert not drain.done()

    gate.open.set()
    assert await early.response(sid) == b"done PUBLISH /slow.md\n"
    assert await drain is True
    await asyncio.wait_for(early.terminated, 10)
    assert server.closed and server.usage().connections == 0


async def test_drain_timeout_closes_what_is_left(net: Net) -> None:
    gate = Gate()
    server = await net.serve(gate)
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"FETCH /stuck.md\n")
    await gate.entered.wait()
    assert await server.drain(timeout=0.2) is False
    with pytest.raises(ConnectionError):
        await client.response(sid)
    await until(lambda: gate.cancelled == 1)
    assert server.usage().connections == 0


async def test_close_is_immediate(net: Net) -> None:
    gate = Gate()
    server = await net.serve(gate)
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"FETCH /x\n")
    await gate.entered.wait()
    server.close()
    with pytest.raises(ConnectionError):
        await client.response(sid)
    await until(lambda: gate.cancelled == 1)
    server.close()  # twice is harmless


async def test_reload_certificate_serves_the_new_pair_to_new_clients(
    net: Net, tmp_path: Path
) -> None:
    server = await net.serve()
    old_cert, _ = net.cert
    new_cert, new_key, _ = devcert.ensure(tmp_path / "new")
    old = await net.dial(server)
    assert old.peer_fingerprint() == devcert.fingerprint(old_cert.read_bytes())

    server.reload_certificate(new_cert, new_key)
    new = await net.dial(server, cafile=new_cert)  # verified against the new certificate
    assert new.peer_fingerprint() == devcert.fingerprint(new_cert.read_bytes())
    assert await old.request(b"FETCH /still\n") == b"FETCH /still\n"

    with pytest.raises(ValueError, match="not the private key"):
        server.reload_certificate(old_cert, new_key)
    with pytest.raises(FileNotFoundError):
        server.reload_certificate(tmp_path / "missing.pem", new_key)
    again = await net.dial(server)
    assert again.peer_fingerprint() == devcert.fingerprint(new_cert.read_bytes())


# --- addresses ------------------------------------------------------------------------------------


def _ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 on this host")
async def test_dual_stack_reports_ipv4_mapped_peers_as_ipv4(net: Net) -> None:
    def whoami(request: bytes, peer: Peer) -> bytes:
        return peer.host.encode()

    server = await net.serve(whoami, host="::")
    assert server.addresses[0][0] == "::"
    assert await (await net.dial(server, "127.0.0.1")).request(b"") == b"127.0.0.1"
    assert await (await net.dial(server, "::1")).request(b"") == b"::1"


async def test_ipv6_unavailable_falls_back_to_ipv4(
    net: Net, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = socket.socket

    def no_ipv6(family: int = socket.AF_INET, *args: object, **kwargs: object) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "socket", no_ipv6)
    server = await net.serve(host="::")
    monkeypatch.undo()
    assert server.addresses == (("0.0.0.0", server.port),)
    assert "IPv6 is unavailable" in caplog.text
    assert await (await net.dial(server)).request(b"FETCH /v4\n") == b"FETCH /v4\n"


async def test_other_bind_errors_are_not_hidden(net: Net, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> socket.socket:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(socket, "socket", refused)
    with pytest.raises(PermissionError):
        await net.serve(host="::")


def test_peer_reports_ipv4_mapped_addresses_as_ipv4() -> None:
    assert Peer.from_address(("::ffff:10.1.2.3", 5000, 0, 0)) == Peer("10.1.2.3", 5000)
    assert Peer.from_address(("10.1.2.3", 5000)) == Peer("10.1.2.3", 5000)
    assert Peer.from_address(("::ffff:a0b:c0d", 1, 0, 0)) == Peer("::ffff:a0b:c0d", 1)
    assert Peer.from_address(("2001:db8::1", 6309, 0, 0)) == Peer("2001:db8::1", 6309)


@given(st.ip_addresses(v=4), st.integers(0, 65535))
def test_peer_unmaps_every_ipv4_address(ip: object, port: int) -> None:
    assert Peer.from_address((f"::ffff:{ip}", port, 0, 0)) == Peer(str(ip), port)
