"""Resuming after a fault: find the newest complete checkpoint among the ranks' checkpoint directories
and make every rank's directory hold it, so all ranks resume from one step. Two kinds: ``tf``, a
TensorFlow V2 checkpoint (TF's own files: the ``checkpoint`` state file, the tensor bundle's index table:
tfbundle.py), and ``torch``, one file torch.save wrote (torchckpt.py). Standard library only, Python
3.7+. Never deletes or overwrites a file the training script wrote."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import stat
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from npulaunch.host import torchckpt
from npulaunch.host.errors import NpulaunchError
from npulaunch.host.tfbundle import STATE_FILE, CheckpointState, checkpoint_step, inspect, load_state, render_state

log = logging.getLogger(__name__)

PREVIOUS_STATE_FILE = "checkpoint.npulaunch-previous"
RESUME_FOLDER = "npulaunch-resume-"  # + step: where a checkpoint goes when its names are taken
TEMP_MARK = ".npulaunch-tmp-"  # our temporary files: "." + name + TEMP_MARK + host-pid
KINDS = ("tf", "torch")  # a TensorFlow V2 checkpoint (a prefix's files), a torch.save file


class ResumeError(NpulaunchError):
    """A checkpoint could not be made ready to resume from: ``path`` says where, ``reason`` why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__("%s: %s" % (path, reason))


# --- the newest complete checkpoint of several directories


@dataclass(frozen=True)
class Found:
    """The checkpoint to resume from (``prefix`` None: none anywhere; of kind torch, the file) and what
    was passed over."""

    prefix: Optional[str]
    step: Optional[int]
    directory: Optional[str]
    skipped: Tuple[Tuple[str, str], ...]  # (prefix, why) of newer ones that were damaged or partial
    unreadable: Tuple[Tuple[str, str], ...] = ()  # (state file, why) that could not be read
    kind: str = "tf"  # one of KINDS

    def describe(self) -> str:
        """``skipped model.ckpt-300 in /x: <why>; resuming from model.ckpt-200 in /y``."""
        parts = ["skipped %s in %s: %s" % (os.path.basename(p), os.path.dirname(p), why) for p, why in self.skipped]
        parts += ["ignored %s: it %s" % (path, why) for path, why in self.unreadable]
        if self.prefix is None:
            parts.append("no complete checkpoint: starting from the beginning")
        else:
            parts.append("resuming from %s in %s" % (os.path.basename(self.prefix), os.path.dirname(self.prefix)))
        return "; ".join(parts)


def _newness(prefix: str) -> Tuple[int, float]:
    step = checkpoint_step(prefix)
    try:
        mtime = os.stat(prefix + ".index").st_mtime
    except OSError:
        mtime = 0.0
    return (-1 if step is None else step, mtime)


def newest_complete(directories: Sequence[str], kind: str = "tf") -> Found:
    """Of every checkpoint the directories hold, the newest complete one; the newer ones passed over
    are in ``skipped``. ``tf``: those the state files list, by step, then by the index's modification
    time. ``torch``: the checkpoint files (torchckpt.candidates), by torchckpt.newness."""
    if kind == "torch":
        return _newest_torch(directories)
    if kind != "tf":
        raise ValueError("checkpoint kind %r: one of %s" % (kind, ", ".join(KINDS)))
    candidates: Dict[str, Tuple[str, str]] = {}  # real path -> (prefix, directory)
    unreadable: List[Tuple[str, str]] = []
    for directory in directories:
        state, why = load_state(directory)
        if state is None:
            if why:
                unreadable.append((os.path.join(os.path.abspath(directory), STATE_FILE), why))
            continue
        for prefix in (*state.all_model_checkpoint_paths, state.model_checkpoint_path):
            candidates.setdefault(os.path.realpath(prefix), (prefix, state.directory))
    skipped: List[Tuple[str, str]] = []
    for prefix, directory in sorted(candidates.values(), key=lambda c: _newness(c[0]), reverse=True):
        verdict = inspect(prefix)
        if verdict.complete:
            return Found(prefix, verdict.step, directory, tuple(skipped), tuple(unreadable))
        skipped.append((prefix, verdict.why))
    return Found(None, None, None, tuple(skipped), tuple(unreadable))


def _newest_torch(directories: Sequence[str]) -> Found:
    seen = set()  # (device, inode): one file seen through hard links or symbolic links once
    candidates: List[Tuple[str, str]] = []  # (file, directory)
    for directory in directories:
        directory = os.path.abspath(directory)
        for path in torchckpt.candidates(directory):
            try:
                there = os.stat(path)
            except OSError:
                continue
            if (there.st_dev, there.st_ino) not in seen:
                seen.add((there.st_dev, there.st_ino))
                candidates.append((path, directory))
    skipped: List[Tuple[str, str]] = []
    for path, directory in sorted(candidates, key=lambda c: torchckpt.newness(c[0]), reverse=True):
        verdict = torchckpt.inspect(path)
        if verdict.complete:
            return Found(path, verdict.step, directory, tuple(skipped), kind="torch")
        skipped.append((path, verdict.why))
    return Found(None, None, None, tuple(skipped), kind="torch")


