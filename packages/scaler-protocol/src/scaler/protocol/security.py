"""Authenticated, encrypted connections (CurveZMQ) and the roles of keys; the one place where every ZeroMQ
socket that crosses a process boundary is made (`new_socket`).

Keys work like ssh's. Each process has a key pair, a ZeroMQ certificate file (``NAME.key_secret``, written by
``scaler_keygen``). The scheduler and the object storage server share the *server* key pair; clients, workers
and monitors are given the server's public key (``server.key``) and their own pair. A daemon is given a
directory of authorized public keys with one subdirectory per role (`ROLE_DIRECTORIES`): a key is authorized
as the roles of the directories that hold it, and the server's own key as the scheduler (the scheduler's
connection to the storage server).

Who may connect is decided twice: ZeroMQ's ZAP handler (`scaler.protocol.zap`) lets no unknown key finish
the CurveZMQ handshake, and the daemon's sans-I/O core decides what an authenticated peer may do: the shell
hands it, with each message, the peer's `Credential` (its public key, as ZeroMQ reports it in the message
property ``User-Id``, and the roles of that key). Without keys every peer holds `OPEN`: any role may be
claimed, and the cores still check that a client touches only its own tasks and objects.

`SecurityConfig` is what a user gives (paths, flags, the ``[security]`` section of a config file, the
environment); `Keys` is what a process loaded from it, once, for its sockets.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import ipaddress
import logging
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Set

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from scaler.protocol.connection_liveness import watch_liveness
from scaler.protocol.errors import SecurityError
from scaler.protocol.message_limits import HANDSHAKE_SECONDS
from scaler.protocol.messages import PeerRole

logger = logging.getLogger(__name__)

KEY_FILE_VARIABLE = "SCALER_KEY_FILE"  # a Client's key pair when none is given (set for tasks by their worker)
SERVER_KEY_FILE_VARIABLE = "SCALER_SERVER_KEY_FILE"  # the server's public key, likewise
REREAD_SECONDS = 1.0  # a daemon reads its authorized keys again this often (and at each handshake)

# the subdirectory of a daemon's authorized keys directory that holds the public keys (*.key) of each role
ROLE_DIRECTORIES: Dict[PeerRole, str] = {
    PeerRole.CLIENT: "clients",
    PeerRole.WORKER: "workers",
    PeerRole.MONITOR: "monitors",
    PeerRole.SCHEDULER: "schedulers",
    PeerRole.WORKER_MANAGER: "worker_managers",
}

# ZAP domains of the sockets the daemons bind: the ZAP handler admits per domain
SCHEDULER_DOMAIN = "scaler.scheduler"  # clients and workers (the core checks the role of each Hello)
MONITOR_DOMAIN = "scaler.monitor"  # monitor keys only (and client keys with --monitor-clients)
STORAGE_DOMAIN = "scaler.storage"  # clients, workers, the scheduler (the core checks each Hello and request)

_ZAP_STATUS = {300: "it cannot check keys right now", 400: "it does not accept this key", 500: "its ZAP handler failed"}
_PROTOCOL_ERRORS = {getattr(zmq, name): name[len("PROTOCOL_ERROR_") :].lower() for name in dir(zmq)
                    if name.startswith("PROTOCOL_ERROR_")}  # fmt: skip


@dataclass(frozen=True)
class SecurityConfig:
    """What a process is given to secure its connections: paths and flags, no key material.

    ``key_file`` switches CurveZMQ on: it is this process's key pair (the ``NAME.key_secret`` file of
    ``scaler_keygen``). Clients, workers and monitors also need ``server_key_file``, the daemons' public key
    (the scheduler needs it only when its storage server has a key of its own); the scheduler and the storage
    server need ``authorized_keys``, the directory of the public keys they accept, by role.
    """

    key_file: Optional[str] = None
    server_key_file: Optional[str] = None
    authorized_keys: Optional[str] = None
    task_key_file: Optional[str] = None  # workers: the client key pair of the Clients their tasks make
    monitor_clients: bool = False  # the scheduler: client keys may subscribe to the monitor feed too
    insecure: bool = False  # the daemons: listen at an address other hosts reach, without keys

    @property
    def enabled(self) -> bool:
        return self.key_file is not None

    @classmethod
    def from_environment(cls, environment: Mapping[str, str] = os.environ) -> SecurityConfig:
        """A Client's default: ``SCALER_KEY_FILE`` and ``SCALER_SERVER_KEY_FILE`` (a worker sets both for the
        tasks it runs, from its ``task_key_file``); no security when they are unset."""
        return cls(
            key_file=environment.get(KEY_FILE_VARIABLE) or None,
            server_key_file=environment.get(SERVER_KEY_FILE_VARIABLE) or None,
        )

    def task_environment(self) -> Dict[str, str]:
        """The environment variables that give a worker's tasks their Client's keys."""
        if self.task_key_file is None or self.server_key_file is None:
            return {}
        return {
            KEY_FILE_VARIABLE: os.path.abspath(self.task_key_file),
            SERVER_KEY_FILE_VARIABLE: os.path.abspath(self.server_key_file),
        }

    def to_arguments(self) -> List[str]:
        """The command-line options that give this configuration back (paths only: never a key)."""
        arguments: List[str] = []
        for option in dataclasses.fields(self):
            value = getattr(self, option.name)
            flag = "--" + option.name.replace("_", "-")
            if value is True:
                arguments.append(flag)
            elif isinstance(value, str):
                arguments += [flag, os.path.abspath(value)]
        return arguments


NO_SECURITY = SecurityConfig()
SECURITY_OPTIONS = frozenset(option.name for option in dataclasses.fields(SecurityConfig))


# ----------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class KeyPair:
    public: bytes  # Z85, 40 characters
    secret: bytes


def fingerprint(public_key: Any) -> str:
    """``SHA256:...`` of a public key (Z85 text or bytes), as ssh shows keys: what logs and scaler_keygen print."""
    key = public_key.encode() if isinstance(public_key, str) else bytes(public_key)
    digest = hashlib.sha256(z85.decode(key)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def load_key_pair(path: str) -> KeyPair:
    """This process's key pair from a ZeroMQ secret certificate; refused when other users may read it."""
    if os.name == "posix":
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError as error:
            raise SecurityError(f"cannot read key file {path}: {error.strerror}") from None
        if mode & 0o077:
            raise SecurityError(
                f"secret key file {path} can be read by other users (mode {mode:04o}): run chmod 600 {path}"
            )
    public, secret = _read_certificate(path)
    if secret is None:
        raise SecurityError(
            f"{path} holds no secret key: give the NAME.key_secret file that scaler_keygen wrote, not NAME.key"
        )
    return KeyPair(public, secret)


