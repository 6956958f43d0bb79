"""The storage emulator the bucket tests run against behaves as Cloud Storage does where our code
relies on it: objects survive an outage, a create-if-absent is refused when the object exists,
and downloads carry the generation tensorstore reads back."""
import urllib.request

import pytest
from etils import epath
from gcp_storage_emulator import storage

import storage_emulator as emulator_server


def test_objects_survive_a_restart_of_the_emulator(storage_emulator, bucket):
    path = epath.Path(bucket) / "folder" / "notes.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("kept")
    storage_emulator.stop()
    storage_emulator.start()
    assert path.read_text() == "kept"
    assert [p.name for p in path.parent.iterdir()] == ["notes.txt"]


def test_the_metadata_file_is_replaced_whole_never_cut(tmp_path):
    # The emulator writes its metadata when it is stopped; cut short, the old file must stay.
    first = storage.Storage(data_dir=str(tmp_path))
    first.buckets = {"b": {"name": "b"}}
    first.objects = {"b": {"x" * 300: {"size": "1"}}}
    emulator_server._write_metadata_atomically(first)
    again = storage.Storage(data_dir=str(tmp_path))
    assert (again.buckets, again.objects) == (first.buckets, first.objects)
    assert not list(tmp_path.rglob(".meta.partial"))


def test_a_create_if_absent_is_refused_once_the_object_exists(storage_emulator, bucket):
    from google.api_core import exceptions
    from google.cloud import storage

    name = bucket.split("/", 3)[3] + "/lock"
    blob = storage.Client(project="test").bucket(storage_emulator.bucket).blob(name)
    blob.upload_from_string("first", if_generation_match=0)
    with pytest.raises(exceptions.PreconditionFailed):
        blob.upload_from_string("second", if_generation_match=0)
    assert blob.download_as_bytes() == b"first"


def test_a_download_names_the_objects_generation(storage_emulator, bucket):
    path = epath.Path(bucket) / "object"
    path.write_bytes(b"x")
    name = str(path).split("/", 3)[3]
    with urllib.request.urlopen(f"{storage_emulator.url}/download/storage/v1/b/"
                                f"{storage_emulator.bucket}/o/{name}?alt=media") as answer:
        assert answer.headers["x-goog-generation"].isdigit()


def test_a_rename_is_the_services_move(bucket, caplog):
    # gcsfs renames with objects.move; on a server without it, it retries ~30 s, then copies.
    old, new = epath.Path(bucket) / "shard.incomplete", epath.Path(bucket) / "shard-00000-of-00001"
    old.write_bytes(b"examples")
    with caplog.at_level("WARNING", logger="gcsfs"):
        old.rename(new)
    assert new.read_bytes() == b"examples" and not old.exists()
    assert "moveTo" not in caplog.text
