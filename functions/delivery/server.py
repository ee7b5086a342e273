"""The HTTP server of `modelhooks serve` and `modelhooks dead-letter`: uvicorn (on uvloop)
reads requests, and a bounded pool of threads runs the handlers.

Bounded by construction: a stalled or slow client costs a coroutine, never a thread; at
most `max_connections` connections and requests are in flight (more get 503); a request's
headers, then its body, must each arrive within `read_timeout` (else 408, or a silent close
for a connection that sent nothing: uvicorn bounds neither a new connection nor a request's
headers, so a few hundred silent or trickling connections held every slot and all else got
503) and a body stops being read past `max_body_bytes` (413); over TLS, a handshake not done
within `read_timeout` is aborted, and a connection counts among the `max_connections` from
its accept, handshake included (`_over_tls`); idle keep-alive connections close after
`keepalive` seconds; at most 64 KiB of pipelined requests are read ahead, and
an answer left unread for `read_timeout` closes its connection (over TLS: once the
keep-alive close has waited `read_timeout`), as does any close not done by then
(`_bounded_protocol`). The same on uvloop and on asyncio's loop (tests/unit/test_server_loops).

A refused body is drained before the answer (a lingering close, as nginx does): closing a
connection with unread data makes the kernel reset it, and the sender, still sending, never
reads the 413 — Knative then retries what should be dead-lettered. The rest of the body is
read and thrown away for at most `linger` seconds and `linger_bytes` bytes; a body that ends
within them keeps its connection, one that does not is answered with `Connection: close`.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, cast

from modelhooks.core.errors import BadRequest, ModelhooksError, PayloadTooLarge
from modelhooks.delivery.encoding import Response, error_response, json_response
from modelhooks.delivery.http import Handler

__all__ = ["Asgi", "Limits", "run"]

Scope = Mapping[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Mapping[str, Any]], Any]
# The answer to a body refused before it was read, for paths that answer in their own
# format (an AdmissionReview denial); None: the JSON error.
Refuse = Callable[[str, ModelhooksError], Response | None]


@dataclass(frozen=True)
class Limits:
    threads: int = 8  # deliveries handled at once
    read_timeout: float = 30.0  # seconds for a request's body to arrive
    keepalive: int = 5  # seconds an idle kept-alive connection stays open
    max_connections: int = 1000  # connections and requests in flight; more get 503
    max_body_bytes: int = 3 << 20  # ingress.max_body_bytes
    linger: float = 5.0  # seconds a refused body is read and discarded, at most
    linger_bytes: int = 64 << 20  # bytes of a refused body read and discarded, at most
    # paths with a body limit of their own (AdmissionReviews may be bigger than events)
    path_body_bytes: tuple[tuple[str, int], ...] = ()

    def body_limit(self, path: str) -> int:
        return dict(self.path_body_bytes).get(path.rstrip("/"), self.max_body_bytes)


class Asgi:
    """An ASGI app around a framework-free `Handler` (modelhooks.delivery.http)."""

    def __init__(self, handler: Handler, limits: Limits, refuse: Refuse | None = None) -> None:
        self.handler = handler
        self.limits = limits
        self.refuse = refuse
        self.pool = ThreadPoolExecutor(limits.threads, thread_name_prefix="delivery")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        read = _Reading()
        try:
            if scope.get("http_version") == "1.1" and "host" not in headers:
                raise BadRequest("an HTTP/1.1 request must carry a Host header (RFC 9112, 3.2)")
            async with asyncio.timeout(self.limits.read_timeout):  # no task, as wait_for made
                body = await self._body(
                    headers, receive, read, self.limits.body_limit(scope["path"])
                )
        except TimeoutError:
            doc = {"error": "request_timeout", "message": "the request body did not arrive in time"}
            late = RequestTimeout("the request body did not arrive in time")
            own = self.refuse(scope["path"], late) if self.refuse else None
            await _send(send, own or json_response(408, doc), close=True)
        except ModelhooksError as exc:
            ended = await self._discard(headers, receive, read)
            own = self.refuse(scope["path"], exc) if self.refuse else None
            await _send(send, own or error_response(exc), close=not ended)
        else:
            loop = asyncio.get_running_loop()
            response = await loop.run_in_executor(
                self.pool, self.handler, scope["method"], scope["path"], headers, body
            )
            await _send(send, response)

    async def _body(
        self, headers: Mapping[str, str], receive: Receive, read: _Reading, limit: int
    ) -> bytes:
        declared = _declared(headers)
        if declared is not None and declared > limit:
            raise PayloadTooLarge(f"body of {declared} bytes is over the limit of {limit}")
        chunks, size = [], 0
        while True:
            read.started = True
            message = await receive()
            if message["type"] == "http.disconnect":  # a body that did not end is no delivery
                raise BadRequest("the connection closed before the request body ended")
            read.ended = not message.get("more_body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body over the limit of {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        return b"".join(chunks)

    async def _discard(self, headers: Mapping[str, str], receive: Receive, read: _Reading) -> bool:
        """Read and throw away the rest of a refused body, within the linger bounds. True when
        the body ended (the connection stays usable); False when it would not in time, was
        too long to try, or the sender waits for `100 Continue` (it is not invited: it sends
        nothing, and the answer can close at once)."""
        if read.ended:
            return True
        declared = _declared(headers)
        if declared is not None and declared > self.limits.linger_bytes:
            return False
        if not read.started and headers.get("expect", "").lower() == "100-continue":
            return False

        async def drain() -> bool:
            size = 0
            while size <= self.limits.linger_bytes:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return False
                size += len(message.get("body", b""))
                if not message.get("more_body"):
                    return True
            return False

        try:
            return await asyncio.wait_for(drain(), self.limits.linger)
        except TimeoutError:
            return False

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.pool.shutdown(wait=True, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return


class RequestTimeout(BadRequest):
    """A request body that did not arrive within the read timeout."""


@dataclass
class _Reading:
    """How far a request's body was read."""

    started: bool = False  # asked for (a `100 Continue` sender was invited)
    ended: bool = False  # its last chunk arrived


