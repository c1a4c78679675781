"""The running server: wires config, store, indexes, tokens, rate limiter and transport together,
and owns the server's life (startup walk, signals, reloads, change scans, graceful drain)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TextIO

from markproto.protocol import status, wire
from markproto.protocol.grants import Grants
from markproto.protocol.url import format_authority
from markproto.server import devcert, memory, seed, tokens, transport
from markproto.server.config import ServerConfig, is_default_root, tokens_explicit
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.ratelimit import RateLimiter
from markproto.server.responses import ResponseCache
from markproto.server.search import saved
from markproto.server.search.build import Build, saved_form, write
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content
from markproto.server.streaming import LongResponse
from markproto.server.watch import Hub

log = logging.getLogger("markproto.server")

TOKEN_CHECK_INTERVAL = 2.0
TOKEN_REFRESH_INTERVAL = 0.05
"""Seconds between tokens-file checks asked for by unknown tokens."""
SUMMARY_INTERVAL = 60.0
"""Seconds between the INFO summaries of successful reads (`Dispatcher.log_summary`) and of
requests refused for their rate (`MarkServer.log_refusals`)."""
DRAIN_TIMEOUT = 10.0
TRIM_INTERVAL = 2.0
"""Seconds without a change after which the heaps are trimmed (after a run of writes)."""
SAVE_INTERVAL = 300.0
"""Seconds at least between saves of a changed lookup index while the server runs (each waits
for a quiet interval): after a crash (no save at stop) a start restores the last one and
analyses again only the documents changed since, never every body. The first comes at the
first quiet interval after the start-up build; the file is rewritten whole (a 29.5 MB root's
is about 15 MB), so not more often than this."""
WARM = (
    "markproto.protocol.mdparse",  # a document's analysis (a PUBLISH, a build); not mistletoe:
    # ``mdtokens`` loads it for the few pieces and headings that need it (most folders: none)
    "markproto.protocol.mdoutline",
    "markproto.protocol.document",
    "markproto.protocol.links",
    "yaml",  # a document's own frontmatter
    "markproto.server.handlers.lookup",
    "markproto.server.handlers.links",
    "markproto.server.search.graph",
)
"""What the first PUBLISH and LOOKUP would import (about 36 modules, 2 MiB of code): imported
once the server is idle after its first answer (``warm``), not before it, so an empty server
answers as soon as the echo server would, and its settled memory is what it will hold once it
serves documents (docs/PERFORMANCE.md, "Board budget")."""
WARM_DELAY = 1.0
"""Seconds after the first request before ``WARM`` is imported: the answer is out by then, and
a client whose first attempt timed out has had time to try again (imported without saved
bytecode, ``WARM`` takes about 0.5 s of CPU that the event loop would share)."""
WARM_IDLE = 5.0
"""Seconds after binding before ``WARM`` is imported when no request has come. Either way the
start-up build (a restore) finishes first."""
FIRST_TOKEN_LABEL = "owner"
INTERRUPTED = 130
"""The exit status after Ctrl-C (128 + SIGINT), as a shell reports a program it interrupted."""


def _responses() -> transport.Responses:
    def error(code: str, message: str) -> bytes:
        return wire.emit_response(wire.error_response(code, message))

    return transport.Responses(
        oversize=error(status.Status.SERVER_ERROR, status.READ_FAILED),
        rate_limited=error(status.Status.RATE_LIMITED, status.RATE_LIMIT_EXCEEDED),
        timeout=error(status.Status.SERVER_ERROR, status.TIMED_OUT),
        internal=error(status.Status.SERVER_ERROR, status.INTERNAL),
    )


class StartError(Exception):
    """The server cannot start; the message is the one line that says why and what to do."""


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
        self.watch: Hub | None = None
        self._cert: tuple[Path, Path] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._first_token_file: Path | None = None
        self._lookup: Lookup | None = None
        self._build: Build | None = None
        self._trim_seen = self._trimmed = 0
        self._saved_at = -SAVE_INTERVAL
        self._refreshed = -TOKEN_REFRESH_INTERVAL

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    async def start(self) -> None:
        """Open the content, build the indexes and listen. A first run (default root, none yet)
        seeds the root and makes a publish token, shown once the server listens: a start that
        fails before then leaves no root and no token behind, so the next one is a first run
        again and shows its own token."""
        config = self.config
        first_run = is_default_root(config) and not config.root.exists()
        if first_run:
            config.root.mkdir(parents=True)
        try:
            if first_run:
                created = seed.seed(config.root, watch=config.watch_limit > 0)
                log.info("created a new content root", extra={"root": str(config.root)})
                log.debug("seeded %s", ", ".join(created))
            first_token = self._load_tokens(first_run)
            await self._start()
        except BaseException:
            if first_run:
                self._forget_first_run()
            raise
        if first_token is not None:
            print(
                f"A publish token for this server (shown once, keep it):\n{first_token}\n",
                file=self.out,
                flush=True,
            )
        self._announce()

    async def _start(self) -> None:
        config = self.config
        self._cert = self._certificate()

        started = time.monotonic()
        size = memory.budget(config.memory_budget)
        shares = memory.Shares.of(size)
        memory.tune()  # before the first thread
        log.info("memory budget", extra={"mib": size >> 20, "source": _budget_source(config)})
        lookup = Lookup()
        lookup.begin_build()  # writes from now on are held until the build swaps its indexes in
        self.content = await asyncio.get_running_loop().run_in_executor(
            None, Content.open, config.root, (), shares.version_cache, shares.chain_verdicts
        )
        self.content.attach(lookup)
        documents = list(self.content.current_versions())
        log.info(
            "content root read",
            extra={
                "documents": len(documents),
                "live": sum(1 for doc in documents if not doc.archived),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        if plain := self.content.plain_files:
            root = shlex.quote(str(config.root))
            said = (
                f"{plain} plain .md files in the content root are not served (they have no"
                " version history); make them documents"
                if plain > 1
                else "1 plain .md file in the content root is not served (it has no version"
                " history); make it a document"
            )
            log.warning(f"{said} in place with: mark-server import {root} --root {root}")
        self._lookup = lookup
        self._build = Build(
            lookup,
            self.content,
            saved=saved_index_file(config),
            workers=min(config.index_workers, os.cpu_count() or 1),
        )
        self._ctx = Context(
            content=self.content,
            lookup=lookup,
            grants=self._grants(),
            read_only=config.read_only,
            refresh=self._refresh,
        )
        if config.watch_limit > 0:
            hub = self.watch = self._ctx.watch = Hub(
                self._ctx,
                limit=config.watch_limit,
                per_connection=config.watch_connection_limit,
                heartbeat=config.watch_heartbeat,
                log_size=config.watch_log,
            )
            self.content.observers.append(hub.record)
        limiter = RateLimiter(config.rate_limit, config.rate_burst, max_clients=shares.rate_clients)
        cache = ResponseCache(shares.response_cache)
        dispatcher = self._dispatcher = Dispatcher(self._ctx, cache)
        asked = asyncio.Event()

        def first(data: bytes, peer: transport.Peer) -> bytes | Awaitable[bytes] | LongResponse:
            """The handler until the first request: it starts the warm-up's clock."""
            asked.set()
            if self.server is not None:
                self.server.handler = dispatcher.handle  # later connections go straight there
            return dispatcher.handle(data, peer)

        try:
            self.server = await transport.serve(
                first,
                host=config.host,
                port=config.port,
                certfile=self._cert[0],
                keyfile=self._cert[1],
                responses=_responses(),
                max_streams=config.max_streams,
                max_buffered=shares.request_buffers,
                request_timeout=config.request_timeout or None,
                idle_timeout=config.idle_timeout,
                allow=limiter.allow if limiter.enabled else None,
            )
        except OSError as exc:
            raise StartError(listen_problem(config, exc)) from None
        except ValueError as exc:  # the TLS pair, replaced since check_paths read it
            raise StartError(f"TLS: {exc}") from None
        if self.watch is not None:
            self.watch.start()  # its heartbeat timer, once there is a server to beat for
        names = devcert.names(self._cert[0].read_bytes())
        lookup.links.authorities = frozenset(format_authority(n, self.port) for n in names)
        self._tasks.append(asyncio.create_task(self._building(self._build, asked)))
        self._tasks.append(asyncio.create_task(self._every(TRIM_INTERVAL, self._trim_after_writes)))
        self._tasks.append(asyncio.create_task(self._every(TOKEN_CHECK_INTERVAL, self._check)))
        self._tasks.append(asyncio.create_task(self._every(SUMMARY_INTERVAL, self._summaries)))
        if config.scan_interval > 0:
            self._tasks.append(asyncio.create_task(self._every(config.scan_interval, self.rescan)))

    def _announce(self) -> None:
        assert self.server is not None
        address = format_authority(*self.server.addresses[0][:2])
        log.info("server started", extra={"addr": f"udp {address}", "root": str(self.config.root)})
        if self.fingerprint:
            print(
                f"TLS certificate (self-signed) fingerprint {self.fingerprint}; clients pin it"
                " on first contact",
                file=sys.stderr,
            )
        # Last: tools wait for this line to know the server is ready.
        print(f"markproto serving {self.config.root} on udp {address}", file=sys.stderr, flush=True)

    def _forget_first_run(self) -> None:
        """Undo what a failed first start created: the seeded root and its first token."""
        if self.content is not None:
            self.content.close()
            self.content = None
        shutil.rmtree(self.config.root, ignore_errors=True)
        if self._first_token_file is not None:
            self._first_token_file.unlink(missing_ok=True)
        log.info("start failed: removed the new content root and its first token")

    def _load_tokens(self, first_run: bool) -> str | None:
        """Load the tokens file; on a first run without one, make it with one publish token and
        return that raw token (for ``start`` to show once it listens)."""
        path = self.config.tokens
        if path is None:
            return None
        raw = None
        if first_run and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            raw = tokens.generate(path, FIRST_TOKEN_LABEL, ["/**"], ["publish"], None)
            self._first_token_file = path
        self._tokens = tokens.TokenFile(path, required=tokens_explicit(self.config))
        return raw

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

    async def _building(self, build: Build, asked: asyncio.Event) -> None:
        try:
            await build.run()
        except Exception:
            log.exception("building the lookup index failed: LOOKUP stays unavailable")
        await _trim()
        await _warm(asked)

    async def _trim_after_writes(self) -> None:
        """Once a run of writes is over (no change for a whole interval, the index work it held
        back done), pack the body index's postings and trim the heaps; and save the lookup
        index if it changed and the last save is ``SAVE_INTERVAL`` old."""
        if self.content is None:
            return
        changes = self.content.changes
        quiet = changes == self._trim_seen and not self.content.indexing
        self._trim_seen = changes
        if not quiet:
            return
        lookup = self._lookup
        if changes != self._trimmed:
            self._trimmed = changes
            if lookup is not None and lookup.ready:
                lookup.freeze()
            await _trim()
        if lookup is not None and time.monotonic() - self._saved_at >= SAVE_INTERVAL:
            await self._save_running(lookup, self.content)

    async def _save_running(self, lookup: Lookup, content: Content) -> None:
        """Save the lookup index while serving: its saved form made here (no index work runs
        meanwhile), written on a thread."""
        form = saved_form(lookup, content)
        if form is None:
            return
        self._saved_at = time.monotonic()
        wrote = await asyncio.to_thread(self._write_index, lookup, form, content)
        del form
        if wrote:
            await _trim()

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
        """The periodic look at the tokens file (edits that only revoke or narrow a token)."""
        self._refreshed = -TOKEN_REFRESH_INTERVAL
        self._refresh()

    def _refresh(self) -> bool:
        """Reload the tokens file if it changed, at most once per ``TOKEN_REFRESH_INTERVAL``:
        an unknown token asks for it, so a flood of bogus tokens costs one ``stat`` per interval."""
        now = time.monotonic()
        if (
            self._tokens is None
            or self._ctx is None
            or now - self._refreshed < TOKEN_REFRESH_INTERVAL
        ):
            return False
        self._refreshed = now
        if not self._tokens.check_changed():
            return False
        self._ctx.grants = self._grants()
        return True

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
        """Stop accepting, let requests in progress finish (up to ``timeout``), save the lookup
        index if it changed, then close."""
        if self._build is not None:
            self._build.cancel()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        drained = True
        if self.watch is not None:
            self.watch.close()  # every subscription gets `closing` before the drain waits on it
        if self.server is not None:
            drained = await self.server.drain(timeout)
        self._summaries()
        if self.content is not None:
            self._save_index(self.content)
            self.content.close()
        log.info("server stopped")
        return drained

    def _save_index(self, content: Content) -> None:
        """Save the lookup index at stop, if it changed since it was built, restored or saved."""
        lookup = self._lookup
        if lookup is not None and (form := saved_form(lookup, content)) is not None:
            self._write_index(lookup, form, content)

    def _write_index(self, lookup: Lookup, form: saved.Saved, content: Content) -> bool:
        """Write a saved form (any thread), logged either way; whether it was written (if not,
        the index stays dirty: the next save tries again, and a start meanwhile restores the
        last copy saved and analyses what changed since)."""
        started = time.monotonic()
        try:
            write(lookup, form, content.root, saved_index_file(self.config))
        except OSError as exc:
            log.warning("lookup index not saved (tried again at the next save): %s", exc)
            return False
        log.info("lookup index saved", extra={"seconds": round(time.monotonic() - started, 3)})
        return True


