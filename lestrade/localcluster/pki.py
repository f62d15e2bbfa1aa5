"""Certificates and keys for a local control plane that is served like a real cluster.

One CA signs the apiserver's serving certificate and the client certificates of the admin and of
each control-plane component; a separate RSA key signs service-account tokens. Everything is
written under the cluster's data dir and lives only as long as it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ClusterPKI", "CertPair", "create_pki"]

_VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPKI:
    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    kwok: CertPair
    kubelet_client: CertPair
    sa_key: Path
    sa_pub: Path


def _write_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


class _Issuer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.name = _name("lestrade-local-ca")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pair = self._save("ca", self.cert, self.key)

    def _save(self, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> CertPair:
        pair = CertPair(self.folder / f"{stem}.crt", self.folder / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def issue(
        self,
        stem: str,
        cn: str,
        *,
        org: str | None = None,
        server_names: list[str] | None = None,
        server_ips: list[str] | None = None,
    ) -> CertPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server_names or server_ips:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            alt = [x509.DNSName(n) for n in server_names or []]
            alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips or []]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        return self._save(stem, builder.sign(self.key, hashes.SHA256()), key)


def create_pki(folder: Path, service_ip: str = "10.0.0.1") -> ClusterPKI:
    """Creates every certificate and key the local control plane needs in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    issuer = _Issuer(folder)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key_path, sa_pub_path = folder / "sa.key", folder / "sa.pub"
    _write_key(sa_key, sa_key_path)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return ClusterPKI(
        ca=issuer.pair,
        apiserver=issuer.issue(
            "apiserver",
            "kube-apiserver",
            server_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            server_ips=["127.0.0.1", service_ip],
        ),
        admin=issuer.issue("admin", "lestrade-admin", org="system:masters"),
        controller_manager=issuer.issue("controller-manager", "system:kube-controller-manager"),
        scheduler=issuer.issue("scheduler", "system:kube-scheduler"),
        kwok=issuer.issue(
            "kwok",
            "system:kwok-controller",
            org="system:masters",
            server_names=["localhost"],
            server_ips=["127.0.0.1"],
        ),
        kubelet_client=issuer.issue("kubelet-client", "kube-apiserver-kubelet-client", org="system:masters"),
        sa_key=sa_key_path,
        sa_pub=sa_pub_path,
    )
