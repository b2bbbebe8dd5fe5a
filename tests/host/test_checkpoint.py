"""host/checkpoint.py: the newest complete TensorFlow checkpoint among the ranks' directories, and
placing it in every rank's directory. Checkpoints come from tests/ranks/tfckpt.py (pure Python) and
from real TensorFlow; TensorFlow itself reads back what tfckpt.py wrote and what place() placed.
TensorFlow runs in child processes (~4 s each; a forking test process must not hold its threads)."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import RANKS, base_env, require

from npulaunch.host import checkpoint
from npulaunch.host.checkpoint import (
    PREVIOUS_STATE_FILE,
    TEMP_MARK,
    Found,
    ResumeError,
    newest_complete,
    place,
    resume_variables,
)
from npulaunch.host.tfbundle import crc32c, inspect, parse_state, read_state, render_state


def load_tfckpt():
    spec = importlib.util.spec_from_file_location("tfckpt", RANKS / "tfckpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tfckpt = load_tfckpt()


def values(step: int) -> List[float]:
    return [step + 0.5, -1.0, 2.25]  # exact in float32


def save(directory: Path, step: int, **options) -> str:
    return tfckpt.write_checkpoint(str(directory), step, values(step), **options)


def snapshot(directory: Path) -> Dict[str, tuple]:
    """Every file under ``directory``: its bytes and inode."""
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_ino) for p in directory.rglob("*") if p.is_file()
    }


def temporaries(directory: Path) -> List[str]:
    return [str(p) for p in directory.rglob("*") if TEMP_MARK in p.name]


# --- formats


def test_crc32c_gives_the_standard_check_values() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720's vector
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283


@pytest.mark.parametrize("shards", [1, 2])
def test_tfckpt_writes_a_checkpoint_it_reads_back(tmp_path: Path, shards: int) -> None:
    prefix = save(tmp_path, 40, num_shards=shards)
    assert tfckpt.read_checkpoint(prefix) == {"w": values(40), "global_step": 40}
    verdict = inspect(prefix)
    assert verdict.complete and verdict.why == "" and verdict.step == 40
    data = ["%s.data-%05d-of-%05d" % (prefix, n, shards) for n in range(shards)]
    assert verdict.files == (prefix + ".index", *data)
    assert sorted(str(p) for p in tmp_path.glob("model.ckpt-40*")) == sorted(verdict.files)


def test_tfckpt_keeps_the_last_checkpoints_like_a_saver(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        last = save(tmp_path, step, keep=2)
    state = read_state(str(tmp_path))
    assert state is not None and state.model_checkpoint_path == last
    assert state.all_model_checkpoint_paths == (str(tmp_path / "model.ckpt-20"), last)
    assert len(state.all_model_checkpoint_timestamps) == 2
    assert not list(tmp_path.glob("model.ckpt-10*"))
    assert (tmp_path / "checkpoint").read_text().splitlines()[0] == 'model_checkpoint_path: "model.ckpt-30"'


def test_state_paths_are_made_absolute_relative_or_not(tmp_path: Path) -> None:
    text = (
        b'model_checkpoint_path: "sub/model.ckpt-3"\n'
        b'all_model_checkpoint_paths: "/elsewhere/model.ckpt-1"\n'
        b"all_model_checkpoint_paths: '../up/model.ckpt-2'  # a comment\n"
        b'all_model_checkpoint_paths: "sub/model.ckpt-3"\n'
        b"all_model_checkpoint_timestamps: 1.7e+09 all_model_checkpoint_timestamps: 1700000001.5\n"
        b"last_preserved_timestamp: 1699999999\n"
    )
    state = parse_state(text, str(tmp_path / "dir"))
    assert state.model_checkpoint_path == str(tmp_path / "dir" / "sub" / "model.ckpt-3")
    assert state.all_model_checkpoint_paths == (
        "/elsewhere/model.ckpt-1",
        str(tmp_path / "up" / "model.ckpt-2"),
        state.model_checkpoint_path,
    )
    assert state.all_model_checkpoint_timestamps == (1.7e9, 1700000001.5)
    assert state.last_preserved_timestamp == 1699999999.0


@pytest.mark.parametrize("name", ['with "quotes" and \\', "new\nline", "spaces and é ü", "tab\there"])
def test_state_text_round_trips_awkward_paths(tmp_path: Path, name: str) -> None:
    paths = [str(tmp_path / "older-1"), str(tmp_path / name / "model.ckpt-2")]
    text = render_state(paths, [1.0, 2.5], 0.5, relative_to=str(tmp_path))
    assert "é" not in text  # bytes beyond ASCII as octal escapes, as protobuf's text format writes them
    state = parse_state(text.encode(), str(tmp_path))
    assert state.all_model_checkpoint_paths == tuple(paths)
    assert state.model_checkpoint_path == paths[-1]
    assert state.all_model_checkpoint_timestamps == (1.0, 2.5) and state.last_preserved_timestamp == 0.5


@pytest.mark.parametrize(
    "text, why",
    [
        (b"", "no model_checkpoint_path"),
        (b'all_model_checkpoint_paths: "x-1"\n', "no model_checkpoint_path"),
        (b'model_checkpoint_path: "x-1"\nmodel_checkpoint_prefix: "y"\n', "unknown field model_checkpoint_prefix"),
        (b"model_checkpoint_path: 12\n", "a value where none belongs"),
        (b'model_checkpoint_path: "x-1\n', "unreadable text"),
        (b"model_checkpoint_path:", "has no value"),
        (b"\x00\x01garbage", "unreadable text"),
    ],
)
def test_unreadable_state_files_are_reported_not_raised(tmp_path: Path, text: bytes, why: str) -> None:
    (tmp_path / "checkpoint").write_bytes(text)
    assert read_state(str(tmp_path)) is None
    found = newest_complete([str(tmp_path)])
    assert found.prefix is None
    assert [path for path, _ in found.unreadable] == [str(tmp_path / "checkpoint")]
    assert why in found.unreadable[0][1]
    assert "ignored %s: it is not a CheckpointState" % (tmp_path / "checkpoint") in found.describe()


def test_a_missing_state_file_is_no_state() -> None:
    assert read_state("/nonexistent/dir") is None
    assert newest_complete(["/nonexistent/dir"]) == Found(None, None, None, (), ())


# --- damage


def cut_index(prefix: str) -> None:
    os.truncate(prefix + ".index", os.path.getsize(prefix + ".index") - 10)


def flip_index_byte(prefix: str) -> None:
    path = Path(prefix + ".index")
    data = bytearray(path.read_bytes())
    data[3] ^= 0x40
    path.write_bytes(bytes(data))


DAMAGES = {
    "truncated index": (cut_index, 1, "model.ckpt-30.index is truncated (no table footer)"),
    "missing index": (lambda p: os.unlink(p + ".index"), 1, "model.ckpt-30.index is missing"),
    "flipped index byte": (flip_index_byte, 1, "model.ckpt-30.index is damaged (data block checksum mismatch)"),
    "missing shard": (
        lambda p: os.unlink(p + ".data-00001-of-00002"),
        2,
        "model.ckpt-30.data-00001-of-00002 is missing",
    ),
    # global_step (8 bytes) at offset 0, then w (3 floats) at 8: the shard needs 20 bytes
    "truncated shard": (
        lambda p: os.truncate(p + ".data-00000-of-00001", 12),
        1,
        "model.ckpt-30.data-00000-of-00001 is 12 bytes, its index needs 20",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_newest_checkpoint_is_skipped_with_its_reason(tmp_path: Path, damage: str) -> None:
    harm, shards, why = DAMAGES[damage]
    older = save(tmp_path / "a", 20)
    newest = save(tmp_path / "a", 30, num_shards=shards)
    harm(newest)
    verdict = inspect(newest)
    assert not verdict.complete and verdict.why == why and verdict.step == 30
    found = newest_complete([str(tmp_path / "a"), str(tmp_path / "empty")])
    assert (found.prefix, found.step, found.directory) == (older, 20, str(tmp_path / "a"))
    assert found.skipped == ((newest, why),)
    assert found.describe() == "skipped model.ckpt-30 in %s: %s; resuming from model.ckpt-20 in %s" % (
        tmp_path / "a",
        why,
        tmp_path / "a",
    )


def test_inspect_never_raises_on_a_cut_or_changed_index(tmp_path: Path) -> None:
    prefix = save(tmp_path, 7, num_shards=2)
    index = Path(prefix + ".index")
    whole = index.read_bytes()
    for size in range(len(whole)):
        index.write_bytes(whole[:size])
        verdict = inspect(prefix)
        assert not verdict.complete and verdict.why.startswith("model.ckpt-7.index is "), size
    for at in range(len(whole)):
        for bit in (0x01, 0x80):
            changed = bytearray(whole)
            changed[at] ^= bit
            index.write_bytes(bytes(changed))
            verdict = inspect(prefix)  # padding bytes of the footer may change harmlessly
            assert verdict.complete or verdict.why.startswith("model.ckpt-7."), (at, bit, verdict.why)


def test_the_newest_step_wins_and_a_tie_goes_to_the_newer_index(tmp_path: Path) -> None:
    save(tmp_path / "a", 10)
    a20 = save(tmp_path / "a", 20)
    b20 = save(tmp_path / "b", 20)
    b30 = save(tmp_path / "b", 30)
    os.unlink(b30 + ".data-00000-of-00001")
    os.utime(a20 + ".index", (1e9, 2e9))
    os.utime(b20 + ".index", (1e9, 1e9))
    dirs = [str(tmp_path / "b"), str(tmp_path / "a"), str(tmp_path / "a")]  # a directory twice counts once
    found = newest_complete(dirs)
    assert (found.prefix, found.directory) == (a20, str(tmp_path / "a"))
    assert found.skipped == ((b30, "model.ckpt-30.data-00000-of-00001 is missing"),)
    os.utime(b20 + ".index", (1e9, 3e9))
    assert newest_complete(dirs).prefix == b20


def test_a_state_file_naming_deleted_checkpoints(tmp_path: Path) -> None:
    first = save(tmp_path, 10)
    second = save(tmp_path, 20)
    for path in tmp_path.glob("model.ckpt-20*"):
        path.unlink()
    found = newest_complete([str(tmp_path)])
    assert found.prefix == first
    assert found.skipped == ((second, "model.ckpt-20.index is missing"),)
    for path in tmp_path.glob("model.ckpt-10*"):
        path.unlink()
    found = newest_complete([str(tmp_path)])
    assert found.prefix is None and len(found.skipped) == 2
    assert found.describe().endswith("no complete checkpoint: starting from the beginning")


def test_absolute_state_paths_from_another_directory_are_followed(tmp_path: Path) -> None:
    prefix = save(tmp_path / "real", 5, relative=False)
    assert str(tmp_path / "real") in (tmp_path / "real" / "checkpoint").read_text()
    (tmp_path / "other").mkdir()
    shutil.copy(tmp_path / "real" / "checkpoint", tmp_path / "other" / "checkpoint")
    found = newest_complete([str(tmp_path / "other")])
    assert (found.prefix, found.directory) == (prefix, str(tmp_path / "other"))


# --- placing


def test_place_into_an_empty_directory_links_the_files(tmp_path: Path) -> None:
    source = save(tmp_path / "rank 0", 20, num_shards=2)
    target = tmp_path / "rank 3" / "ckpt"
    placed = place(newest_complete([str(tmp_path / "rank 0")]), str(target))
    assert placed == checkpoint.Placed(str(target / "model.ckpt-20"), 3, 0, False)
    for path in Path(source).parent.glob("model.ckpt-20.*"):
        assert os.path.samefile(path, target / path.name)
    assert (target / "checkpoint").read_text().splitlines()[:2] == [
        'model_checkpoint_path: "model.ckpt-20"',
        'all_model_checkpoint_paths: "model.ckpt-20"',
    ]
    state = read_state(str(target))
    assert state is not None and state.model_checkpoint_path == placed.prefix_in_directory
    assert tfckpt.read_checkpoint(placed.prefix_in_directory) == {"w": values(20), "global_step": 20}
    assert not (target / PREVIOUS_STATE_FILE).exists() and temporaries(tmp_path) == []


def test_place_beside_a_partial_checkpoint_of_the_same_name(tmp_path: Path) -> None:
    source = save(tmp_path / "good", 20)
    Path(source + ".meta").write_bytes(b"a MetaGraphDef")
    rank = tmp_path / "rank"
    save(rank, 10)
    partial = save(rank, 20)
    Path(partial + ".meta").write_bytes(b"another MetaGraphDef")
    os.truncate(partial + ".data-00000-of-00001", 5)  # the rank was killed writing it
    state_text = (rank / "checkpoint").read_text()
    before = snapshot(rank)
    found = newest_complete([str(tmp_path / "good"), str(rank)])
    assert found.prefix == source  # the partial one, written later, is newer but incomplete
    assert found.skipped == ((partial, "model.ckpt-20.data-00000-of-00001 is 5 bytes, its index needs 20"),)
    placed = place(found, str(rank))
    assert placed.prefix_in_directory == str(rank / "npulaunch-resume-20" / "model.ckpt-20")
    assert (placed.linked, placed.copied, placed.unchanged) == (3, 0, False)
    after = snapshot(rank)
    assert {name: after[name] for name in before if name != "checkpoint"} == {
        name: seen for name, seen in before.items() if name != "checkpoint"
    }
    assert (rank / PREVIOUS_STATE_FILE).read_text() == state_text
    lines = (rank / "checkpoint").read_text().splitlines()
    assert lines[:3] == [
        'model_checkpoint_path: "npulaunch-resume-20/model.ckpt-20"',
        'all_model_checkpoint_paths: "model.ckpt-10"',
        'all_model_checkpoint_paths: "npulaunch-resume-20/model.ckpt-20"',
    ]
    assert sum(line.startswith("all_model_checkpoint_timestamps: ") for line in lines) == 2
    assert Path(placed.prefix_in_directory + ".meta").read_bytes() == b"a MetaGraphDef"


def test_place_is_idempotent(tmp_path: Path) -> None:
    save(tmp_path / "a", 20)
    found = newest_complete([str(tmp_path / "a")])
    first = place(found, str(tmp_path / "b"))
    text = (tmp_path / "b" / "checkpoint").read_bytes()
    again = place(found, str(tmp_path / "b"))
    assert again == checkpoint.Placed(first.prefix_in_directory, 0, 0, True)
    assert (tmp_path / "b" / "checkpoint").read_bytes() == text
    assert not (tmp_path / "b" / PREVIOUS_STATE_FILE).exists()
    assert place(found, str(tmp_path / "a")).unchanged  # its own directory


def test_place_does_nothing_where_the_directory_is_ahead(tmp_path: Path) -> None:
    save(tmp_path / "a", 20)
    ahead = save(tmp_path / "b", 30)
    before = snapshot(tmp_path / "b")
    placed = place(newest_complete([str(tmp_path / "a")]), str(tmp_path / "b"))
    assert placed == checkpoint.Placed(ahead, 0, 0, True)
    assert snapshot(tmp_path / "b") == before


def test_place_reuses_the_same_files_already_there(tmp_path: Path) -> None:
    source = save(tmp_path / "a", 20)
    save(tmp_path / "b", 10)
    for path in Path(source).parent.glob("model.ckpt-20.*"):
        shutil.copy(path, tmp_path / "b" / path.name)  # same sizes, other inodes
    placed = place(newest_complete([str(tmp_path / "a")]), str(tmp_path / "b"))
    assert placed == checkpoint.Placed(str(tmp_path / "b" / "model.ckpt-20"), 0, 0, False)
    state = read_state(str(tmp_path / "b"))
    assert state is not None and state.model_checkpoint_path == placed.prefix_in_directory
    assert state.all_model_checkpoint_paths == (str(tmp_path / "b" / "model.ckpt-10"), placed.prefix_in_directory)


def test_place_repoints_a_directory_whose_latest_is_damaged(tmp_path: Path) -> None:
    save(tmp_path, 10)
    good = save(tmp_path, 20)
    bad = save(tmp_path, 30)
    cut_index(bad)
    damaged = Path(bad + ".index").read_bytes()
    found = newest_complete([str(tmp_path)])
    assert found.prefix == good
    placed = place(found, str(tmp_path))
    assert placed == checkpoint.Placed(good, 0, 0, False)
    state = read_state(str(tmp_path))
    assert state is not None and state.model_checkpoint_path == good
    assert state.all_model_checkpoint_paths == (str(tmp_path / "model.ckpt-10"), good)
    assert Path(bad + ".index").read_bytes() == damaged  # the script's files stay as they are


def fail_with(code: int):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return fail


def test_place_copies_where_hard_links_fail(tmp_path: Path, monkeypatch) -> None:
    source = save(tmp_path / "a", 20, num_shards=2)
    monkeypatch.setattr(os, "link", fail_with(errno.EXDEV))
    placed = place(newest_complete([str(tmp_path / "a")]), str(tmp_path / "b"))
    assert (placed.linked, placed.copied) == (0, 3)
    for path in Path(source).parent.glob("model.ckpt-20.*"):
        copy = tmp_path / "b" / path.name
        assert copy.read_bytes() == path.read_bytes() and not os.path.samefile(path, copy)
        assert copy.stat().st_mode == path.stat().st_mode
    assert temporaries(tmp_path) == []


@pytest.mark.parametrize("had_state", [False, True])
def test_a_full_disk_mid_copy_leaves_nothing_half_done(tmp_path: Path, monkeypatch, had_state: bool) -> None:
    save(tmp_path / "a", 20, num_shards=2)
    target = tmp_path / "b"
    target.mkdir()
    if had_state:
        save(target, 10)
    before = snapshot(target)
    real_copy = checkpoint.copy_file
    copies = []

    def copy_until_full(source: str, destination: str) -> None:
        copies.append(destination)
        if len(copies) < 2:
            return real_copy(source, destination)
        with open(destination, "wb") as handle:
            handle.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), destination)

    monkeypatch.setattr(os, "link", fail_with(errno.EXDEV))
    monkeypatch.setattr(checkpoint, "copy_file", copy_until_full)
    found = newest_complete([str(tmp_path / "a")])
    with pytest.raises(ResumeError) as raised:
        place(found, str(target))
    assert raised.value.path == str(target) and "No space left on device" in str(raised.value)
    assert "one file system" in str(raised.value)
    assert snapshot(target) == before and temporaries(tmp_path) == []
    monkeypatch.undo()
    assert place(found, str(target)).linked == 3


# place() in a process that copies (no hard links) and stalls in the middle of the last data shard
STALLED_PLACE = """
import errno, os, sys, time
from npulaunch.host import checkpoint
def no_link(*args):
    raise OSError(errno.EXDEV, "Invalid cross-device link")
