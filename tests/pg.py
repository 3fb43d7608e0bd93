"""A throwaway PostgreSQL server on loopback for the distributed tests.

Debian's `postgresql` package is installed where it is missing (when running as root, as CI
does); the server lives in a temporary directory and is stopped afterwards.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _binaries() -> Path | None:
    for found in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(found, "initdb")):
            return Path(found)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def ensure_installed() -> tuple[Path | None, str]:
    """(the directory of initdb/pg_ctl, or None with the reason it cannot be had)."""
    found = _binaries()
    if found:
        return found, ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "PostgreSQL is not installed and this is not a root Debian machine"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "postgresql"]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            return None, f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-300:]}"
    found = _binaries()
    return (found, "") if found else (None, "apt-get installed postgresql, but no initdb found")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server() -> Iterator[str]:
    """Start a server; yield its SQLAlchemy URL; stop it."""
    bindir, why = ensure_installed()
    if bindir is None:
        raise RuntimeError(why)
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    data = root / "data"
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(root, "postgres", "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*as_postgres, *cmd], check=True, capture_output=True, timeout=120)

    run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    run(
        str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w",
        "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200",
        "start",
    )  # fmt: skip
    try:
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c",
             "CREATE DATABASE autotune"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/autotune"
    finally:
        subprocess.run(
            [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
            capture_output=True, timeout=120,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
