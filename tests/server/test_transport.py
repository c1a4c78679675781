"""The QUIC transport over real QUIC on loopback, and its stream buffering driven without one."""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import Limit
from aioquic.quic.events import StreamDataReceived, StreamReset
from aioquic.quic.packet import QuicFrameType
from hypothesis import given, settings
from hypothesis import strategies as st
from support.quicclient import QuicClient, StreamResetError, connect

from markproto.protocol.limits import MAX_REQUEST_LINE
from markproto.server import devcert, transport
from markproto.server.transport import MarkConnection, MarkServer, Peer, Responses

RESPONSES = Responses(oversize=b"OVERSIZE", timeout=b"TIMEOUT", internal=b"INTERNAL")


def echo(request: bytes, peer: Peer) -> bytes:
    return request


async def until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait for a condition the server reaches on its own (no timing assertion: just a bound)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def only_connection(server: MarkServer) -> MarkConnection:
    (conn,) = server._connections
    return conn


def local_port(client: QuicClient) -> int:
    assert client._transport is not None
    port: int = client._transport.get_extra_info("sockname")[1]
    return port


def assert_no_stream_state(server: MarkServer) -> None:
    for conn in server._connections:
        assert conn._partials == {}
        assert conn._running == {}
        assert conn._discarding == set()
    assert server._buffered == 0


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
    assert peers == {Peer("127.0.0.1", local_port(client))}

    await client.rebind()  # the peer follows the client to its new address
    assert await client.request(b"FETCH /moved\n") == b"\ndevom/ HCTEF"
    assert Peer("127.0.0.1", local_port(client)) in peers
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
    assert gate.most == 8
    assert client._quic._remote_max_streams_bidi >= 300  # credit was re-granted as streams finished
    assert_no_stream_state(server)


async def test_one_mebibyte_request_and_response(net: Net) -> None:
    client = await net.dial(await net.serve())
    body = bytes(range(256)) * 4096
    request = b"PUBLISH /big.md\n" + body
    assert len(body) == 1 << 20
    assert await client.request(request) == request


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
    assert_no_stream_state(server)


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
    await until(lambda: not only_connection(server)._discarding)  # the client reset its side
    assert calls == []
    assert await client.request(b"next\n") == b"ok"
    assert_no_stream_state(server)


async def test_request_line_without_newline_past_the_cap_is_answered_early(net: Net) -> None:
    server = await net.serve()
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"FETCH /" + b"a" * MAX_REQUEST_LINE, fin=False, chunk=1000)
    assert await client.response(sid) == b"OVERSIZE"
    longest = b"FETCH /" + b"b" * (MAX_REQUEST_LINE - 7) + b"\n" + b"body" * 1000
    assert await client.request(longest, chunk=1000) == longest  # a 4096-byte line is allowed


async def test_global_buffer_cap_resets_the_stream_that_passes_it(net: Net) -> None:
    server = await net.serve(max_buffered=3000)
    client = await net.dial(server)
    first = client.open()
    client.send(first, b"a" * 2000, fin=False)
    await until(lambda: server._buffered == 2000)
    second = client.open()
    client.send(second, b"b" * 2000, fin=False)
    with pytest.raises(StreamResetError):
        await client.response(second)
    assert server._buffered == 2000
    client.send(first, b"\n", fin=True)
    assert await client.response(first) == b"a" * 2000 + b"\n"
    await until(lambda: not only_connection(server)._discarding)
    assert_no_stream_state(server)


async def test_incomplete_request_is_reset_after_the_request_timeout(net: Net) -> None:
    server = await net.serve(request_timeout=0.3)
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"PUBLISH /half.md\n", fin=False)
    with pytest.raises(StreamResetError):
        await client.response(sid)
    await until(lambda: not only_connection(server)._discarding)
    assert_no_stream_state(server)
    assert await client.request(b"FETCH /after.md\n") == b"FETCH /after.md\n"


async def test_handler_past_the_request_timeout_gets_the_timeout_bytes(net: Net) -> None:
    gate = Gate()
    server = await net.serve(gate, request_timeout=0.3)
    client = await net.dial(server)
    assert await client.request(b"FETCH /slow.md\n") == b"TIMEOUT"
    await until(lambda: gate.cancelled == 1)
    assert_no_stream_state(server)


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


async def test_unidirectional_streams_are_ignored(net: Net) -> None:
    calls: list[bytes] = []

    def handler(request: bytes, peer: Peer) -> bytes:
        calls.append(request)
        return b"ok"

    server = await net.serve(handler)
    client = await net.dial(server)
    uni = client.open(unidirectional=True)
    client.send(uni, b"FETCH /uni.md\n")
    assert await client.request(b"FETCH /bidi.md\n") == b"ok"
    assert calls == [b"FETCH /bidi.md\n"]
    assert_no_stream_state(server)


