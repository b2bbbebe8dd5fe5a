"""The launcher's wake pipes (launch/fleet/link.py): a channel that outlives its attempt (a lost host's srun or
mpirun ends late) wakes a pipe its attempt has closed; the byte must not land in whatever file now has that
descriptor's number, such as the stdin of the next attempt's agent, whose code it would damage."""

from __future__ import annotations

import os

from npulaunch.launch.fleet.link import close_wake, open_wake, wake


def test_a_wake_reaches_its_open_pipe() -> None:
    pipe = open_wake()
    try:
        wake(pipe[1])
        assert os.read(pipe[0], 16) == b"m"
    finally:
        close_wake(pipe)


def test_a_closed_pipe_is_not_woken_even_when_its_number_is_taken_again() -> None:
    pipe = open_wake()
    close_wake(pipe)
    read, write = os.pipe()  # the lowest free numbers: the closed pipe's, as a new agent's stdin would get them
    try:
        assert pipe[1] in (read, write)
        wake(pipe[1])  # the old channel's reader thread, its process ending late
        os.set_blocking(read, False)
        os.write(write, b"code")
        assert os.read(read, 16) == b"code"  # no stray byte ahead of it
    finally:
        os.close(read)
        os.close(write)
