"""The pooled QUIC client against real servers on loopback: reuse, failures, eviction, close."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aioquic._buffer import Buffer
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection, stream_is_unidirectional
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamDataReceived
from aioquic.quic.packet import pull_quic_transport_parameters, push_quic_transport_parameters

from markproto.client import (
    ALPNMismatch,
    ConnectionLost,
    Pool,
    RequestTimeout,
    ResponseTooLarge,
    StreamReset,
    TransportError,
    Trust,
    Unreachable,
    UsageError,
)
from markproto.client.connection import split_authority
from markproto.protocol.limits import ALPN, LOOPBACK_DATAGRAM
from markproto.server import devcert

Answer = Callable[["Peer", int, bytes], None]


class Peer(QuicConnectionProtocol):
    """A server connection that records itself and answers each whole request with ``answer``.
    Once ``silent`` it sends nothing more, as a server that vanished."""

    answer: Answer
    log: list[Peer]
    max_udp_payload: int | None = None
    """The ``max_udp_payload_size`` transport parameter to send (aioquic sends none)."""

    def __init__(self, quic: QuicConnection, *args: Any, **kwargs: Any) -> None:
        super().__init__(quic, *args, **kwargs)
        self.quic = quic
        self.buffers: dict[int, bytearray] = {}
        self.terminated = asyncio.Event()
        self.silent = False
        self.sizes: list[int] = []
        """The size of every datagram received, in order."""
        self.log.append(self)
        if self.max_udp_payload is not None:
            quic._serialize_transport_parameters = self._advertise(  # type: ignore[method-assign]
                quic._serialize_transport_parameters, self.max_udp_payload
            )

    @staticmethod
    def _advertise(serialize: Callable[[], bytes], size: int) -> Callable[[], bytes]:
        def serialized() -> bytes:
            params = pull_quic_transport_parameters(Buffer(data=serialize()))
            params.max_udp_payload_size = size
            buf = Buffer(capacity=4096)
            push_quic_transport_parameters(buf, params)
            return buf.data

        return serialized

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        self.sizes.append(len(data))
        super().datagram_received(data, addr)

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived) and not stream_is_unidirectional(event.stream_id):
            buf = self.buffers.setdefault(event.stream_id, bytearray())
            buf += event.data
            if event.end_stream:
                self.answer(self, event.stream_id, bytes(self.buffers.pop(event.stream_id)))
        elif isinstance(event, ConnectionTerminated):
            self.terminated.set()

    def transmit(self) -> None:
        if not self.silent:
            super().transmit()


def echo(peer: Peer, sid: int, data: bytes) -> None:
    peer.quic.send_stream_data(sid, data, end_stream=True)


def double(peer: Peer, sid: int, data: bytes) -> None:
    peer.quic.send_stream_data(sid, data * 2, end_stream=True)


def reset(peer: Peer, sid: int, data: bytes) -> None:
    peer.quic.reset_stream(sid, 7)


def swallow(peer: Peer, sid: int, data: bytes) -> None:
    """Never answer: the request stays in flight until the client gives up."""


def hang(peer: Peer, sid: int, data: bytes) -> None:
    """Swallow ``hang`` requests, echo the others (to bring a connection up first)."""
    if data != b"hang":
        echo(peer, sid, data)


async def hanging_requests(pool: Pool, authority: str, count: int) -> list[asyncio.Task[bytes]]:
    """``count`` requests that stay in flight, handed to QUIC in order on an established
    connection: each task submits in its first step, which one loop turn runs."""
    assert await pool.request(authority, b"up") == b"up"
    tasks = [asyncio.ensure_future(pool.request(authority, b"hang")) for _ in range(count)]
    await asyncio.sleep(0)
    return tasks


@pytest.fixture
def certs(tmp_path: Path) -> tuple[Path, Path]:
    cert, key, _ = devcert.ensure(tmp_path / "server")
    return cert, key


@dataclass
class Served:
    """A test QUIC server: its UDP port and every connection it accepted."""

    transport: asyncio.DatagramTransport
    port: int
    peers: list[Peer]

    async def stop(self, *, polite: bool = True) -> None:
        """Stop for good. Polite: CONNECTION_CLOSE on every connection first; impolite: vanish.
        Every connection then goes silent (aioquic would leave its timers firing into the closed
        socket) and the socket closes, so the port can be bound again."""
        for peer in self.peers:
            if polite:
                peer.close()
            peer.silent = True
        self.transport.close()
        await asyncio.sleep(0)


async def serve_peer(
    certs: tuple[Path, Path],
    answer: Answer = echo,
    *,
    alpn: str = ALPN,
    host: str = "127.0.0.1",
    port: int = 0,
    idle_timeout: float = 60.0,
    max_udp_payload: int | None = None,
) -> Served:
    config = QuicConfiguration(is_client=False, alpn_protocols=[alpn], idle_timeout=idle_timeout)
    config.load_cert_chain(*certs)
    log: list[Peer] = []
    members = {"answer": staticmethod(answer), "log": log, "max_udp_payload": max_udp_payload}
    protocol = type("TestPeer", (Peer,), members)
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: QuicServer(configuration=config, create_protocol=protocol),
        local_addr=(host, port),
    )
    return Served(transport, int(transport.get_extra_info("sockname")[1]), log)


@contextlib.asynccontextmanager
async def pool_for(certs: tuple[Path, Path], **kwargs: Any) -> AsyncIterator[Pool]:
    """A pool that trusts the test certificate as its CA (its SANs: localhost, 127.0.0.1, ::1)."""
    trust = Trust(cafile=str(certs[0]), known_hosts=certs[0].parent / "known_hosts")
    async with Pool(trust, **kwargs) as pool:
        yield pool


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_line(exc: BaseException) -> str:
    message = str(exc)
    assert "\n" not in message
    return message


async def test_round_trip(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs)
    body = bytes(range(256)) * 1000
    authority = f"127.0.0.1:{server.port}"
    try:
        async with pool_for(certs) as pool:
            assert await pool.request(authority, b"FETCH /a.md\n") == b"FETCH /a.md\n"
            assert await pool.request(authority, body) == body
    finally:
        await server.stop()


async def test_concurrent_requests_share_one_dial_and_connection(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs)
    try:
        async with pool_for(certs) as pool:
            requests = [b"request %d" % i for i in range(200)]
            results = await asyncio.gather(
                *(pool.request(f"127.0.0.1:{server.port}", r) for r in requests)
            )
        assert results == requests
        assert len(server.peers) == 1
    finally:
        await server.stop()


async def test_sequential_requests_reuse_the_connection(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs)
    try:
        async with pool_for(certs) as pool:
            for i in range(20):
                authority = f"LOCALHOST:{server.port}" if i % 2 else f"localhost:{server.port}"
                assert await pool.request(authority, b"%d" % i) == b"%d" % i
        assert len(server.peers) == 1
    finally:
        await server.stop()


async def test_server_restart_evicts_the_dead_connection(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs)
    authority = f"127.0.0.1:{server.port}"
    async with pool_for(certs) as pool:
        assert await pool.request(authority, b"one") == b"one"
        await server.stop()  # sends CONNECTION_CLOSE on every connection
        server = await serve_peer(certs, port=server.port)
        try:
            with contextlib.suppress(TransportError):
                await pool.request(authority, b"maybe")
            assert await pool.request(authority, b"two") == b"two"
            assert len(server.peers) == 1
        finally:
            await server.stop()


async def test_silently_vanished_server_is_evicted_after_a_timeout(
    certs: tuple[Path, Path],
) -> None:
    server = await serve_peer(certs)
    authority = f"127.0.0.1:{server.port}"
    async with pool_for(certs, request_timeout=0.3) as pool:
        assert await pool.request(authority, b"one") == b"one"
        await server.stop(polite=False)
        server = await serve_peer(certs, port=server.port)  # knows nothing of the old connection
        try:
            with pytest.raises(RequestTimeout) as caught:
                await pool.request(authority, b"lost")
            assert caught.value.sent is True
            assert one_line(caught.value) == f"{authority}: no response within 0.3 s"
            assert await pool.request(authority, b"two") == b"two"
            assert len(server.peers) == 1
        finally:
            await server.stop()


async def test_closed_port_is_refused_not_timed_out(certs: tuple[Path, Path]) -> None:
    port = free_udp_port()
    async with pool_for(certs, dial_timeout=5.0) as pool:
        with pytest.raises(Unreachable) as caught:
            await pool.request(f"127.0.0.1:{port}", b"x")
    assert one_line(caught.value) == f"127.0.0.1:{port}: unreachable (connection refused)"
    assert caught.value.sent is False


async def test_silent_address_times_out_the_dial(certs: tuple[Path, Path]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as blackhole:  # never answers
        blackhole.bind(("127.0.0.1", 0))
        authority = f"127.0.0.1:{blackhole.getsockname()[1]}"
        async with pool_for(certs) as pool:
            with pytest.raises(Unreachable) as caught:
                await pool.request(authority, b"x", dial_timeout=0.2)
    assert one_line(caught.value) == f"{authority}: unreachable (no answer within 0.2 s)"
    assert caught.value.sent is False


async def test_a_vanished_server_fails_in_flight_requests(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs, hang)
    authority = f"127.0.0.1:{server.port}"
    async with pool_for(certs) as pool:
        [pending] = await hanging_requests(pool, authority, 1)
        await server.stop()
        with pytest.raises(ConnectionLost) as caught:
            await pending
    assert caught.value.sent is True
    assert one_line(caught.value).startswith(f"{authority}: connection lost (")


async def test_unknown_host_is_unreachable(certs: tuple[Path, Path]) -> None:
    async with pool_for(certs) as pool:
        with pytest.raises(Unreachable) as caught:
            await pool.request("no-such-host.invalid:6309", b"x")
    assert one_line(caught.value).startswith(
        "no-such-host.invalid:6309: unreachable (cannot resolve no-such-host.invalid: "
    )
    assert caught.value.sent is False


async def test_alpn_mismatch(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs, alpn="h3")
    authority = f"127.0.0.1:{server.port}"
    try:
        async with pool_for(certs) as pool:
            with pytest.raises(ALPNMismatch) as caught:
                await pool.request(authority, b"x")
        assert one_line(caught.value) == f"{authority}: server does not speak mark (ALPN mismatch)"
        assert caught.value.sent is False
    finally:
        await server.stop()


async def test_response_too_large_stops_the_stream_only(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs, double)
    authority = f"127.0.0.1:{server.port}"
    try:
        async with pool_for(certs, max_response=1000) as pool:
            with pytest.raises(ResponseTooLarge) as caught:
                await pool.request(authority, b"x" * 600)
            assert caught.value.sent is True
            assert one_line(caught.value) == f"{authority}: response larger than 1000 bytes"
            assert await pool.request(authority, b"x" * 500) == b"x" * 1000
            with pytest.raises(ResponseTooLarge):
                await pool.request(authority, b"x" * 10, max_response=19)
        assert len(server.peers) == 1
    finally:
        await server.stop()


async def test_stream_reset_by_the_server(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs, reset)
    authority = f"127.0.0.1:{server.port}"
    try:
        async with pool_for(certs) as pool:
            for _ in range(2):
                with pytest.raises(StreamReset) as caught:
                    await pool.request(authority, b"x")
                assert caught.value.sent is True
                assert one_line(caught.value) == f"{authority}: stream reset by the server (code 7)"
        assert len(server.peers) == 1
    finally:
        await server.stop()


async def test_request_timeout_evicts_and_redials(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs, swallow)
    authority = f"127.0.0.1:{server.port}"
    try:
        async with pool_for(certs, request_timeout=10.0) as pool:
            with pytest.raises(RequestTimeout) as caught:
                await pool.request(authority, b"x", request_timeout=0.1)
            assert caught.value.sent is True
            with pytest.raises(RequestTimeout):
                await pool.request(authority, b"x", request_timeout=0.1)
        assert len(server.peers) == 2
    finally:
        await server.stop()


async def test_no_stream_credit_evicts_and_close_fails_the_rest(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs, hang)
    authority = f"127.0.0.1:{server.port}"
    try:
        async with pool_for(certs, request_timeout=30.0) as pool:
            hanging = await hanging_requests(pool, authority, 128)  # all the peer's stream credit
            with pytest.raises(Unreachable) as caught:
                await pool.request(authority, b"x", dial_timeout=0.2)
            assert caught.value.sent is False
            assert one_line(caught.value) == (
                f"{authority}: unreachable (no stream granted within 0.2 s)"
            )
            with pytest.raises(RequestTimeout):
                await pool.request(authority, b"hang", request_timeout=0.05)
            assert len(server.peers) == 2
            assert not any(task.done() for task in hanging)
        outcomes = await asyncio.gather(*hanging, return_exceptions=True)
        assert all(isinstance(o, ConnectionLost) and o.sent for o in outcomes)
        assert str(outcomes[0]) == f"{authority}: connection lost (pool closed)"
    finally:
        await server.stop()


async def test_family_limits_the_addresses_dialed(certs: tuple[Path, Path]) -> None:
    server = await serve_peer(certs)
    try:
        async with pool_for(certs, family=socket.AF_INET) as pool:
            assert await pool.request(f"localhost:{server.port}", b"v4") == b"v4"
        async with pool_for(certs, family=socket.AF_INET6) as pool:
            with pytest.raises(Unreachable, match=r"cannot resolve 127\.0\.0\.1"):
                await pool.request(f"127.0.0.1:{server.port}", b"v6")
        assert len(server.peers) == 1
    finally:
        await server.stop()


async def test_ipv6_literal(certs: tuple[Path, Path]) -> None:
    try:
        server = await serve_peer(certs, host="::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        async with pool_for(certs) as pool:
            assert await pool.request(f"[::1]:{server.port}", b"v6") == b"v6"
        async with pool_for(certs, family=socket.AF_INET) as pool:
            with pytest.raises(Unreachable):
                await pool.request(f"[::1]:{server.port}", b"v4 only")
    finally:
        await server.stop()


async def upload(certs: tuple[Path, Path], host: str, **served: Any) -> list[int]:
    """The sizes of the datagrams a 200 KB request and its handshake reached the server in."""
    try:
        server = await serve_peer(certs, host=host, **served)
    except OSError:
        pytest.skip(f"no {host} here")
    body = bytes(range(256)) * 800
    try:
        async with pool_for(certs) as pool:
            authority = f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"
            assert await pool.request(authority, body) == body
        (peer,) = server.peers
        return peer.sizes
    finally:
        await server.stop()


LINUX_ONLY = pytest.mark.skipif(sys.platform != "linux", reason="only Linux says a path's MTU")


@LINUX_ONLY
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_a_loopback_peer_gets_larger_datagrams_after_the_handshake(
    certs: tuple[Path, Path], host: str
) -> None:
    sizes = await upload(certs, host)
    assert sizes[0] == 1200  # the Initial, which any peer must be able to take
    assert max(sizes) == LOOPBACK_DATAGRAM
    assert sum(sizes) < 1.2 * 200_000


@LINUX_ONLY
async def test_a_peer_s_max_udp_payload_size_bounds_the_datagrams(
    certs: tuple[Path, Path],
) -> None:
    sizes = await upload(certs, "127.0.0.1", max_udp_payload=1452)
    assert max(sizes) == 1452


async def test_idle_timeout_evicts_and_keepalive_prevents_it(certs: tuple[Path, Path]) -> None:
    """Timeouts are ten keepalives wide, so a loaded machine (the suite runs at load 9) still
    sends one in time."""
    server = await serve_peer(certs, idle_timeout=1.0)
    authority = f"127.0.0.1:{server.port}"
    try:
        async with pool_for(certs, idle_timeout=1.0) as pool:
            assert await pool.request(authority, b"a") == b"a"
            await asyncio.sleep(2.0)
            assert await pool.request(authority, b"b") == b"b"
        assert len(server.peers) == 2
        async with pool_for(certs, idle_timeout=1.0, keepalive=0.1) as pool:
            assert await pool.request(authority, b"a") == b"a"
            await asyncio.sleep(2.0)
            assert await pool.request(authority, b"b") == b"b"
        assert len(server.peers) == 3
    finally:
        await server.stop()


async def test_close_tells_the_server_and_leaves_no_tasks(certs: tuple[Path, Path]) -> None:
    blackhole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # never answers a handshake
    blackhole.bind(("127.0.0.1", 0))
    server = await serve_peer(certs)
    try:
        pool = Pool(Trust(cafile=str(certs[0])))
        assert await pool.request(f"127.0.0.1:{server.port}", b"x") == b"x"
        dialing = asyncio.ensure_future(
            pool.request(f"127.0.0.1:{blackhole.getsockname()[1]}", b"x")
        )
        await asyncio.sleep(0.05)
        await pool.close()
        with pytest.raises(ConnectionLost) as caught:
            await dialing
        assert caught.value.sent is False
        assert asyncio.all_tasks() == {asyncio.current_task()}
        # CONNECTION_CLOSE, not the server's 60 s idle timeout, ends its side.
        [peer] = server.peers
        await asyncio.wait_for(peer.terminated.wait(), 5)
        with pytest.raises(ConnectionLost):
            await pool.request(f"127.0.0.1:{server.port}", b"x")
    finally:
        await server.stop()
        blackhole.close()


def test_a_bad_authority_is_a_usage_error() -> None:
    """The protocol's authority rule (tests/protocol/test_url.py), raised as the client's error."""
    assert split_authority("[::1]:7000") == ("::1", 7000)
    with pytest.raises(UsageError, match="IPv6 addresses go in brackets"):
        split_authority("::1:6309")


@LINUX_ONLY
def test_only_a_loopback_path_is_known_to_take_larger_datagrams() -> None:
    from markproto.client.quic import loopback_datagram_size

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("127.0.0.1", 9))
        assert loopback_datagram_size(sock) == LOOPBACK_DATAGRAM
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: routed like any remote host, never sent
        except OSError:
            pytest.skip("no route to a non-loopback address here")
        assert loopback_datagram_size(sock) == 0
