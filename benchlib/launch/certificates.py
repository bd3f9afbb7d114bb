"""`python -m benchlib cluster certs DIR`: a certificate authority and a certificate and key for each role of a Dask
cluster (scheduler, worker, client), for mutual TLS between every process; and the `Security` a run connects with.

The CA signs the three certificates and its private key is then dropped: nothing but the three roles' keys is ever
written, each readable by its owner only. A scheduler started with these files refuses any client or worker whose
certificate the CA did not sign.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

ROLES = ("scheduler", "worker", "client")
CA_FILE = "ca.pem"
VALID_DAYS = 365
KEY_MODE = 0o600


class CertificatesError(ValueError):
    """A certificates folder that cannot be written or used. One line."""


@dataclass(frozen=True)
class RoleFiles:
    """The files one role of the cluster starts with."""

    ca: Path
    cert: Path
    key: Path

    def dask_options(self) -> str:
        """The options of `dask scheduler` and `dask worker` that use these files."""
        return f"--tls-ca-file {self.ca} --tls-cert {self.cert} --tls-key {self.key}"


def role_files(folder: Path, role: str) -> RoleFiles:
    """Where `cluster certs` puts `role`'s certificate and key, and the CA's certificate, in `folder`."""
    return RoleFiles(folder / CA_FILE, folder / f"{role}.pem", folder / f"{role}.key")


def _name(common_name: str):  # noqa: ANN202 - a cryptography x509.Name
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "benchlib cluster"), x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, data: bytes) -> None:
    """Write a private key readable by its owner only (the mode is set when the file is made, before a byte is in it)."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_MODE)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def write_certificates(folder: Path, days: int = VALID_DAYS) -> dict[str, RoleFiles]:
    """A new CA and, signed by it, a certificate and key for each of `ROLES`, in `folder` (made if missing; files there
    of the same names are replaced). Returns each role's files. CertificatesError when `folder` cannot be written."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CertificatesError(f"cluster certs: cannot make {folder}: {error.strerror}") from None
    if not os.access(folder, os.W_OK):
        raise CertificatesError(f"cluster certs: {folder} is not writable")
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)  # clocks of the machines differ a little
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("benchlib cluster CA")
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    (folder / CA_FILE).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    usages = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    files = {}
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder().subject_name(_name(f"benchlib {role}")).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(usages, critical=False)
            .sign(ca_key, hashes.SHA256())
        )  # fmt: skip
        files[role] = role_files(folder, role)
        files[role].cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(files[role].key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return files


def start_commands(folder: Path, host: str = "SCHEDULER_HOST", port: int = 8786) -> list[str]:
    """The three commands that start a scheduler, a worker and a run with the files in `folder`."""
    address = f"tls://{host}:{port}"
    return [
        f"dask scheduler --port {port} --no-dashboard {role_files(folder, 'scheduler').dask_options()}",
        f"dask worker {address} --nworkers 1 --nthreads 1 --resources benchmark=1 {role_files(folder, 'worker').dask_options()}",
        f"python -m benchlib run --cluster {address} --tls {folder}",
    ]


def client_security(folder: Path):  # noqa: ANN201 - distributed.Security, imported only with the cluster extra
    """The client's `Security` from a `cluster certs` folder, encryption required; CertificatesError naming a missing file."""
    from distributed import Security

    files = role_files(folder, "client")
    if not folder.is_dir():
        raise CertificatesError(f"--tls: no such folder: {folder} (make one with `python -m benchlib cluster certs {folder}`)")
    for path in (files.ca, files.cert, files.key):
        if not path.is_file():
            raise CertificatesError(f"--tls: {folder} has no {path.name} (made by `python -m benchlib cluster certs {folder}`)")
    return Security(tls_ca_file=str(files.ca), tls_client_cert=str(files.cert), tls_client_key=str(files.key), require_encryption=True)


def local_security(folder: Path | None):  # noqa: ANN201 - distributed.Security
    """Every role's `Security` for workers started on this machine: the files of a `cluster certs` folder, or, without
    one, Dask's temporary certificate (in memory, for this run only)."""
    from distributed import Security

    if folder is None:
        return Security.temporary()
    client_security(folder)  # the folder and its files are there
    roles = {f"tls_{role}_{part}": str(getattr(role_files(folder, role), part)) for role in ROLES for part in ("cert", "key")}
    return Security(tls_ca_file=str(folder / CA_FILE), require_encryption=True, **roles)