def load_public_key(path: str) -> bytes:
    return _read_certificate(path)[0]


def _read_certificate(path: str) -> Any:
    from zmq.auth.certs import load_certificate

    try:
        public, secret = load_certificate(path)
    except (OSError, ValueError) as error:
        raise SecurityError(f"cannot read key file {path}: {error}") from None
    for key in (public, secret):
        if key is not None and (len(key) != 40 or _undecodable(key)):
            raise SecurityError(f"key file {path} holds a malformed key: expected 40 Z85 characters")
    return public, secret


def _undecodable(key: bytes) -> bool:
    try:
        z85.decode(key)
    except (ValueError, KeyError, IndexError):
        return True
    return False


@dataclass(frozen=True)
class Credential:
    """Who sent a message, as the daemon's shell tells its core: the peer's public key (Z85 text; "" without
    security) and the roles that key is authorized as (none: it is no longer authorized)."""

    key: str
    roles: FrozenSet[PeerRole]

    def name(self) -> str:
        return f"key {fingerprint(self.key)}" if self.key else "a peer without a key"


OPEN = Credential("", frozenset(PeerRole))  # without security: any role may be claimed


class RefusalLog:
    """Which refusals of a key to log: the first, then at most one per ``interval`` seconds, which tells how
    many were not logged since. Sans-I/O: the time is given. Holds at most ``capacity`` keys (then forgets
    them all: an attacker with many keys gets a few more lines, not unbounded memory)."""

    def __init__(self, interval: float = 60.0, capacity: int = 4096) -> None:
        self._interval = interval
        self._capacity = capacity
        self._keys: Dict[str, List[float]] = {}  # key -> [when last logged, refusals not logged since]

    def should_log(self, key: str, now: float) -> Optional[int]:
        """None: do not log this refusal; else log it, saying how many refusals of ``key`` were not logged."""
        entry = self._keys.get(key)
        if entry is None:
            if len(self._keys) >= self._capacity:
                self._keys.clear()
            self._keys[key] = [now, 0]
            return 0
        if now - entry[0] < self._interval:
            entry[1] += 1
            return None
        suppressed = int(entry[1])
        entry[0], entry[1] = now, 0
        return suppressed