async def test_peer_reset_leaves_no_state(net: Net) -> None:
    server = await net.serve()
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"z" * 1500, fin=False)
    await until(lambda: only_connection(server)._partials)
    client.reset(sid)
    await until(lambda: not only_connection(server)._partials)
    assert_no_stream_state(server)


async def test_a_peer_that_stops_reading_cancels_its_handler(net: Net) -> None:
    gate = Gate()
    server = await net.serve(gate)
    client = await net.dial(server)
    sid = client.open()
    client.send(sid, b"LOOKUP /\n")
    await gate.entered.wait()
    client.stop(sid)
    await until(lambda: gate.cancelled == 1)
    assert_no_stream_state(server)
    gate.open.set()
    assert await client.request(b"FETCH /\n") == b"done FETCH /\n"


async def test_no_state_piles_up_over_thousands_of_requests(net: Net) -> None:
    server = await net.serve()
    client = await net.dial(server)
    for i in range(5000):
        request = b"FETCH /%d\n" % i
        assert await client.request(request) == request
    conn = only_connection(server)
    assert_no_stream_state(server)
    await until(lambda: not conn._quic._streams)  # aioquic drops a stream once its answer is acked
    assert conn._stream_readers == {}  # the stock API's per-stream readers are never created


# --- connection lifetime --------------------------------------------------------------------------


async def test_idle_timeout_closes_a_silent_connection(net: Net) -> None:
    server = await net.serve(idle_timeout=0.5)
    client = await net.dial(server)
    assert await client.request(b"FETCH /\n") == b"FETCH /\n"
    assert len(server._connections) == 1
    await until(lambda: not server._connections)


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
    assert server._transport is not None
    assert server._transport.is_closing()


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
    assert not server._connections


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


# --- stream buffering without a socket ------------------------------------------------------------


class FakeQuic:
    """The slice of aioquic's QuicConnection that the transport touches, recording its calls."""

    def __init__(self) -> None:
        self._local_max_streams_bidi = Limit(
            QuicFrameType.MAX_STREAMS_BIDI, "max_streams_bidi", 128
        )
        self._streams: dict[int, object] = {}
        self.sent: dict[int, bytes] = {}
        self.stopped: set[int] = set()
        self.reset: set[int] = set()

    def send_stream_data(self, sid: int, data: bytes, end_stream: bool = False) -> None:
        assert end_stream
        assert sid not in self.sent
        self.sent[sid] = data

    def stop_stream(self, sid: int, error_code: int) -> None:
        self.stopped.add(sid)

    def reset_stream(self, sid: int, error_code: int) -> None:
        self.reset.add(sid)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, object]]:
        return []

    def get_timer(self) -> None:
        return None


def offline(
    handler: transport.Handler, *, max_request: int, max_buffered: int = 1 << 30
) -> tuple[MarkServer, MarkConnection, FakeQuic]:
    server = MarkServer(
        handler,
        QuicConfiguration(is_client=False),
        RESPONSES,
        max_request=max_request,
        max_streams=5,
        request_timeout=None,
        max_buffered=max_buffered,
    )
    quic = FakeQuic()
    conn = server._connect(quic)  # type: ignore[arg-type]
    return server, conn, quic


def outcome(events: list[tuple[bytes, bool]], end: str, max_request: int) -> tuple[str, bool]:
    """What the transport must do with one stream: ("served" | "refused" | "reset" | "open", and
    whether it asked the peer to stop sending)."""
    seen = b""
    for data, fin in events:
        seen += data
        over = len(seen) > max_request
        line = len(seen) > MAX_REQUEST_LINE and b"\n" not in seen[: MAX_REQUEST_LINE + 1]
        if over or line:
            return "refused", not fin
    return {"fin": "served", "reset": "reset", "open": "open"}[end], False


payloads = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda head, n, tail: head + b"x" * n + tail,
        st.binary(max_size=8),
        st.integers(MAX_REQUEST_LINE - 8, MAX_REQUEST_LINE + 8),
        st.binary(max_size=8),
    ),
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[tuple[bytes, bool]], str]:
    """One stream's data events as aioquic delivers them (never empty without FIN), and its end."""
    payload = draw(payloads)
    cuts = draw(st.sets(st.integers(1, max(len(payload) - 1, 1)), max_size=6))
    bounds = [0, *sorted(c for c in cuts if c < len(payload)), len(payload)]
    events = [(payload[a:b], False) for a, b in itertools.pairwise(bounds) if b > a]
    end = draw(st.sampled_from(["fin", "reset", "open"]))
    fin_on_data = draw(st.booleans())  # FIN with the last bytes, or in an empty frame of its own
    if end == "fin" and events and fin_on_data:
        events[-1] = (events[-1][0], True)
    elif end == "fin":
        events.append((b"", True))
    return events, end


