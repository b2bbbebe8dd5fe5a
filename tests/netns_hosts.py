"""Test hosts on one machine: each host a network namespace on a private bridge (a test subnet that
exists only inside this machine, no route out), its own hostname (a UTS namespace) and its own sshd
(own host key, key-only root login). Writes the client key, known_hosts and an ssh_config.

Needs root, iproute2, util-linux (unshare, nsenter) and openssh-server; .ci/run installs them.
Processes share the machine's process table and filesystem with the test (``ip netns pids``
tells which process is on which host).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class Network:
    """Names and subnet of one set of hosts; leftovers of a crashed run are removed on up()."""

    subnet: str  # the first three numbers: bridge .1, hosts .11, .12, ...
    bridge: str
    ns_prefix: str  # namespace names: <prefix>h1, ...
    veth_prefix: str  # the host side of each host's veth pair


def slot() -> int:
    """This test process's number among those that may run at once: pytest-xdist's worker gwN is N, plus
    NPULAUNCH_TEST_SLOT_BASE (a suite run inside a test sets it, so the two never share a name). Names,
    subnets and Slurm ports of test hosts and clusters are per slot: parallel workers never meet, and
    up() removing its own network's leftovers never removes another worker's hosts."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return (int(os.environ.get("NPULAUNCH_TEST_SLOT_BASE", "0") or 0) + index) % 100


def network(subnet16: str, tag: str, veth_tag: str) -> Network:
    """A test network of this slot: subnet ``subnet16``.<slot>.0/24, bridge ``npl<tag><slot>``,
    namespaces ``npl<tag><slot>-h1``..., veths ``npl<veth_tag><slot>-h1``... (15 characters at most)."""
    n = slot()
    return Network(f"{subnet16}.{n}", f"npl{tag}{n}", f"npl{tag}{n}-", f"npl{veth_tag}{n}-")


TESTS_NET = network("10.79", "test", "v")
BENCH_NET = network("10.78", "bench", "b")  # bench/ssh_startup.py: never clashes
SLURM_NET = network("10.74", "slurm", "s")  # the Slurm test nodes (slurm_cluster.py)


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def available() -> str:
    """Why these hosts cannot be made here ('' when they can)."""
    if os.geteuid() != 0:
        return "root"
    for tool, package in (
        ("ip", "iproute2"),
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
        ("ssh-keygen", "openssh-client"),
    ):
        if shutil.which(tool) is None:
            return f"{tool} ({package})"
    return "" if os.path.exists(SSHD) else "openssh-server (/usr/sbin/sshd)"


@dataclass
class TestHost:
    name: str
    address: str
    directory: Path
    net: Network = TESTS_NET

    @property
    def netns(self) -> str:
        return self.net.ns_prefix + self.name

    @property
    def veth(self) -> str:
        return self.net.veth_prefix + self.name

    @property
    def pid(self) -> int:
        try:
            return int((self.directory / "sshd.pid").read_text())
        except (OSError, ValueError):
            return 0