class AuthorizedKeys:
    """The public keys a daemon accepts and their roles, read from one subdirectory per role
    (`ROLE_DIRECTORIES`) of ZeroMQ public certificates (``*.key``). `refresh` reads them again when a
    subdirectory changed (a key file added or removed), so keys are granted and revoked without a restart; the
    daemons call it at each handshake (their ZAP handler, on its thread) and every `REREAD_SECONDS` (their event
    loop), and each read that changed something is a new `generation`.

    As ssh's StrictModes, a directory or key file that another user could change (writable by its group or by
    others, or owned by another user than this process's or root) authorizes nothing: the daemon refuses to start
    with one, and one found later is logged as an error, its keys refused."""

    def __init__(self, directory: str, own_public: bytes) -> None:
        if not os.path.isdir(directory):
            raise SecurityError(f"authorized keys directory {directory} does not exist")
        self.directory = directory
        self._own = own_public.decode()
        self._lock = threading.Lock()  # the ZAP handler's thread and the event loop both read them again
        self._stamps: List[Any] = []
        self._credentials: Mapping[str, Credential] = {}
        self.generation = 0
        problems = self._read()
        if problems:
            raise SecurityError("; ".join(problems))

    def credential(self, key: str) -> Credential:
        """The credential of a key (Z85 text): no roles for an unknown one."""
        credential = self._credentials.get(key)
        return credential if credential is not None else Credential(key, frozenset())

    @property
    def credentials(self) -> Mapping[str, Credential]:
        """Every authorized key's credential, as last read (a new mapping at each read: never changed after)."""
        return self._credentials

    def count(self, role: PeerRole) -> int:
        return sum(role in credential.roles for credential in self._credentials.values())

    def refresh(self) -> bool:
        """Read the keys again if a directory changed (its files, its mode, its owner); whether one did."""
        with self._lock:
            if self._directories_stamps() == self._stamps:
                return False
            for problem in self._read():
                logger.error(f"authorized keys: {problem}")
            return True

    def _directories_stamps(self) -> List[Any]:
        return [_stamp(self.directory), *(_stamp(os.path.join(self.directory, n)) for n in ROLE_DIRECTORIES.values())]

    def _read(self) -> List[str]:
        """Read every key (called with the lock held, or before any other thread has the object); what refused
        some."""
        self._stamps = self._directories_stamps()
        roles: Dict[str, Set[PeerRole]] = {self._own: {PeerRole.SCHEDULER}}  # the server key: the scheduler
        problems: List[str] = []
        unsafe = _unsafe(self.directory)
        if unsafe is not None:
            problems.append(f"authorized keys directory {unsafe}: no key in it is authorized")
        else:
            for role, name in ROLE_DIRECTORIES.items():
                for key in _public_keys(os.path.join(self.directory, name), problems):
                    roles.setdefault(key, set()).add(role)
        self._credentials = {key: Credential(key, frozenset(held)) for key, held in roles.items()}
        self.generation += 1
        return problems