def _declared(headers: Mapping[str, str]) -> int | None:
    """The request's Content-Length, when it declares one."""
    declared = headers.get("content-length", "")
    return int(declared) if declared.isascii() and declared.isdigit() else None


async def _send(send: Send, response: Response, *, close: bool = False) -> None:
    headers = [
        (k.lower().encode("latin-1"), v.encode("latin-1"))
        for k, v in response.headers.items()
        if k.lower() not in ("content-length", "connection")
    ]
    headers.append((b"content-length", str(len(response.body)).encode()))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


def _bounded_protocol(timeout: float) -> type[Any]:
    """uvicorn's HTTP/1.1 protocol on httptools (llhttp, a C parser: h11, pure Python, took
    ~40 % of the event loop's CPU), bounded where uvicorn is not:

    - each request's headers must arrive within `timeout` (armed when a connection opens
      and when a request's first bytes did not bring its headers whole; the app bounds the
      body), and be at most `_HEAD` bytes (431): httptools bounds neither, and gathers a
      header's value until it ends;
    - pipelined requests are read ahead up to `_PIPELINED` bytes, and parsed only once the
      requests before them are answered: uvicorn read on for each request and after each
      answer, so a client sending requests without reading the answers grew its memory
      without end (1 GiB in seconds);
    - an answer the client does not read for `timeout` seconds aborts the connection (it
      waited for the client for good, holding a connection slot; a close waited too).
    """
    import httptools
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class ReadAhead(FlowControl):
        """Reads resume only while the bytes held unparsed are under `_PIPELINED` (uvicorn
        resumed for every request and after every answer)."""

        def __init__(self, transport: Any, backlog: Callable[[], int]) -> None:
            super().__init__(transport)
            self.backlog = backlog

        def resume_reading(self) -> None:
            if self.backlog() <= _PIPELINED:
                super().resume_reading()

    class Closing:
        """The transport, each close on the clock: one not done in `timeout` seconds is
        aborted. A close waits for what was written to be taken and, over TLS, for the
        client's close_notify, which the SSL layer (asyncio's and uvloop's alike) waited 30 s
        for: a 408 for stalled headers held its connection 30 s more, and an answer left
        unread over TLS (there the socket's buffer is hidden from pause_writing) until the
        keep-alive close and 30 s after."""

        def __init__(self, transport: Any, arm: Callable[[], None]) -> None:
            self._transport, self._arm = transport, arm
            self.write, self.is_closing = transport.write, transport.is_closing  # hot: bound

        def __getattr__(self, name: str) -> Any:
            return getattr(self._transport, name)

        def close(self) -> None:
            self._transport.close()
            self._arm()

    class Bounded(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._held = memoryview(b"")  # received, not parsed yet: a request waits
            self._head: int | None = None  # bytes of the request's headers so far
            self.flow = ReadAhead(transport, lambda: len(self._held))
            # writing "pauses" whenever the client has not taken all that was written: an
            # answer (or a close, which waits to flush) left unread is always on the clock.
            # Not over TLS: at 0 the SSL transport (asyncio's and uvloop's) pauses at every
            # write and resumes only when its socket's own buffer was full and drains, which
            # need not happen (the answer's body never went); nor does it pause for that
            # buffer: there an answer left unread is on the clock from the keep-alive close
            # (Closing)
            if transport.get_extra_info("sslcontext") is None:
                transport.set_write_buffer_limits(high=0)
            self._due: dict[str, asyncio.TimerHandle] = {}
            self._lost = False
            self._refusal: tuple[int, str, str] | None = None  # once those before are answered
            self._arm("headers", self._headers_late)
            closing = Closing(transport, lambda: self._arm("close", transport.abort))
            self.transport = cast(asyncio.Transport, closing)

        def data_received(self, data: bytes) -> None:
            if self._refusal is not None:
                return  # what follows a refused request is never parsed
            self._held = memoryview(bytes(self._held) + data) if self._held else memoryview(data)
            self._parse()

        def _parse(self) -> None:
            """Parse what is held, a slice at a time, until a request waits for the one
            before it to be answered (at most one is parsed ahead)."""
            while self._held and not self.pipeline and not self.transport.is_closing():
                piece, self._held = self._held[:_SLICE], self._held[_SLICE:]
                self._feed(piece)
                if self._head is not None and not self.transport.is_closing():
                    self._head += len(piece)
                    if self._head > _HEAD:
                        message = f"the request headers are over the limit of {_HEAD} bytes"
                        self._refuse(431, "headers_too_large", message)
            if self._head is not None and self._refusal is None:  # on the clock once they lag
                self._arm("headers", self._headers_late)
            if len(self._held) > _PIPELINED:
                self.flow.pause_reading()

        def _feed(self, piece: memoryview) -> None:
            """uvicorn's data_received, a refused request answered with the parser's reason
            (uvicorn's said "Invalid HTTP request received.", in plain text)."""
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserUpgrade:
                pass  # answered as a plain request: serve upgrades to nothing (ws="none")
            except httptools.HttpParserError as exc:
                self._refuse(400, "bad_request", f"not a valid HTTP/1.1 request: {exc}")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head = 0

        def on_headers_complete(self) -> None:
            self._head = None
            self._disarm("headers")
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # starts the next pipelined request, if parsed
            if self._refusal is not None:
                if not self._answering():
                    self._refuse(*self._refusal)
            elif not self.transport.is_closing():
                self._parse()  # the one after it, if held
                self.flow.resume_reading()  # when that left the bytes held short enough

        def pause_writing(self) -> None:
            super().pause_writing()
            self._arm("write", self.transport.abort)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._disarm("write")

        def handshaking(self, raw: asyncio.Transport) -> None:
            """Over TLS: the connection was accepted and its handshake begins. It counts
            among the connections from now (the SSL layer tells `connection_made` only once
            the handshake is done), and a server stopping meanwhile aborts it."""
            self.connections.add(self)
            self._raw = raw

        def handshake_lost(self) -> None:
            """Over TLS: the connection is gone; if before its handshake was done (failed,
            late, the client gone), `connection_lost` is never called: it is counted no more."""
            if self.transport is None:
                self.connections.discard(self)

        def shutdown(self) -> None:
            if self.transport is None:  # still handshaking
                self._raw.abort()
            else:
                super().shutdown()

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)  # closes the transport: disarmed below
            self._lost = True  # a close after this (uvicorn's error paths) arms nothing
            for name in list(self._due):
                self._disarm(name)
            self._held = memoryview(b"")

        def _arm(self, name: str, then: Callable[[], None]) -> None:
            """Call `then` in `timeout` seconds, unless already armed (or disarmed), or the
            connection is gone."""
            if name not in self._due and not self._lost:
                self._due[name] = self.loop.call_later(timeout, then)

        def _disarm(self, name: str) -> None:
            timer = self._due.pop(name, None)
            if timer is not None:
                timer.cancel()

        def _headers_late(self) -> None:
            self._due.pop("headers", None)
            if self.transport.is_closing():
                return
            if self._head is None:  # nothing came
                self.transport.close()
            else:  # part of a request came: say why it is cut off
                self._refuse(408, "request_timeout", "the request headers did not arrive in time")

        def _answering(self) -> bool:
            """Whether a request parsed before is still being answered (or waits to be)."""
            cycle = self.cycle
            return bool(self.pipeline) or (
                cycle is not None and not cycle.response_complete and not cycle.disconnected
            )

        def _refuse(self, status: int, error: str, message: str) -> None:
            """Answer a request whose headers are refused, and close: once the requests
            pipelined before it are answered, so each of them gets its own answer (the client
            reads answers in order: answered at once, this one would be taken for theirs)."""
            cycle = self.cycle
            if cycle is not None and cycle.more_body and not cycle.response_started:
                # refused in the body of the last request parsed: this refusal is its answer
                # (its app waited for the rest of the body: a 408, which Knative retries);
                # its app reads no more of it, and its own answer is dropped
                cycle.disconnected = True
                cycle.message_event.set()
            if self._answering():
                self._refusal = self._refusal or (status, error, message)  # the first reason
                self._disarm("headers")
                self._held = memoryview(b"")
                self.flow.pause_reading()
                return
            answer = json_response(status, {"error": error, "message": message})
            head = "".join(f"{k}: {v}\r\n" for k, v in answer.headers.items())
            reason = HTTPStatus(status).phrase
            self.transport.write(
                f"HTTP/1.1 {status} {reason}\r\n{head}content-length: {len(answer.body)}"
                "\r\nconnection: close\r\n\r\n".encode("latin-1")
                + answer.body
            )
            self._held = memoryview(b"")
            self.transport.close()

    return Bounded


