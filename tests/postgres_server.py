"""A PostgreSQL server on 127.0.0.1 for the tests: the distribution's own server binaries
(Debian's `postgresql` package; .ci/run installs it), a fresh cluster in a temporary folder,
stopped and removed at the end.

  with PostgresServer() as server:      # or the `postgres_server` fixture (conftest.py)
      url = server.create_database()    # postgresql://postgres@127.0.0.1:PORT/<fresh name>
      ...                               # Optuna's RDBStorage, `albert-jax sweep` workers

The server listens on 127.0.0.1 and on a Unix socket inside its own folder, nowhere else, and
trusts every local connection (a test server: no password to pass around). PostgreSQL refuses to
run as root, so under root (CI) the cluster belongs to the `postgres` user, which Debian's package
creates (`nobody` where there is none), and every server command runs as that user.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid

from tests.storage_emulator import _free_port

_HOST = "127.0.0.1"
SUPERUSER = "postgres"
INSTALL_HINT = ("install PostgreSQL's server (Debian: `apt-get install postgresql`, as .ci/run "
                "does) or put its bin folder (the one with initdb and pg_ctl) on PATH")


def server_bindir() -> str | None:
    """The folder of `initdb`, `pg_ctl` and `createdb`: initdb's on PATH (a link followed to
    its install), else the newest Debian install."""
    on_path = shutil.which("initdb")
    if on_path:
        return os.path.dirname(os.path.realpath(on_path))
    # Debian keeps the server binaries off PATH, one folder per major version.
    installed = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    installed.sort(key=lambda path: int(path.split("/")[-3]))
    return os.path.dirname(installed[-1]) if installed else None


class PostgresServer:
    """One cluster and its server process; `create_database` hands out fresh databases."""

    def __init__(self) -> None:
        bindir = server_bindir()
        if bindir is None:
            raise RuntimeError(f"no PostgreSQL server binaries (initdb, pg_ctl): {INSTALL_HINT}")
        self.bindir = bindir
        self.port = 0
        self._user = _server_user()
        self._root: str | None = None

    @property
    def data_dir(self) -> str:
        assert self._root is not None, "the server is not started"
        return os.path.join(self._root, "data")

    def start(self) -> None:
        # Not under pytest's tmp_path: its folders are private to the user who runs the tests,
        # and the server's user must reach its cluster.
        self._root = tempfile.mkdtemp(prefix="albert_jax_postgres_")
        if self._user is not None:
            os.chown(self._root, self._user.pw_uid, self._user.pw_gid)
        self._run("initdb", f"--pgdata={self.data_dir}", f"--username={SUPERUSER}",
                  "--auth=trust", "--encoding=UTF8", "--no-sync")
        # A free port can be taken between the probe and the server's bind: try another.
        for attempt in range(3):
            self.port = _free_port()
            options = (f"-c listen_addresses={_HOST} -c port={self.port} "
                       f"-c unix_socket_directories={self._root} "
                       # a throwaway cluster: no waiting on the disk
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            started = self._run("pg_ctl", "start", "--wait", "--timeout=60",
                                f"--pgdata={self.data_dir}", f"--log={self._log}",
                                f"--options={options}", check=False)
            if started.returncode == 0:
                return
        raise RuntimeError(f"PostgreSQL did not start: {self._log_tail()}")

    def stop(self) -> None:
        if self._root is None:
            return
        self._run("pg_ctl", "stop", "--wait", "--mode=fast", f"--pgdata={self.data_dir}",
                  check=False)
        shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    def url(self, database: str) -> str:
        """The URL of `database` (SQLAlchemy 2.1 reads `postgresql://` with psycopg 3)."""
        return f"postgresql://{SUPERUSER}@{_HOST}:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database on this server; returns its URL."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        self._run("createdb", f"--host={_HOST}", f"--port={self.port}",
                  f"--username={SUPERUSER}", name)
        return self.url(name)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def _log(self) -> str:
        assert self._root is not None
        return os.path.join(self._root, "server.log")

    def _log_tail(self) -> str:
        try:
            with open(self._log) as log:
                return "".join(log.readlines()[-20:])
        except OSError:
            return "(no server log)"

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [os.path.join(self.bindir, program), *args]
        if self._user is not None:
            command = ["runuser", "-u", self._user.pw_name, "--", *command]
        # The server's user may not be able to enter the caller's folder.
        done = subprocess.run(command, cwd=self._root or "/", capture_output=True, text=True,
                              check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}")
        return done


def _server_user() -> pwd.struct_passwd | None:
    """The user the server runs as: None (the caller) unless the caller is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("PostgreSQL refuses to run as root, and there is no `postgres` or "
                       "`nobody` user to run it as")
