"""``scaler_keygen``: write CurveZMQ key pairs in ZeroMQ's certificate format, as ssh-keygen writes ssh keys.

``scaler_keygen NAME`` writes ``NAME.key`` (the public key: give it to whoever authorizes it) and
``NAME.key_secret`` (the key pair: it stays on its host, readable by its owner only) and prints the key's
fingerprint, which the daemons log when they refuse it. ``--fingerprint FILE...`` prints the fingerprints of
existing key files. `write_cluster_keys` writes every key of a cluster on one host, with its authorized keys
directory (``SchedulerClusterCombo(security=True)`` and the tests use it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from scaler.protocol.errors import SecurityError
from scaler.protocol.messages import PeerRole
from scaler.protocol.security import ROLE_DIRECTORIES, SecurityConfig, fingerprint, load_public_key

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"


def write_key_pair(directory: str, name: str, force: bool = False) -> Tuple[str, str]:
    """Write ``NAME.key`` (mode 0644) and ``NAME.key_secret`` (0600) in ``directory``; return their paths.

    The files are made in a private directory first, so the secret key is never readable by others; an
    existing pair is replaced only with ``force``."""
    from zmq.auth.certs import create_certificates

    if not name or os.sep in name or name.startswith("."):
        raise SecurityError(f"invalid key name {name!r}: a file name without a directory, not starting with a dot")
    public_path = os.path.join(directory, name + PUBLIC_SUFFIX)
    secret_path = os.path.join(directory, name + SECRET_SUFFIX)
    if not force:
        for path in (public_path, secret_path):
            if os.path.exists(path):
                raise SecurityError(f"{path} exists: choose another name, or pass --force to replace it")
    os.makedirs(directory, exist_ok=True)
    private = tempfile.mkdtemp(prefix=".scaler-keygen-", dir=directory)  # mode 0700
    try:
        made_public, made_secret = create_certificates(private, name)
        os.chmod(made_secret, 0o600)
        os.chmod(made_public, 0o644)
        os.replace(made_secret, secret_path)
        os.replace(made_public, public_path)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return public_path, secret_path


@dataclass(frozen=True)
class ClusterKeys:
    """Every key of a cluster on one host: what its daemons, clients, workers and monitors are given."""

    directory: str
    server: SecurityConfig  # the scheduler and the storage server
    client: SecurityConfig
    worker: SecurityConfig  # its tasks' Clients use the client key
    monitor: SecurityConfig
    manager: SecurityConfig  # a worker manager's own key pair (its workers use the worker's)


def write_cluster_keys(directory: str) -> ClusterKeys:
    """Key pairs for the server, a client, a worker, a monitor and a worker manager in ``directory``, and the
    authorized keys directory ``directory/authorized`` that holds the public keys of the last four."""
    server_public, server_secret = write_key_pair(directory, "server")
    authorized = os.path.join(directory, "authorized")
    pairs = {}
    roles = (
        ("client", PeerRole.CLIENT), ("worker", PeerRole.WORKER), ("monitor", PeerRole.MONITOR),
        ("manager", PeerRole.WORKER_MANAGER),
    )  # fmt: skip
    for name, role in roles:
        public, secret = write_key_pair(directory, name)
        role_directory = os.path.join(authorized, ROLE_DIRECTORIES[role])
        os.makedirs(role_directory, exist_ok=True)
        os.chmod(role_directory, 0o755)  # whatever the umask: the daemons refuse what others could write to
        shutil.copy(public, os.path.join(role_directory, name + PUBLIC_SUFFIX))  # its mode too: 0644
        pairs[name] = secret
    os.chmod(authorized, 0o755)
    return ClusterKeys(
        directory=directory,
        server=SecurityConfig(key_file=server_secret, authorized_keys=authorized),
        client=SecurityConfig(key_file=pairs["client"], server_key_file=server_public),
        worker=SecurityConfig(key_file=pairs["worker"], server_key_file=server_public, task_key_file=pairs["client"]),
        monitor=SecurityConfig(key_file=pairs["monitor"], server_key_file=server_public),
        manager=SecurityConfig(key_file=pairs["manager"], server_key_file=server_public),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_keygen",
        description="Write CurveZMQ key pairs for Scaler: NAME.key (public: give it to whoever authorizes it) and "
        "NAME.key_secret (yours alone). docs/security.md says where each goes.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="the name of each key pair to write")
    parser.add_argument("--directory", "-d", default=".", help="where to write them (default: here)")
    parser.add_argument("--force", action="store_true", help="replace existing key files of these names")
    parser.add_argument(
        "--fingerprint", nargs="+", metavar="FILE", default=None, help="print the fingerprints of these key files"
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.names and not args.fingerprint:
        parser.error("give the NAME of a key pair to write, or --fingerprint FILE")
    try:
        for path in args.fingerprint or ():
            print(f"{fingerprint(load_public_key(path))}  {path}")
        for name in args.names:
            public, secret = write_key_pair(args.directory, name, args.force)
            print(f"{fingerprint(load_public_key(public))}  {public} (public), {secret} (secret: keep it here)")
    except (SecurityError, OSError) as error:
        parser.exit(1, f"scaler_keygen: error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
