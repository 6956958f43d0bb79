"""A Cloud Storage server on 127.0.0.1 for the tests: `gcp-storage-emulator`, run in a process
of its own, spoken to by the real clients (gcsfs behind etils.epath, tensorstore behind Orbax).

  with StorageEmulator(tmp_dir) as emulator:     # or the `storage_emulator` fixture (conftest.py)
      os.environ.update(emulator.environment)    # what a process needs to reach it
      ...  gs://<emulator.bucket>/...            # every client now talks to the emulator
      emulator.stop(); emulator.start()          # an outage: the objects live in `data_dir`

Run as a script, this file is the server (`python tests/storage_emulator.py --port=N
--data_dir=D`): the emulator with two behaviours of the real service it lacks, added in its
handler table (the clients are not touched):
- a media download carries the object's generation in `x-goog-generation` (tensorstore's
  OCDBT driver reads it back on every manifest read; without it: "Malformed StorageGeneration");
- an upload, compose or delete with `ifGenerationMatch` is refused with 412 when the object's
  generation differs (0: the object must not exist), as the service does: the workdir lock is a
  create-if-absent;
- `objects.move` (POST .../o/NAME/moveTo/o/NEW), the service's rename within a bucket, which
  gcsfs (epath's `rename`) calls first: without it gcsfs retries the call for ~30 s before it
  falls back to copy + delete.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from http import HTTPStatus

BUCKET = "albert-jax-tests"
_HOST = "127.0.0.1"


class StorageEmulator:
    """The emulator server process; `environment` points the clients at it."""

    def __init__(self, data_dir: str, port: int | None = None):
        self.data_dir = data_dir
        self.port = port or _free_port()
        self.bucket = BUCKET
        self.url = f"http://{_HOST}:{self.port}"
        self._process: subprocess.Popen | None = None

    @property
    def environment(self) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.url,  # gcsfs and google-cloud-storage
            "TENSORSTORE_GCS_HTTP_URL": self.url,  # tensorstore (Orbax's arrays)
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # tensorstore asks no credentials
            # gcsfs otherwise probes the bucket type with a call the emulator answers after 60 s.
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }

    def start(self) -> None:
        log = open(os.path.join(self.data_dir, "emulator.log"), "ab")
        self._process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), f"--port={self.port}",
             f"--data_dir={self.data_dir}"], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the storage emulator exited; see {self.data_dir}/emulator.log")
            try:
                socket.create_connection((_HOST, self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the storage emulator did not listen on port {self.port} in 30 s")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

    def __enter__(self) -> "StorageEmulator":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((_HOST, 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The server process.

def _generation_precondition(handler):
    """`handler` refused with 412 when the request's ifGenerationMatch does not hold."""
    from gcp_storage_emulator.exceptions import NotFound

    def checked(request, response, storage, *args, **kwargs):
        wanted = request.query.get("ifGenerationMatch")
        if wanted:
            name = request.params.get("object_id") or (request.query.get("name") or [None])[0]
            if name is None and isinstance(request.data, dict):  # multipart: the name in "meta"
                name = request.data.get("meta", request.data).get("name")
            try:
                generation = storage.get_file_obj(request.params["bucket_name"], name)["generation"]
            except NotFound:
                generation = "0"
            if str(generation) != wanted[0]:
                response.status = HTTPStatus.PRECONDITION_FAILED
                response.json({"error": {"code": 412, "message": "conditionNotMet"}})
                return None
        return handler(request, response, storage, *args, **kwargs)

    return checked


def _with_generation_header(download):
    def answered(request, response, storage, *args, **kwargs):
        download(request, response, storage, *args, **kwargs)
        if response.status in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT):
            obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
            response["x-goog-generation"] = str(obj["generation"])
            response["x-goog-metageneration"] = str(obj["metageneration"])

    return answered


def _move(request, response, storage, *args, **kwargs):
    """objects.move: the object under its new name, the old name gone."""
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    bucket = request.params["bucket_name"]
    try:
        moved = objects._copy(request.base_url, storage, bucket, request.params["object_id"],
                              bucket, request.params["dest_object_id"])
        storage.delete_file(bucket, request.params["object_id"])
    except NotFound:
        response.status = HTTPStatus.NOT_FOUND
        return
    response.json(moved)


def _write_metadata_atomically(storage) -> None:
    """The emulator's metadata file (`Storage._write_config_to_file`'s content), written beside
    and renamed over the old one: a stop in the middle leaves the old file whole."""
    data = {"buckets": storage.buckets, "objects": storage.objects,
            "resumable": storage.resumable, "bucket_iam_policies": storage.bucket_iam_policies,
            "soft_deleted": storage.soft_deleted}
    path = storage._store._disk_path(".meta")
    partial = path.with_name(".meta.partial")
    partial.write_bytes(json.dumps(data).encode("utf-8"))
    os.replace(partial, path)


def _serve(port: int, data_dir: str) -> None:
    from gcp_storage_emulator import server, settings, storage
    from gcp_storage_emulator.handlers import objects

    # The emulator rewrites its whole metadata file at every change: 12 ms a change once a test
    # run's buckets hold 400 objects, on the one thread that answers every request. Here the
    # objects' bytes go to disk as they come and the metadata once, when the server is stopped
    # (`StorageEmulator.stop`: SIGTERM), which is all a restart needs.
    storage.Storage._write_config_to_file = lambda self: None

    wrapped = {objects.download: _with_generation_header(objects.download)}
    for handler in (objects.insert, objects.compose, objects.delete, objects.xml_upload):
        wrapped[handler] = _generation_precondition(handler)
    server.HANDLERS = tuple((pattern, {method: wrapped.get(handler, handler)
                                       for method, handler in handlers.items()})
                            for pattern, handlers in server.HANDLERS)
    moves = tuple((rf"^{prefix}/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)/moveTo/o/"
                   rf"(?P<dest_object_id>.*[^/]+)$", {server.POST: _move})
                  for prefix in (settings.API_ENDPOINT, ""))
    server.HANDLERS = moves + server.HANDLERS  # before the generic object paths
    objects.insert = wrapped[objects.insert]  # the router's fallback for uploads without /upload
    # `objects.get` with alt=media (tensorstore's reads, ranged ones too) calls this by name.
    objects.download = wrapped[objects.download]
    storage_server = server.create_server(_HOST, port, in_memory=False, default_bucket=BUCKET,
                                          data_dir=data_dir)

    def stop(signal_number, frame) -> None:
        storage_server.stop()  # the request being answered ends; no other starts
        _write_metadata_atomically(storage_server._storage)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    storage_server.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data_dir", required=True)
    arguments = parser.parse_args()
    _serve(arguments.port, arguments.data_dir)
