"""What a host can say about the NPUs a job will use, gathered by the preflight probe before anything
starts: each chip's health and the processes already holding it (``npu-smi``), each NPU NIC's link, net
health, address, gateway, detect address and TLS switch (``hccn_tool``), the CANN toolkit, driver and
firmware versions, and the host side of HCCL (``HCCL_IF_IP`` / ``HCCL_SOCKET_IFNAME``, its ports); and,
in a second round, NPU-to-NPU pings to peers on other hosts.

Facts only, as plain JSON: the launcher judges them across hosts (plan/checks/health.py). Every tool call
has a time limit and the whole gathering a deadline, so a hung tool costs at most its limit; what could
not be learned is listed under ``skipped`` with why, never taken as passed. Standard library only,
Python 3.7 (the probe runs this on the hosts).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.host.discovery import NpuChip, parse_hccn_ip, parse_npu_smi_processes, parse_npu_smi_version
from npulaunch.host.health import parse
from npulaunch.host.health.hostnet import hccl_env_problems, port_facts

TOOL_TIMEOUT_S = 10.0  # one hccn_tool / npu-smi call
HEALTH_LIMIT_S = 30.0  # all of them (the launcher waits 60 s for a probe's answer)
PING_TIMEOUT_S = 10.0  # one hccn_tool -ping (the device sends 3 packets)
WORKERS = 8  # tool calls at a time on one host
ASCEND_ROOT = "/usr/local/Ascend"
INSTALL_INFO = "/etc/ascend_install.info"  # Driver_Install_Path_Param (hicann/runtime scripts/.../setenv.bash)
HCCN_CONF = "/etc/hccn.conf"
# each NIC question: the fact's name and hccn_tool's arguments after "-i <id>"
NIC_QUERIES = (
    ("link", ("-link", "-g")),
    ("net_health", ("-net_health", "-g")),
    ("ip", ("-ip", "-g")),
    ("gateway", ("-gateway", "-g")),
    ("netdetect", ("-netdetect", "-g")),
    ("tls", ("-tls", "-g")),
)
TOOLKIT_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")  # set by CANN's set_env.sh


class Unanswered(Exception):
    """A tool that could not be asked, hung, or failed; its message says which and why."""


def run_bounded(argv: Sequence[str], timeout_s: float) -> Tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of a tool, killed with its whole process group at ``timeout_s``
    (a hung driver call must not hold up the preflight, nor leave a child holding the pipes)."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            start_new_session=True,
        )
    except OSError as exc:
        raise Unanswered(f"{argv[0]} cannot be run: {exc.strerror}") from None
    try:
        out, err = proc.communicate(timeout=max(0.01, timeout_s))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:  # a grandchild left the group and holds the pipes
            proc.kill()
        raise Unanswered(f"{' '.join(argv)} did not answer within {timeout_s:g} s") from None
    return proc.returncode, out, err


class Calls:
    """Tool calls against one deadline, counted per tool (the check's "what was checked")."""

    def __init__(self, limit_s: float, tool_timeout_s: float, runner: Callable[..., Tuple[int, str, str]]) -> None:
        self.deadline = time.monotonic() + limit_s
        self.limit_s, self.tool_timeout_s, self.runner = limit_s, tool_timeout_s, runner
        self.counts: Dict[str, int] = {}

    def run(self, argv: Sequence[str], timeout_s: Optional[float] = None) -> Tuple[int, str, str]:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Unanswered(f"not asked: the host's {self.limit_s:g} s for its checks ran out")
        self.counts[argv[0]] = self.counts.get(argv[0], 0) + 1
        return self.runner(argv, min(timeout_s or self.tool_timeout_s, left))

    def output(self, argv: Sequence[str]) -> str:
        """stdout of a call that must succeed."""
        status, out, err = self.run(argv)
        if status != 0:
            lines = (err or out).strip().splitlines()
            raise Unanswered(f"{' '.join(argv)} exited with {status}: {lines[-1] if lines else 'no output'}")
        return out


def gather(
    ask: Dict[str, Any],
    chips: Sequence[NpuChip],
    ids: Sequence[int],
    smi_text: Optional[str],
    environ: Mapping[str, str],
    runner: Callable[..., Tuple[int, str, str]] = run_bounded,
) -> Dict[str, Any]:
    """The health facts of this host. ``chips``/``ids``/``smi_text``: what ``npu-smi info`` listed
    (physical id of each chip) and its text, None without npu-smi. ``ask``: devices (physical ids, None
    for all listed), nics (ask hccn_tool), env (the job's YAML values of the variables read here, None
    = removed), ports ({"first", "count"} or None), chief_port, tool_timeout_s, limit_s, paths."""
    started = time.monotonic()
    calls = Calls(float(ask.get("limit_s", HEALTH_LIMIT_S)), float(ask.get("tool_timeout_s", TOOL_TIMEOUT_S)), runner)
    env = effective_env(environ, ask.get("env") or {})
    paths = dict(
        {"root": ASCEND_ROOT, "install_info": INSTALL_INFO, "hccn_conf": HCCN_CONF}, **(ask.get("paths") or {})
    )
    has_smi, has_hccn = smi_text is not None, bool(shutil.which("hccn_tool", path=environ.get("PATH")))
    wanted = ask.get("devices")
    devices = [d for d in (ids if wanted is None else wanted)]
    facts: Dict[str, Any] = {
        "tools": {"npu-smi": has_smi, "hccn_tool": has_hccn},
        "devices": devices,
        "busy": {},
        "chips": {},
        "nics": {},
        "skipped": [],
        "driver_from_smi": parse_npu_smi_version(smi_text) if smi_text else None,
    }
    if smi_text is not None:
        facts["busy"] = _busy(smi_text, chips, ids, devices)
        facts["chips"] = _chip_details(calls, chips, ids, devices, facts["skipped"])
    if ask.get("nics") and has_hccn:
        facts["nics"] = _nics(calls, devices, facts["skipped"])
        facts["hccn_conf"] = _hccn_conf(paths["hccn_conf"], devices)
    facts["versions"] = versions(env, paths, facts["driver_from_smi"], facts["skipped"])
    facts["hccl_env"] = hccl_env_problems(env)
    facts["ports"] = port_facts(env, bool(ask.get("ports")), ask.get("chief_port"))
    facts["calls"] = calls.counts
    facts["elapsed_s"] = round(time.monotonic() - started, 3)
    return facts


def effective_env(environ: Mapping[str, str], yaml_env: Mapping[str, Optional[str]]) -> Dict[str, str]:
    """What the job's ranks will see of the variables read here: the YAML's value, else the host's."""
    env = dict(environ)
    for name, value in yaml_env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return env


def _busy(text: str, chips: Sequence[NpuChip], ids: Sequence[int], devices: Sequence[int]) -> Dict[str, List[Any]]:
    """Physical id -> [[pid, name], ...] of the processes npu-smi lists on the job's devices."""
    by_chip = {(c.npu_id, c.chip_id): device for c, device in zip(chips, ids)}
    busy: Dict[str, List[Any]] = {}
    for process in parse_npu_smi_processes(text):
        device = by_chip.get((process.npu_id, process.chip_id))
        if device is not None and device in devices:
            busy.setdefault(str(device), []).append([process.pid, process.name])
    return busy


def _chip_details(
    calls: Calls, chips: Sequence[NpuChip], ids: Sequence[int], devices: Sequence[int], skipped: List[List[Any]]
) -> Dict[str, Dict[str, Any]]:
    """Each job chip's health from the table; for a chip that is not OK, its error code and information
    from ``npu-smi info -t health -i <card> -c <chip>`` (Ascend/mind-cluster 03_collecting_logs.md)."""
    details: Dict[str, Dict[str, Any]] = {}
    for chip, device in zip(chips, ids):
        if device not in devices:
            continue
        entry: Dict[str, Any] = {"health": chip.health, "npu": chip.npu_id, "chip": chip.chip_id}
        if chip.health != "OK":
            argv = ["npu-smi", "info", "-t", "health", "-i", str(chip.npu_id), "-c", str(chip.chip_id)]
            try:
                health, code, info = parse.parse_npu_health(calls.output(argv))
                entry.update(code=code, info=info, detail_health=health)
            except Unanswered as exc:
                skipped.append(["chip_detail", device, str(exc)])
        details[str(device)] = entry
    return details


def _nics(calls: Calls, devices: Sequence[int], skipped: List[List[Any]]) -> Dict[str, Dict[str, Any]]:
    """Every NIC question of every device, WORKERS calls at a time."""
    jobs = [(device, name, args) for device in devices for name, args in NIC_QUERIES]
    nics: Dict[str, Dict[str, Any]] = {str(device): {} for device in devices}

    def ask_one(job: Tuple[int, str, Tuple[str, ...]]) -> Tuple[int, str, Any, str]:
        device, name, args = job
        try:
            status, out, err = calls.run(["hccn_tool", "-i", str(device), *args])
        except Unanswered as exc:
            return device, name, None, str(exc)
        return device, name, _nic_value(name, status, out, err), ""

    from concurrent.futures import ThreadPoolExecutor  # ~4 ms (logging, queue): only with NPUs to ask about

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for device, name, value, why in pool.map(ask_one, jobs):
            if why:
                skipped.append([name, device, why])
            elif isinstance(value, Unanswered):
                skipped.append([name, device, str(value)])
            else:
                nics[str(device)].update(value)
    return nics


def _nic_value(name: str, status: int, out: str, err: str) -> Any:
    """The facts one answer gives, or Unanswered when the tool failed for another reason than "none set"."""
    if name == "gateway":  # no gateway set: no line, and the tool fails (UDA_DSMI_GATEWAY_NOT_PRESET_ERR)
        return {"gateway": parse.parse_gateway(out)}
    if name == "ip":  # no address: nothing printed (mind-cluster npu_info_before.txt, device 2)
        return {"ip": parse_hccn_ip(out), "netmask": parse.parse_netmask(out)}
    if name == "netdetect":
        return {"netdetect": parse.parse_netdetect(out)}
    if status != 0:
        lines = (err or out).strip().splitlines()
        return Unanswered(f"hccn_tool -{name} -g exited with {status}: {lines[-1] if lines else 'no output'}")
    value = {"link": parse.parse_link, "net_health": parse.parse_net_health, "tls": parse.parse_tls_switch}[name](out)
    if value is None:
        first = out.strip().splitlines()[0] if out.strip() else "nothing"
        return Unanswered(f"hccn_tool -{name} -g printed {first!r}, not a format npulaunch reads")
    return {name: value}


def _hccn_conf(path: str, devices: Sequence[int]) -> Optional[Dict[str, Dict[str, str]]]:
    text = _read(path)
    if text is None:
        return None
    conf = parse.parse_hccn_conf(text)
    return {str(d): conf[d] for d in devices if d in conf}


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(1 << 20)
    except OSError:
        return None


def versions(
    env: Mapping[str, str], paths: Mapping[str, str], driver_from_smi: Optional[str], skipped: List[List[Any]]
) -> Dict[str, Optional[List[str]]]:
    """``{"toolkit"|"driver"|"firmware": [version, where it was read] or None}``."""
    found: Dict[str, Optional[List[str]]] = {"toolkit": toolkit_version(env, paths["root"])}
    if found["toolkit"] is None:
        places = [f"${name}" for name in TOOLKIT_VARS] + [os.path.join(paths["root"], "ascend-toolkit/latest")]
        skipped.append(["toolkit", None, f"no ascend_toolkit_install.info or version.cfg under {', '.join(places)}"])
    install = parse.parse_key_values(_read(paths["install_info"]) or "")
    root = install.get("Driver_Install_Path_Param") or paths["root"]
    for part in ("driver", "firmware"):
        path = os.path.join(root, part, "version.info")
        version = parse.parse_installed_version(_read(path) or "")
        found[part] = [version, path] if version else None
    if found["driver"] is None and driver_from_smi:
        found["driver"] = [driver_from_smi, "npu-smi info"]
    for part in ("driver", "firmware"):
        if found[part] is None:
            skipped.append([part, None, f"no {os.path.join(root, part, 'version.info')}"])
    return found


def toolkit_version(env: Mapping[str, str], root: str) -> Optional[List[str]]:
    """The CANN toolkit the ranks would load: under $ASCEND_HOME_PATH / $ASCEND_TOOLKIT_HOME (CANN's
    set_env.sh), else the default install (``ascend-toolkit/latest``; ``cann`` from CANN 8.5.0)."""
    bases = [env[name] for name in TOOLKIT_VARS if env.get(name)]
    bases += [os.path.join(root, "ascend-toolkit", "latest"), os.path.join(root, "cann")]
    arch = os.uname().machine  # what platform.machine() returns on Linux, without importing platform
    for base in bases:
        candidates = [os.path.join(base, f"{arch}-linux", "ascend_toolkit_install.info")]
        try:
            candidates += sorted(
                os.path.join(base, entry, "ascend_toolkit_install.info")
                for entry in os.listdir(base)
                if entry.endswith("-linux") and entry != f"{arch}-linux"
            )
        except OSError:
            continue
        candidates.append(os.path.join(base, "version.cfg"))
        for path in candidates:
            version = parse.parse_toolkit_version(_read(path) or "")
            if version:
                return [version, path]
    return None


def pings(ask: Dict[str, Any], runner: Callable[..., Tuple[int, str, str]] = run_bounded) -> Dict[str, Any]:
    """The second round: ``ask["pairs"]`` = [[device, peer address], ...]; each pinged from its NPU with
    ``hccn_tool -i <device> -ping -g address <peer>`` (hicann/hccl docs/zh/user_guide/fault_diagnosis/
    param_link_stage.md), WORKERS at a time, each within ``timeout_s``. Results: [device, peer, sent,
    received, failure line or why not asked]."""
    timeout_s = float(ask.get("timeout_s", PING_TIMEOUT_S))
    calls = Calls(float(ask.get("limit_s", timeout_s * 2)), timeout_s, runner)
    if not shutil.which("hccn_tool"):
        return {"results": [], "skipped": "hccn_tool is not on the PATH", "calls": {}}

    def ping(pair: List[Any]) -> List[Any]:
        device, peer = int(pair[0]), str(pair[1])
        try:
            _, out, err = calls.run(["hccn_tool", "-i", str(device), "-ping", "-g", "address", peer])
        except Unanswered as exc:
            return [device, peer, None, None, str(exc)]
        sent, received, failure = parse.parse_ping(out + err)
        return [device, peer, sent, received, failure]

    from concurrent.futures import ThreadPoolExecutor  # ~4 ms (logging, queue): only with NPUs to ask about

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(ping, ask.get("pairs") or []))
    return {"results": results, "skipped": "", "calls": calls.counts}
