"""The YAML and flags of the mpirun transport: ``transport``, the ``mpi`` section (mpirun, mpirun_options:
the options npulaunch sets itself are refused), the warning for SSH logins that mpirun does not use, and
``--transport`` over the YAML; and the mpirun command line each agent gets (plan/schedulers/mpi.py), whose
shell leaves no variable of Open MPI to the agent (run here with a real /bin/sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from npulaunch.config.cluster import ClusterConfig, Transport
from npulaunch.config.load import load_config
from npulaunch.config.overrides import Overrides, apply_overrides
from npulaunch.host.errors import ConfigError
from npulaunch.plan.schedulers.mpi import agent_argv

HEAD = "version: 1\njob:\n  command: [python3, train.py]\nhosts: [h1, h2]\n"  # lines 1-4


def load(tmp_path: Path, text: str) -> ClusterConfig:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD + text)
    return load_config(str(path))


def test_ssh_is_the_default_and_mpirun_takes_its_section(tmp_path: Path) -> None:
    assert load(tmp_path, "").transport is Transport.SSH
    config = load(
        tmp_path,
        'transport: mpirun\nmpi:\n  mpirun: /opt/ompi/bin/mpirun\n  mpirun_options: [--mca, btl, "tcp,self"]\n',
    )
    assert config.transport is Transport.MPIRUN and config.sources["transport"] == "yaml"
    assert config.mpi == {"mpirun": "/opt/ompi/bin/mpirun", "mpirun_options": ("--mca", "btl", "tcp,self")}
    assert not config.warnings


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("transport: mpi\n", ["job.yaml:5: transport", "ssh", "mpirun"]),
        ("mpi: {mpirun_options: [-np, '4']}\n", ["job.yaml:5: mpi.mpirun_options[0]", "'-np'", "--host HOST:1 -np 1"]),
        ("mpi: {mpirun_options: ['--host=h3']}\n", ["mpi.mpirun_options[0]", "'--host=h3'"]),
        ("mpi: {mpirun_options: '--mca btl tcp'}\n", ["mpi.mpirun_options", "a list of mpirun's arguments"]),
        ("mpi: {mpirunn: mpirun}\n", ["mpi.mpirunn", "mpirun"]),
    ],
)
def test_what_the_mpirun_transport_refuses(tmp_path: Path, text: str, needles: list) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    rendered = caught.value.render()
    for needle in needles:
        assert needle in rendered, rendered


def test_ssh_logins_with_mpirun_are_a_warning_and_the_flag_decides(tmp_path: Path) -> None:
    text = "hosts: [{host: h1, user: alice}, h2]\nssh: {identity_file: /k}\n"
    path = tmp_path / "job.yaml"
    path.write_text(HEAD.replace("hosts: [h1, h2]\n", "") + text + "transport: mpirun\n")
    config = load_config(str(path))
    [warning] = [w for w in config.warnings if "transport mpirun" in w.render()]
    assert "(and 1 more)" in warning.render() and "plm_rsh_agent" in warning.render()
    over_ssh = apply_overrides(config, Overrides(transport=Transport.SSH))
    assert over_ssh.transport is Transport.SSH and over_ssh.sources["transport"] == "cli"
    assert not [w for w in over_ssh.warnings if "transport mpirun" in w.render()]
    back = apply_overrides(over_ssh, Overrides(transport=Transport.MPIRUN))
    assert [w for w in back.warnings if "transport mpirun" in w.render()]


def test_each_agent_is_one_process_of_its_own_mpirun_without_open_mpis_variables() -> None:
    argv = agent_argv("mpirun", "h2", ["--mca", "btl", "tcp,self"], "env")
    assert argv[:10] == ["mpirun", "--host", "h2:1", "-np", "1", "--stdin", "0", "--bind-to", "none", "-q"]
    assert argv[10:15] == ["--mca", "btl", "tcp,self", "/bin/sh", "-c"]
    given = {
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_MCA_btl": "tcp,self",
        "PMIX_RANK": "0",
        "HFI_NO_BACKTRACE": "1",
        "KEEP": "a\nOMPI_FAKE=1",  # a value whose line looks like a variable: KEEP stays whole
        "PATH": "/usr/bin:/bin",
    }
    said = subprocess.run(argv[-3:], env=given, capture_output=True, text=True, check=True).stdout
    assert "KEEP=a\nOMPI_FAKE=1\n" in said
    names = [line.split("=", 1)[0] for line in said.splitlines() if "=" in line]
    assert not [n for n in names if n.startswith(("OMPI_COMM", "OMPI_MCA", "PMIX_", "HFI_"))], said
