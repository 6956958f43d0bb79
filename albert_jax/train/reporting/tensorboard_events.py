"""TensorBoard's event files: the records a run writes, encoded here.

An event file is a sequence of records, each `length, crc(length), Event, crc(Event)` (TFRecord
framing, masked CRC32C), and an `Event` is a protocol buffer (tensorboardX/proto/event.proto,
proto3). A run writes three kinds: the file version, the session start, and one scalar. They are
a handful of protobuf fields, encoded by hand rather than through tensorboardX, whose import
brings in PyTorch wherever it is installed: 2-3 s added to every start of a command.
tests/test_tensorboard_events.py checks the bytes against tensorboardX's own protocol buffers.
"""
from __future__ import annotations

import math
import re
import struct

import google_crc32c

FILE_VERSION = "brain.Event:2"
# tensorboardX's summary.scalar replaces these in a tag by "_" (and strips leading slashes):
# TensorBoard's tags are graph node names.
_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w.]")
# proto3 wire types
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
# field numbers of event.proto and summary.proto
_EVENT_WALL_TIME, _EVENT_STEP, _EVENT_FILE_VERSION, _EVENT_SUMMARY, _EVENT_SESSION_LOG = (
    1, 2, 3, 5, 7)
_SESSION_LOG_STATUS, _SESSION_LOG_START = 1, 1
_SUMMARY_VALUE, _VALUE_TAG, _VALUE_SIMPLE_VALUE = 1, 1, 2


def file_version_record(wall_time: float, step: int) -> bytes:
    """The first record of every event file."""
    return _framed(_event(wall_time, step, _string(_EVENT_FILE_VERSION, FILE_VERSION)))


def session_start_record(wall_time: float, step: int) -> bytes:
    """SessionLog START at `step`: TensorBoard's reader drops the points at or past `step` that
    earlier event files hold (a run resumed from its checkpoint at s starts at s + 1)."""
    session_log = _key(_SESSION_LOG_STATUS, _VARINT) + _varint(_SESSION_LOG_START)
    return _framed(_event(wall_time, step, _message(_EVENT_SESSION_LOG, session_log)))


def scalar_record(wall_time: float, step: int, tag: str, value: float) -> bytes:
    """One scalar of the plot named `tag` (cleaned as tensorboardX cleans it)."""
    tag = _INVALID_TAG_CHARACTERS.sub("_", tag).lstrip("/")
    # simple_value is one of a oneof: written even at 0.0, where a plain proto3 field is not
    summary_value = (_string(_VALUE_TAG, tag) + _key(_VALUE_SIMPLE_VALUE, _FIXED32)
                     + _float32(value))
    summary = _message(_SUMMARY_VALUE, summary_value)
    return _framed(_event(wall_time, step, _message(_EVENT_SUMMARY, summary)))


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC32C rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _framed(event: bytes) -> bytes:
    header = struct.pack("<Q", len(event))
    return (header + struct.pack("<I", masked_crc32c(header)) + event
            + struct.pack("<I", masked_crc32c(event)))


def _event(wall_time: float, step: int, payload: bytes) -> bytes:
    """An Event: wall_time and step (each left out at its default, as proto3 does), then the
    payload field."""
    encoded = b""
    if struct.pack("<d", wall_time) != bytes(8):
        encoded += _key(_EVENT_WALL_TIME, _FIXED64) + struct.pack("<d", wall_time)
    if step != 0:
        encoded += _key(_EVENT_STEP, _VARINT) + _varint(step)
    return encoded + payload


def _float32(value: float) -> bytes:
    """A float field: past float32's range it is infinite, as protobuf stores it."""
    try:
        return struct.pack("<f", value)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, value))


def _key(field_number: int, wire_type: int) -> bytes:
    return _varint(field_number << 3 | wire_type)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 is its two's complement, ten bytes
    encoded = bytearray()
    while value > 0x7F:
        encoded.append(value & 0x7F | 0x80)
        value >>= 7
    encoded.append(value)
    return bytes(encoded)


def _message(field_number: int, payload: bytes) -> bytes:
    return _key(field_number, _LENGTH_DELIMITED) + _varint(len(payload)) + payload


def _string(field_number: int, text: str) -> bytes:
    return _message(field_number, text.encode("utf-8")) if text else b""
