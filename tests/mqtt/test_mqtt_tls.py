"""The publisher against a real mosquitto TLS listener (certificates from trustme) that requires a client certificate
and a user name with password: it connects with the right CA, certificate and password, and refuses a broker its
CA does not vouch for."""

from __future__ import annotations

import contextlib
import getpass
import shutil
import ssl
import subprocess
from pathlib import Path

import aiomqtt
import pytest
import trustme
from mqtt_broker import PREFIX, Broker, Subscriber, on_topic

from watchdog.config.mqtt import MqttSettings

STATUS = f"{PREFIX}/node-a/status"
USER, PASSWORD = "gpu-watchdog", "s3cr3t"
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"


class TlsBroker(Broker):
    """mosquitto with one TLS listener: client certificate required, anonymous clients refused."""

    def __init__(self, workdir: Path, ca: trustme.CA) -> None:
        super().__init__(workdir)
        server = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = workdir / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        server.cert_chain_pems[0].write_to_path(str(workdir / "server.pem"))
        server.private_key_pem.write_to_path(str(workdir / "server.key"))
        passwords = workdir / "passwords"
        subprocess.run([MOSQUITTO_PASSWD, "-c", "-b", str(passwords), USER, PASSWORD], check=True,
                       capture_output=True)
        self.config.write_text(
            "per_listener_settings false\n"
            f"listener {self.port} 127.0.0.1\n"
            f"cafile {self.ca_file}\ncertfile {workdir / 'server.pem'}\nkeyfile {workdir / 'server.key'}\n"
            "require_certificate true\n"
            "allow_anonymous false\n"
            f"password_file {passwords}\n"
            "persistence false\n"
            f"user {getpass.getuser()}\n"
        )


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def broker(tmp_path, ca):
    """Replaces conftest's plain broker, so `start_publisher` connects to this one."""
    async with TlsBroker(tmp_path, ca) as server:
        yield server


@pytest.fixture
def client_files(tmp_path, ca) -> dict[str, str]:
    client = ca.issue_cert("gpu-watchdog-node-a")
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    (tmp_path / "password").write_text(PASSWORD + "\n")
    return {"cert_file": str(tmp_path / "client.pem"), "key_file": str(tmp_path / "client.key"),
            "username": USER, "password_file": str(tmp_path / "password")}


async def subscriber(broker: TlsBroker, ca: trustme.CA, client_files: dict[str, str], stack) -> Subscriber:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.load_cert_chain(client_files["cert_file"], client_files["key_file"])
    client = await stack.enter_async_context(aiomqtt.Client("127.0.0.1", broker.port, tls_context=context,
                                                            username=USER, password=PASSWORD, timeout=5))
    await client.subscribe(f"{PREFIX}/#", qos=1)
    return Subscriber(client)


async def test_the_publisher_connects_over_tls_with_certificate_and_password(broker, ca, client_files,
                                                                            start_publisher):
    async with contextlib.AsyncExitStack() as stack:
        watching = await subscriber(broker, ca, client_files, stack)
        publisher = start_publisher(tls=True, ca_file=str(broker.ca_file), **client_files)
        _, payload = await watching.next(on_topic(STATUS, state="online"))
        assert payload["node"] == "node-a"
        assert publisher.counters().connected and publisher.counters().connect_failures == 0


@pytest.mark.parametrize(
    "change",
    ["untrusted-ca", "no-client-certificate", "wrong-password", "no-tls"],
)
async def test_a_broker_or_credentials_that_do_not_check_out_are_refused(broker, client_files, tmp_path, gate,
                                                                        start_publisher, change):
    # A refused handshake may be noticed only when CONNACK does not come: a short wait keeps the test short.
    settings = {"tls": True, "ca_file": str(broker.ca_file), "timeout_seconds": 1, **client_files}
    if change == "untrusted-ca":
        trustme.CA().cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
        settings["ca_file"] = str(tmp_path / "other-ca.pem")
    elif change == "no-client-certificate":
        settings.pop("cert_file"), settings.pop("key_file")
    elif change == "wrong-password":
        (tmp_path / "password").write_text("not-it\n")
    else:
        settings = {key: settings[key] for key in ("username", "password_file", "timeout_seconds")}
    publisher = start_publisher(**settings)
    await gate.wait_until_backing_off()
    counters = publisher.counters()
    assert counters.connect_failures == 1 and not counters.connected and counters.published == 0


def test_tls_files_need_tls_and_a_certificate_needs_its_key():
    with pytest.raises(ValueError, match="need tls: true"):
        MqttSettings(ca_file="/etc/ca.pem")
    with pytest.raises(ValueError, match="go together"):
        MqttSettings(tls=True, cert_file="/etc/client.pem")
    assert MqttSettings(tls=True).ca_file is None  # the system trust store
