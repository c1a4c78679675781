"""``SyncClient``: the client's verbs as blocking calls, for scripts, notebooks and REPLs.

The ``Client`` runs on an event loop of its own in a private thread, and each call waits for its
coroutine there. So it works the same in plain code and inside a running event loop (a notebook
cell, a callback of an async framework), where ``asyncio.run`` would refuse to start; the caller's
loop is never touched, only the calling thread waits.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from markproto.client.client import Client
from markproto.client.errors import MarkError, UsageError
from markproto.client.results import LinksResult, LookupResult, Result
from markproto.client.watch import STALL_TIMEOUT, Changes, Notice, Watch
from markproto.protocol.url import MarkURL
from markproto.protocol.watch import Cursor

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _doc_of(coroutine: Callable[..., Any]) -> Callable[[F], F]:
    """Give a blocking method the docstring of the ``Client`` coroutine it runs."""

    def copy(method: F) -> F:
        method.__doc__ = coroutine.__doc__
        return method

    return copy


class SyncClient:
    """The ``Client`` verbs, blocking, on a private event loop in a private thread. Use it as a
    context manager, or call ``close``: that closes the connections and ends the thread. The
    ``client`` given belongs to the ``SyncClient`` from then on (default: ``Client()``; for the
    CLI's setup, ``SyncClient(Client.from_environment())``)."""

    def __init__(self, client: Client | None = None) -> None:
        self.client = client if client is not None else Client()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="markproto-sync-client", daemon=True
        )
        self._thread.start()
        self._closed = False

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the client's connections, then stop the private loop and its thread."""
        if self._closed:
            return
        try:
            self._run(self._shutdown())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    @_doc_of(Client.fetch)
    def fetch(
        self,
        target: MarkURL | str,
        *,
        if_none_match: str | None = None,
        if_modified_since: str | None = None,
    ) -> Result:
        return self._run(
            self.client.fetch(
                target, if_none_match=if_none_match, if_modified_since=if_modified_since
            )
        )

    @_doc_of(Client.manifest)
    def manifest(self, target: MarkURL | str) -> Result:
        return self._run(self.client.manifest(target))

    @_doc_of(Client.list)
    def list(
        self,
        target: MarkURL | str,
        *,
        cursor: str | None = None,
        page_size: int | None = None,
        include_archived: bool = False,
    ) -> Result:
        return self._run(
            self.client.list(
                target, cursor=cursor, page_size=page_size, include_archived=include_archived
            )
        )

    @_doc_of(Client.versions)
    def versions(self, target: MarkURL | str) -> Result:
        return self._run(self.client.versions(target))

    @_doc_of(Client.links)
    def links(
        self,
        target: MarkURL | str,
        *,
        direction: str | None = None,
        relations: Sequence[str] | None = None,
        depth: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> LinksResult:
        return self._run(
            self.client.links(
                target,
                direction=direction,
                relations=relations,
                depth=depth,
                limit=limit,
                cursor=cursor,
            )
        )

    @_doc_of(Client.lookup)
    def lookup(
        self,
        target: MarkURL | str,
        query: str,
        *,
        filter: str | None = None,
        limit: int | None = None,
        match: str | None = None,
    ) -> LookupResult:
        return self._run(self.client.lookup(target, query, filter=filter, limit=limit, match=match))

    @_doc_of(Client.publish)
    def publish(
        self,
        target: MarkURL | str,
        body: bytes,
        *,
        expected_version: int | None,
        meta: Mapping[str, str] | None = None,
    ) -> Result:
        return self._run(
            self.client.publish(target, body, expected_version=expected_version, meta=meta)
        )

    @_doc_of(Client.append)
    def append(
        self,
        target: MarkURL | str,
        body: bytes,
        *,
        expected_version: int | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> Result:
        return self._run(
            self.client.append(target, body, expected_version=expected_version, meta=meta)
        )

    @_doc_of(Client.archive)
    def archive(self, target: MarkURL | str) -> Result:
        return self._run(self.client.archive(target))

    def watch(
        self,
        target: MarkURL | str,
        *,
        since: Cursor | str | None = None,
        stall_timeout: float = STALL_TIMEOUT,
        on_reconnect: Callable[[MarkError], None] | None = None,
    ) -> SyncWatch:
        """Change hints for a document or a folder and everything below it, as a blocking
        iterator of ``WatchEvent`` and ``Resync`` values (``Client.watch``, which see). Use it
        as a context manager (which subscribes at once), or ``start`` and ``close`` it."""
        watch = self.client.watch(
            target, since=since, stall_timeout=stall_timeout, on_reconnect=on_reconnect
        )
        return SyncWatch(self, watch)

    @_doc_of(Client.changes)
    def changes(
        self, target: MarkURL | str, *, since: Cursor | str | None = None, limit: int = 1000
    ) -> Changes:
        return self._run(self.client.changes(target, since=since, limit=limit))

    # private

    def _run(self, job: Coroutine[Any, Any, T]) -> T:
        """Run ``job`` on the private loop and wait for it; an interrupt (Ctrl-C) while waiting
        cancels it there too."""
        if self._closed:
            job.close()
            raise UsageError("the SyncClient is closed")
        future = asyncio.run_coroutine_threadsafe(job, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    async def _shutdown(self) -> None:
        """What ``asyncio.run`` does on the way out: close the client, cancel what is left, and
        end async generators and the resolver's executor threads."""
        await self.client.close()
        current = asyncio.current_task()
        rest = [task for task in asyncio.all_tasks() if task is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)
        await self._loop.shutdown_asyncgens()
        await self._loop.shutdown_default_executor()


class SyncWatch:
    """A ``Watch`` iterated from blocking code; each step runs on the ``SyncClient``'s loop."""

    def __init__(self, owner: SyncClient, watch: Watch) -> None:
        self._owner = owner
        self.watch = watch

    @property
    def cursor(self) -> Cursor | None:
        """Where to resume: after the last notice taken."""
        return self.watch.cursor

    def __iter__(self) -> Iterator[Notice]:
        return self

    def __next__(self) -> Notice:
        try:
            return self._owner._run(self.watch.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def __enter__(self) -> SyncWatch:
        return self.start()

    def start(self) -> SyncWatch:
        """Subscribe now (entering ``with`` does this): every change from here on is seen."""
        self._owner._run(self.watch.start())
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._owner._closed:
            self._owner._run(self.watch.aclose())
