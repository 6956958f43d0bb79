"""The event records a run writes are byte for byte those of tensorboardX's own protocol buffers
and framing (tensorboardX/proto/event.proto serialized by the protobuf library)."""
import random
import struct

import pytest
from tensorboardX import record_writer, summary
from tensorboardX.proto import event_pb2

from albert_jax.train.reporting import tensorboard_events


def framed(event: event_pb2.Event) -> bytes:
    data = event.SerializeToString()
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", record_writer.masked_crc32c(header)) + data
            + struct.pack("<I", record_writer.masked_crc32c(data)))


WALL_TIMES = [0.0, 1.5, 1795000000.123456]
STEPS = [0, 1, 127, 128, 300, 2**31 + 5, 10**12]


@pytest.mark.parametrize("wall_time", WALL_TIMES)
@pytest.mark.parametrize("step", STEPS)
def test_file_version_and_session_start(wall_time, step):
    assert tensorboard_events.file_version_record(wall_time, step) == framed(event_pb2.Event(
        wall_time=wall_time, step=step, file_version="brain.Event:2"))
    assert tensorboard_events.session_start_record(wall_time, step) == framed(event_pb2.Event(
        wall_time=wall_time, step=step,
        session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))


@pytest.mark.parametrize("tag", ["loss", "dev/accuracy", "train/mlm_accuracy",
                                 "dev/f1_B-PER x", "/leading/slash", "Größe/über", "a:b[c]",
                                 "dev/" + "x" * 200])
@pytest.mark.parametrize("value", [0.0, -0.0, 1.0, -2.5, 1e-30, 3.4e38, 0.1234567, 1e39, -1e300])
def test_scalars(tag, value):
    for wall_time, step in ((0.0, 0), (1795000000.5, 300)):
        assert tensorboard_events.scalar_record(wall_time, step, tag, value) == framed(
            event_pb2.Event(wall_time=wall_time, step=step, summary=summary.scalar(tag, value)))


def test_random_scalars_and_checksums():
    rng = random.Random(0)
    for _ in range(500):
        tag = "".join(rng.choice("ab/_.-: é") for _ in range(rng.randrange(1, 30)))
        value = rng.uniform(-1e6, 1e6) * rng.choice([1, 1e-20, 0])
        step, wall_time = rng.randrange(0, 2**40), rng.uniform(0, 2e9)
        assert tensorboard_events.scalar_record(wall_time, step, tag, value) == framed(
            event_pb2.Event(wall_time=wall_time, step=step, summary=summary.scalar(tag, value)))
        data = rng.randbytes(rng.randrange(0, 100))
        assert tensorboard_events.masked_crc32c(data) == record_writer.masked_crc32c(data)