def _over_tls(protocol: type[Any], context: ssl.SSLContext, timeout: float) -> Callable[..., Any]:
    """uvicorn's protocol factory over TLS: each accepted connection gets its own SSL layer
    (the running loop's: uvloop's or asyncio's) around `protocol` (`_bounded_protocol`), on
    the clock and counted from its accept. The loop's own TLS (`create_server(ssl=...)`, as
    uvicorn asks for it) gave a handshake 60 s (uvicorn passes no `ssl_handshake_timeout`),
    and the protocol saw the connection only once its handshake was done: clients that
    connect and never finish their handshake held a descriptor each for a minute, uncounted
    by `max_connections`. Here a handshake not done in `timeout` seconds is aborted, and a
    connection handshaking takes a slot as a silent plain one does."""
    layers: dict[type[Any], type[Any]] = {}

    def layer(loop: asyncio.AbstractEventLoop) -> type[Any]:
        base: type[Any]
        if type(loop).__module__.split(".")[0] == "uvloop":
            import uvloop.loop

            base = uvloop.loop.SSLProtocol  # type: ignore[attr-defined]  # its create_server's
        else:
            import asyncio.sslproto

            base = asyncio.sslproto.SSLProtocol
        if base not in layers:
            layers[base] = _handshaking(base)
        return layers[base]

    def made(**kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return layer(loop)(loop, protocol(**kwargs), context, timeout)

    return made


def _handshaking(ssl_protocol: type[Any]) -> type[Any]:
    """The SSL layer `ssl_protocol` (a loop's `SSLProtocol`) telling its HTTP protocol when
    the connection is accepted and when it is gone, whether or not its handshake was done."""

    class Handshaking(ssl_protocol):  # type: ignore[misc]
        def __init__(
            self,
            loop: asyncio.AbstractEventLoop,
            http: Any,
            context: ssl.SSLContext,
            timeout: float,
        ) -> None:
            super().__init__(
                loop, http, context, None, server_side=True, ssl_handshake_timeout=timeout
            )
            self._http = http

        def connection_made(self, transport: asyncio.Transport) -> None:
            self._http.handshaking(transport)
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            self._http.handshake_lost()

    return Handshaking


_PIPELINED = 64 * 1024  # bytes of pipelined requests read ahead, at most
_HEAD = 64 * 1024  # bytes of a request's line and headers, at most
_SLICE = 16 * 1024  # bytes parsed at a time: requests parsed ahead are few


def event_loop() -> str:
    """uvicorn's event loop: uvloop (libuv, in C: a dependency where it has wheels) when
    installed, else asyncio's own."""
    import importlib.util

    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def run(
    handler: Handler,
    *,
    host: str,
    port: int,
    limits: Limits = Limits(),
    on_ready: Callable[[str, int], None] | None = None,
    refuse: Refuse | None = None,
    tls: tuple[str, str] | None = None,
) -> None:
    """Serve until interrupted. `on_ready(host, port)` runs once the socket is bound (the
    port is the real one when 0 was asked for). `tls`: (certificate, key) files to serve
    HTTPS with, re-read when they change (modelhooks.delivery.tls)."""
    import uvicorn

    from modelhooks.delivery.tls import ReloadingTls

    context = ReloadingTls(*tls).context if tls else None  # a bad pair stops start-up
    protocol = _bounded_protocol(limits.read_timeout)

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (an
    # accepted socket inherits 0 from socket(family, SOCK_STREAM)), and without it every
    # second request on a kept-alive connection waited ~40 ms (Nagle vs delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    if on_ready is not None:
        on_ready(host, int(sock.getsockname()[1]))
    config = uvicorn.Config(
        Asgi(handler, limits, refuse),
        loop=event_loop(),
        # TLS is the protocol's (_over_tls), not the loop's: uvicorn is given no SSL context
        http=cast(Any, _over_tls(protocol, context, limits.read_timeout) if context else protocol),
        lifespan="on",
        timeout_keep_alive=limits.keepalive,
        # uvicorn counts the connection asking among those in flight (503 when they are
        # >= its limit): one more, so that max_connections are served and the next gets 503
        limit_concurrency=limits.max_connections + 1,
        log_level="warning",
        access_log=False,
        ws="none",  # an Upgrade header is not acted on
        proxy_headers=False,  # no X-Forwarded-* is read: a middleware less on every request
    )
    # what start-up built (modules, settings, adapters) lives as long as the process: out of
    # the collector's sight, a full collection no longer walks it (64,000 objects: 22 ms of
    # CPU, 30-140 ms on the loaded machine, every delivery in flight stopped meanwhile)
    gc.freeze()
    uvicorn.Server(config).run(sockets=[sock])
