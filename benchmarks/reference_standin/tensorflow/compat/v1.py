"""`tf` as the reference's create_pretraining_data.py and tokenization.py use it, TF 1.x API:
flags (absl's, as TF's are), app.run, gfile.GFile/Glob, logging (Python's logging under the
name "tensorflow", as TF's absl-based `tf.logging`), train.Example/Features/Feature/Int64List/
FloatList (the tf.Example protos TFDS ships, tensorflow/core/example/*.proto copied, loaded
without importing TFDS) and python_io.TFRecordWriter (TFRecord framing: uint64 length, masked
CRC-32C of the length, data, masked CRC-32C of the data).
"""
import glob as _glob
import importlib.util
import logging as _logging
import os
import struct
import sys
import types

import google_crc32c
from absl import app as _absl_app
from absl import flags  # noqa: F401  (tf.flags)

# ---- tf.train: the tf.Example protos (TFDS's generated copy, imported without TFDS itself).
_PROTO_DIR = os.path.join(os.path.dirname(importlib.util.find_spec("tensorflow_datasets").origin),
                          "proto")
for _name, _path in (("tensorflow_datasets", []), ("tensorflow_datasets.proto", [_PROTO_DIR])):
    _module = types.ModuleType(_name)
    _module.__path__ = _path
    sys.modules.setdefault(_name, _module)
from tensorflow_datasets.proto import tf_example_generated_pb2 as _example_pb2  # noqa: E402
from tensorflow_datasets.proto import tf_feature_generated_pb2 as _feature_pb2  # noqa: E402

train = types.SimpleNamespace(Example=_example_pb2.Example, Features=_feature_pb2.Features,
                              Feature=_feature_pb2.Feature, Int64List=_feature_pb2.Int64List,
                              FloatList=_feature_pb2.FloatList)

# ---- tf.gfile: local files only.
gfile = types.SimpleNamespace(GFile=open, Glob=lambda pattern: sorted(_glob.glob(pattern)))

# ---- tf.app.run: main defaults to the __main__ module's, as in TF.
def _run(main=None, argv=None):
    _absl_app.run(main or sys.modules["__main__"].main, argv)


app = types.SimpleNamespace(run=_run)

# ---- tf.logging: TF's logger, whose records absl's handler (on the root logger) writes.
_logger = _logging.getLogger("tensorflow")
_logger.setLevel(_logging.WARNING)
logging = types.SimpleNamespace(
    INFO=_logging.INFO, WARN=_logging.WARNING, info=_logger.info, warning=_logger.warning,
    set_verbosity=_logger.setLevel)


# ---- tf.python_io.TFRecordWriter
def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class TFRecordWriter:
    def __init__(self, path: str):
        self._file = open(path, "wb")

    def write(self, record: bytes) -> None:
        length = struct.pack("<Q", len(record))
        self._file.write(length + struct.pack("<I", _masked_crc(length)) + record
                         + struct.pack("<I", _masked_crc(record)))

    def close(self) -> None:
        self._file.close()


python_io = types.SimpleNamespace(TFRecordWriter=TFRecordWriter)