# --- placing it in a rank's directory


@dataclass(frozen=True)
class Placed:
    """Where a directory's ranks resume from (a prefix, or of kind torch a file), and how many files were
    hard-linked or copied there."""

    prefix_in_directory: str
    linked: int
    copied: int
    unchanged: bool  # the directory already resumed from it (or from a newer one): nothing written


def place(found: Found, directory: str) -> Placed:
    """Make ``directory`` hold ``found``'s checkpoint and its state file name it: the files are
    hard-linked (or copied) under temporary names, flushed and renamed into place, then the state file
    is written, atomically. Creates ``directory``. Raises ResumeError. Of kind torch: ``_place_torch``."""
    if found.prefix is None:
        raise ResumeError(directory, "there is no checkpoint to place")
    directory = os.path.abspath(directory)
    _make_folder(directory)
    if found.kind == "torch":
        return _place_torch(found.prefix, directory)
    state, _ = load_state(directory)
    if state is not None:
        current = inspect(state.model_checkpoint_path)
        same = os.path.realpath(current.prefix) == os.path.realpath(found.prefix)
        newer = found.step is not None and current.step is not None and current.step >= found.step
        if current.complete and (same or newer):
            return Placed(current.prefix, 0, 0, True)
    source = inspect(found.prefix)
    if not source.complete:
        raise ResumeError(found.prefix, source.why)
    meta = source.prefix + ".meta"  # TF1's MetaGraphDef: scripts may import_meta_graph(latest + ".meta")
    files = source.files + ((meta,) if os.path.isfile(meta) else ())
    folder, todo = _choose_folder(directory, source.prefix, files)
    linked, copied = _bring(folder, todo)
    target = os.path.join(folder, os.path.basename(source.prefix))
    placed = inspect(target)
    if not placed.complete:
        raise ResumeError(target, "differs from %s: %s" % (source.prefix, placed.why))
    _write_state(directory, state, target)
    return Placed(target, linked, copied, False)


def _place_torch(source: str, directory: str) -> Placed:
    """The file, under its own name, in ``directory`` (or in a resume folder of it when the name there
    holds another file), copied, then renamed into place; a file there that is the same save
    (torchckpt.same_save) is used as it is. Copied, never hard-linked: TF's savers write new files and
    rename them, but torch.save writes into the name it is given, so ranks saving again under the name
    they resumed from (``latest.pt``) would all write into one shared file at once."""
    still = torchckpt.inspect(source, crc_budget_bytes=0)  # changed since it was found?
    if not still.complete:
        raise ResumeError(source, still.why)
    name = os.path.basename(source)
    step = torchckpt.file_step(name)
    folder, todo = _choose_folder(directory, source, [source], torchckpt.same_save, step)
    linked, copied = _bring(folder, todo, link=False)
    target = os.path.join(folder, name)
    if copied:  # a copy is checked as the file was
        placed = torchckpt.inspect(target)
        if not placed.complete:
            raise ResumeError(target, "differs from %s: %s" % (source, placed.why))
    return Placed(target, linked, copied, not todo)


def _same(source: str, target: str) -> Optional[bool]:
    """None when ``target`` is absent, else whether it holds the same file (same inode, or same size)."""
    try:
        there = os.stat(target)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    here = os.stat(source)
    return stat.S_ISREG(there.st_mode) and (os.path.samestat(here, there) or here.st_size == there.st_size)


def _choose_folder(
    directory: str,
    prefix: str,
    files: Sequence[str],
    same: Callable[[str, str], Optional[bool]] = _same,
    step: Optional[int] = None,
) -> Tuple[str, List[Tuple[str, str]]]:
    """The folder to place in (``directory``, or a resume folder of it when a name there holds
    something else, as ``same`` judges) and the (source, target) files still to bring. ``step``: the
    checkpoint's, for the resume folder's name (a TF prefix's when None)."""
    step = checkpoint_step(prefix) if step is None else step
    name = RESUME_FOLDER + ("%d" % step if step is not None else os.path.basename(prefix))
    for attempt in range(100):
        folder = directory if attempt == 0 else os.path.join(directory, name + ("-%d" % attempt if attempt > 1 else ""))
        try:
            plan = [(path, os.path.join(folder, os.path.basename(path))) for path in files]
            sameness = [same(source, target) for source, target in plan]
        except OSError as exc:
            raise ResumeError(prefix, "cannot be read: %s" % (exc.strerror or exc)) from exc
        if False not in sameness:
            return folder, [pair for pair, same in zip(plan, sameness) if same is None]
        log.info("%s holds other files named as %s; trying a folder of its own", folder, os.path.basename(prefix))
    raise ResumeError(directory, "every resume folder for %s holds other files" % os.path.basename(prefix))


