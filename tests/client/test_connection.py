"""The pooled QUIC client against real servers on loopback: reuse, failures, eviction, close."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import stream_is_unidirectional
from aioquic.quic.events import QuicEvent, StreamDataReceived
from support.echo import start_echo

from markproto.client.connection import (
    ALPNMismatch,
    ConnectionLost,
    Pool,
    RequestTimeout,
    ResponseTooLarge,
    StreamReset,
    TransportError,
    Unreachable,
    split_authority,
)
from markproto.client.trust import Trust
from markproto.protocol.limits import ALPN
from markproto.server import devcert

Answer = Callable[["Peer", int, bytes], None]


class Peer(QuicConnectionProtocol):
    """A server connection that records itself and answers each whole request with ``answer``."""

    answer: Answer
    log: list[Peer]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.buffers: dict[int, bytearray] = {}
        self.log.append(self)

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived) and not stream_is_unidirectional(event.stream_id):
            buf = self.buffers.setdefault(event.stream_id, bytearray())
            buf += event.data
            if event.end_stream:
                self.answer(self, event.stream_id, bytes(self.buffers.pop(event.stream_id)))


def echo(peer: Peer, sid: int, data: bytes) -> None:
    peer._quic.send_stream_data(sid, data, end_stream=True)


def reset(peer: Peer, sid: int, data: bytes) -> None:
    peer._quic.reset_stream(sid, 7)


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


async def serve_peer(
    certs: tuple[Path, Path],
    answer: Answer = echo,
    *,
    alpn: str = ALPN,
    host: str = "127.0.0.1",
    port: int = 0,
    idle_timeout: float = 60.0,
) -> tuple[QuicServer, int, list[Peer]]:
    config = QuicConfiguration(is_client=False, alpn_protocols=[alpn], idle_timeout=idle_timeout)
    config.load_cert_chain(*certs)
    log: list[Peer] = []
    protocol = type("TestPeer", (Peer,), {"answer": staticmethod(answer), "log": log})
    server = await serve(host, port, configuration=config, create_protocol=protocol)
    sock = server._transport.get_extra_info("socket")  # type: ignore[union-attr]
    return server, int(sock.getsockname()[1]), log


async def stop(server: QuicServer, *, polite: bool = True) -> None:
    """Stop a test server for good. ``QuicServer.close`` leaves each connection's timer armed on
    the closed socket (it would fire into it later), so cancel those too; then let the socket close
    so the port can be bound again. Impolite: vanish without sending CONNECTION_CLOSE."""
    protocols = set(server._protocols.values())
    if polite:
        server.close()
    else:
        server._transport.close()  # type: ignore[union-attr]
    for protocol in protocols:
        if protocol._timer is not None:
            protocol._timer.cancel()
    await asyncio.sleep(0)


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
    server, port = await start_echo(*certs)
    body = bytes(range(256)) * 1000
    try:
        async with pool_for(certs) as pool:
            assert await pool.request(f"127.0.0.1:{port}", b"FETCH /a.md\n") == b"FETCH /a.md\n"
            assert await pool.request(f"127.0.0.1:{port}", body) == body
    finally:
        await stop(server)


async def test_concurrent_requests_share_one_dial_and_connection(certs: tuple[Path, Path]) -> None:
    server, port, log = await serve_peer(certs)
    try:
        async with pool_for(certs) as pool:
            requests = [b"request %d" % i for i in range(200)]
            results = await asyncio.gather(
                *(pool.request(f"127.0.0.1:{port}", r) for r in requests)
            )
        assert results == requests
        assert len(log) == 1
    finally:
        await stop(server)


async def test_sequential_requests_reuse_the_connection(certs: tuple[Path, Path]) -> None:
    server, port, log = await serve_peer(certs)
    try:
        async with pool_for(certs) as pool:
            for i in range(20):
                authority = f"LOCALHOST:{port}" if i % 2 else f"localhost:{port}"
                assert await pool.request(authority, b"%d" % i) == b"%d" % i
        assert len(log) == 1
    finally:
        await stop(server)


async def test_server_restart_evicts_the_dead_connection(certs: tuple[Path, Path]) -> None:
    server, port, _ = await serve_peer(certs)
    async with pool_for(certs) as pool:
        assert await pool.request(f"127.0.0.1:{port}", b"one") == b"one"
        await stop(server)  # sends CONNECTION_CLOSE on every connection
        server, _, log = await serve_peer(certs, port=port)
        try:
            with contextlib.suppress(TransportError):
                await pool.request(f"127.0.0.1:{port}", b"maybe")
            assert await pool.request(f"127.0.0.1:{port}", b"two") == b"two"
            assert len(log) == 1
        finally:
            await stop(server)


async def test_silently_vanished_server_is_evicted_after_a_timeout(
    certs: tuple[Path, Path],
) -> None:
    server, port, _ = await serve_peer(certs)
    async with pool_for(certs, request_timeout=0.3) as pool:
        assert await pool.request(f"127.0.0.1:{port}", b"one") == b"one"
        await stop(server, polite=False)
        server, _, log = await serve_peer(certs, port=port)  # knows nothing of the old connection
        try:
            with pytest.raises(RequestTimeout) as caught:
                await pool.request(f"127.0.0.1:{port}", b"lost")
            assert caught.value.sent is True
            assert one_line(caught.value) == f"127.0.0.1:{port}: no response within 0.3 s"
            assert await pool.request(f"127.0.0.1:{port}", b"two") == b"two"
            assert len(log) == 1
        finally:
            await stop(server)


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
    server, port, _ = await serve_peer(certs, hang)
    async with pool_for(certs) as pool:
        [pending] = await hanging_requests(pool, f"127.0.0.1:{port}", 1)
        await stop(server)
        with pytest.raises(ConnectionLost) as caught:
            await pending
    assert caught.value.sent is True
    assert one_line(caught.value).startswith(f"127.0.0.1:{port}: connection lost (")


async def test_unknown_host_is_unreachable(certs: tuple[Path, Path]) -> None:
    async with pool_for(certs) as pool:
        with pytest.raises(Unreachable) as caught:
            await pool.request("no-such-host.invalid:6309", b"x")
    assert one_line(caught.value).startswith(
        "no-such-host.invalid:6309: unreachable (cannot resolve no-such-host.invalid: "
    )
    assert caught.value.sent is False


async def test_alpn_mismatch(certs: tuple[Path, Path]) -> None:
    server, port, _ = await serve_peer(certs, alpn="h3")
    try:
        async with pool_for(certs) as pool:
            with pytest.raises(ALPNMismatch) as caught:
                await pool.request(f"127.0.0.1:{port}", b"x")
        assert (
            one_line(caught.value)
            == f"127.0.0.1:{port}: server does not speak mark (ALPN mismatch)"
        )
        assert caught.value.sent is False
    finally:
        await stop(server)


async def test_response_too_large_stops_the_stream_only(certs: tuple[Path, Path]) -> None:
    server, port = await start_echo(*certs, reply=lambda data: data * 2)
    try:
        async with pool_for(certs, max_response=1000) as pool:
            with pytest.raises(ResponseTooLarge) as caught:
                await pool.request(f"127.0.0.1:{port}", b"x" * 600)
            assert caught.value.sent is True
            assert one_line(caught.value) == f"127.0.0.1:{port}: response larger than 1000 bytes"
            assert await pool.request(f"127.0.0.1:{port}", b"x" * 500) == b"x" * 1000
            with pytest.raises(ResponseTooLarge):
                await pool.request(f"127.0.0.1:{port}", b"x" * 10, max_response=19)
    finally:
        await stop(server)


async def test_stream_reset_by_the_server(certs: tuple[Path, Path]) -> None:
    server, port, log = await serve_peer(certs, reset)
    try:
        async with pool_for(certs) as pool:
            for _ in range(2):
                with pytest.raises(StreamReset) as caught:
                    await pool.request(f"127.0.0.1:{port}", b"x")
                assert caught.value.sent is True
                assert one_line(caught.value) == (
                    f"127.0.0.1:{port}: stream reset by the server (code 7)"
                )
        assert len(log) == 1
    finally:
        await stop(server)


async def test_request_timeout_evicts_and_redials(certs: tuple[Path, Path]) -> None:
    server, port, log = await serve_peer(certs, swallow)
    try:
        async with pool_for(certs, request_timeout=10.0) as pool:
            with pytest.raises(RequestTimeout) as caught:
                await pool.request(f"127.0.0.1:{port}", b"x", request_timeout=0.1)
            assert caught.value.sent is True
            with pytest.raises(RequestTimeout):
                await pool.request(f"127.0.0.1:{port}", b"x", request_timeout=0.1)
        assert len(log) == 2
    finally:
        await stop(server)


async def test_no_stream_credit_evicts_and_close_fails_the_rest(certs: tuple[Path, Path]) -> None:
    server, port, log = await serve_peer(certs, hang)
    authority = f"127.0.0.1:{port}"
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
            assert len(log) == 2
            assert not any(task.done() for task in hanging)
        outcomes = await asyncio.gather(*hanging, return_exceptions=True)
        assert all(isinstance(o, ConnectionLost) and o.sent for o in outcomes)
        assert str(outcomes[0]) == f"{authority}: connection lost (pool closed)"
    finally:
        await stop(server)


async def test_ipv4_only_resolution(certs: tuple[Path, Path]) -> None:
    server, port, _ = await serve_peer(certs)
    try:
        async with pool_for(certs, family=socket.AF_INET) as pool:
            assert await pool.request(f"localhost:{port}", b"v4") == b"v4"
            conn = pool._conns[f"localhost:{port}"]
            assert conn._transport is not None
            assert conn._transport.get_extra_info("socket").family == socket.AF_INET
    finally:
        await stop(server)


async def test_ipv6_literal(certs: tuple[Path, Path]) -> None:
    try:
        server, port, _ = await serve_peer(certs, host="::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        async with pool_for(certs) as pool:
            assert await pool.request(f"[::1]:{port}", b"v6") == b"v6"
    finally:
        await stop(server)


async def test_idle_timeout_evicts_and_keepalive_prevents_it(certs: tuple[Path, Path]) -> None:
    server, port, log = await serve_peer(certs, idle_timeout=0.3)
    try:
        async with pool_for(certs, idle_timeout=0.3) as pool:
            assert await pool.request(f"127.0.0.1:{port}", b"a") == b"a"
            await asyncio.sleep(0.6)
            assert f"127.0.0.1:{port}" not in pool._conns
            assert await pool.request(f"127.0.0.1:{port}", b"b") == b"b"
        assert len(log) == 2
        async with pool_for(certs, idle_timeout=0.3, keepalive=0.05) as pool:
            assert await pool.request(f"127.0.0.1:{port}", b"a") == b"a"
            await asyncio.sleep(0.6)
            assert await pool.request(f"127.0.0.1:{port}", b"b") == b"b"
        assert len(log) == 3
    finally:
        await stop(server)


async def test_close_leaves_no_tasks_and_cancels_dials(certs: tuple[Path, Path]) -> None:
    blackhole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # never answers a handshake
    blackhole.bind(("127.0.0.1", 0))
    server, port = await start_echo(*certs)
    try:
        pool = Pool(Trust(cafile=str(certs[0])))
        assert await pool.request(f"127.0.0.1:{port}", b"x") == b"x"
        dialing = asyncio.ensure_future(
            pool.request(f"127.0.0.1:{blackhole.getsockname()[1]}", b"x")
        )
        await asyncio.sleep(0.05)
        await pool.close()
        with pytest.raises(ConnectionLost) as caught:
            await dialing
        assert caught.value.sent is False
        assert asyncio.all_tasks() == {asyncio.current_task()}
        assert not pool._all
        with pytest.raises(ConnectionLost):
            await pool.request(f"127.0.0.1:{port}", b"x")
    finally:
        await stop(server)
        blackhole.close()


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("localhost:6309", ("localhost", 6309)),
        ("[::1]:7000", ("::1", 7000)),
        ("10.0.0.1:1", ("10.0.0.1", 1)),
    ],
)
def test_split_authority(authority: str, expected: tuple[str, int]) -> None:
    assert split_authority(authority) == expected


@pytest.mark.parametrize("authority", ["localhost", ":6309", "::1:6309", "h:0", "h:65536", "h:x"])
def test_split_authority_refuses(authority: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        split_authority(authority)
