"""The daemons' ZAP handler: during each CurveZMQ handshake, ZeroMQ asks it whether the peer's key may connect.

pyzmq's `ThreadAuthenticator` answers ZeroMQ from a thread of its own (so handshakes are answered whatever the
daemon's event loop is doing); `Keys.refusal` decides, after reading the authorized keys again if a role's
directory changed. A refused key is logged with its fingerprint and the peer's address, rate-limited per key
(`RefusalLog`), and the daemon serves on. The peer sees the refusal as a failed handshake (ZAP status 400):
`security.handshake_failure` tells it so. Start the handler before binding a socket of its domains.

ZeroMQ checks a key only during the handshake. To end what a key revoked since still holds, the daemon calls
`reread` every second or so (its credentials change, so what the key's peers send is refused), and the handler
keeps the keys it admitted on the monitor feed, whose subscribers send nothing: `revoked_monitors` names those
refused now (the scheduler then closes the feed's subscriptions: ZeroMQ cannot close one subscriber's
connection).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterable, List, Mapping, Optional, Set

from zmq.auth.thread import ThreadAuthenticator

from scaler.protocol.security import MONITOR_DOMAIN, Credential, Keys, RefusalLog, fingerprint

logger = logging.getLogger(__name__)

_WHERE = {MONITOR_DOMAIN: "monitor feed"}


class _Authenticator(ThreadAuthenticator):
    """pyzmq's ZAP handler thread, which notes each request's peer address for the log."""

    peer_address = ""

    async def handle_zap_message(self, msg: List[bytes]) -> None:
        self.peer_address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else ""
        await super().handle_zap_message(msg)


class ZapHandler:
    """Answers ZeroMQ's authentication requests for the sockets of ``domains`` of one context."""

    def __init__(self, context: Any, keys: Keys, daemon: str, domains: Iterable[str]) -> None:
        self._keys = keys
        self._daemon = daemon
        self._log = RefusalLog()
        self._authenticator = _Authenticator(context, log=logging.getLogger("zmq.auth"))
        self._monitors: Set[str] = set()  # the keys it admitted on the monitor feed (Z85 text)
        self._monitors_lock = threading.Lock()  # added to on the handler's thread, read on the daemon's
        # the generation of the authorized keys that `reread` last returned (or that the daemon started with)
        self._generation = keys.authorized.generation if keys.authorized is not None else 0
        for domain in domains:
            self._authenticator.configure_curve_callback(domain, self)

    def start(self) -> None:
        self._authenticator.start()

    def stop(self) -> None:
        self._authenticator.stop()

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's credentials provider: whether ``key`` (Z85) may finish its handshake on ``domain``."""
        keys = self._keys
        text = key.decode("ascii", "replace")
        try:
            if keys.authorized is not None:
                keys.authorized.refresh()
            why = keys.refusal(domain, text)
        except Exception:  # the handler must answer every request: refuse, and keep answering
            logger.exception(f"{self._daemon}: cannot check key {fingerprint(key)}; refused it")
            return False
        if why is None:
            if domain == MONITOR_DOMAIN:
                with self._monitors_lock:
                    self._monitors.add(text)
            return True
        suppressed = self._log.should_log(text, time.monotonic())
        if suppressed is not None:
            address = self._authenticator.peer_address or "an unknown address"
            more = f" ({suppressed} more refusals of this key since its last line)" if suppressed else ""
            logger.warning(
                f"{self._daemon}: refused key {fingerprint(key)} from {address} on its "
                f"{_WHERE.get(domain, 'address')}: {why}{more}"
            )
        return False

    def reread(self) -> Optional[Mapping[str, Credential]]:
        """Read the authorized keys again if their directories changed; every key's credential if they changed
        since the last call (read here or at a handshake), else None."""
        authorized = self._keys.authorized
        if authorized is None:
            return None
        authorized.refresh()
        if authorized.generation == self._generation:
            return None
        self._generation = authorized.generation
        return authorized.credentials

    def revoked_monitors(self) -> List[str]:
        """The keys admitted on the monitor feed that would be refused now (the authorized keys as last read);
        each is named once (admitted again, it counts again)."""
        with self._monitors_lock:
            gone = [key for key in self._monitors if self._keys.refusal(MONITOR_DOMAIN, key) is not None]
            self._monitors.difference_update(gone)
        return gone