@settings(max_examples=150, deadline=None)
@given(st.lists(streams(), min_size=1, max_size=4), st.integers(40, 5000), st.randoms())
async def test_any_chunking_and_interleaving_gives_the_handler_whole_requests(
    plan: list[tuple[list[tuple[bytes, bool]], str]], max_request: int, rnd: random.Random
) -> None:
    calls: list[bytes] = []

    def handler(request: bytes, peer: Peer) -> bytes:
        calls.append(request)
        return b"R" + request

    server, conn, quic = offline(handler, max_request=max_request)
    assert quic._local_max_streams_bidi.value == quic._local_max_streams_bidi.sent == 5
    queues: list[list[StreamDataReceived | StreamReset]] = []
    for index, (events, end) in enumerate(plan):
        queue: list[StreamDataReceived | StreamReset] = [
            StreamDataReceived(data=data, end_stream=fin, stream_id=index * 4)
            for data, fin in events
        ]
        if end == "reset":
            queue.append(StreamReset(error_code=0, stream_id=index * 4))
        queues.append(queue)
    while any(queues):
        conn.quic_event_received(rnd.choice([q for q in queues if q]).pop(0))

    served: list[bytes] = []
    for index, (events, end) in enumerate(plan):
        sid, payload = index * 4, b"".join(data for data, _ in events)
        what, stopped = outcome(events, end, max_request)
        if what == "served":
            assert quic.sent[sid] == b"R" + payload
            served.append(payload)
        elif what == "refused":
            assert quic.sent[sid] == b"OVERSIZE"
        else:
            assert sid not in quic.sent
        assert (sid in quic.stopped) == stopped
        assert (sid in conn._discarding) == (stopped and end == "open")
        assert (sid in conn._partials) == (what == "open" and payload != b"")
    assert sorted(calls) == sorted(served)
    assert server._buffered == sum(len(buf) for buf, _ in conn._partials.values())
    conn._teardown()
    assert server._buffered == 0
    assert not server._connections


async def test_the_line_cap_counts_exactly_4096_bytes_before_the_newline() -> None:
    _, conn, quic = offline(echo, max_request=10_000)
    line = b"x" * MAX_REQUEST_LINE
    for sid, rest in ((0, b"\n"), (4, b"y")):
        conn.quic_event_received(StreamDataReceived(data=line, end_stream=False, stream_id=sid))
        conn.quic_event_received(StreamDataReceived(data=rest, end_stream=False, stream_id=sid))
    assert quic.sent == {4: b"OVERSIZE"}
    conn.quic_event_received(StreamDataReceived(data=b"", end_stream=True, stream_id=0))
    assert quic.sent == {0: line + b"\n", 4: b"OVERSIZE"}


async def test_a_stream_passing_the_global_cap_is_reset_and_its_data_discarded() -> None:
    server, conn, quic = offline(echo, max_request=10_000, max_buffered=100)
    conn.quic_event_received(StreamDataReceived(data=b"a" * 60, end_stream=False, stream_id=0))
    conn.quic_event_received(StreamDataReceived(data=b"b" * 60, end_stream=False, stream_id=4))
    assert quic.reset == quic.stopped == {4}
    conn.quic_event_received(StreamDataReceived(data=b"b", end_stream=True, stream_id=4))
    conn.quic_event_received(StreamDataReceived(data=b"\n", end_stream=True, stream_id=0))
    assert quic.sent == {0: b"a" * 60 + b"\n"}
    assert server._buffered == 0
    assert not conn._discarding


async def test_expiry_resets_partial_requests_and_answers_late_handlers() -> None:
    never: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def handler(request: bytes, peer: Peer) -> Awaitable[bytes]:
        return never

    server, conn, quic = offline(handler, max_request=10_000)
    conn.quic_event_received(StreamDataReceived(data=b"half", end_stream=False, stream_id=0))
    conn.quic_event_received(StreamDataReceived(data=b"whole", end_stream=True, stream_id=4))
    conn._expire(cutoff=conn._loop.time() - 60)  # nothing is that old yet
    assert quic.sent == {}
    assert quic.reset == set()
    conn._expire(cutoff=conn._loop.time() + 1)
    assert quic.reset == quic.stopped == {0}
    assert quic.sent == {4: b"TIMEOUT"}
    assert never.cancelled()
    await asyncio.sleep(0)  # the cancelled handler's callback finds nothing left to answer
    assert quic.sent == {4: b"TIMEOUT"}
    assert server._buffered == 0
