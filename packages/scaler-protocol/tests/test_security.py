"""Keys, their roles, the ZAP handler and secured sockets (real ZeroMQ sockets on loopback TCP)."""

from __future__ import annotations

import argparse
import errno
import os
import re
import stat
import struct
from typing import Any, Dict, List, Optional

import pytest
import zmq

from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.command_line import parse_arguments
from scaler.protocol.errors import SecurityError
from scaler.protocol.keygen import ClusterKeys, main, write_cluster_keys, write_key_pair
from scaler.protocol.messages import PeerRole
from scaler.protocol.security import (
    MONITOR_DOMAIN,
    NO_KEYS,
    OPEN,
    SCHEDULER_DOMAIN,
    AuthorizedKeys,
    Keys,
    RefusalLog,
    SecurityConfig,
    add_security_arguments,
    check_exposure,
    check_http_exposure,
    fingerprint,
    handshake_failure,
    is_local_address,
    load_key_pair,
    load_public_key,
    new_socket,
    peer_keys,
    security_from_arguments,
    server_keys,
)
from scaler.protocol.zap import ZapHandler

WAIT_MS = 10_000


@pytest.fixture
def cluster_keys(tmp_path) -> ClusterKeys:
    return write_cluster_keys(str(tmp_path / "keys"))


# --- key files ---------------------------------------------------------------------------------------------


def test_keygen_writes_a_private_secret_and_a_public_key_and_never_overwrites_unasked(tmp_path):
    public, secret = write_key_pair(str(tmp_path), "alice")
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(public).st_mode) == 0o644
    pair = load_key_pair(secret)
    assert load_public_key(public) == pair.public and len(pair.secret) == 40
    assert sorted(os.listdir(tmp_path)) == ["alice.key", "alice.key_secret"]  # no temporary directory left
    with pytest.raises(SecurityError, match="exists"):
        write_key_pair(str(tmp_path), "alice")
    write_key_pair(str(tmp_path), "alice", force=True)
    assert load_key_pair(secret).public != pair.public


def test_a_secret_key_readable_by_others_or_a_public_file_is_not_a_key_pair(tmp_path):
    public, secret = write_key_pair(str(tmp_path), "bob")
    with pytest.raises(SecurityError, match="holds no secret key"):
        os.chmod(public, 0o600)
        load_key_pair(public)
    os.chmod(secret, 0o640)
    with pytest.raises(SecurityError, match="chmod 600"):
        load_key_pair(secret)
    with pytest.raises(SecurityError, match="cannot read key file"):
        load_key_pair(str(tmp_path / "missing.key_secret"))
    (tmp_path / "bad.key").write_text('curve\n    public-key = "tooshort"\n')
    with pytest.raises(SecurityError, match="malformed key"):
        load_public_key(str(tmp_path / "bad.key"))


def test_fingerprints_are_sha256_of_the_key_as_ssh_shows_them(tmp_path, capsys):
    public, secret = write_key_pair(str(tmp_path), "carol")
    shown = fingerprint(load_public_key(public))
    assert shown.startswith("SHA256:") and len(shown) == len("SHA256:") + 43
    assert fingerprint(load_public_key(public).decode()) == shown
    assert main(["--fingerprint", public, secret]) == 0
    assert capsys.readouterr().out.split() == [shown, public, shown, secret]
    assert main(["--directory", str(tmp_path), "dave"]) == 0
    assert "dave.key_secret (secret" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([])


# --- whom a daemon accepts ----------------------------------------------------------------------------------


def test_authorized_keys_have_the_roles_of_their_directories_and_the_server_key_is_the_scheduler(cluster_keys):
    keys = server_keys(cluster_keys.server)
    for config, role in ((cluster_keys.client, PeerRole.CLIENT), (cluster_keys.worker, PeerRole.WORKER),
                         (cluster_keys.monitor, PeerRole.MONITOR),
                         (cluster_keys.manager, PeerRole.WORKER_MANAGER)):  # fmt: skip
        own = load_key_pair(config.key_file).public.decode()
        assert keys.credential(own).roles == {role}
    assert keys.credential(keys.own.public.decode()).roles == {PeerRole.SCHEDULER}
    assert keys.credential("x" * 40).roles == frozenset()
    assert NO_KEYS.credential("anything") is OPEN