@dataclass
class NetnsHosts:
    root: Path
    count: int
    net: Network = TESTS_NET
    name_prefix: str = "h"  # host names: h1, h2, ... (the Slurm test nodes are n1, n2, ...)
    hosts: List[TestHost] = field(default_factory=list)

    @property
    def client_key(self) -> Path:
        return self.root / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def bin_dir(self) -> Path:
        """First on the PATH of every SSH session on the hosts (empty unless a test puts tools there,
        such as the NPU tool stand-ins; the hosts share this machine's filesystem)."""
        return self.root / "bin"

    def up(self) -> "NetnsHosts":
        remove_leftovers(self.net)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.bin_dir.mkdir(exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "npulaunch-tests", "-f", str(self.client_key))
        shutil.copy(self.root / "client_key.pub", self.root / "authorized_keys")
        net = self.net
        if run("ip", "link", "show", net.bridge, check=False).returncode != 0:
            run("ip", "link", "add", net.bridge, "type", "bridge")
        run("ip", "addr", "replace", f"{net.subnet}.1/24", "dev", net.bridge)
        run("ip", "link", "set", net.bridge, "up")
        names = [f"{self.name_prefix}{i}" for i in range(1, self.count + 1)]
        etc_hosts = "127.0.0.1 localhost\n" + "".join(f"{net.subnet}.{10 + i} {n}\n" for i, n in enumerate(names, 1))
        for i, name in enumerate(names, 1):
            host = TestHost(name, f"{net.subnet}.{10 + i}", self.root / name, net)
            self.hosts.append(host)  # before it exists: down() cleans up a half-made host too
            self._host_up(host, etc_hosts)
        known, config = [], []
        for host in self.hosts:
            key = (host.directory / "host_ed25519.pub").read_text().split()[:2]
            known.append(f"{host.name},{host.address} {' '.join(key)}\n")
            config.append(f"Host {host.name}\n  HostName {host.address}\n")
        self.known_hosts.write_text("".join(known))
        config.append(
            f"Host *\n  User root\n  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
        )
        self.ssh_config.write_text("".join(config))
        return self

    def _host_up(self, host: TestHost, etc_hosts: str) -> None:
        directory, name, address, ns = host.directory, host.name, host.address, host.netns
        directory.mkdir(exist_ok=True)
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        run("ip", "link", "set", host.veth, "master", self.net.bridge, "up")
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        run("ip", "-n", ns, "link", "set", "eth0", "up")
        Path(f"/etc/netns/{ns}").mkdir(parents=True, exist_ok=True)
        Path(f"/etc/netns/{ns}/hosts").write_text(etc_hosts)
        uts = directory / "uts"
        uts.touch()
        run("unshare", f"--uts={uts}", "hostname", name)
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(directory / "host_ed25519"))
        (directory / "sshd_config").write_text(
            f"ListenAddress {address}:22\nHostKey {directory}/host_ed25519\nPidFile {directory}/sshd.pid\n"
            f"AuthorizedKeysFile {self.root}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nUseDNS no\nPrintMotd no\nPrintLastLog no\nX11Forwarding no\nMaxStartups 200:30:400\n"
            f"MaxSessions 200\nSubsystem sftp /usr/lib/openssh/sftp-server\n"
            f"SetEnv PATH={self.bin_dir}:{os.environ['PATH']}\n"
        )
        run(
            "ip",
            "netns",
            "exec",
            ns,
            "nsenter",
            f"--uts={uts}",
            "--",
            SSHD,
            "-f",
            str(directory / "sshd_config"),
            "-E",
            str(directory / "sshd.log"),
        )
        deadline = time.monotonic() + 5
        while not host.pid and time.monotonic() < deadline:
            time.sleep(0.05)
        if not host.pid:
            raise RuntimeError(f"sshd for {name} did not start: {(directory / 'sshd.log').read_text()}")

    def down(self) -> None:
        """Stop every sshd and every process left on the hosts; remove namespaces and the bridge."""
        for host in self.hosts:
            _remove_namespace(host.netns, extra_pid=host.pid)
            run("umount", str(host.directory / "uts"), check=False)
        run("ip", "link", "del", self.net.bridge, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def set_link(self, host: TestHost, up: bool) -> None:
        """Cut (or restore) a host's network: its veth goes down."""
        run("ip", "link", "set", host.veth, "up" if up else "down")


def _remove_namespace(ns: str, extra_pid: int = 0) -> None:
    pids = run("ip", "netns", "pids", ns, check=False).stdout.split()
    for pid in [extra_pid, *map(int, pids)]:
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    run("ip", "netns", "del", ns, check=False)
    shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)


def remove_leftovers(net: Network = TESTS_NET) -> None:
    """Namespaces, veths and the bridge a crashed earlier run left behind (ours by their prefix)."""
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(net.ns_prefix):
            _remove_namespace(name)
    for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        fields = line.split(":")
        if len(fields) > 1 and fields[1].strip().split("@")[0].startswith(net.veth_prefix):
            run("ip", "link", "del", fields[1].strip().split("@")[0], check=False)
    run("ip", "link", "del", net.bridge, check=False)
