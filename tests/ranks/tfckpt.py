"""Real TensorFlow V2 checkpoints without TensorFlow, for test ranks that checkpoint and resume:
``write_checkpoint`` writes a tensor bundle (an index table and data shards) holding a float32
variable ``w`` and the int64 ``global_step``, then TF's ``checkpoint`` state file the way TF's
Saver does (atomically, keeping the last ``keep`` checkpoints and deleting older ones);
``read_checkpoint`` reads them back through npulaunch.host.checkpoint's index parser.
TensorFlow reads what this writes (tests/host/test_checkpoint.py checks it). Python 3.7+."""

import glob
import os
import struct
import time
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

from npulaunch.host.tfbundle import crc32c, data_path, mask_crc, parse_index, read_state, render_state

DT_FLOAT = 1  # tensorflow/core/framework/types.proto
DT_INT64 = 9
FORMATS = {DT_FLOAT: "f", DT_INT64: "q"}
RESTART_INTERVAL = 16  # table::Options.block_restart_interval


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s take ten bytes, as protobuf writes them
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, value: object) -> bytes:
    """A protobuf field: an int as a varint, bytes length-delimited."""
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    assert isinstance(value, int)
    return _varint(number << 3) + _varint(value)


def _entry(dtype: int, shape: Sequence[int], shard: int, offset: int, data: bytes) -> bytes:
    """A BundleEntryProto (proto3: zero values are left out)."""
    dims = b"".join(_field(2, _field(1, size) if size else b"") for size in shape)
    proto = _field(1, dtype) + _field(2, dims)
    for number, value in ((3, shard), (4, offset), (5, len(data))):
        proto += _field(number, value) if value else b""
    return proto + _varint(6 << 3 | 5) + struct.pack("<I", mask_crc(crc32c(data)))


def _block(items: Sequence[Tuple[bytes, bytes]], interval: int) -> bytes:
    """A table block: prefix-compressed keys, a restart point every ``interval`` entries."""
    out, restarts, last = bytearray(), [], b""
    for n, (key, value) in enumerate(items):
        shared = 0
        if n % interval:
            while shared < min(len(key), len(last)) and key[shared] == last[shared]:
                shared += 1
        else:
            restarts.append(len(out))
        out += _varint(shared) + _varint(len(key) - shared) + _varint(len(value)) + key[shared:] + value
        last = key
    restarts = restarts or [0]
    return bytes(out) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def _table(items: Sequence[Tuple[bytes, bytes]]) -> bytes:
    """A LevelDB table of sorted items in one data block, as TF's TableBuilder lays it out."""
    out = bytearray()

    def add_block(contents: bytes) -> bytes:
        handle = _varint(len(out)) + _varint(len(contents))
        out.extend(contents + b"\0" + struct.pack("<I", mask_crc(crc32c(b"\0", crc32c(contents)))))
        return handle

    data = add_block(_block(items, RESTART_INTERVAL))
    meta = add_block(_block([], 1))
    last = items[-1][0]
    successor = next((last[:i] + bytes([b + 1]) for i, b in enumerate(last) if b != 0xFF), last)
    index = add_block(_block([(successor, data)], 1))
    footer = (meta + index).ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    return bytes(out + footer)


def _write_file(path: str, data: bytes) -> None:
    """Write aside and rename into place, as TF's file system does for a bundle's files."""
    temp = "%s.tempstate%d" % (path, uuid.uuid4().int % 10**18)
    with open(temp, "wb") as handle:
        handle.write(data)
    os.rename(temp, path)


def write_bundle(prefix: str, tensors: Dict[str, Tuple[int, Sequence[int], bytes]], num_shards: int = 1) -> None:
    """A V2 checkpoint of ``tensors`` (name -> dtype, shape, bytes): the data shards first, the
    index last. With more than one shard, the tensors are dealt to the shards in name order."""
    shards = [bytearray() for _ in range(num_shards)]
    entries = []
    for n, name in enumerate(sorted(tensors)):
        dtype, shape, data = tensors[name]
        shard = n % num_shards
        entries.append((name.encode(), _entry(dtype, shape, shard, len(shards[shard]), data)))
        shards[shard] += data
    for shard, data in enumerate(shards):
        _write_file(data_path(prefix, shard, num_shards), bytes(data))
    header = _field(1, num_shards) + _field(3, _field(1, 1))  # num_shards, version {producer: 1}
    _write_file(prefix + ".index", _table([(b"", header), *entries]))


def write_checkpoint(
    directory: str,
    step: int,
    w: Sequence[float],
    name: str = "model.ckpt",
    num_shards: int = 1,
    keep: int = 5,
    relative: bool = True,
) -> str:
    """Save ``w`` and ``global_step`` as ``directory/name-step`` and record it in the state file;
    the checkpoints beyond the last ``keep`` are deleted, as Saver(max_to_keep=keep) does.
    ``relative``: the state file's paths relative to the directory (else absolute). The prefix."""
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, "%s-%d" % (name, step))
    tensors = {
        "w": (DT_FLOAT, [len(w)], struct.pack("<%df" % len(w), *w)),
        "global_step": (DT_INT64, [], struct.pack("<q", step)),
    }
    write_bundle(prefix, tensors, num_shards)
    state = read_state(directory)
    listed: List[Tuple[str, Optional[float]]] = []
    if state:
        stamps = state.all_model_checkpoint_timestamps
        aligned = len(stamps) == len(state.all_model_checkpoint_paths)
        for n, path in enumerate(state.all_model_checkpoint_paths):
            listed += [(path, stamps[n] if aligned else None)] if path != prefix else []
    listed.append((prefix, time.time()))
    paths = [path for path, _ in listed[-keep:]]
    stamps = [stamp for _, stamp in listed[-keep:] if stamp is not None]
    text = render_state(paths, stamps if len(stamps) == len(paths) else [], relative_to=directory if relative else "")
    _write_file(os.path.join(directory, "checkpoint"), text.encode())
    for old, _ in listed[:-keep]:
        for path in [old + ".index", *glob.glob(glob.escape(old) + ".data-?????-of-?????")]:
            if os.path.exists(path):
                os.unlink(path)
    return prefix


def read_checkpoint(prefix: str) -> Dict[str, object]:
    """{"w": [floats], "global_step": int} of a checkpoint, each tensor's checksum verified."""
    with open(prefix + ".index", "rb") as handle:
        index = parse_index(handle.read())
    found: Dict[str, object] = {}
    for entry in index.entries:
        with open(data_path(prefix, entry.shard_id, index.num_shards), "rb") as handle:
            handle.seek(entry.offset)
            data = handle.read(entry.size)
        if len(data) != entry.size or mask_crc(crc32c(data)) != entry.crc32c:
            raise ValueError("%s: tensor %s is damaged" % (prefix, entry.name))
        kind = FORMATS[entry.dtype]
        values: List[object] = list(struct.unpack("<%d%s" % (entry.size // struct.calcsize(kind), kind), data))
        found[entry.name] = values if entry.shape else values[0]
    return found


def latest(directory: str) -> Optional[str]:
    """The state file's latest checkpoint prefix (absolute), or None."""
    state = read_state(directory)
    return state.model_checkpoint_path if state else None