def stalling_copy(source, target, copy=checkpoint.copy_file):
    if source.endswith(".data-00001-of-00002"):
        with open(target, "wb") as handle:
            handle.write(b"half")
        print("stalled", flush=True)
        time.sleep(60)
    copy(source, target)
os.link, checkpoint.copy_file = no_link, stalling_copy
checkpoint.place(checkpoint.newest_complete([sys.argv[1]]), sys.argv[2])
"""


def test_a_placing_killed_mid_copy_leaves_the_state_alone(tmp_path: Path, marker: str) -> None:
    save(tmp_path / "a", 20, num_shards=2)
    target = tmp_path / "b"
    save(target, 10)
    before = snapshot(target)
    argv = [sys.executable, "-c", STALLED_PLACE, str(tmp_path / "a"), str(target)]
    with subprocess.Popen(argv, env=base_env({"NPLTEST_MARKER": marker}), stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdout.readline() == "stalled\n"
        assert len(temporaries(target)) == 3
        child.kill()
    after = snapshot(target)
    assert {name: after[name] for name in before} == before  # the state and the script's files as they were
    assert {name for name in after if name not in before} == {Path(t).name for t in temporaries(target)}
    placed = place(newest_complete([str(tmp_path / "a")]), str(target))
    assert placed.linked == 3 and temporaries(target) == []
    assert tfckpt.read_checkpoint(placed.prefix_in_directory) == {"w": values(20), "global_step": 20}


def test_temporaries_a_killed_placing_left_are_removed(tmp_path: Path) -> None:
    save(tmp_path / "a", 20)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    stale = tmp_path / "b" / (".model.ckpt-20.index%s%s-%s" % (TEMP_MARK, host, gone.stdout.strip()))
    live = tmp_path / "b" / (".checkpoint%s%s-%d" % (TEMP_MARK, host, os.getppid()))
    elsewhere = tmp_path / "b" / (".checkpoint%sanother-host-%s" % (TEMP_MARK, gone.stdout.strip()))
    stale.parent.mkdir()
    for path in (stale, live, elsewhere):
        path.write_bytes(b"cut short, or still being written")
    place(newest_complete([str(tmp_path / "a")]), str(tmp_path / "b"))
    assert not stale.exists() and live.exists() and elsewhere.exists()


def test_place_without_a_checkpoint_or_with_one_gone(tmp_path: Path) -> None:
    with pytest.raises(ResumeError, match="there is no checkpoint to place"):
        place(Found(None, None, None, ()), str(tmp_path))
    prefix = save(tmp_path / "a", 20)
    found = newest_complete([str(tmp_path / "a")])
    os.unlink(prefix + ".data-00000-of-00001")
    with pytest.raises(ResumeError) as raised:
        place(found, str(tmp_path / "b"))
    assert raised.value.path == prefix and raised.value.reason == "model.ckpt-20.data-00000-of-00001 is missing"
    assert not (tmp_path / "b" / "checkpoint").exists()


def test_resume_variables() -> None:
    assert resume_variables("/d/model.ckpt-20", 20) == {
        "NPULAUNCH_RESUME_CHECKPOINT": "/d/model.ckpt-20",
        "NPULAUNCH_RESUME_STEP": "20",
    }
    assert resume_variables("/d/model.ckpt", None) == {"NPULAUNCH_RESUME_CHECKPOINT": "/d/model.ckpt"}


# --- real TensorFlow

TF_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}

# Checkpoints as TensorFlow's own savers write them: a v1 Saver in a graph (absolute paths, no
# timestamps), the same sharded over two CPU devices, and TF2's CheckpointManager (relative paths,
# timestamps) whose tensors a sharding policy slices across three data files.
TF_SAVE = """
import json, os, sys
import tensorflow as tf
out = sys.argv[1]
made = {}
for kind in ("saver", "sharded"):
    os.makedirs(os.path.join(out, kind))
