"""TensorFlow's checkpoint files as data: the tensor bundle's index (a LevelDB table of tensor name ->
BundleEntryProto, with TF's masked crc32c on each block), whether a V2 checkpoint is complete (its index
reads, every data shard it names is there and long enough), and the directory's ``checkpoint`` state file
(a text-format CheckpointState proto). Formats from tensorflow/core/util/tensor_bundle/tensor_bundle.cc,
tensorflow/core/lib/io/format.cc and tensorflow/python/training/checkpoint_management.py; checked
against files TensorFlow writes (tests/host/test_checkpoint.py). Standard library only, Python 3.7+."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

log = logging.getLogger(__name__)

STATE_FILE = "checkpoint"  # TF's default latest_filename
TABLE_MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic, as TF's lib/io/format.h has it
FOOTER_BYTES = 48  # two BlockHandles padded to 40 bytes, then the 8-byte magic
TRAILER_BYTES = 5  # after each block: compression type (1 byte), masked crc32c (4 bytes)
MAX_SHARDS = 1 << 16  # more than any real bundle; a bigger num_shards is a damaged header
_STEP = re.compile(r"-(\d+)$")


# --- crc32c (Castagnoli), as TF's lib/hash/crc32c: tables and index blocks carry it masked

_CRC_TABLE: List[int] = []  # filled at first use: nothing is computed at import


def crc32c(data: bytes, crc: int = 0) -> int:
    """The CRC-32C of ``data``, continuing ``crc`` (crc32c::Extend)."""
    if not _CRC_TABLE:
        for byte in range(256):
            value = byte
            for _ in range(8):
                value = (value >> 1) ^ 0x82F63B78 if value & 1 else value >> 1
            _CRC_TABLE.append(value)
    table = _CRC_TABLE
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """crc32c::Mask: what TF stores (a crc of data that holds crcs is then not degenerate)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# --- the tensor bundle's index: a LevelDB table of tensor name -> BundleEntryProto


@dataclass(frozen=True)
class TensorEntry:
    """One BundleEntryProto: where a tensor's bytes are in which data shard."""

    name: str
    dtype: int  # DataType enum: 1 float32, 9 int64, ...
    shape: Tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int  # masked, as stored
    sliced: bool  # metadata of a partitioned tensor: its slices are entries of their own


@dataclass(frozen=True)
class BundleIndex:
    """A tensor bundle's index: how many data shards it has, and its tensors (the header left out)."""

    num_shards: int
    entries: Tuple[TensorEntry, ...]


def _varint(data: bytes, pos: int, limit: int) -> Tuple[int, int]:
    result = shift = 0
    while pos < limit and shift < 70:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ValueError("damaged (a varint runs past its end)")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(message: bytes) -> Iterator[Tuple[int, Union[int, bytes]]]:
    """(field number, value) of a protobuf message: an int, or bytes when length-delimited."""
    pos, end = 0, len(message)
    while pos < end:
        key, pos = _varint(message, pos, end)
        wire = key & 7
        value: Union[int, bytes]
        if wire == 0:
            value, pos = _varint(message, pos, end)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > end:
                raise ValueError("damaged (a protobuf field runs past its message)")
            value, pos = int.from_bytes(message[pos : pos + width], "little"), pos + width
        elif wire == 2:
            length, pos = _varint(message, pos, end)
            if pos + length > end:
                raise ValueError("damaged (a protobuf field runs past its message)")
            value, pos = message[pos : pos + length], pos + length
        else:
            raise ValueError("damaged (protobuf wire type %d)" % wire)
        yield key >> 3, value


def _block(body: bytes, offset: int, size: int, what: str) -> bytes:
    """A table block's contents, its trailer checked as TF's table::ReadBlock does."""
    end = offset + size
    if end + TRAILER_BYTES > len(body):
        raise ValueError("truncated (its %s block ends past the file's end)" % what)
    kind, stored = body[end], int.from_bytes(body[end + 1 : end + TRAILER_BYTES], "little")
    if mask_crc(crc32c(body[end : end + 1], crc32c(body[offset:end]))) != stored:
        raise ValueError("damaged (%s block checksum mismatch)" % what)
    if kind != 0:
        raise ValueError("not readable here (%s block compressed, type %d)" % (what, kind))
    return body[offset:end]


def _block_entries(block: bytes) -> Iterator[Tuple[bytes, bytes]]:
    """(key, value) of a block: prefix-compressed keys, then restart offsets and their count."""
    if len(block) < 4:
        raise ValueError("damaged (a block too short for its restart count)")
    limit = len(block) - 4 - 4 * int.from_bytes(block[-4:], "little")
    if limit < 0:
        raise ValueError("damaged (a block's restart array is longer than the block)")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = _varint(block, pos, limit)
        own, pos = _varint(block, pos, limit)
        length, pos = _varint(block, pos, limit)
        if shared > len(key) or pos + own + length > limit:
            raise ValueError("damaged (a block entry runs past its block)")
        key = key[:shared] + block[pos : pos + own]
        yield key, block[pos + own : pos + own + length]
        pos += own + length


