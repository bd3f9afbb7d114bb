"""How a run reaches its Dask cluster: the address checked before any kernel (TLS, or plain text on this machine's
loopback only unless `--insecure`), and a probe of what answers there, so that a wrong address is one line within the
connect timeout (nothing listening, an HTTP port such as the dashboard's, a TLS scheduler reached without `--tls` or
the reverse, a certificate from another CA) instead of a traceback or a hang.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distributed.comm.addressing import parse_address, parse_host_port
from distributed.comm.registry import backends

from benchlib.launch.certificates import CA_FILE, CertificatesError, client_security, role_files

DEFAULT_PORT = 8786
DASHBOARD_PORT = 8787
CONNECT_TIMEOUT_S = 10
FIRST_WORDS_S = 2.0  # a Dask scheduler speaks first, at once: silence this long means something else listens
CERTS_HINT = "make certificates with `python -m benchlib cluster certs DIR`"


class ClusterError(RuntimeError):
    """The cluster cannot be used: a bad address, no scheduler answering, no benchmark worker. One line."""


@dataclass(frozen=True)
class ClusterTarget:
    """Where a run's tasks go: the scheduler at `address`, or `local` workers started on this machine, and how."""

    address: str  # as given: tcp://HOST:PORT, tls://HOST:PORT or local:N
    local: int = 0  # N of local:N
    tls: Path | None = None  # a `cluster certs` folder
    insecure: bool = False  # plain text allowed off loopback (tcp://) or between local workers (local:N)

    @property
    def encrypted(self) -> bool:
        """Whether every connection of the run is TLS."""
        return not self.insecure if self.local else self.address.startswith("tls://")

    def record(self) -> dict[str, Any]:
        """What environment.json records of how the run reached its workers."""
        where = f"local:{self.local}" if self.local else self.address
        return {"address": where, "encryption": "TLS" if self.encrypted else "none (--insecure)" if self.insecure else "none (loopback)"}


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine's loopback (127.0.0.0/8, ::1, or a name that resolves only there)."""
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in found)


def _host_port(address: str) -> tuple[str, str, int | None]:
    """The scheme, host and port of a scheduler address; ClusterError when it is none."""
    try:
        scheme, location = parse_address(address, strict=False)
        host, port = parse_host_port(location)
    except ValueError:
        host, scheme, port = "", "", None
    if not host or scheme not in backends or scheme == "inproc":
        raise ClusterError(f"--cluster: {address!r} is not a scheduler address (tls://HOST:PORT, tcp://HOST:PORT) or local:N")
    return scheme, host, port


def plan_target(address: str, tls: Path | None = None, insecure: bool = False) -> ClusterTarget:
    """The checked `--cluster`, `--tls` and `--insecure`; ClusterError (one line) before any kernel when they do not go
    together, or when plain text would cross a network without `--insecure`."""
    if address.startswith("local:"):
        count = address.removeprefix("local:")
        if not count.isdigit() or int(count) < 1:
            raise ClusterError(f"--cluster: local:N takes a number of workers of 1 or more, not {address!r}")
        if tls is not None and insecure:
            raise ClusterError("--insecure: local:N runs without encryption with --insecure, or with the certificates of --tls, not both")
        target = ClusterTarget(address, local=int(count), tls=tls, insecure=insecure)
    else:
        scheme, host, _ = _host_port(address)
        if "://" not in address:
            scheme, address = ("tls", f"tls://{address}") if tls is not None else ("tcp", f"tcp://{address}")
        if scheme == "tls" and tls is None:
            raise ClusterError(f"--cluster: {address} is a TLS scheduler: give the folder of its certificates with --tls DIR ({CERTS_HINT})")
        if scheme == "tls" and insecure:
            raise ClusterError(f"--insecure: {address} is a TLS address; --insecure allows plain tcp:// only")
        if scheme != "tls" and tls is not None:
            raise ClusterError(f"--tls: {address} is plain text; with --tls the address is tls://{address.split('://', 1)[-1]}")
        if scheme != "tls" and not insecure and not is_loopback(host):
            raise ClusterError(
                f"--cluster: {address} is plain text across a network: anyone who reaches its port can run code on every worker; "
                f"{CERTS_HINT}, start the scheduler and workers with them and run with --cluster tls://{address.split('://', 1)[-1]} --tls DIR "
                f"(--insecure runs without encryption)"
            )
        target = ClusterTarget(address, tls=tls, insecure=insecure)
    if target.tls is not None:
        try:
            client_security(target.tls)
        except CertificatesError as error:
            raise ClusterError(str(error)) from None
    return target


# ---------------------------------------------------------------- what answers at an address


def _looks_like_dask(data: bytes) -> bool:
    """Whether `data` starts as a Dask comm message: its length, its frame count and the frames' lengths adding up."""
    if len(data) < 16:
        return False
    total, count = struct.unpack_from("<QQ", data)
    if not 1 <= count <= 64 or total > 2**24 or len(data) < 16 + 8 * count:
        return False
    return 8 + 8 * count + sum(struct.unpack_from(f"<{count}Q", data, 16)) == total


def _first_words(sock: socket.socket, wait_s: float) -> bytes:
    """What the other side sends first within `wait_s` (b"" when it says nothing or closes)."""
    sock.settimeout(wait_s)
    try:
        return sock.recv(4096)
    except (TimeoutError, socket.timeout):
        return b""


def _open(host: str, port: int, timeout_s: float, address: str) -> socket.socket:
    """A TCP connection to `address`; ClusterError naming why none could be made."""
    try:
        return socket.create_connection((host, port), timeout=timeout_s)
    except ConnectionRefusedError:
        raise ClusterError(f"--cluster: nothing listens at {address} (connection refused): is the scheduler running there, on that port (its default is {DEFAULT_PORT})?") from None
    except (TimeoutError, socket.timeout):
        raise ClusterError(f"--cluster: no answer from {address} within {timeout_s:g} s: no machine there, or a firewall drops the connection") from None
    except OSError as error:
        raise ClusterError(f"--cluster: cannot reach {address}: {error.strerror or error}") from None


def _speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether a TLS server answers at host:port (a handshake gets as far as the server's reply, certificates unchecked)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s) as sock:
        try:
            with context.wrap_socket(sock) as wrapped:
                wrapped.settimeout(timeout_s)
                return True
        except ssl.SSLError as error:
            return "ALERT" in str(error).upper()  # the server answered the handshake, then refused: a TLS server
    return False


def _speaks_http(host: str, port: int, timeout_s: float) -> bool:
    """Whether an HTTP server answers a request at host:port."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        return _first_words(sock, timeout_s).startswith(b"HTTP/")
    return False


def _not_dask(address: str, host: str, port: int, timeout_s: float, seen: bytes) -> str:
    """The one line for an address where something other than a plain Dask scheduler answers."""
    if seen.startswith(b"HTTP/") or _speaks_http(host, port, timeout_s):
        hint = f" (the dashboard's port is {DASHBOARD_PORT}, the scheduler's {DEFAULT_PORT})" if port == DASHBOARD_PORT else f" (the scheduler's port is {DEFAULT_PORT} by default)"
        return f"--cluster: an HTTP server answers at {address}, not a Dask scheduler: a dashboard or web port?{hint}"
    if not seen and _speaks_tls(host, port, timeout_s):
        tls_address = "tls://" + address.split("://", 1)[-1]
        return f"--cluster: the scheduler at {address} asks for TLS and this run has none: run with --cluster {tls_address} --tls DIR, the folder of its certificates"
    said = f"it sent {seen[:24]!r}" if seen else f"it said nothing within {FIRST_WORDS_S:g} s"
    return f"--cluster: something answers at {address} but not as a Dask scheduler ({said}): check the host and port"


def probe_scheduler(target: ClusterTarget, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Check that a Dask scheduler answers at `target.address` as the target expects it to (TLS with the cluster's
    certificates, or plain text); ClusterError, one line, naming the likely cause otherwise."""
    scheme, host, port = _host_port(target.address)
    port = port or DEFAULT_PORT
    address = target.address
    with _open(host, port, timeout_s, address) as sock:
        if scheme != "tls":
            seen = _first_words(sock, FIRST_WORDS_S)
            if _looks_like_dask(seen):
                return
            raise ClusterError(_not_dask(address, host, port, timeout_s, seen))
        certs = target.tls
        context = client_security(certs).get_connection_args("client")["ssl_context"]
        try:
            with context.wrap_socket(sock) as wrapped:
                seen = _first_words(wrapped, timeout_s)
        except ssl.SSLCertVerificationError:
            raise ClusterError(
                f"--cluster: the scheduler at {address} shows a certificate that {certs / CA_FILE} did not sign: "
                f"its certificates come from another `cluster certs`"
            ) from None
        except ssl.SSLError as error:
            if "ALERT" in str(error).upper():
                raise ClusterError(
                    f"--cluster: the scheduler at {address} refused this run's certificate ({role_files(certs, 'client').cert}): "
                    f"it trusts another CA; use the folder `cluster certs` made for its scheduler"
                ) from None
            with _open(host, port, timeout_s, address) as plain:
                if _looks_like_dask(seen := _first_words(plain, FIRST_WORDS_S)):
                    plain_address = "tcp://" + address.split("://", 1)[-1]
                    raise ClusterError(
                        f"--cluster: the scheduler at {address} has no TLS (it speaks plain {plain_address}): "
                        f"start it with the certificates of {certs} (--tls-ca-file, --tls-cert, --tls-key)"
                    ) from None
            raise ClusterError(_not_dask(address, host, port, timeout_s, seen)) from None
        except (TimeoutError, socket.timeout):
            raise ClusterError(f"--cluster: no TLS answer from {address} within {timeout_s:g} s: is a Dask scheduler there?") from None
        if not _looks_like_dask(seen):
            raise ClusterError(f"--cluster: something answers TLS at {address} but not as a Dask scheduler: check the host and port")