graph = tf.Graph()
with graph.as_default():
    with tf.device("/cpu:0"):
        w = tf.compat.v1.get_variable("w", initializer=tf.range(6, dtype=tf.float32))
    with tf.device("/cpu:1"):
        step = tf.compat.v1.train.get_or_create_global_step()
    plain = tf.compat.v1.train.Saver(max_to_keep=2)
    sharded = tf.compat.v1.train.Saver(max_to_keep=2, sharded=True)
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for n in (10, 20, 30):
            session.run([step.assign(n), w.assign_add(tf.ones(6))])
            made["saver"] = plain.save(session, os.path.join(out, "saver", "model.ckpt"), global_step=n)
            made["sharded"] = sharded.save(session, os.path.join(out, "sharded", "model.ckpt"), global_step=n)
variable = tf.Variable(tf.range(1000, dtype=tf.float32))
counter = tf.Variable(0, dtype=tf.int64)
manager = tf.train.CheckpointManager(tf.train.Checkpoint(w=variable, step=counter), os.path.join(out, "manager"), 3)
from tensorflow.python.checkpoint.sharding import sharding_policies
policy = sharding_policies.MaxShardSizePolicy(max_shard_size=1500)
options = tf.train.CheckpointOptions(experimental_sharding_callback=policy)
for n in (100, 200, 300):
    counter.assign(n)
    made["manager"] = manager.save(checkpoint_number=n, options=options)
