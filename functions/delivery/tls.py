"""HTTPS for the admission webhook, its certificate re-read when its files change.

The apiserver only calls webhooks over HTTPS. A serving certificate in a Kubernetes Secret
is rotated in place (cert-manager, a mounted Secret's `..data` symlink swapped): each TLS
handshake checks the files' identity (inode, size, mtime) and, when they changed, loads
them into a fresh context that this and later connections use. A pair that does not load
(half-written, key and certificate not matching) keeps the previous one, with a warning.

>>> context = ReloadingTls("tls.crt", "tls.key").context  # doctest: +SKIP

`modelhooks.delivery.server.run(..., tls=(cert, key))` wraps each connection in it.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading

from modelhooks.core.errors import ConfigError
from modelhooks.core.logs import log

__all__ = ["ReloadingTls"]

_Stamp = tuple[tuple[int, int, int], ...]


class ReloadingTls:
    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._lock = threading.Lock()
        try:
            self._stamp = self._stat()
            self._current = self._load()
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                "MODELHOOKS_ADMISSION_TLS_CERT_FILE / _KEY_FILE: cannot serve with "
                f"{cert_file} and {key_file}: {e}"
            ) from None
        self.reloads = 0
        self.context = self._current  # the listener's; each handshake then picks the newest
        self.context.sni_callback = self._pick

    def _stat(self) -> _Stamp:
        found = (os.stat(self.cert_file), os.stat(self.key_file))
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in found)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        context.sni_callback = self._pick
        return context

    def _pick(self, sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        """Called for every handshake (with or without SNI): the newest loaded context."""
        try:
            stamp = self._stat()
        except OSError:
            stamp = self._stamp  # mid-rotation: keep serving what was loaded
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._current = self._load()
                    self.reloads += 1
                    log(logging.INFO, "admission certificate reloaded", file=self.cert_file)
                except (OSError, ssl.SSLError) as e:
                    log(logging.WARNING, "admission certificate not reloaded", error=str(e))
                self._stamp = stamp
            current = self._current
        if current is not sock.context:
            sock.context = current
