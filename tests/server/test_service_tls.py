"""Transport security of `apportion serve`: TLS, mutual TLS, and the warning for a plain-text
server on a non-loopback address. Certificates are made in the test (`cryptography`)."""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_harness import CALL_TIMEOUT_S, call_error, running_server, server_command, small_request

from apportion.server.app import byte_size, is_loopback
from apportion.v1 import allocation_service_pb2 as service_pb
from apportion.v1 import allocation_service_pb2_grpc as service_grpc

WARNING = "without TLS"


@dataclass(frozen=True)
class Pem:
    cert: bytes
    key: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(common_name: str, issuer: Pem | None = None, server: bool = False) -> Pem:
    """A certificate for `common_name`: self-signed CA without `issuer`, else signed by it
    (`server`: valid for 127.0.0.1 and localhost)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.issuer_name(_name(common_name)).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        )
        signing_key = key
    else:
        ca_cert = x509.load_pem_x509_certificate(issuer.cert)
        builder = builder.issuer_name(ca_cert.subject)
        loaded = serialization.load_pem_private_key(issuer.key, None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        signing_key = loaded
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(signing_key, hashes.SHA256())
    return Pem(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


@dataclass(frozen=True)
class Pki:
    ca: Pem
    server: Pem
    client: Pem
    stranger: Pem
    """A client certificate from another CA."""
    files: dict[str, str]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = issue("apportion test CA")
    server = issue("apportion server", ca, server=True)
    client = issue("apportion client", ca)
    stranger = issue("stranger", issue("other CA"))
    files = {}
    for name, data in (("ca.pem", ca.cert), ("server.pem", server.cert),
                       ("server.key", server.key)):
        (folder / name).write_bytes(data)
        files[name] = str(folder / name)
    return Pki(ca, server, client, stranger, files)


def tls_args(pki: Pki, mutual: bool = False) -> list[str]:
    args = ["--tls-cert", pki.files["server.pem"], "--tls-key", pki.files["server.key"]]
    return [*args, "--tls-client-ca", pki.files["ca.pem"]] if mutual else args


def solve_over(channel: grpc.Channel) -> service_pb.SolveResponse:
    stub = service_grpc.AllocationServiceStub(channel)
    reply: service_pb.SolveResponse = stub.Solve(small_request(), timeout=CALL_TIMEOUT_S)
    return reply


def secure(address: str, pki: Pki, client: Pem | None = None) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.cert,
        private_key=None if client is None else client.key,
        certificate_chain=None if client is None else client.cert,
    )
    return grpc.secure_channel(address, credentials)


def test_tls(pki: Pki) -> None:
    with running_server("--workers", "1", *tls_args(pki)) as server:
        with secure(server.address, pki) as channel:
            assert solve_over(channel).stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
        with grpc.insecure_channel(server.address) as plain:
            error = call_error(lambda: solve_over(plain))
            assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert WARNING not in server.stderr()


def test_mutual_tls_requires_a_client_certificate_from_the_ca(pki: Pki) -> None:
    with running_server("--workers", "1", *tls_args(pki, mutual=True), host="0.0.0.0") as server:
        address = "127.0.0.1:" + server.address.rpartition(":")[2]
        with secure(address, pki, pki.client) as channel:
            assert solve_over(channel).stats.termination == service_pb.TERMINATION_REASON_OPTIMAL
        for client in (None, pki.stranger):
            with secure(address, pki, client) as refused:
                error = call_error(lambda: solve_over(refused))
                assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert WARNING not in server.stderr()  # not loopback, but TLS


def test_plain_text_on_a_non_loopback_address_warns() -> None:
    with running_server("--workers", "1", host="0.0.0.0") as server:
        assert WARNING in server.stderr()
        with grpc.insecure_channel("127.0.0.1:" + server.address.rpartition(":")[2]) as ch:
            assert solve_over(ch).stats.termination == service_pb.TERMINATION_REASON_OPTIMAL


def test_incomplete_tls_options_are_a_usage_error(pki: Pki, tmp_path: Path) -> None:
    for args, message in (
        (["--tls-cert", pki.files["server.pem"]], "--tls-cert and --tls-key go together"),
        (["--tls-client-ca", pki.files["ca.pem"]], "--tls-client-ca needs --tls-cert"),
        (["--tls-cert", str(tmp_path / "absent.pem"), "--tls-key", pki.files["server.key"]],
         "absent.pem"),
    ):
        result = subprocess.run(
            server_command("--port", "0", *args), capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2, result.stderr
        assert message in result.stderr


def test_address_and_size_parsing() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.org"):
        assert not is_loopback(host), host
    assert byte_size("4096") == 4096
    assert byte_size("512M") == 512 * 2**20
    assert byte_size("1.5g") == 3 * 2**29
    assert byte_size("2GiB") == byte_size("2GB") == 2 * 2**30
    for bad in ("", "12Q", "-1G", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(bad)
