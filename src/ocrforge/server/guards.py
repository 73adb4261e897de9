"""Guards a browser-reachable local service needs beyond an API key.

- ``host_allowed``: the Host header must name this server (DNS rebinding: a page on the
  attacker's own domain, re-resolved to 127.0.0.1, would otherwise read the local API with
  the victim's browser). IP literals, ``localhost`` and ``*.localhost`` are always let in
  (a rebinding attack needs a name the attacker controls); other names only when configured.
- ``security_headers``: nosniff and no framing on every response, a strict CSP on the demo
  page (its script and style are files under /static, nothing inline).
- ``header_timeout_protocol``: uvicorn's HTTP protocol with a deadline for a request's headers,
  so idle or trickling connections (slowloris) are closed instead of held.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

LOCAL_NAMES = frozenset({"localhost"})
DEMO_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
            "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


def host_name(header: str) -> str:
    """The name in a Host header, without port, brackets or a trailing dot, lower case."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h[1:]
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def host_allowed(header: str | None, allowed: frozenset[str]) -> bool:
    if header is None or "*" in allowed:  # no Host (HTTP/1.0): not a browser
        return True
    name = host_name(header)
    if not name:
        return False
    if name in allowed or name in LOCAL_NAMES or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def security_headers(path: str) -> dict[str, str]:
    out = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
           "Referrer-Policy": "no-referrer"}
    if path == "/" or path.startswith("/static/"):
        out["Content-Security-Policy"] = DEMO_CSP
    return out


def header_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's default HTTP protocol class, closing a connection whose next request's
    headers are not complete within ``timeout_s`` of the connection or the last response."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class HeaderTimeout(base):  # type: ignore[misc, valid-type]
        _timer: asyncio.TimerHandle | None = None
        _armed_cycle: Any = None

        def _arm(self) -> None:
            self._disarm()
            self._armed_cycle = self.cycle  # a new cycle is made when headers are complete
            self._timer = self.loop.call_later(timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self) -> None:
            self._timer = None
            if self.cycle is self._armed_cycle and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._timer is not None and self.cycle is not self._armed_cycle:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeout
