"""`python -m benchlib lab` (what `make lab` runs): JupyterLab serves notebooks/ with a kernel of this environment."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A JupyterLab server on a free loopback port with a token; stopped after the test."""
    port, token = free_port(), secrets.token_hex(16)
    command = [
        sys.executable, "-m", "benchlib", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
    ]  # fmt: skip
    log = open(tmp_path / "lab.log", "w+", encoding="utf-8")
    server = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"token {token}"}
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"jupyter lab exited:\n{(tmp_path / 'lab.log').read_text()}"
            assert time.monotonic() < deadline, f"jupyter lab did not answer:\n{(tmp_path / 'lab.log').read_text()}"
            try:
                if requests.get(f"{url}/api/status", headers=headers, timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        yield url, headers
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.mark.e2e
def test_lab_lists_the_notebooks_and_offers_this_environments_kernel(lab: tuple[str, dict[str, str]]) -> None:
    url, headers = lab
    assert requests.get(f"{url}/api/contents/notebooks", timeout=10).status_code == 403  # the token is required

    listing = requests.get(f"{url}/api/contents/notebooks", headers=headers, timeout=10)
    assert listing.status_code == 200
    names = {item["name"]: item["type"] for item in listing.json()["content"]}
    assert names.get("benchmark.ipynb") == "notebook"
    assert requests.get(f"{url}/api/contents/parameters/grids", headers=headers, timeout=10).status_code == 200  # rooted at the kit

    specs = requests.get(f"{url}/api/kernelspecs", headers=headers, timeout=10).json()
    assert specs["default"] == "python3"
    python = specs["kernelspecs"]["python3"]["spec"]["argv"][0]
    # "python" is replaced by the server's own interpreter; an absolute path must be this environment's.
    assert python == "python" or Path(python).parent == Path(sys.executable).parent, python
