"""Long-lived responses: a stream the server keeps writing after its handler returned (WATCH).

The transport's ordinary path is one whole response per stream. A handler may instead return a
`LongResponse`; the transport then hands it a `Sink` for the stream and tells it when the peer
acknowledged data (room to send more) and when the stream is gone. Such a stream is not a request
in progress: no request timeout applies to it and it takes no handler task. It holds the stream
(and so one of the connection's stream credits) until the response finishes it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class Sink(ABC):
    """The sending side of one long-lived response's stream."""

    __slots__ = ()

    @property
    @abstractmethod
    def owner(self) -> object:
        """The connection the stream belongs to (for limits per connection)."""

    @property
    @abstractmethod
    def backlog(self) -> int:
        """Bytes sent and not yet acknowledged by the peer: what a slow reader costs."""

    @abstractmethod
    def send(self, data: bytes) -> None:
        """Queue ``data`` on the stream (a stream the peer stopped drops it silently)."""

    @abstractmethod
    def finish(self, data: bytes = b"") -> None:
        """Queue ``data`` and end the stream; the response is over."""

    @abstractmethod
    def wake(self) -> None:
        """Call the response's `LongResponse.resume` once the peer acknowledges more data."""


class LongResponse(ABC):
    """What a handler returns to keep its stream: the transport calls `start` once, then
    `resume` after a `Sink.wake`, and `stop` when the peer stopped reading or the connection is
    gone (the response must not touch the sink after that)."""

    __slots__ = ()

    @abstractmethod
    def start(self, sink: Sink) -> None: ...

    @abstractmethod
    def resume(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...
