"""The running server: wires config, store, indexes, tokens, rate limiter and transport together,
and owns the server's life (startup walk, signals, reloads, change scans, graceful drain)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from markproto.protocol import status, wire
from markproto.protocol.grants import Grants
from markproto.server import devcert, seed, tokens, transport
from markproto.server.config import ServerConfig, is_default_root, tokens_explicit
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.ratelimit import RateLimiter
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content

log = logging.getLogger("markproto.server")

TOKEN_CHECK_INTERVAL = 2.0
SUMMARY_INTERVAL = 60.0
"""Seconds between the INFO summaries of successful reads (`Dispatcher.log_summary`) and of
requests refused for their rate (`MarkServer.log_refusals`)."""
DRAIN_TIMEOUT = 10.0
FIRST_TOKEN_LABEL = "owner"


def _responses() -> transport.Responses:
    def error(code: str, message: str) -> bytes:
        return wire.emit_response(wire.error_response(code, message))

    return transport.Responses(
        oversize=error(status.Status.SERVER_ERROR, status.READ_FAILED),
        rate_limited=error(status.Status.RATE_LIMITED, status.RATE_LIMIT_EXCEEDED),
        timeout=error(status.Status.SERVER_ERROR, status.TIMED_OUT),
        internal=error(status.Status.SERVER_ERROR, status.INTERNAL),
    )


class App:
    """One server over one content root. ``start`` then ``stop``; ``reload`` on SIGHUP."""

    def __init__(self, config: ServerConfig, out: TextIO | None = None) -> None:
        self.config = config
        self.out = out if out is not None else sys.stdout
        self.content: Content | None = None
        self.server: transport.MarkServer | None = None
        self.fingerprint = ""
        self._tokens: tokens.TokenFile | None = None
        self._ctx: Context | None = None
        self._dispatcher: Dispatcher | None = None
        self._cert: tuple[Path, Path] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    async def start(self) -> None:
        config = self.config
        first_run = is_default_root(config) and not config.root.exists()
        if first_run:
            config.root.mkdir(parents=True)
            created = seed.seed(config.root)
            log.info("created a new content root", extra={"root": str(config.root)})
            log.debug("seeded %s", ", ".join(created))
        self._load_tokens(first_run)
        self._cert = self._certificate()

        started = time.monotonic()
        lookup = Lookup()
        loop = asyncio.get_running_loop()

        def open_content() -> Content:
            # The body index analyzes documents in worker processes during the one startup walk.
            with lookup.bulk(workers=min(config.index_workers, os.cpu_count() or 1)):
                return Content.open(config.root, [lookup])

        self.content = await loop.run_in_executor(None, open_content)
        documents = list(self.content.current_versions())
        log.info(
            "lookup catalog built",
            extra={
                "entries": sum(1 for doc in documents if not doc.archived),
                "documents": len(documents),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        self._ctx = Context(
            content=self.content,
            lookup=lookup,
            grants=self._grants(),
            read_only=config.read_only,
        )
        limiter = RateLimiter(config.rate_limit, config.rate_burst)
        dispatcher = self._dispatcher = Dispatcher(self._ctx)
        self.server = await transport.serve(
            dispatcher.handle,
            host=config.host,
            port=config.port,
            certfile=self._cert[0],
            keyfile=self._cert[1],
            responses=_responses(),
            max_streams=config.max_streams,
            request_timeout=config.request_timeout or None,
            idle_timeout=config.idle_timeout,
            allow=limiter.allow if limiter.enabled else None,
        )
        self._tasks.append(asyncio.create_task(self._every(TOKEN_CHECK_INTERVAL, self._check)))
        self._tasks.append(asyncio.create_task(self._every(SUMMARY_INTERVAL, self._summaries)))
        if config.scan_interval > 0:
            self._tasks.append(asyncio.create_task(self._every(config.scan_interval, self.rescan)))
        host, port = self.server.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        log.info(
            "server started",
            extra={"addr": f"udp {shown}:{port}", "root": str(config.root)},
        )
        if self.fingerprint:
            print(
                f"TLS certificate (self-signed) fingerprint {self.fingerprint}; clients pin it"
                " on first contact",
                file=sys.stderr,
            )
        # Last: tools wait for this line to know the server is ready.
        print(f"markproto serving {config.root} on udp {shown}:{port}", file=sys.stderr, flush=True)

    def _load_tokens(self, first_run: bool) -> None:
        path = self.config.tokens
        if path is None:
            return
        if first_run and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            raw = tokens.generate(path, FIRST_TOKEN_LABEL, ["/**"], ["publish"], None)
            print(
                f"A publish token for this server (shown once, keep it):\n{raw}\n",
                file=self.out,
                flush=True,
            )
        self._tokens = tokens.TokenFile(path, required=tokens_explicit(self.config))

    def _grants(self) -> Grants | None:
        """None means no token store at all: reads public, writes refused as unconfigured."""
        tf = self._tokens
        if tf is None or (not len(tf.grants) and not tf.path.exists()):
            return None
        return tf.grants

    def _certificate(self) -> tuple[Path, Path]:
        config = self.config
        if config.tls_cert is not None and config.tls_key is not None:
            return config.tls_cert, config.tls_key
        cert, key, created = devcert.ensure(config.state_dir)
        self.fingerprint = devcert.fingerprint(cert.read_bytes())
        if created:
            log.info("generated a self-signed certificate", extra={"file": str(cert)})
        return cert, key

    async def _every(self, seconds: float, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("periodic job failed")

    def _summaries(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.log_summary()
        if self.server is not None:
            self.server.log_refusals()

    def _check(self) -> None:
        if self._tokens is not None and self._tokens.check_changed() and self._ctx is not None:
            self._ctx.grants = self._grants()

    async def rescan(self) -> None:
        """Pick up files changed on disk behind the server's back (a sync tool, a restore)."""
        if self.content is None:
            return
        changes = await self.content.rescan()
        if changes:
            log.info(
                "store changes picked up",
                extra={"updated": len(changes.updated), "removed": len(changes.removed)},
            )

    async def reload(self) -> None:
        """SIGHUP: tokens, certificate, and a change scan."""
        log.info("reloading (SIGHUP)")
        if self._tokens is not None and self._ctx is not None:
            self._tokens.reload()
            self._ctx.grants = self._grants()
        if self.server is not None and self.config.tls_cert and self.config.tls_key:
            try:
                self.server.reload_certificate(self.config.tls_cert, self.config.tls_key)
            except Exception as exc:
                log.error("tls: certificate not reloaded, keeping the old one: %s", exc)
        await self.rescan()

    async def stop(self, timeout: float = DRAIN_TIMEOUT) -> bool:
        """Stop accepting, let requests in progress finish (up to ``timeout``), then close."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        drained = True
        if self.server is not None:
            drained = await self.server.drain(timeout)
        self._summaries()
        if self.content is not None:
            self.content.close()
        log.info("server stopped")
        return drained


async def run(config: ServerConfig) -> int:
    """Serve until SIGTERM or SIGINT; reload on SIGHUP. Returns the exit status."""
    app = App(config)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    reloads: set[asyncio.Task[None]] = set()

    def hup() -> None:
        if app.server is None:
            return  # still starting: the start itself reads everything a reload would
        task = asyncio.create_task(app.reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    # Before start, so a signal during a long startup walk is never lost or fatal.
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    loop.add_signal_handler(signal.SIGHUP, hup)
    await app.start()
    await stopping.wait()
    log.info("shutting down: draining connections")
    await app.stop()
    return 0