def test_keys_added_or_removed_count_once_the_directories_are_read_again(cluster_keys, tmp_path):
    authorized = AuthorizedKeys(cluster_keys.server.authorized_keys, b"0" * 40)
    public, _ = write_key_pair(str(tmp_path), "eve")
    key = load_public_key(public).decode()
    assert authorized.credential(key).roles == frozenset()
    assert authorized.refresh() is False  # nothing changed
    clients = os.path.join(cluster_keys.server.authorized_keys, "clients")
    os.rename(public, os.path.join(clients, "eve.key"))
    assert authorized.refresh() is True and authorized.credential(key).roles == {PeerRole.CLIENT}
    os.remove(os.path.join(clients, "eve.key"))
    authorized.refresh()
    assert authorized.credential(key).roles == frozenset()


def test_keys_that_another_user_could_change_are_refused_as_ssh_refuses_them(cluster_keys, monkeypatch, caplog):
    authorized = cluster_keys.server.authorized_keys
    clients = os.path.join(authorized, "clients")
    client_file = os.path.join(clients, "client.key")
    for path, mode, says in ((authorized, 0o777, "every user (mode 0777)"), (clients, 0o775, "its group (mode 0775)"),
                             (client_file, 0o666, "every user (mode 0666)")):  # fmt: skip
        os.chmod(path, mode)
        with pytest.raises(SecurityError, match=f"{path} can be written by {re.escape(says)}: run chmod go-w"):
            AuthorizedKeys(authorized, b"0" * 40)
        os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
    if os.geteuid() == 0:
        os.chown(client_file, 12345, -1)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # the daemon runs as another user than the file's
    with pytest.raises(SecurityError, match=f"{client_file} belongs to another user"):
        AuthorizedKeys(authorized, b"0" * 40)
    monkeypatch.undo()
    os.chown(client_file, os.getuid(), -1)

    keys = AuthorizedKeys(authorized, b"0" * 40)  # while it runs: the keys of what became unsafe are refused
    client = load_key_pair(cluster_keys.client.key_file).public.decode()
    worker = load_key_pair(cluster_keys.worker.key_file).public.decode()
    assert keys.credential(client).roles == {PeerRole.CLIENT}
    os.chmod(clients, 0o777)  # a chmod changes no file: the directory's mode is looked at too
    assert keys.refresh() is True
    assert keys.credential(client).roles == frozenset() and keys.credential(worker).roles == {PeerRole.WORKER}
    assert any(f"{clients} can be written by every user" in record.getMessage() for record in caplog.records)
    os.chmod(clients, 0o755)
    assert keys.refresh() is True and keys.credential(client).roles == {PeerRole.CLIENT}


def test_the_monitor_feed_admits_monitor_keys_and_client_keys_only_when_told(cluster_keys):
    keys = server_keys(cluster_keys.server)
    client = load_key_pair(cluster_keys.client.key_file).public.decode()
    monitor = load_key_pair(cluster_keys.monitor.key_file).public.decode()
    assert keys.refusal(MONITOR_DOMAIN, monitor) is None
    assert "not a monitor key" in keys.refusal(MONITOR_DOMAIN, client)
    assert keys.refusal(SCHEDULER_DOMAIN, client) is None  # the core decides what a known key may do
    assert keys.refusal(SCHEDULER_DOMAIN, "y" * 40) == "unknown key"
    with_clients = server_keys(SecurityConfig(**{**cluster_keys.server.__dict__, "monitor_clients": True}))
    assert with_clients.refusal(MONITOR_DOMAIN, client) is None


def test_incomplete_configurations_say_what_is_missing(cluster_keys):
    with pytest.raises(SecurityError, match="server's public key"):
        peer_keys(SecurityConfig(key_file=cluster_keys.client.key_file))
    with pytest.raises(SecurityError, match="authorized keys too"):
        server_keys(SecurityConfig(key_file=cluster_keys.server.key_file))
    with pytest.raises(SecurityError, match="without the server's key pair"):
        server_keys(SecurityConfig(authorized_keys=cluster_keys.server.authorized_keys))
    with pytest.raises(SecurityError, match="does not exist"):
        server_keys(SecurityConfig(key_file=cluster_keys.server.key_file, authorized_keys="/nonexistent/keys"))
    assert peer_keys(SecurityConfig()) is NO_KEYS and server_keys(SecurityConfig()) is NO_KEYS