print(json.dumps(made))
"""

# What TensorFlow finds in each directory: its latest checkpoint and every numeric tensor in it.
TF_READ = """
import json, sys
import tensorflow as tf
found = {}
for directory in json.loads(sys.argv[1]):
    latest = tf.train.latest_checkpoint(directory)
    tensors = {}
    if latest:
        reader = tf.train.load_checkpoint(latest)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            if dtype != tf.string:
                tensors[name] = reader.get_tensor(name).tolist()
    found[directory] = {"latest": latest, "tensors": tensors}
print(json.dumps(found))
"""


def run_tensorflow(script: str, argument: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", script, argument], env=base_env(TF_ENV), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def tensorflow_present() -> None:
    require(importlib.util.find_spec("tensorflow") is not None, "tensorflow-cpu (pip install -e '.[tf]')")


@pytest.fixture(scope="module")
def tf_saved(tensorflow_present, tmp_path_factory) -> Dict[str, str]:
    out = tmp_path_factory.mktemp("tf saved")
    return run_tensorflow(TF_SAVE, str(out))


def test_checkpoints_tensorflow_wrote_are_found_complete(tf_saved: Dict[str, str], tmp_path: Path) -> None:
    for kind, shards in (("saver", 1), ("sharded", 2), ("manager", 3)):
        latest = tf_saved[kind]
        directory = os.path.dirname(latest)
        state = read_state(directory)
        assert state is not None and state.model_checkpoint_path == latest, kind
        found = newest_complete([directory])
        assert (found.prefix, found.skipped) == (latest, ()), kind
        verdict = inspect(latest)
        assert verdict.complete and len(verdict.files) == 1 + shards, (kind, verdict)
        assert sorted(verdict.files) == sorted(
            str(p) for p in Path(directory).glob(os.path.basename(latest) + ".*") if p.suffix != ".meta"
        ), kind
    # the sharded saver's newest checkpoint loses a shard: the one before is chosen
    copy = tmp_path / "sharded"
    shutil.copytree(os.path.dirname(tf_saved["sharded"]), copy)
    (copy / "checkpoint").write_text(
        (copy / "checkpoint").read_text().replace(os.path.dirname(tf_saved["sharded"]), str(copy))
    )
    (copy / "model.ckpt-30.data-00001-of-00002").unlink()
    found = newest_complete([str(copy)])
    assert found.prefix == str(copy / "model.ckpt-20")
    assert found.skipped == ((str(copy / "model.ckpt-30"), "model.ckpt-30.data-00001-of-00002 is missing"),)


def test_tensorflow_reads_what_tfckpt_wrote_and_what_place_placed(
    tf_saved: Dict[str, str], tmp_path: Path, monkeypatch
) -> None:
    expected: Dict[str, tuple] = {}  # directory -> (latest prefix, {tensor: values})
    for name, shards, relative in (("one", 1, True), ("two", 2, False)):
        prefix = save(tmp_path / name, 20, num_shards=shards, relative=relative)
        expected[str(tmp_path / name)] = (prefix, {"w": values(20), "global_step": 20})
    rank0 = tmp_path / "rank0"
    save(rank0, 10)
    save(rank0, 30)
    os.truncate(str(rank0 / "model.ckpt-30.index"), 30)
    found = newest_complete([str(rank0), str(tmp_path / "one")])
    assert found.prefix == str(tmp_path / "one" / "model.ckpt-20")
    ours = {"w": values(20), "global_step": 20}
    partial = tmp_path / "partial"
    save(partial, 20)
    os.truncate(str(partial / "model.ckpt-20.data-00000-of-00001"), 3)
    for directory in (tmp_path / "empty" / "ckpt", rank0, partial):
        expected[str(directory)] = (place(found, str(directory)).prefix_in_directory, ours)
    assert expected[str(partial)][0] == str(partial / "npulaunch-resume-20" / "model.ckpt-20")
    with monkeypatch.context() as patch:
        patch.setattr(os, "link", fail_with(errno.EXDEV))
        copied = place(found, str(tmp_path / "copied"))
        assert copied.copied == 2
    expected[str(tmp_path / "copied")] = (copied.prefix_in_directory, ours)
    manager = os.path.dirname(tf_saved["manager"])
    placed = place(newest_complete([manager]), str(tmp_path / "from tf"))
    assert placed.linked == 4
    expected[str(tmp_path / "from tf")] = (placed.prefix_in_directory, None)

    seen = run_tensorflow(TF_READ, json.dumps(sorted(expected) + [manager]))
    for directory, (prefix, tensors) in expected.items():
        assert seen[directory]["latest"] == prefix, directory
        if tensors is not None:
            assert seen[directory]["tensors"] == tensors, directory
    assert seen[str(tmp_path / "from tf")]["tensors"] == seen[manager]["tensors"]
    assert seen[manager]["tensors"]["step/.ATTRIBUTES/VARIABLE_VALUE"] == 300
