"""The baseline of bench_cli: one FETCH with nothing but aioquic, as a script a user would write.

    python bare_fetch.py HOST PORT PATH CAFILE

It verifies the server against CAFILE (the server's own certificate), as ``mark`` verifies it
against its pin, and closes the way aioquic's ``connect`` does. It imports nothing of markproto.
"""

import asyncio
import sys

from aioquic.asyncio import connect
from aioquic.quic.configuration import QuicConfiguration


async def fetch(host: str, port: int, path: str, cafile: str) -> bytes:
    config = QuicConfiguration(is_client=True, alpn_protocols=["mark"], server_name="localhost")
    config.load_verify_locations(cafile=cafile)
    async with connect(host, port, configuration=config) as connection:
        reader, writer = await connection.create_stream()
        writer.write(f"FETCH {path}\n".encode())
        writer.write_eof()
        return await reader.read()


if __name__ == "__main__":
    host, port, path, cafile = sys.argv[1:5]
    sys.stdout.buffer.write(asyncio.run(fetch(host, int(port), path, cafile)))