def test_refusals_of_a_key_are_logged_once_then_at_most_once_per_interval():
    log = RefusalLog(interval=60.0, capacity=2)
    assert log.should_log("k", 0.0) == 0
    assert log.should_log("k", 1.0) is None and log.should_log("k", 2.0) is None
    assert log.should_log("k", 61.0) == 2
    assert log.should_log("other", 61.0) == 0
    assert log.should_log("third", 61.0) == 0  # over capacity: forgets, logs again
    assert log.should_log("k", 62.0) == 0


# --- where a daemon may listen without keys -----------------------------------------------------------------


@pytest.mark.parametrize(
    "address, local",
    [
        ("tcp://127.0.0.1:1", True),
        ("tcp://127.3.4.5:1", True),
        ("tcp://localhost:1", True),
        ("tcp://[::1]:1", True),
        ("ipc:///tmp/scaler", True),
        ("tcp://0.0.0.0:1", False),
        ("tcp://*:1", False),
        ("tcp://10.1.2.3:1", False),
        ("tcp://node7:1", False),
        ("tcp://eth0:1", False),
    ],
)
def test_only_loopback_and_ipc_are_local(address, local):
    assert is_local_address(address) is local


def test_a_daemon_reachable_from_other_hosts_needs_keys_or_insecure():
    with pytest.raises(SecurityError, match="other hosts can reach.*--insecure"):
        check_exposure("the scheduler", ["tcp://127.0.0.1:1", "tcp://0.0.0.0:2"], SecurityConfig())
    check_exposure("the scheduler", ["tcp://0.0.0.0:2"], SecurityConfig(insecure=True))
    check_exposure("the scheduler", ["tcp://0.0.0.0:2"], SecurityConfig(key_file="server.key_secret"))
    check_exposure("the scheduler", ["tcp://127.0.0.1:1", "ipc:///tmp/x"], SecurityConfig())


@pytest.mark.parametrize("host", ["0.0.0.0", "", "10.1.2.3", "sched.example.com", "::"])
def test_plain_http_reachable_from_other_hosts_needs_insecure_whatever_the_keys(host):
    with pytest.raises(SecurityError, match="other hosts can reach, over plain HTTP.*--insecure") as refused:
        check_http_exposure("the scheduler", "its Prometheus metrics", host, insecure=False)
    assert "the scheduler would serve its Prometheus metrics at " in str(refused.value)
    check_http_exposure("the scheduler", "its Prometheus metrics", host, insecure=True)
    for local in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        check_http_exposure("the scheduler", "its Prometheus metrics", local, insecure=False)


# --- configuration: flags, the [security] section, the environment ------------------------------------------


