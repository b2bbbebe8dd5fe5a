"""PyTorch's checkpoint files as data: which files of a directory are checkpoints and their step, and
whether one is complete. A checkpoint is the one file ``torch.save`` writes; it must not import torch
(it runs where torch may be absent: standard library only, Python 3.7+). host/checkpoint.py places it.

The format, from pytorch/pytorch @ cf30153c4c131c8164ee7798e5022d810682e2cb (the torch 2.13.0 this was
checked against; tests/host/test_torch_checkpoint.py reads files real torch writes):
- torch/serialization.py ``save`` / ``_save``: a zip archive (the default since torch 1.6; with
  ``_use_new_zipfile_serialization=False`` the legacy format: pickles then raw storages, which starts
  with the pickled ``MAGIC_NUMBER``). Records ``data.pkl`` (the object, storages as persistent ids),
  ``.format_version``, ``.storage_alignment``, ``byteorder``, ``data/<key>`` per storage; the C++
  writer adds ``version`` (or ``.data/version``) and ``.data/serialization_id``. ``get_crc32_options``:
  a save may write no CRC-32 (every record's is 0). ``_open_zipfile_writer_file``: the file is written
  in place (no temporary name), so a save cut short leaves a file without its central directory.
- caffe2/serialize/inline_container.cc (read @ 3834689c5e3caabf546aa98d83f47387ca50e684; the wheel ships
  only inline_container.h): every record sits in one folder (the writer names it after the file, minus
  its extension; "archive" for a stream); the reader takes the folder from the first entry, needs
  ``.data/version`` or ``version``, and reads ``data.pkl`` (torch/serialization.py ``_load``). Records
  are stored uncompressed, aligned to 64 bytes, ZIP64; the central directory is written last
  (``writeEndOfFile``).
"""

from __future__ import annotations

import os
import re
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass
from io import BufferedReader
from typing import List, Optional, Sequence, Tuple

EXTENSIONS = (".pt", ".pth", ".ckpt", ".tar", ".bin")  # ".pth.tar": the ImageNet example's name
# The CRC-32 of the tensors' records is read up to this many bytes per checkpoint; past it they are
# checked by structure only (``inspect``). Measured on a 200 MB torch.save file: 0.065 s from the page
# cache, 0.3 s from disk, so 0.35-1.5 s at the budget, ~10 s from a 100 MB/s shared file system, while
# every NPU of the job waits. A whole pass over a multi-GB file would cost that per GB; what it finds
# beyond the structure is damage after a whole write (bit rot, a lost page), rarer than a cut save.
CRC_BUDGET_BYTES = 1 << 30
LEGACY_MAGIC = (0x1950A86A20F9469CFC6C).to_bytes(10, "little")  # torch/serialization.py MAGIC_NUMBER
LOCAL_HEADER = b"PK\x03\x04"  # torch's _is_zipfile looks for it at the start
_LOCAL_HEADER_BYTES = 30
_CHUNK = 1 << 20
_NUMBER = re.compile(r"\d+")
# a number right after one of these words is where the file belongs, not how far training got
_PLACE_WORD = re.compile(r"(?:rank|device|dev|node|npu|gpu|shard)[-_=]?$", re.IGNORECASE)


def is_candidate(name: str) -> bool:
    """Whether a file name is a checkpoint's: a known extension, not hidden (our temporaries are)."""
    return not name.startswith(".") and name.lower().endswith(EXTENSIONS)


def file_step(name: str) -> Optional[int]:
    """The step in a checkpoint's name: the last number, extensions aside, skipping a number that says
    where the file belongs (``ckpt_300.pt``, ``model-300.pth``, ``step300.pt``, ``epoch3_step300.pt``,
    ``ckpt_300_rank0.pt``: 300); None when there is none (``last.ckpt``, ``model_best.pth.tar``)."""
    stem = os.path.basename(name)
    while stem.lower().endswith(EXTENSIONS):
        stem = stem[: stem.rindex(".")]
    numbers = [m for m in _NUMBER.finditer(stem) if not _PLACE_WORD.search(stem[: m.start()])]
    return int(numbers[-1].group()) if numbers else None


def candidates(directory: str) -> List[str]:
    """The checkpoint files in ``directory`` and in the folders npulaunch placed checkpoints in
    (``npulaunch-resume-*``), as absolute paths; none when it cannot be listed."""
    directory = os.path.abspath(directory)
    found: List[str] = []
    for folder in [directory] + _resume_folders(directory):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        found += [os.path.join(folder, n) for n in names if is_candidate(n) and os.path.isfile(os.path.join(folder, n))]
    return found