def _entry(key: bytes, value: bytes) -> TensorEntry:
    found: Dict[int, int] = {}
    shape: List[int] = []
    sliced = False
    for number, got in _fields(value):
        if number == 2 and isinstance(got, bytes):
            dims = [dim for n, dim in _fields(got) if n == 2 and isinstance(dim, bytes)]
            shape = [next((_signed(s) for n, s in _fields(dim) if n == 1 and isinstance(s, int)), 0) for dim in dims]
        elif number == 7:
            sliced = True
        elif isinstance(got, int):
            found[number] = got
    name = key.decode("utf-8", "replace")
    shard, offset, size = (_signed(found.get(n, 0)) for n in (3, 4, 5))
    if shard < 0 or offset < 0 or size < 0:
        raise ValueError("damaged (entry %r has a negative shard, offset or size)" % name)
    return TensorEntry(name, found.get(1, 0), tuple(shape), shard, offset, size, found.get(6, 0), sliced)


def parse_index(data: bytes) -> BundleIndex:
    """A tensor bundle's index file, read whole; ValueError says what is wrong ("truncated (...)")."""
    if len(data) < FOOTER_BYTES or int.from_bytes(data[-8:], "little") != TABLE_MAGIC:
        raise ValueError("truncated (no table footer)")
    body = data[:-FOOTER_BYTES]
    pos = len(body)
    for _ in range(2):  # the metaindex handle: TF writes an empty metaindex block and never reads it
        _, pos = _varint(data, pos, len(data) - 8)
    index_offset, pos = _varint(data, pos, len(data) - 8)
    index_size, pos = _varint(data, pos, len(data) - 8)
    num_shards = 0
    entries: List[TensorEntry] = []
    for _, handle in _block_entries(_block(body, index_offset, index_size, "index")):
        offset, at = _varint(handle, 0, len(handle))
        size, _ = _varint(handle, at, len(handle))
        for key, value in _block_entries(_block(body, offset, size, "data")):
            if not num_shards:  # the header is the entry with the empty key, always the first
                if key:
                    raise ValueError("damaged (no header entry)")
                num_shards = _signed(next((v for n, v in _fields(value) if n == 1 and isinstance(v, int)), 0))
                if not 0 < num_shards <= MAX_SHARDS:
                    raise ValueError("damaged (its header says %d data shards)" % num_shards)
            else:
                entries.append(_entry(key, value))
    if not num_shards:
        raise ValueError("damaged (no header entry)")
    for entry in entries:
        if entry.shard_id >= num_shards and not entry.sliced:
            raise ValueError("damaged (entry %r is in shard %d of %d)" % (entry.name, entry.shard_id, num_shards))
    return BundleIndex(num_shards, tuple(entries))


def data_path(prefix: str, shard: int, num_shards: int) -> str:
    """A data shard's file, as TF's DataFilename names it."""
    return "%s.data-%05d-of-%05d" % (prefix, shard, num_shards)


def checkpoint_step(prefix: str) -> Optional[int]:
    """The global step in a prefix's name (``model.ckpt-1000`` -> 1000), or None."""
    match = _STEP.search(os.path.basename(prefix))
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Verdict:
    """Whether a checkpoint can be resumed from; ``why`` names the file at fault when it cannot."""

    prefix: str
    complete: bool
    why: str
    step: Optional[int]
    files: Tuple[str, ...]  # the index, then every data shard (only the index when it is unreadable)


def inspect(prefix: str) -> Verdict:
    """Read ``prefix``.index and check that every data shard it names is there and long enough
    for the tensors it holds (the data's checksums are not read). Never raises."""
    prefix = os.path.abspath(prefix)
    name, step, index = os.path.basename(prefix), checkpoint_step(prefix), prefix + ".index"
    try:
        with open(index, "rb") as handle:
            bundle = parse_index(handle.read())
    except FileNotFoundError:
        return Verdict(prefix, False, "%s.index is missing" % name, step, (index,))
    except OSError as exc:
        return Verdict(prefix, False, "%s.index cannot be read: %s" % (name, exc.strerror or exc), step, (index,))
    except ValueError as exc:
        return Verdict(prefix, False, "%s.index is %s" % (name, exc), step, (index,))
    shards = [data_path(prefix, shard, bundle.num_shards) for shard in range(bundle.num_shards)]
    need = [0] * bundle.num_shards
    for entry in bundle.entries:
        if not entry.sliced:
            need[entry.shard_id] = max(need[entry.shard_id], entry.offset + entry.size)
    files = (index, *shards)
    for path, needed in zip(shards, need):
        shard = os.path.basename(path)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return Verdict(prefix, False, "%s is missing" % shard, step, files)
        except OSError as exc:
            return Verdict(prefix, False, "%s cannot be read: %s" % (shard, exc.strerror or exc), step, files)
        if size < needed:
            return Verdict(prefix, False, "%s is %d bytes, its index needs %d" % (shard, size, needed), step, files)
    return Verdict(prefix, True, "", step, files)