def _parser(**kinds: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scaler_thing")
    parser.add_argument("--config")
    add_security_arguments(parser, **kinds)
    return parser


def test_flags_give_a_configuration_and_a_configuration_gives_its_flags_back():
    parser = _parser(serves=True, scheduler=True)
    args = parser.parse_args(["--key-file", "s.key_secret", "--authorized-keys", "auth", "--monitor-clients"])
    config = security_from_arguments(args)
    assert config == SecurityConfig(key_file="s.key_secret", authorized_keys="auth", monitor_clients=True)
    assert security_from_arguments(parser.parse_args(config.to_arguments())) == SecurityConfig(
        key_file=os.path.abspath("s.key_secret"), authorized_keys=os.path.abspath("auth"), monitor_clients=True
    )
    with pytest.raises(SystemExit):
        _parser(worker=True).parse_args(["--authorized-keys", "auth"])  # a worker authorizes no one


def test_the_security_section_serves_every_program_with_the_options_it_has(tmp_path):
    path = tmp_path / "scaler.toml"
    path.write_text('[security]\nkey-file = "k.key_secret"\nauthorized_keys = "auth"\n[thing]\n')
    worker = parse_arguments(_parser(worker=True), "thing", ["--config", str(path)])
    assert security_from_arguments(worker) == SecurityConfig(key_file="k.key_secret")
    server = parse_arguments(_parser(serves=True), "thing", ["--config", str(path), "--key-file", "cli.key_secret"])
    assert security_from_arguments(server) == SecurityConfig(key_file="cli.key_secret", authorized_keys="auth")
    path.write_text('[security]\nkey_fiel = "typo"\n')
    with pytest.raises(SystemExit):
        parse_arguments(_parser(worker=True), "thing", ["--config", str(path)])


def test_a_client_reads_its_keys_from_the_environment_a_worker_sets_for_its_tasks():
    worker = SecurityConfig(key_file="w.key_secret", server_key_file="server.key", task_key_file="t.key_secret")
    environment: Dict[str, str] = worker.task_environment()
    assert SecurityConfig.from_environment(environment) == SecurityConfig(
        key_file=os.path.abspath("t.key_secret"), server_key_file=os.path.abspath("server.key")
    )
    assert SecurityConfig(key_file="w.key_secret").task_environment() == {}
    assert SecurityConfig.from_environment({}) == SecurityConfig()


# --- real sockets: the ZAP handler and what the connecting side is told ------------------------------------


class _Server:
    """A ROUTER secured by the server keys, with its ZAP handler."""

    def __init__(self, keys: Keys, domain: str = SCHEDULER_DOMAIN) -> None:
        self.context = zmq.Context()
        self.zap = ZapHandler(self.context, keys, "TestServer", [SCHEDULER_DOMAIN, MONITOR_DOMAIN])
        self.zap.start()
        self.socket = new_socket(self.context, zmq.ROUTER, keys, domain)
        self.address = f"tcp://127.0.0.1:{free_tcp_port()}"
        self.socket.bind(self.address)

    def close(self) -> None:
        self.socket.close(linger=0)
        self.zap.stop()
        self.context.term()


def _connect(server: _Server, config: Optional[SecurityConfig]) -> List[Any]:
    """Connect as ``config`` says and send b"hi": [the User-Id the server saw] or [the failure text]."""
    keys = peer_keys(config) if config is not None else NO_KEYS
    context = zmq.Context()
    socket = new_socket(context, zmq.DEALER, keys)
    watch = socket.get_monitor_socket()  # handshake_failure picks the failures among its events
    try:
        socket.connect(server.address)
        socket.setsockopt(zmq.SNDTIMEO, WAIT_MS)
        try:
            socket.send(b"hi")
        except zmq.Again:
            pass  # no connection to queue it on: the handshake failed before the send (its event is in `watch`)
        poller = zmq.Poller()
        poller.register(server.socket, zmq.POLLIN)
        poller.register(watch, zmq.POLLIN)
        while True:
            ready = dict(poller.poll(WAIT_MS))
            assert ready, "neither a message nor a handshake failure"
            if server.socket in ready:
                frames = server.socket.recv_multipart(copy=False)
                return ["received", frames[1].get("User-Id")]
            failure = handshake_failure(watch.recv_multipart(), keys, "the test server")
            if failure is not None:
                return ["failed", failure]
    finally:
        socket.disable_monitor()
        watch.close(linger=0)
        socket.close(linger=0)
        context.term()


@pytest.fixture
def secure_server(cluster_keys):
    server = _Server(server_keys(cluster_keys.server))
    yield server
    server.close()


def test_an_authorized_key_connects_and_the_server_sees_it_as_user_id(secure_server, cluster_keys):
    outcome = _connect(secure_server, cluster_keys.worker)
    assert outcome == ["received", load_key_pair(cluster_keys.worker.key_file).public.decode()]


def test_an_unknown_key_is_refused_and_told_so_and_the_refusal_is_logged(secure_server, cluster_keys, tmp_path, caplog):
    _, secret = write_key_pair(str(tmp_path), "stranger")
    stranger = SecurityConfig(key_file=secret, server_key_file=cluster_keys.client.server_key_file)
    outcome = _connect(secure_server, stranger)
    assert outcome[0] == "failed" and "does not accept this key" in outcome[1]
    shown = fingerprint(load_key_pair(secret).public)
    assert shown in outcome[1]
    assert any(shown in record.getMessage() and "127.0.0.1" in record.getMessage() for record in caplog.records)
    assert _connect(secure_server, cluster_keys.client)[0] == "received"  # it serves on


def test_a_peer_without_keys_is_told_keys_are_required(secure_server):
    outcome = _connect(secure_server, None)
    assert outcome[0] == "failed" and "requires CurveZMQ keys" in outcome[1]


def test_a_wrong_server_key_is_named(secure_server, cluster_keys, tmp_path):
    wrong, _ = write_key_pair(str(tmp_path), "not-the-server")
    config = SecurityConfig(key_file=cluster_keys.client.key_file, server_key_file=wrong)
    outcome = _connect(secure_server, config)
    assert outcome[0] == "failed" and fingerprint(load_public_key(wrong)) in outcome[1]


def test_a_peer_with_keys_is_told_when_the_server_has_none(cluster_keys):
    server = _Server(NO_KEYS)
    try:
        outcome = _connect(server, cluster_keys.client)
    finally:
        server.close()
    assert outcome[0] == "failed" and "it runs without keys" in outcome[1]


def test_a_connection_closed_during_the_handshake_is_not_blamed_on_keys_when_none_are_involved(cluster_keys):
    # what a client's DEALER sees at a scheduler's monitor port (an XPUB) on a busy machine: the XPUB closes the
    # connection when it reads the DEALER's socket type, and the DEALER's next write fails (EPIPE, no detail)
    closed = [struct.pack("=hi", zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, errno.EPIPE), b"tcp://127.0.0.1:2347"]
    assert handshake_failure(closed, NO_KEYS, "the scheduler") is None
    with_keys = peer_keys(cluster_keys.client)
    assert "or it is not the peer wanted" in handshake_failure(closed, with_keys, "the scheduler")


def test_the_monitor_domain_refuses_a_client_key(cluster_keys):
    server = _Server(server_keys(cluster_keys.server), MONITOR_DOMAIN)
    try:
        assert _connect(server, cluster_keys.client)[0] == "failed"
        assert _connect(server, cluster_keys.monitor)[0] == "received"
    finally:
        server.close()


def test_the_zap_handler_refuses_a_key_it_cannot_check_and_answers_on(caplog):
    class Broken:
        authorized = None

        def refusal(self, domain: str, key: str) -> Optional[str]:
            raise OSError("the authorized keys directory cannot be read")

    context = zmq.Context()
    try:
        handler = ZapHandler(context, Broken(), "TestServer", [SCHEDULER_DOMAIN])  # type: ignore[arg-type]
        key = zmq.curve_keypair()[0]
        assert handler.callback(SCHEDULER_DOMAIN, key) is False
        assert handler.callback(SCHEDULER_DOMAIN, key) is False  # and again: it goes on answering
        assert any("cannot check key" in record.getMessage() for record in caplog.records)
    finally:
        context.term()


def test_the_zap_handler_names_each_monitor_key_it_admitted_and_that_was_revoked_since_once(cluster_keys):
    keys = server_keys(cluster_keys.server)
    monitor, client = (load_key_pair(config.key_file).public for config in (cluster_keys.monitor, cluster_keys.client))
    context = zmq.Context()
    try:
        handler = ZapHandler(context, keys, "TestServer", [SCHEDULER_DOMAIN, MONITOR_DOMAIN])
        assert handler.callback(MONITOR_DOMAIN, monitor) and handler.callback(SCHEDULER_DOMAIN, client)
        assert handler.reread() is None and handler.revoked_monitors() == []  # nothing changed
        authorized = cluster_keys.server.authorized_keys
        os.remove(os.path.join(authorized, "monitors", "monitor.key"))
        os.remove(os.path.join(authorized, "clients", "client.key"))
        credentials = handler.reread()  # what the daemon tells its core: the keys changed, as now read
        assert credentials is not None and monitor.decode() not in credentials and client.decode() not in credentials
        assert handler.reread() is None  # told once
        assert handler.revoked_monitors() == [monitor.decode()]  # the client key's peers are the core's to forget
        assert handler.revoked_monitors() == []  # named once
        assert handler.callback(MONITOR_DOMAIN, monitor) is False  # and refused from now on
    finally:
        context.term()