def _stamp(path: str) -> Any:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_ino, status.st_mtime_ns, status.st_mode, status.st_uid)


def _unsafe(path: str) -> Optional[str]:
    """Why another user could change ``path`` (as ssh's StrictModes judges it), naming it; None: no one could."""
    if os.name != "posix":
        return None
    try:
        status = os.stat(path)
    except OSError as error:
        return f"{path} cannot be read ({error.strerror})"
    mode = stat.S_IMODE(status.st_mode)
    if mode & 0o022:
        writers = "every user" if mode & 0o002 else "its group"
        return f"{path} can be written by {writers} (mode {mode:04o}): run chmod go-w {path}"
    if status.st_uid not in (0, os.geteuid()):
        return f"{path} belongs to another user (uid {status.st_uid}): give it to this user or to root"
    return None


def _public_keys(directory: str, problems: List[str]) -> List[str]:
    """The public keys of the ``*.key`` files of ``directory``; a file or directory another user could change
    gives none, and says why in ``problems``."""
    if not os.path.isdir(directory):
        return []
    unsafe = _unsafe(directory)
    if unsafe is not None:
        problems.append(f"authorized keys directory {unsafe}: no key in it is authorized")
        return []
    keys = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".key"):
            continue
        path = os.path.join(directory, name)
        unsafe = _unsafe(path)
        if unsafe is not None:
            problems.append(f"authorized key file {unsafe}: its key is not authorized")
            continue
        try:
            keys.append(load_public_key(path).decode())
        except SecurityError as error:
            logger.warning(f"ignored authorized key file: {error}")
    return keys


@dataclass(frozen=True)
class Keys:
    """The keys a process's sockets use, loaded once. `NO_KEYS`: plain ZeroMQ."""

    own: Optional[KeyPair] = None
    server_public: Optional[bytes] = None  # the daemons' public key, for the sockets this process connects
    authorized: Optional[AuthorizedKeys] = None  # a daemon's: whom it accepts
    monitor_clients: bool = False

    @property
    def secure(self) -> bool:
        return self.own is not None

    def credential(self, user_id: str) -> Credential:
        """The credential of the peer ZeroMQ authenticated as ``user_id`` (its public key); `OPEN` without
        keys."""
        if self.authorized is None:
            return OPEN
        return self.authorized.credential(user_id)

    def refusal(self, domain: str, key: str) -> Optional[str]:
        """Why the ZAP handler refuses ``key`` on a socket of ``domain``; None: it may finish the handshake
        (on the scheduler's and storage server's own sockets the core then decides what it may do)."""
        roles = self.credential(key).roles
        if not roles:
            return "unknown key"
        if domain != MONITOR_DOMAIN or PeerRole.MONITOR in roles:
            return None
        if self.monitor_clients and PeerRole.CLIENT in roles:
            return None
        return "not a monitor key" + ("" if self.monitor_clients else " (client keys need --monitor-clients)")


NO_KEYS = Keys()


def peer_keys(config: SecurityConfig) -> Keys:
    """The keys of a process that connects to the daemons (client, worker, monitor); `NO_KEYS` without
    ``key_file``."""
    if config.key_file is None:
        return NO_KEYS
    if config.server_key_file is None:
        raise SecurityError(
            f"a key pair ({config.key_file}) needs the server's public key too: give server_key_file "
            "(--server-key-file), the server.key file of the scheduler's administrator"
        )
    return Keys(own=load_key_pair(config.key_file), server_public=load_public_key(config.server_key_file))


