"""A bare aioquic echo server on the event-based pattern: the baseline benchmarks measure against,
and a peer for transport-level client tests. It speaks no protocol: the response is the request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.asyncio.server import QuicServer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import stream_is_unidirectional
from aioquic.quic.events import QuicEvent, StreamDataReceived, StreamReset

from markproto.protocol.limits import ALPN


class EchoProtocol(QuicConnectionProtocol):
    """Buffers each bidirectional stream until FIN, then answers with ``reply(request)``."""

    reply: Callable[[bytes], bytes] = staticmethod(lambda data: data)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._buffers: dict[int, bytearray] = {}

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived):
            sid = event.stream_id
            if stream_is_unidirectional(sid):
                return
            buf = self._buffers.setdefault(sid, bytearray())
            buf += event.data
            if event.end_stream:
                del self._buffers[sid]
                self._quic.send_stream_data(sid, self.reply(bytes(buf)), end_stream=True)
        elif isinstance(event, StreamReset):
            self._buffers.pop(event.stream_id, None)


async def start_echo(
    cert: Path,
    key: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    reply: Callable[[bytes], bytes] | None = None,
) -> tuple[QuicServer, int]:
    """Start the echo server; return it and the UDP port it listens on."""
    config = QuicConfiguration(is_client=False, alpn_protocols=[ALPN])
    config.load_cert_chain(cert, key)
    protocol = EchoProtocol
    if reply is not None:
        protocol = type("ReplyProtocol", (EchoProtocol,), {"reply": staticmethod(reply)})
    server = await serve(host, port, configuration=config, create_protocol=protocol)
    sock = server._transport.get_extra_info("socket")  # type: ignore[union-attr]
    return server, int(sock.getsockname()[1])


async def _main() -> None:  # pragma: no cover - manual use: python -m support.echo
    import tempfile

    from markproto.server import devcert

    cert, key, _ = devcert.ensure(Path(tempfile.mkdtemp()))
    server, port = await start_echo(cert, key, port=6399)
    print(f"echo on udp/{port}")
    try:
        await asyncio.Event().wait()
    finally:
        server.close()


if __name__ == "__main__":  # pragma: no cover
    asyncio.run(_main())