# --- the `checkpoint` state file: a text-format CheckpointState proto

_TOKEN = re.compile(
    rb"""\s+|\#[^\n]*|(?P<name>[A-Za-z_]\w*)\s*:|(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
    rb"""|(?P<num>[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf(?:inity)?|nan))"""
)
_ESCAPE = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.S)
_SIMPLE = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"a": b"\a", b"b": b"\b", b"f": b"\f", b"v": b"\v"}
_PATHS = ("model_checkpoint_path", "all_model_checkpoint_paths")
_FLOATS = ("all_model_checkpoint_timestamps", "last_preserved_timestamp")


@dataclass(frozen=True)
class CheckpointState:
    """A directory's state file, its paths made absolute as TF's get_checkpoint_state does."""

    directory: str
    model_checkpoint_path: str
    all_model_checkpoint_paths: Tuple[str, ...]  # oldest first
    all_model_checkpoint_timestamps: Tuple[float, ...]
    last_preserved_timestamp: Optional[float]


def _unescape(match: Any) -> bytes:  # re.Match[bytes], a generic only from Python 3.9
    octal, hexa, char = match.groups()
    if octal or hexa:
        return bytes([int(octal, 8) & 0xFF if octal else int(hexa, 16)])
    return _SIMPLE.get(char, char)


def parse_state(text: bytes, directory: str) -> CheckpointState:
    """A state file's text; ValueError says what TF would not accept in it."""
    values: Dict[str, list] = {name: [] for name in _PATHS + _FLOATS}
    field = ""
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise ValueError("unreadable text at byte %d" % pos)
        pos = match.end()
        if match.group("name"):
            field = match.group("name").decode()
            if field not in values:
                raise ValueError("unknown field %s" % field)
        elif match.group("str") and field in _PATHS:
            values[field].append(os.fsdecode(_ESCAPE.sub(_unescape, match.group("str")[1:-1])))
            field = ""
        elif match.group("num") and field in _FLOATS:
            values[field].append(float(match.group("num")))
            field = ""
        elif match.group("str") or match.group("num"):
            raise ValueError("a value where none belongs at byte %d" % match.start())
    if field:
        raise ValueError("field %s has no value" % field)
    if not values["model_checkpoint_path"]:
        raise ValueError("no model_checkpoint_path")

    def absolute(path: str) -> str:
        return os.path.normpath(os.path.join(directory, path))

    return CheckpointState(
        directory,
        absolute(values["model_checkpoint_path"][-1]),
        tuple(absolute(p) for p in values["all_model_checkpoint_paths"]),
        tuple(values["all_model_checkpoint_timestamps"]),
        values["last_preserved_timestamp"][-1] if values["last_preserved_timestamp"] else None,
    )


def load_state(directory: str) -> Tuple[Optional[CheckpointState], str]:
    """The state of ``directory``, or None and why ("" when there is no state file)."""
    directory = os.path.abspath(directory)
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, "rb") as handle:
            return parse_state(handle.read(), directory), ""
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, "cannot be read: %s" % (exc.strerror or exc)
    except ValueError as exc:
        return None, "is not a CheckpointState (%s)" % exc


def read_state(directory: str) -> Optional[CheckpointState]:
    """The ``checkpoint`` state file of ``directory``; None when it is missing or unparsable."""
    state, why = load_state(directory)
    if why:
        log.warning("%s %s", os.path.join(directory, STATE_FILE), why)
    return state


def _quote(path: str) -> str:
    """A path as protobuf's text format writes a string (C escapes, octal for other bytes)."""
    special = {9: "\\t", 10: "\\n", 13: "\\r", 34: '\\"', 39: "\\'", 92: "\\\\"}
    return '"%s"' % "".join(special.get(b, chr(b) if 32 <= b < 127 else "\\%03o" % b) for b in os.fsencode(path))


def render_state(
    paths: Sequence[str], timestamps: Sequence[float] = (), preserved: Optional[float] = None, relative_to: str = ""
) -> str:
    """The state file's text for ``paths`` (oldest first; the last is the latest), made relative to
    the directory ``relative_to`` where inside it; ``timestamps``: one a path, or none."""
    relative = [os.path.relpath(p, relative_to) if relative_to and inside(p, relative_to) else p for p in paths]
    lines = ["model_checkpoint_path: %s" % _quote(relative[-1])]
    lines += ["all_model_checkpoint_paths: %s" % _quote(p) for p in relative]
    lines += ["all_model_checkpoint_timestamps: %r" % float(t) for t in timestamps]
    lines += ["last_preserved_timestamp: %r" % float(preserved)] if preserved is not None else []
    return "\n".join(lines) + "\n"


def inside(path: str, directory: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), directory]) == directory