def _resume_folders(directory: str) -> List[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    folders = [os.path.join(directory, n) for n in names if n.startswith("npulaunch-resume-")]
    return [f for f in folders if os.path.isdir(f) and not os.path.islink(f)]


def newness(path: str) -> Tuple[int, int, float]:
    """Sorts newest last: a step in the name first, by step then modification time; files without one
    after every numbered one, by modification time (a name's step is the script's own word and holds
    across hosts and copies; an mtime does not, and such a file may be anything: ``pretrained.bin``)."""
    step = file_step(path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        mtime = 0.0
    return (0, 0, mtime) if step is None else (1, step, mtime)


# --- whether one is complete


@dataclass(frozen=True)
class Verdict:
    """Whether a checkpoint file can be resumed from; ``why`` says what is wrong when it cannot."""

    prefix: str  # the file (named as tfbundle.Verdict's, which host/checkpoint.py reads alike)
    complete: bool
    why: str
    step: Optional[int]
    files: Tuple[str, ...]  # the file itself
    crc_checked: int = 0  # bytes of records whose CRC-32 was checked
    crc_skipped: int = 0  # bytes of tensor records past the budget, or written without a CRC-32


@dataclass(frozen=True)
class _Record:
    info: zipfile.ZipInfo
    data_start: int  # where its bytes begin in the file


class Damaged(ValueError):
    """What makes a file not a complete checkpoint."""


def inspect(path: str, crc_budget_bytes: int = CRC_BUDGET_BYTES) -> Verdict:
    """Whether ``path`` is a complete torch.save zip archive. Never raises. Checked, cheap first:
    it starts as a zip does and its central directory (written last) parses: a save cut short fails
    here; every record is in one folder, with ``data.pkl`` (a pickle: ends with STOP) and a version
    record (a number); every record's local header is where the directory says, names it, and its
    bytes end before the next record (zeros over a header fail here); the CRC-32 of every record but the
    tensors', then of the tensors' records, last written first, while ``crc_budget_bytes`` lasts."""
    path = os.path.abspath(path)
    name, step = os.path.basename(path), file_step(path)

    def verdict(why: str, checked: int = 0, skipped: int = 0) -> Verdict:
        return Verdict(path, not why, "%s %s" % (name, why) if why else "", step, (path,), checked, skipped)

    try:
        with open(path, "rb") as handle:
            checked, skipped = _check(handle, crc_budget_bytes)
    except FileNotFoundError:
        return verdict("is missing")
    except OSError as exc:
        return verdict("cannot be read: %s" % (exc.strerror or exc))
    except Damaged as exc:
        return verdict(str(exc))
    return verdict("", checked, skipped)


def _check(handle: BufferedReader, crc_budget_bytes: int) -> Tuple[int, int]:
    head = handle.read(64)
    if head[:4] != LOCAL_HEADER:
        if not head:
            raise Damaged("is empty")
        if LEGACY_MAGIC in head[:16]:
            raise Damaged(
                "is in torch's legacy format (_use_new_zipfile_serialization=False), which has no index "
                "or checksums to tell a whole file from a cut one; save with torch.save's default format"
            )
        raise Damaged("is not a torch.save zip archive (torch writes one since 1.6)")
    size = os.fstat(handle.fileno()).st_size
    try:
        archive = zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise Damaged("is cut short or damaged (its zip central directory, which torch writes last: %s)" % exc) from exc
    with archive:
        records = _records(handle, archive, size)
        small = [r for r in records if not _is_tensor(r.info)]
        tensors = sorted((r for r in records if _is_tensor(r.info)), key=lambda r: r.data_start, reverse=True)
        _check_contents(handle, archive, small)
        checked = skipped = 0
        for record in small:
            checked += _check_crc(handle, archive, record)
        budget = crc_budget_bytes
        for record in tensors:
            if record.info.file_size > budget or not record.info.CRC:
                skipped += record.info.file_size
                continue
            budget -= record.info.file_size
            checked += _check_crc(handle, archive, record)
    return checked, skipped


def _is_tensor(info: zipfile.ZipInfo) -> bool:
    return info.filename.split("/", 1)[-1].startswith("data/")


def _records(handle: BufferedReader, archive: zipfile.ZipFile, size: int) -> List[_Record]:
    """Every record, with where its bytes are; Damaged unless they lie one after another in the file."""
    infos = archive.infolist()
    if not infos:
        raise Damaged("is an empty zip archive")
    folders = sorted({i.filename.split("/", 1)[0] if "/" in i.filename else "" for i in infos})
    if len(folders) != 1 or not folders[0]:
        raise Damaged("is a zip archive torch.save did not write (its records are not in one folder)")
    names = {i.filename for i in infos}
    top = folders[0] + "/"
    if top + "data.pkl" not in names:
        raise Damaged("has no data.pkl (a zip archive, not a torch.save one)")
    if top + "version" not in names and top + ".data/version" not in names:
        raise Damaged("has no version record (a zip archive, not a torch.save one)")
    end_of_records = min(getattr(archive, "start_dir", size), size)  # where the central directory begins
    records = []
    for info in sorted(infos, key=lambda i: i.header_offset):
        handle.seek(info.header_offset)
        header = handle.read(_LOCAL_HEADER_BYTES)
        if len(header) < _LOCAL_HEADER_BYTES or header[:4] != LOCAL_HEADER:
            raise Damaged("is damaged (no record header where the directory puts %s)" % info.filename)
        name_bytes, extra_bytes = struct.unpack("<HH", header[26:30])
        stored = handle.read(name_bytes)
        if stored != info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace"):
            raise Damaged("is damaged (the record header of %s names another)" % info.filename)
        records.append(_Record(info, info.header_offset + _LOCAL_HEADER_BYTES + name_bytes + extra_bytes))
    for record, following in zip(records, records[1:] + [None]):
        limit = end_of_records if following is None else following.info.header_offset
        if record.data_start + record.info.compress_size > limit:
            raise Damaged("is damaged (%s runs past where the next record begins)" % record.info.filename)
    return records


def _check_crc(handle: BufferedReader, archive: zipfile.ZipFile, record: _Record) -> int:
    """The record's CRC-32 against the directory's (0: none written); the bytes checked."""
    info = record.info
    if info.compress_type != zipfile.ZIP_STORED:  # not torch.save's, but torch reads it: zipfile checks
        try:
            with archive.open(info) as member:
                while member.read(_CHUNK):
                    pass
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            raise Damaged("is damaged (%s: %s)" % (info.filename, exc)) from exc
        return info.file_size
    if not info.CRC and info.file_size:
        return 0  # saved with torch.serialization.set_crc32_options(False)
    crc, left = 0, info.compress_size
    handle.seek(record.data_start)
    buffer = memoryview(bytearray(min(left, _CHUNK)))
    while left:
        got = handle.readinto(buffer[: min(left, _CHUNK)])
        if not got:
            raise Damaged("is cut short (%s ends early)" % info.filename)
        crc, left = zlib.crc32(buffer[:got], crc), left - got
    if crc != info.CRC:
        raise Damaged("is damaged (the CRC-32 of %s does not match)" % info.filename)
    return info.file_size


def _check_contents(handle: BufferedReader, archive: zipfile.ZipFile, small: Sequence[_Record]) -> None:
    """The records torch.load reads first: data.pkl a whole pickle, the version a number."""
    by_name = {r.info.filename.split("/", 1)[1]: r for r in small}
    version = by_name.get(".data/version") or by_name["version"]
    if _end_of(handle, archive, by_name["data.pkl"], 1) != b".":
        raise Damaged("is damaged (data.pkl does not end as a pickle does)")
    text = _end_of(handle, archive, version, 32).strip()
    if not text.isdigit():
        raise Damaged("is damaged (its version record is %r, not a number)" % text)


def _end_of(handle: BufferedReader, archive: zipfile.ZipFile, record: _Record, count: int) -> bytes:
    """The last ``count`` bytes of a record."""
    info = record.info
    if info.compress_type != zipfile.ZIP_STORED:
        try:
            return archive.read(info)[-count:]
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            raise Damaged("is damaged (%s: %s)" % (info.filename, exc)) from exc
    handle.seek(record.data_start + max(info.compress_size - count, 0))
    return handle.read(min(count, info.compress_size))


# --- whether two files hold the same save


def same_save(source: str, target: str) -> Optional[bool]:
    """None when ``target`` is absent, else whether it holds the same save as ``source``: the same
    file, or a complete checkpoint of the same size whose zip directory lists the same records, sizes
    and CRC-32s (a copy of it; or the rank's own save of that step when every rank saves the same
    weights). Its tensors' CRC-32s are not read again: that would cost a pass over every rank's file."""
    try:
        here, there = os.stat(source), os.stat(target)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    if os.path.samestat(here, there):
        return True
    if not stat.S_ISREG(there.st_mode) or here.st_size != there.st_size:
        return False
    listed = _directory_of(source)
    if listed is None or listed != _directory_of(target):
        return False
    return inspect(target, crc_budget_bytes=0).complete


def _directory_of(path: str) -> Optional[Tuple[Tuple[str, int, int], ...]]:
    """A checkpoint's records as its zip directory lists them (name, size, CRC-32), or None when it is
    unreadable or records no CRC-32 (then nothing says two saves hold the same bytes)."""
    try:
        with zipfile.ZipFile(path) as archive:
            listed = tuple((i.filename.split("/", 1)[-1], i.file_size, i.CRC) for i in archive.infolist())
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        return None
    return listed if listed and all(crc for _, size, crc in listed if size) else None