def server_keys(config: SecurityConfig) -> Keys:
    """The keys of the scheduler or the storage server; `NO_KEYS` without ``key_file``."""
    if config.key_file is None:
        if config.authorized_keys is not None:
            raise SecurityError("authorized keys were given without the server's key pair (--key-file)")
        return NO_KEYS
    if config.authorized_keys is None:
        raise SecurityError(
            f"the server's key pair ({config.key_file}) needs a directory of authorized keys too "
            "(--authorized-keys DIR, with clients/, workers/ and monitors/ subdirectories of public keys)"
        )
    own = load_key_pair(config.key_file)
    server_public = load_public_key(config.server_key_file) if config.server_key_file else own.public
    authorized = AuthorizedKeys(config.authorized_keys, own.public)
    for role in (PeerRole.CLIENT, PeerRole.WORKER):
        if authorized.count(role) == 0:
            directory = os.path.join(config.authorized_keys, ROLE_DIRECTORIES[role])
            logger.warning(f"no {role.name.lower()} key is authorized: {directory} holds no *.key file")
    return Keys(own, server_public, authorized, config.monitor_clients)


# ----------------------------------------------------------------------------- sockets


def new_socket(
    context: Any, socket_type: int, keys: Keys, domain: Optional[str] = None, max_message_size: Optional[int] = None
) -> Any:
    """A socket of ``context`` with linger 0, the TCP options that find a vanished host (`connection_liveness`) and
    a bounded handshake (`message_limits.HANDSHAKE_SECONDS`), secured by ``keys``: the CurveZMQ server of
    ``domain`` (a socket that binds, authorized through the ZAP handler), or a CurveZMQ client of the server key
    (``domain`` None). Without keys, a plain socket. A socket that binds is given ``max_message_size``: a peer that
    sends or announces a larger frame is disconnected before it is buffered, authenticated or not
    (docs/protocol.md, "Message size limits")."""
    socket = context.socket(socket_type)
    socket.setsockopt(zmq.LINGER, 0)
    watch_liveness(socket)  # a vanished host's connections are found dead in seconds
    socket.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_SECONDS * 1000))
    if max_message_size is not None:
        socket.setsockopt(zmq.MAXMSGSIZE, max_message_size)
    own = keys.own
    if own is None:
        return socket
    socket.curve_secretkey = own.secret
    socket.curve_publickey = own.public
    if domain is not None:
        socket.curve_server = True
        socket.zap_domain = domain.encode()
    else:
        socket.curve_serverkey = keys.server_public
    return socket


def handshake_failure(frames: List[Any], keys: Keys, peer: str) -> Optional[str]:
    """Why the handshake with ``peer`` (e.g. "the scheduler at tcp://...") failed, from a monitor event; None
    for any other event."""
    event = parse_monitor_message(frames)
    kind, value = event["event"], event["value"]
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        own = f"key {fingerprint(keys.own.public)}" if keys.own is not None else "this process's key"
        why = _ZAP_STATUS.get(value, f"ZAP status {value}")
        return (
            f"{peer} refused {own}: {why} (unknown or revoked, or on a monitor feed not a monitor key). Its "
            "administrator authorizes a key by copying its public file (NAME.key) into the directory of its role "
            "(docs/security.md)"
        )
    if kind not in (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL):
        return None
    mismatch = kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
    detail = _PROTOCOL_ERRORS.get(value, str(value)) if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL else str(value)
    if keys.own is None:
        if not mismatch:  # not over keys: what answered closed the connection (e.g. a socket of another kind)
            return None
        return (
            f"{peer} requires CurveZMQ keys: give this process its key pair and the server's public key "
            f"(--key-file and --server-key-file, Client(security=SecurityConfig(...)); docs/security.md) "
            f"(ZeroMQ: {detail})"
        )
    if mismatch:
        return f"the CurveZMQ handshake with {peer} failed: it runs without keys (ZeroMQ: {detail})"
    # a server that cannot decrypt our greeting, one without keys and a socket of another kind may all just close
    return (
        f"the CurveZMQ handshake with {peer} failed: either {fingerprint(keys.server_public)} is not its public "
        f"key (--server-key-file), or it runs without keys, or it is not the peer wanted (ZeroMQ: {detail})"
    )


