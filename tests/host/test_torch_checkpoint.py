"""host/torchckpt.py and host/checkpoint.py's kind "torch": which files are checkpoints and their step,
whether one is complete, the newest complete one among the ranks' directories, and placing it in a rank's
directory. The checkpoints are written by real torch.save (in a child process, once for the module: the
test process does not import torch), damaged here, and read back by real torch.load after placing."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import base_env, require

from npulaunch.host import checkpoint, torchckpt
from npulaunch.host.checkpoint import TEMP_MARK, Found, ResumeError, newest_complete, place, resume_variables
from npulaunch.host.torchckpt import file_step, inspect

# torch.save, as scripts call it, of every form the format has (see torchckpt.py's sources)
SAVE = """
import io, sys, torch
out = sys.argv[1]
def state(step):
    return {"model": {"w": torch.full((8,), step + 0.5), "b": torch.arange(3.0)}, "step": step}
for step in (10, 20, 30):
    torch.save(state(step), "%s/ckpt_%d.pt" % (out, step))
torch.save({"t%d" % i: torch.full((4096,), float(i)) for i in range(4)}, out + "/multi_40.pt")
torch.save(state(50), out + "/legacy_50.pt", _use_new_zipfile_serialization=False)
torch.serialization.set_crc32_options(False)
torch.save(state(60), out + "/nocrc_60.pt")
torch.serialization.set_crc32_options(True)
buffer = io.BytesIO()
torch.save(state(70), buffer)  # a stream: its records are in the folder "archive"
open(out + "/stream_70.pt", "wb").write(buffer.getvalue())
torch.save(state(80), out + "/dot.ted_80.pth.tar")
print(torch.__version__)
"""

# torch.load of each file named: its step and weights
LOAD = """
import json, sys, torch
found = {}
for path in sys.argv[1:]:
    state = torch.load(path, weights_only=True)
    found[path] = [state["step"], state["model"]["w"].tolist()]
print(json.dumps(found))
"""


def run_torch(script: str, *args: str) -> str:
    argv = [sys.executable, "-c", script, *args]
    result = subprocess.run(argv, env=base_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()[-1]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The files real torch.save wrote (read them, or copy them to change them)."""
    require(importlib.util.find_spec("torch") is not None, "torch (pip install -e '.[torch]')")
    out = tmp_path_factory.mktemp("torch saved")
    run_torch(SAVE, str(out))
    for path in out.iterdir():
        path.chmod(0o444)  # the tests change copies only
    return out


def copy(saved: Path, name: str, directory: Path, as_name: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / (as_name or name)
    shutil.copyfile(saved / name, target)
    return target


def records(path: Path) -> Dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename.split("/", 1)[1]: info for info in archive.infolist()}


def data_start(path: Path, info: zipfile.ZipInfo) -> int:
    with open(path, "rb") as handle:
        handle.seek(info.header_offset + 26)
        name, extra = struct.unpack("<HH", handle.read(4))
    return info.header_offset + 30 + name + extra


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))


def temporaries(directory: Path) -> List[str]:
    return [str(p) for p in directory.rglob("*") if TEMP_MARK in p.name]


# --- names


@pytest.mark.parametrize(
    "name, step",
    [
        ("ckpt_300.pt", 300),
        ("model-300.pth", 300),
        ("step300.pt", 300),
        ("checkpoint_epoch3_step300.pt", 300),
        ("epoch=3-step=300.ckpt", 300),  # Lightning's
        ("checkpoint_300.pth.tar", 300),
        ("ckpt_300_rank0.pt", 300),  # where the file belongs is not a step
        ("ckpt-300-device_7.bin", 300),
        ("last.ckpt", None),
        ("model_best.pth.tar", None),
        ("rank3.pt", None),
        ("resnet50.pth", 50),  # a number is a step: keep other weights out of the checkpoint directory
    ],
)
def test_the_step_is_the_last_number_in_the_name(name: str, step: int) -> None:
    assert file_step(name) == step


