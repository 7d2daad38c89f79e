"""Redis as production runs it: TLS (``rediss://``, with a CA and a client certificate) and ACL users
restricted to the spider's keys, in real crawls against real servers of the matrix (tests/helpers/redis_server.py).
Certificates are made here with ``cryptography`` (a dependency of Scrapy)."""

from __future__ import annotations

import datetime
import subprocess
import uuid

import pytest
from helpers.crawlkit import books, crawl_tagged
from helpers.pages import distinct_pages
from helpers.redis_server import RedisServer, free_port, kind_named, server_kinds

pytestmark = pytest.mark.slow


def _supports_tls(kind) -> bool:
    try:
        out = subprocess.run(
            [kind.server, "--port", "0", "--tls-port", "1", "--tls-cert-file", "/nonexistent"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except subprocess.TimeoutExpired:  # pragma: no cover - it would have started
        return True
    text = out.stdout + out.stderr
    return "Bad directive" not in text and "Failed finding TLS support" not in text


def _certificates(folder) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def issue(subject: str, issuer_name, issuer_key, ca: bool = False, ip: bool = False):  # type: ignore[no-untyped-def]
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(issuer_name or name(subject))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ip:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
        return key, builder.sign(issuer_key or key, hashes.SHA256())

    files = {}

    def write(label: str, key, cert) -> None:  # type: ignore[no-untyped-def]
        (folder / f"{label}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        (folder / f"{label}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[label] = str(folder / f"{label}.crt")
        files[label + "_key"] = str(folder / f"{label}.key")

    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca = issue("neardup test CA", None, None, ca=True)
    write("ca", ca_key, ca)
    write("server", *issue("127.0.0.1", ca.subject, ca_key, ip=True))
    write("client", *issue("crawler", ca.subject, ca_key))
    other_key, other = issue("another CA", None, None, ca=True)
    write("other_ca", other_key, other)
    return files


TLS_KINDS = [k.name for k in server_kinds() if _supports_tls(k)]


@pytest.mark.extended
@pytest.mark.parametrize(
    "redis_kind",
    TLS_KINDS
    or [
        pytest.param(
            "none",
            marks=pytest.mark.skip(
                reason="no server of the matrix is built with TLS (Debian's redis-server is: CI installs it)"
            ),
        )
    ],
)
def test_a_crawl_over_tls_with_a_client_certificate(tmp_path, redis_kind):
    certs = _certificates(tmp_path / "certs")
    tls_port = free_port()
    server = RedisServer(
        str(tmp_path / "redis"),
        kind=kind_named(redis_kind),
        args=(
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            certs["server"],
            "--tls-key-file",
            certs["server_key"],
            "--tls-ca-cert-file",
            certs["ca"],
            "--tls-auth-clients",
            "yes",
        ),
    ).start()
    try:
        url = f"rediss://127.0.0.1:{tls_port}/0"
        tls = {
            "NEARDUP_STORE_URL": url,
            "NEARDUP_REDIS_TLS_CA_FILE": certs["ca"],
            "NEARDUP_REDIS_TLS_CERT_FILE": certs["client"],
            "NEARDUP_REDIS_TLS_KEY_FILE": certs["client_key"],
        }
        pages = distinct_pages(20, copies_every=4)
        good = crawl_tagged(tmp_path, pages, tls, name="tls")
        assert good.stats["finish_reason"] == "finished", good.log[-3000:]
        assert books(good)["checked"] == 20 and good.stats["neardup/duplicate"] == 4
        assert int(server.cli("DBSIZE").strip()) > 0  # filed over TLS
        # A server whose certificate the given CA did not sign: refused at open, in one line, no page unchecked.
        wrong = crawl_tagged(
            tmp_path,
            pages,
            {**tls, "NEARDUP_REDIS_TLS_CA_FILE": certs["other_ca"], "NEARDUP_REDIS_RETRIES": "0"},
            name="wrong-ca",
        )
        assert wrong.refused_at_start(), wrong.log[-3000:]
        assert "certificate verify failed" in wrong.log
        # No client certificate, where the server asks for one.
        anonymous = crawl_tagged(
            tmp_path,
            pages,
            {"NEARDUP_STORE_URL": url, "NEARDUP_REDIS_TLS_CA_FILE": certs["ca"], "NEARDUP_REDIS_RETRIES": "0"},
            name="no-cert",
        )
        assert anonymous.refused_at_start(), anonymous.log[-3000:]
    finally:
        server.stop()


def test_a_missing_certificate_file_fails_at_start_up_in_one_line(tmp_path):
    result = crawl_tagged(
        tmp_path,
        distinct_pages(3),
        {"NEARDUP_STORE_URL": "rediss://127.0.0.1:1/0", "NEARDUP_REDIS_TLS_CA_FILE": str(tmp_path / "no-such-ca.pem")},
    )
    assert result.returncode != 0 and "NEARDUP_REDIS_TLS_CA_FILE" in result.log
    assert "the path of a readable file" in result.log and "Traceback" not in result.log


@pytest.mark.extended
def test_an_acl_user_restricted_to_the_spiders_keys_crawls_and_another_is_refused(tmp_path, redis_server):
    """The ACL rules of docs/scaling.md: the store's own keys (``neardup:{paths}:*``) and its groups'
    (``{neardup:paths:*``), the commands of the read, write and scripting categories."""
    secret = uuid.uuid4().hex
    redis_server.cli(
        "ACL",
        "SETUSER",
        "crawler",
        "on",
        f">{secret}",
        "~neardup:{paths}:*",
        "~{neardup:paths:*",
        "+@read",
        "+@write",
        "+@scripting",
        "+@connection",
        "-@dangerous",
        "+info",
        "+scan",
    )
    redis_server.cli(
        "ACL",
        "SETUSER",
        "other",
        "on",
        f">{secret}",
        "~neardup:{other}:*",
        "~{neardup:other:*",
        "+@read",
        "+@write",
        "+@scripting",
        "+@connection",
        "-@dangerous",
        "+info",
        "+scan",
    )
    host = f"127.0.0.1:{redis_server.port}"
    pages = distinct_pages(20, copies_every=4)
    good = crawl_tagged(tmp_path, pages, {"NEARDUP_STORE_URL": f"redis://crawler:{secret}@{host}/0"}, name="crawler")
    assert good.stats["finish_reason"] == "finished", good.log[-3000:]
    assert books(good)["checked"] == 20 and good.stats["neardup/duplicate"] == 4
    assert "neardup/store_error" not in good.stats
    # The same pages again, served on another port: 20 near-duplicates of what the first crawl filed.
    again = crawl_tagged(tmp_path, pages, {"NEARDUP_STORE_URL": f"redis://crawler:{secret}@{host}/0"}, name="again")
    assert again.stats.get("neardup/duplicate") == 20, again.neardup_stats()
    refused = crawl_tagged(tmp_path, pages, {"NEARDUP_STORE_URL": f"redis://other:{secret}@{host}/0"}, name="other")
    assert refused.refused_at_start(), refused.log[-3000:]
    assert "refused the credentials or the command" in refused.log and "NoPermissionError" in refused.log
    for result in (good, refused):
        assert secret not in result.log