def copy_file(source: str, target: str) -> None:
    """Copy ``source`` to the new file ``target``, flushed to disk."""
    with open(source, "rb") as here:
        mode = stat.S_IMODE(os.fstat(here.fileno()).st_mode)
        with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as there:
            shutil.copyfileobj(here, there, 1 << 20)
            there.flush()
            os.fsync(there.fileno())


def _bring(folder: str, todo: Sequence[Tuple[str, str]], link: bool = True) -> Tuple[int, int]:
    """Hard-link (or copy; only copy without ``link``) each file to a temporary name in ``folder``, flush,
    then rename them all into place. On an error no temporary file is left, and no final name was taken."""
    _make_folder(folder)
    staged: List[Tuple[str, str]] = []
    linked = copied = 0
    try:
        _remove_stale_temps(folder)
        for source, target in todo:
            temp = _temp_name(target)
            staged.append((temp, target))
            if link:
                try:
                    os.link(source, temp)
                    linked += 1
                    _fsync(temp, os.O_RDONLY)
                    continue
                except OSError as exc:  # EXDEV across file systems, EPERM where links are not allowed, ...
                    log.debug("cannot link %s (%s); copying it", source, exc)
            copy_file(source, temp)
            copied += 1
        for temp, target in staged:
            if os.path.lexists(target):
                raise ResumeError(target, "appeared while the checkpoint was being placed; left as it is")
            os.rename(temp, target)
        _fsync(folder, os.O_RDONLY)
    except OSError as exc:
        raise ResumeError(folder, _os_reason(exc)) from exc
    finally:
        for temp, _ in staged:
            _unlink_quietly(temp)
    return linked, copied


def _write_state(directory: str, previous: Optional[CheckpointState], target: str) -> None:
    """Point ``directory``'s state file at ``target``, keeping the older checkpoints it listed that
    still exist (TF's max_to_keep rotation goes on) and its previous text aside."""
    step = checkpoint_step(target)
    paths: List[str] = []
    stamps: List[float] = []
    preserved: Optional[float] = None
    aligned = previous is None  # timestamps are written only when each path has one
    if previous is not None:
        preserved = previous.last_preserved_timestamp
        given = previous.all_model_checkpoint_timestamps
        aligned = len(given) == len(previous.all_model_checkpoint_paths)
        for n, path in enumerate(previous.all_model_checkpoint_paths):
            its_step = checkpoint_step(path)
            older = step is not None and its_step is not None and its_step < step
            if older and path not in paths and os.path.exists(path + ".index"):
                paths.append(path)
                stamps.extend(given[n : n + 1] if aligned else [])
    paths.append(target)
    stamps.append(time.time())
    text = render_state(paths, stamps if aligned else [], preserved, relative_to=directory)
    state_path = os.path.join(directory, STATE_FILE)
    try:
        with open(state_path, "rb") as handle:
            _write_atomically(os.path.join(directory, PREVIOUS_STATE_FILE), handle.read())
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ResumeError(state_path, _os_reason(exc)) from exc
    try:
        _write_atomically(state_path, text.encode("utf-8"))
    except OSError as exc:
        raise ResumeError(state_path, _os_reason(exc)) from exc


def _write_atomically(path: str, data: bytes) -> None:
    temp = _temp_name(path)
    try:
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
        _fsync(os.path.dirname(path), os.O_RDONLY)
    finally:
        _unlink_quietly(temp)


def _make_folder(path: str) -> None:
    if os.path.isdir(path):
        return
    try:
        os.makedirs(path, 0o755, exist_ok=True)
        _fsync(os.path.dirname(path), os.O_RDONLY)
    except OSError as exc:
        raise ResumeError(path, "cannot create the directory: %s" % _os_reason(exc)) from exc


def _temp_name(path: str) -> str:
    owner = "%s-%d" % (socket.gethostname(), os.getpid())  # the directory may be shared by hosts
    return os.path.join(os.path.dirname(path), ".%s%s%s" % (os.path.basename(path), TEMP_MARK, owner))


def _remove_stale_temps(folder: str) -> None:
    """Our temporary files that a placing on this host, killed mid-way, left (its pid is gone)."""
    for name in os.listdir(folder):
        host, _, pid = name.rpartition(TEMP_MARK)[2].rpartition("-")
        if name.startswith(".") and TEMP_MARK in name and host == socket.gethostname() and pid.isdigit():
            if not _alive(int(pid)):
                _unlink_quietly(os.path.join(folder, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems cannot sync a directory
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc)


def _os_reason(exc: OSError) -> str:
    where = " (%s)" % exc.filename if exc.filename else ""
    reason = (exc.strerror or str(exc)) + where
    if exc.errno == errno.ENOSPC:
        reason += "; free some space, or keep the ranks' checkpoint directories on one file system (hard links)"
    return reason


def resume_variables(placed_prefix: str, step: Optional[int]) -> Dict[str, str]:
    """The variables a rank is started with to resume: the prefix, and its step when it has one."""
    variables = {"NPULAUNCH_RESUME_CHECKPOINT": placed_prefix}
    if step is not None:
        variables["NPULAUNCH_RESUME_STEP"] = str(step)
    return variables