def test_candidates_are_checkpoint_files_here_and_in_resume_folders(tmp_path: Path) -> None:
    for name in ("ckpt_1.pt", "b.PTH", "c.ckpt", "d.pth.tar", "e.bin", "notes.txt", "ckpt_2.pt.tmp", ".hidden.pt"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / (".ckpt_3.pt" + TEMP_MARK + "host-1")).write_bytes(b"x")
    (tmp_path / "folder.pt").mkdir()
    (tmp_path / "npulaunch-resume-5").mkdir()
    (tmp_path / "npulaunch-resume-5" / "ckpt_5.pt").write_bytes(b"x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "ckpt_9.pt").write_bytes(b"x")  # the script's own folders are its business
    found = [os.path.relpath(p, tmp_path) for p in torchckpt.candidates(str(tmp_path))]
    assert found == ["b.PTH", "c.ckpt", "ckpt_1.pt", "d.pth.tar", "e.bin", "npulaunch-resume-5/ckpt_5.pt"]
    assert torchckpt.candidates(str(tmp_path / "absent")) == []


# --- complete or not


def test_what_torch_save_writes_is_complete(saved: Path) -> None:
    for name in ("ckpt_10.pt", "multi_40.pt", "stream_70.pt", "dot.ted_80.pth.tar"):
        verdict = inspect(str(saved / name))
        assert verdict.complete and verdict.why == "", name
        assert verdict.step == file_step(name) and verdict.files == (str(saved / name),)
        sizes = sum(info.file_size for info in records(saved / name).values())
        assert (verdict.crc_checked, verdict.crc_skipped) == (sizes, 0), name
    assert set(records(saved / "ckpt_10.pt")) == {
        "data.pkl",
        ".format_version",
        ".storage_alignment",
        "byteorder",
        "data/0",
        "data/1",
        "version",
        ".data/serialization_id",
    }  # torch 2.13's records; the folder is the file's name without its extension
    with zipfile.ZipFile(saved / "dot.ted_80.pth.tar") as archive:
        assert archive.namelist()[0] == "dot.ted_80.pth/data.pkl"
    with zipfile.ZipFile(saved / "stream_70.pt") as archive:
        assert archive.namelist()[0] == "archive/data.pkl"


def test_a_save_without_crcs_is_complete_by_its_structure(saved: Path) -> None:
    assert {info.CRC for info in records(saved / "nocrc_60.pt").values()} == {0}
    verdict = inspect(str(saved / "nocrc_60.pt"))
    assert verdict.complete and verdict.crc_checked == 0
    assert verdict.crc_skipped == 8 * 4 + 3 * 4  # the tensors' bytes: nothing says whether they changed


def cut(path: Path, at: int) -> None:
    os.truncate(path, at)


def damage_tensor(path: Path) -> None:
    info = records(path)["data/1"]
    flip(path, data_start(path, info) + 5)


def damage_pickle(path: Path) -> None:
    info = records(path)["data.pkl"]
    flip(path, data_start(path, info) + 40)


def zeros_over_a_header(path: Path) -> None:
    info = records(path)["data/0"]
    data = bytearray(path.read_bytes())
    data[info.header_offset : info.header_offset + 30] = bytes(30)
    path.write_bytes(bytes(data))


def rewrite(path: Path, keep=lambda name: True, rename=lambda name: name) -> None:
    with zipfile.ZipFile(path) as archive:
        contents = [(i.filename, archive.read(i)) for i in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in contents:
            if keep(name.split("/", 1)[1]):
                archive.writestr(rename(name), data)


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda p: cut(p, p.stat().st_size // 2), "is cut short or damaged (its zip central directory"),
        (lambda p: cut(p, p.stat().st_size - 1), "is cut short or damaged (its zip central directory"),
        (lambda p: cut(p, 0), "is empty"),
        (damage_tensor, "is damaged (the CRC-32 of ckpt_20/data/1 does not match)"),
        (damage_pickle, "is damaged (the CRC-32 of ckpt_20/data.pkl does not match)"),
        (zeros_over_a_header, "is damaged (no record header where the directory puts ckpt_20/data/0)"),
        (lambda p: p.write_bytes(b"not a checkpoint at all\n" * 10), "is not a torch.save zip archive"),
        (lambda p: rewrite(p, keep=lambda n: n != "data.pkl"), "has no data.pkl"),
        (lambda p: rewrite(p, keep=lambda n: n != "version"), "has no version record"),
        (
            lambda p: rewrite(p, rename=lambda n: n.replace("ckpt_20/data/", "other/")),
            "is a zip archive torch.save did not write",
        ),
    ],
    ids=[
        "half",
        "one-byte-short",
        "empty",
        "tensor-byte",
        "pickle-byte",
        "zeroed-header",
        "text",
        "no-pickle",
        "no-version",
        "two-folders",
    ],
)
def test_a_damaged_or_partial_file_is_not_complete(saved: Path, tmp_path: Path, damage, why: str) -> None:
    path = copy(saved, "ckpt_20.pt", tmp_path)
    damage(path)
    verdict = inspect(str(path))
    assert not verdict.complete and verdict.why.startswith("ckpt_20.pt " + why), verdict.why
    assert verdict.step == 20


def test_the_legacy_format_is_refused_with_why(saved: Path) -> None:
    """torch.save(..., _use_new_zipfile_serialization=False): pickles then raw storages, no index and no
    checksum, so a cut file cannot be told from a whole one without unpickling it; it is not resumed from."""
    verdict = inspect(str(saved / "legacy_50.pt"))
    assert not verdict.complete
    assert "legacy format (_use_new_zipfile_serialization=False)" in verdict.why


def test_tensor_crcs_are_read_within_the_budget_last_written_first(saved: Path, tmp_path: Path) -> None:
    path = copy(saved, "multi_40.pt", tmp_path)
    sizes = {name: info.file_size for name, info in records(path).items()}
    small = sum(size for name, size in sizes.items() if not name.startswith("data/"))
    assert [sizes["data/%d" % n] for n in range(4)] == [16384] * 4
    info = records(path)["data/0"]  # written first: read last
    flip(path, data_start(path, info) + 100)
    assert "the CRC-32 of multi_40/data/0" in inspect(str(path)).why
    within = inspect(str(path), crc_budget_bytes=3 * 16384)
    assert within.complete and (within.crc_checked, within.crc_skipped) == (small + 3 * 16384, 16384)
    structure = inspect(str(path), crc_budget_bytes=0)
    assert structure.complete and (structure.crc_checked, structure.crc_skipped) == (small, 4 * 16384)


def test_inspect_never_raises_on_any_cut(saved: Path, tmp_path: Path) -> None:
    whole = (saved / "ckpt_10.pt").read_bytes()
    path = tmp_path / "ckpt_10.pt"
    for size in range(0, len(whole), 7):
        path.write_bytes(whole[:size])
        assert not inspect(str(path)).complete, size
    path.unlink()
    assert inspect(str(path)).why == "ckpt_10.pt is missing"


# --- the newest complete one


def test_the_newest_step_wins_and_damaged_newer_ones_are_skipped(saved: Path, tmp_path: Path) -> None:
    r0, r1, r2 = tmp_path / "r0", tmp_path / "r1", tmp_path / "r2"
    copy(saved, "ckpt_10.pt", r0)
    good = copy(saved, "ckpt_20.pt", r1)
    cut(copy(saved, "ckpt_30.pt", r2), 100)  # the rank was killed writing it
    (r2 / "last.pt").write_bytes((saved / "ckpt_30.pt").read_bytes())  # no step: after every numbered one
    found = newest_complete([str(r0), str(r1), str(r2), str(tmp_path / "absent")], kind="torch")
    assert (found.prefix, found.step, found.directory, found.kind) == (str(good), 20, str(r1), "torch")
    assert found.skipped == (
        (
            str(r2 / "ckpt_30.pt"),
            "ckpt_30.pt is cut short or damaged (its zip central "
            "directory, which torch writes last: File is not a zip file)",
        ),
    )
    assert "resuming from ckpt_20.pt in %s" % r1 in found.describe()


def test_files_without_a_step_go_by_time_after_numbered_ones(saved: Path, tmp_path: Path) -> None:
    older, newer = copy(saved, "ckpt_10.pt", tmp_path, "best.pt"), copy(saved, "ckpt_10.pt", tmp_path, "last.pt")
    os.utime(older, (1000, 1000))
    os.utime(newer, (2000, 2000))
    found = newest_complete([str(tmp_path)], kind="torch")
    assert (found.prefix, found.step) == (str(newer), None)
    cut(copy(saved, "ckpt_20.pt", tmp_path), 10)
    found = newest_complete([str(tmp_path)], kind="torch")
    assert found.prefix == str(newer) and [os.path.basename(p) for p, _ in found.skipped] == ["ckpt_20.pt"]
    numbered = copy(saved, "ckpt_10.pt", tmp_path, "ckpt_5.pt")
    os.utime(numbered, (10, 10))
    assert newest_complete([str(tmp_path)], kind="torch").prefix == str(numbered)


def test_a_tie_goes_to_the_newer_file_and_links_are_seen_once(saved: Path, tmp_path: Path) -> None:
    a = copy(saved, "ckpt_20.pt", tmp_path / "a")
    b = copy(saved, "ckpt_20.pt", tmp_path / "b")
    os.utime(a, (1000, 1000))
    os.utime(b, (2000, 2000))
    assert newest_complete([str(tmp_path / "a"), str(tmp_path / "b")], kind="torch").prefix == str(b)
    cut(b, 10)
    os.link(b, tmp_path / "a" / "ckpt_25.pt")
    found = newest_complete([str(tmp_path / "a"), str(tmp_path / "b")], kind="torch")
    assert found.prefix == str(a)  # b's file, cut, is skipped once, by the name it was seen first
    assert [os.path.relpath(p, tmp_path) for p, _ in found.skipped] == ["a/ckpt_25.pt"]


def test_none_anywhere_and_an_unknown_kind(tmp_path: Path) -> None:
    assert newest_complete([str(tmp_path)], kind="torch") == Found(None, None, None, (), kind="torch")
    with pytest.raises(ValueError, match="one of tf, torch"):
        newest_complete([str(tmp_path)], kind="mindspore")


# --- placing


def found_in(directory: Path) -> Found:
    return newest_complete([str(directory)], kind="torch")


def test_place_copies_the_file_under_its_own_name(saved: Path, tmp_path: Path) -> None:
    source = copy(saved, "ckpt_20.pt", tmp_path / "rank 0")
    target = tmp_path / "rank 2" / "ckpt"
    placed = place(found_in(tmp_path / "rank 0"), str(target))
    assert placed == checkpoint.Placed(str(target / "ckpt_20.pt"), 0, 1, False)
    assert (target / "ckpt_20.pt").read_bytes() == source.read_bytes()
    assert not os.path.samefile(source, target / "ckpt_20.pt")
    assert sorted(os.listdir(target)) == ["ckpt_20.pt"]
    assert place(found_in(tmp_path / "rank 0"), str(target)).unchanged  # again: nothing to do
    assert place(found_in(tmp_path / "rank 0"), str(tmp_path / "rank 0")).unchanged  # its own directory
    assert resume_variables(placed.prefix_in_directory, 20) == {
        "NPULAUNCH_RESUME_CHECKPOINT": str(target / "ckpt_20.pt"),
        "NPULAUNCH_RESUME_STEP": "20",
    }


def test_a_name_taken_by_another_file_puts_it_in_a_resume_folder(saved: Path, tmp_path: Path) -> None:
    copy(saved, "ckpt_20.pt", tmp_path / "good")
    rank = tmp_path / "rank"
    partial = copy(saved, "ckpt_20.pt", rank)
    cut(partial, 300)  # the rank's own save of step 20, cut short
    other = copy(saved, "ckpt_30.pt", tmp_path / "other", "ckpt_20.pt")  # a whole one of other tensors
    before = partial.read_bytes()
    placed = place(found_in(tmp_path / "good"), str(rank))
    assert placed.prefix_in_directory == str(rank / "npulaunch-resume-20" / "ckpt_20.pt")
    assert (placed.linked, placed.copied, placed.unchanged) == (0, 1, False)
    assert partial.read_bytes() == before and sorted(os.listdir(rank)) == ["ckpt_20.pt", "npulaunch-resume-20"]
    taken = place(found_in(tmp_path / "good"), str(other.parent))
    assert taken.prefix_in_directory == str(other.parent / "npulaunch-resume-20" / "ckpt_20.pt")
    assert (other.parent / "ckpt_20.pt").read_bytes() == (saved / "ckpt_30.pt").read_bytes()


def test_the_ranks_own_save_of_the_same_tensors_is_used_as_it_is(saved: Path, tmp_path: Path) -> None:
    """Every rank saving the same weights writes the same records (torch's saves are deterministic): a
    rank's own whole file of that name is as good as the one found."""
    copy(saved, "ckpt_20.pt", tmp_path / "r0")
    own = copy(saved, "ckpt_20.pt", tmp_path / "r1")
    placed = place(found_in(tmp_path / "r0"), str(tmp_path / "r1"))
    assert placed == checkpoint.Placed(str(own), 0, 0, True)
    assert sorted(os.listdir(tmp_path / "r1")) == ["ckpt_20.pt"]


def fail_with(code: int):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return fail


def test_place_never_links_a_torch_file_and_torch_loads_what_was_placed(saved: Path, tmp_path: Path) -> None:
    """torch.save writes into the name it is given (no temporary and rename, as TF's savers do): with a
    hard link, ranks saving again under the name they resumed from would write into one file at once."""
    source = copy(saved, "ckpt_20.pt", tmp_path / "a")
    copied = place(found_in(tmp_path / "a"), str(tmp_path / "b"))
    assert (copied.linked, copied.copied) == (0, 1)
    target = Path(copied.prefix_in_directory)
    assert target.read_bytes() == source.read_bytes() and not os.path.samefile(source, target)
    assert target.stat().st_mode == source.stat().st_mode and temporaries(tmp_path) == []
    loaded = json.loads(run_torch(LOAD, str(source), copied.prefix_in_directory))
    assert list(loaded.values()) == [[20, [20.5] * 8]] * 2
    with open(target, "r+b") as handle:  # the rank saves again under that name: written in place
        handle.truncate(100)
    assert source.stat().st_size > 100  # the checkpoint it came from is untouched


def test_a_full_disk_mid_copy_leaves_nothing_behind(saved: Path, tmp_path: Path, monkeypatch) -> None:
    copy(saved, "ckpt_20.pt", tmp_path / "a")
    target = tmp_path / "b"
    target.mkdir()

    def copy_until_full(source: str, destination: str) -> None:
        with open(destination, "wb") as handle:
            handle.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), destination)

    monkeypatch.setattr(checkpoint, "copy_file", copy_until_full)
    found = found_in(tmp_path / "a")
    with pytest.raises(ResumeError) as raised:
        place(found, str(target))
    assert raised.value.path == str(target) and "No space left on device" in str(raised.value)
    assert os.listdir(target) == []  # no temporary, and no file under the checkpoint's name
    monkeypatch.undo()
    assert place(found, str(target)).copied == 1


def test_a_checkpoint_changed_since_it_was_found_is_not_placed(saved: Path, tmp_path: Path) -> None:
    source = copy(saved, "ckpt_20.pt", tmp_path / "a")
    found = found_in(tmp_path / "a")
    cut(source, 500)
    with pytest.raises(ResumeError) as raised:
        place(found, str(tmp_path / "b"))
    assert raised.value.path == str(source) and "cut short" in raised.value.reason
    assert os.listdir(tmp_path / "b") == []