# ----------------------------------------------------------------------------- exposure


def is_local_address(address: str) -> bool:
    """Whether only this host can reach ``address``: ipc://, or TCP on a loopback address (127.0.0.0/8, ::1,
    localhost). ``tcp://*``, 0.0.0.0 and host or interface names are not."""
    if address.startswith(("ipc://", "inproc://")):
        return True
    return is_loopback_host(address[len("tcp://") :].rpartition(":")[0].strip("[]"))


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (an IP address or a name) is this host's loopback: 127.0.0.0/8, ::1, localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(program: str, addresses: Iterable[str], config: SecurityConfig) -> None:
    """Refuse (`SecurityError`) to listen where other hosts reach without keys, unless ``insecure``."""
    if config.enabled or config.insecure:
        return
    for address in addresses:
        if not is_local_address(address):
            raise SecurityError(
                f"{program} would listen at {address}, which other hosts can reach, without keys: anyone who "
                "reaches it could run code on the workers and read every task's data. Give it keys "
                "(--key-file and --authorized-keys, made with scaler_keygen; docs/security.md), or pass "
                "--insecure to run without authentication on a network you trust"
            )


def check_http_exposure(program: str, served: str, host: str, insecure: bool, protection: str = "") -> None:
    """Refuse (`SecurityError`) to serve ``served`` over plain HTTP at ``host`` where other hosts reach it without
    authentication (``protection``: how the program could authenticate its requests, e.g. a token), unless
    ``insecure``: the safe-by-default rule of `check_exposure`, for HTTP, which has no keys."""
    if insecure or is_loopback_host(host):
        return
    remedy = f"{protection}keep it on 127.0.0.1 and reach it through an SSH tunnel or an HTTPS reverse proxy"
    raise SecurityError(
        f"{program} would serve {served} at {host or 'every address'}, which other hosts can reach, over plain "
        "HTTP without authentication: anyone who reaches it reads the cluster's state (the IDs of clients and "
        f"workers, their hosts and processes, the functions they run). {remedy[0].upper()}{remedy[1:]}, or pass "
        "--insecure to serve it on a network you trust"
    )


# ----------------------------------------------------------------------------- command lines


def add_security_arguments(
    parser: argparse.ArgumentParser, *, serves: bool = False, connects: bool = True, scheduler: bool = False,
    worker: bool = False,
) -> None:  # fmt: skip
    """The security options of a program (also read from the ``[security]`` section of its --config file)."""
    group = parser.add_argument_group("security", "CurveZMQ keys (docs/security.md); also [security] of --config")
    group.add_argument(
        "--key-file", metavar="FILE", help="this process's key pair: the NAME.key_secret file of scaler_keygen"
    )
    if connects:
        group.add_argument(
            "--server-key-file", metavar="FILE",
            help="the public key of the scheduler and object storage server (their server.key)"
            + ("; only when the storage server's key is not this scheduler's" if scheduler else ""),
        )  # fmt: skip
    if serves:
        group.add_argument(
            "--authorized-keys", metavar="DIR",
            help="the public keys (*.key) allowed to connect, in one subdirectory per role: "
            + ", ".join(f"{name}/" for name in ROLE_DIRECTORIES.values()),
        )  # fmt: skip
        group.add_argument(
            "--insecure", action="store_true",
            help="listen where other hosts reach without authentication: at an address without keys, at a "
            "--metrics-host other than loopback (only on a network you trust)",
        )  # fmt: skip
    if scheduler:
        group.add_argument(
            "--monitor-clients", action="store_true", help="client keys may subscribe to the monitor feed too"
        )
    if worker:
        group.add_argument(
            "--task-key-file", metavar="FILE",
            help="the client key pair that tasks use for their own Client (nested tasks)",
        )  # fmt: skip


def security_from_arguments(args: Any) -> SecurityConfig:
    return SecurityConfig(**{name: getattr(args, name) for name in SECURITY_OPTIONS if hasattr(args, name)})