async def _warm(asked: asyncio.Event) -> None:
    """Import ``WARM`` on a thread once the server has answered (or waited) a while."""
    if not asked.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asked.wait(), WARM_IDLE)
    await asyncio.sleep(WARM_DELAY)
    await asyncio.to_thread(lambda: [__import__(name) for name in WARM])
    await _trim()


async def _trim() -> None:
    """``memory.trim`` with the cycles collected: every caller is a pause (a build done, the
    imports done, writes over, a save written)."""
    await asyncio.get_running_loop().run_in_executor(None, partial(memory.trim, cycles=True))


def _budget_source(config: ServerConfig) -> str:
    if config.memory_budget is not None:
        return config.sources.get("memory_budget", "set")
    return "cgroup memory.max" if memory.cgroup_limit() else "default"


def saved_index_file(config: ServerConfig) -> Path:
    return saved.file_for(config.state_dir, config.root)


def listen_problem(config: ServerConfig, exc: OSError) -> str:
    """Why the server cannot listen, in words, naming the address and what to change."""
    host = f"[{config.host}]" if ":" in config.host else config.host
    where = f"cannot listen on udp {host}:{config.port}"
    port_from = _origin(config, "port")
    host_from = _origin(config, "host")
    if isinstance(exc, socket.gaierror):
        return (
            f"{where}: {config.host!r} ({host_from}) is no address or resolvable name "
            f"({exc.strerror}): give an address of this machine with --host or "
            "MARK_LISTEN_HOST, or :: for all of them"
        )
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where}: the port ({port_from}) is in use, by another mark-server perhaps: stop "
            "that, or choose a free port with --port or MARK_PORT"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{where}: {config.host} ({host_from}) is not an address of this machine: give one "
            "of its addresses with --host or MARK_LISTEN_HOST, or :: for all of them"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (
            f"{where}: permission denied; ports below 1024 need privileges: choose one above "
            f"1023 with --port or MARK_PORT (this one is {port_from})"
        )
    return f"{where}: {exc.strerror or exc}"


def _origin(config: ServerConfig, setting: str) -> str:
    source = config.sources.get(setting)
    return f"set by {source}" if source else "the default"


async def run(config: ServerConfig) -> int:
    """Serve until SIGTERM or SIGINT; reload on SIGHUP. Both stop signals drain first; the exit
    status is 0 after SIGTERM (a service manager's stop) and 130 after SIGINT (Ctrl-C)."""
    app = App(config)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    stopped_by: list[signal.Signals] = []
    reloads: set[asyncio.Task[None]] = set()

    def stop(signum: signal.Signals) -> None:
        stopped_by.append(signum)
        stopping.set()

    def hup() -> None:
        if app.server is None:
            return  # still starting: the start itself reads everything a reload would
        task = asyncio.create_task(app.reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    # Before start, so a signal during a long startup walk is never lost or fatal.
    loop.add_signal_handler(signal.SIGTERM, stop, signal.SIGTERM)
    loop.add_signal_handler(signal.SIGINT, stop, signal.SIGINT)
    loop.add_signal_handler(signal.SIGHUP, hup)
    await app.start()
    await stopping.wait()
    log.info("shutting down: draining connections")
    await app.stop()
    return INTERRUPTED if stopped_by[0] is signal.SIGINT else 0
