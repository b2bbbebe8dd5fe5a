"""Reading what Ascend's tools and files say about an NPU's health, its NIC and the installed versions:
``hccn_tool -i <id> -link/-net_health/-gateway/-netdetect/-tls/-ping -g``, ``npu-smi info -t health``
and ``-t board``, the performance figures of ``npu-smi info -t common`` and ``hccn_tool -speed/-stat -g``,
``ascend_toolkit_install.info`` / ``version.cfg``, the driver's and firmware's ``version.info``,
``/etc/hccn.conf``. Pure functions over text, tolerant of the variants seen across
products and driver versions (tests/data/tool_outputs/ holds the real samples with their sources).
Standard library only, Python 3.7: the probe runs this on the hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from npulaunch.host.lazyre import lazy_re

# hicann/driver src/custom/network/hccn/ascend910B/hccn_tool/tool_ops.c @ ef377e95 (tool_link_get_linkstatus):
# "link status: UP" / "link status: DOWN"; the vNIC query prints "vnic link status: ..." (not matched here)
_LINK = lazy_re(r"^\s*link status\s*:\s*(\w+)", re.MULTILINE | re.IGNORECASE)
# the same file, g_net_health_status: Success, Socket fail, Receive timeout, Unreachable, Time exceeded,
# Fault, Init, Thread error, Detect ip set, Unknown; a 2022 capture spells "Socket failed" (Ascend/mind-cluster
# component/ascend-faultdiag/test/st_module_testcase/kg_parse/npu_info_before.txt @ 22bb3d98)
_NET_HEALTH = lazy_re(r"^\s*net health status\s*:\s*(.+?)\s*$", re.MULTILINE | re.IGNORECASE)
# tool_ops_ext.c: "default gateway:%s, Iface:eth%d" (910B); Ascend 950 prints "default gateway:%s" only
_GATEWAY = lazy_re(r"^\s*default gateway\s*:\s*([0-9A-Fa-f.:]+)", re.MULTILINE)
# tool_ops.c tool_get_netdetect: "netdetect addr: %s"; a MindIE deployment document shows "netdetect address:"
_NETDETECT = lazy_re(r"^\s*netdetect addr(?:ess)?\s*:\s*([0-9A-Fa-f.:]+)", re.MULTILINE | re.IGNORECASE)
# tool_tls.c: "dev_id:%d, tls switch[%u](0:disable, 1:enable), ..." (older drivers lack "tls preconfigured")
_TLS = lazy_re(r"tls switch\s*\[\s*(\d)\s*\]", re.IGNORECASE)
_NETMASK = lazy_re(r"^\s*netmask\s*:\s*(\d{1,3}(?:\.\d{1,3}){3})\s*$", re.MULTILINE)
# hccn_product_ext/ds_net_ext.c dsmi_ping_fun: "device %d PING %s" then the device's lines
# ("recv seq=0,time=1.418000ms", "recv time out seq=0", "3 packets transmitted, 3 received, 0.00% packet loss");
# the tool itself treats "Message too long", "recv time out seq" and "Destination Host Unreachable" as failures
_PING_SUMMARY = lazy_re(r"(\d+)\s+packets? transmitted,\s*(\d+)\s+received", re.IGNORECASE)
PING_FAILURE_MARKERS = ("Message too long", "recv time out seq", "Destination Host Unreachable")
UNSET_ADDRESSES = ("", "0.0.0.0", "::")

# Every net health state the sources list; "Init" is also what MindCluster counts as healthy
# (component/ascend-common/devmanager/common/constants.go, NetworkInit = 6 beside NetworkSuccess = 0)
NET_HEALTH_GOOD = ("Success", "Init")
NET_HEALTH_BAD = (
    "Socket fail",
    "Socket failed",
    "Receive timeout",
    "Unreachable",
    "Time exceeded",
    "Fault",
    "Thread error",
    "Detect ip set",
    "Unknown",
)


def parse_link(text: str) -> Optional[str]:
    """``UP`` or ``DOWN`` (upper case whatever the output's case), None when the output has no status."""
    match = _LINK.search(text)
    return match.group(1).upper() if match else None


def parse_net_health(text: str) -> Optional[str]:
    """The state after ``net health status:`` as printed (``Success``, ``Init``, ``Fault``, ...)."""
    match = _NET_HEALTH.search(text)
    return match.group(1) if match else None


def parse_netmask(text: str) -> Optional[str]:
    """The ``netmask:`` line of ``hccn_tool -i N -ip -g``."""
    match = _NETMASK.search(text)
    return match.group(1) if match else None


def parse_gateway(text: str) -> Optional[str]:
    """The default gateway of ``-gateway -g``; None when it prints none (no gateway set: the tool fails)."""
    match = _GATEWAY.search(text)
    return match.group(1) if match else None


def parse_netdetect(text: str) -> Optional[str]:
    """The detect address of ``-netdetect -g``; None when unset (no line, or 0.0.0.0)."""
    match = _NETDETECT.search(text)
    if not match or match.group(1) in UNSET_ADDRESSES:
        return None
    return match.group(1)


def parse_tls_switch(text: str) -> Optional[int]:
    """0 (TLS off) or 1 (on) from the first ``tls switch[N]`` of ``-tls -g``."""
    match = _TLS.search(text)
    return int(match.group(1)) if match else None


def parse_ping(text: str) -> Tuple[int, int, str]:
    """``(sent, received, failure)`` of ``hccn_tool -i N -ping -g address IP``: the packet counts of its
    summary line (0, 0 when there is none) and the first failure line the tool reports ("" if none)."""
    sent = received = 0
    match = _PING_SUMMARY.search(text)
    if match:
        sent, received = int(match.group(1)), int(match.group(2))
    failure = ""
    for line in text.splitlines():
        if any(marker in line for marker in PING_FAILURE_MARKERS):
            failure = line.strip()
            break
    return sent, received, failure


def parse_colon_fields(text: str) -> Dict[str, str]:
    """``Key   : value`` lines (npu-smi's ``-t health`` and ``-t board``, indented by a tab or spaces)
    as ``{key: value}``; a continuation line (``   : more``) is added to the previous key's value."""
    fields: Dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not key and last:
            fields[last] = (fields[last] + "; " + value).strip("; ")
        elif key:
            fields[key] = value
            last = key
    return fields


def parse_npu_health(text: str) -> Tuple[Optional[str], str, str]:
    """``(health, error code, error information)`` of ``npu-smi info -t health -i N [-c C]``: the key is
    ``Health Status`` on 910A/910B with ``-c`` (Ascend/mind-cluster docs/en/faultdiag/user_guide/
    03_collecting_logs.md) and ``Health`` on Ascend 950 (hicann/driver docs/en/Ascend_950_npu-smi/
    querying-the-device-health-status.md); "NA" means none."""
    fields = parse_colon_fields(text)
    health = fields.get("Health Status", fields.get("Health"))
    code = fields.get("Error Code", "NA")
    info = fields.get("Error Information", "NA")
    return health, "" if code == "NA" else code, "" if info == "NA" else info


def parse_board_firmware(text: str) -> Optional[str]:
    """``Firmware Version`` of ``npu-smi info -t board -i N`` (the firmware running on the card)."""
    value = parse_colon_fields(text).get("Firmware Version")
    return value or None


def parse_key_values(text: str) -> Dict[str, str]:
    """``key=value`` lines (version.info, ascend_toolkit_install.info, /etc/hccn.conf, ascend_install.info)."""
    values: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            values[key.strip()] = value.strip()
    return values


# version.cfg: "toolkit_running_version=[1.84.15.1.310:6.0.1]" (Ascend/samples issue 11; the format in
# Ascend/MindIE-LLM src/kernels/mie_ops/csrc/scripts/package/common/sh/version_cfg.inc @ 8b4871ad)
_VERSION_CFG = lazy_re(r"^\s*(\w+?)_running_version\s*=\s*\[[^:\]]*:([^\]]+)\]", re.MULTILINE)


def parse_toolkit_version(text: str) -> Optional[str]:
    """The CANN version of ``ascend_toolkit_install.info`` (``version=8.3.RC2``) or of the older
    ``version.cfg`` (``toolkit_running_version=[inner:6.0.1]``, a ``CANN-`` prefix dropped)."""
    values = parse_key_values(text)
    if values.get("version"):
        return values["version"]
    running = dict(_VERSION_CFG.findall(text))
    found = running.get("toolkit") or running.get("runtime")
    if found:
        return found[5:] if found.startswith("CANN-") else found
    return None


def parse_installed_version(text: str) -> Optional[str]:
    """``Version=`` of the driver's or the firmware's ``version.info`` (capital V there, unlike the
    toolkit's file; Ascend/mind-cluster npu_info_after.txt @ 22bb3d98)."""
    values = parse_key_values(text)
    return values.get("Version") or values.get("version") or values.get("package_version") or None


def parse_hccn_conf(text: str) -> Dict[int, Dict[str, str]]:
    """``/etc/hccn.conf`` as ``{device: {"address": ..., "netmask": ..., "netdetect": ..., ...}}``: each key
    ends in ``_<physical device id>`` (hicann/hccl docs/zh/user_guide/cluster_info_config/rank_table_config_910.md)."""
    devices: Dict[int, Dict[str, str]] = {}
    for key, value in parse_key_values(text).items():
        name, _, device = key.rpartition("_")
        if name and device.isdigit():
            devices.setdefault(int(device), {})[name] = value
    return devices


# -- performance figures (the health watch's NPU_PERF; formats in ../shared/sources/npu_perf_formats.md) -----


@dataclass(frozen=True)
class NpuCommon:
    """One chip's figures of ``npu-smi info -t common -i N -c C``; None where the tool printed none (or
    ``NA``/``-``). ``aicore_rated_mhz`` is ``Aicore Freq(MHZ)`` (DCMI_FREQ_AICORE_MAX), ``aicore_mhz``
    ``Aicore curFreq(MHZ)`` (the current clock; hicann/driver src/custom/include/dcmi_interface_api.h)."""

    aicore_usage_pct: Optional[float] = None
    aicore_mhz: Optional[int] = None
    aicore_rated_mhz: Optional[int] = None
    temp_c: Optional[float] = None
    power_w: Optional[float] = None
    hbm_usage_pct: Optional[float] = None


# hicann/driver @ ef377e95 npu_info_print.c print_npu_common_info / print_mcu_common_info: "\t%-30s : %u" lines;
# each chip block opens with "Chip ID", the MCU's with "Chip Name : mcu" (310/310B: "MCU"); Ascend 950 prints
# neither key (one block); docs show the tab as spaces or nothing, and some drop the blank lines
_COMMON_KEYS = {
    "Aicore Usage Rate(%)": ("aicore_usage_pct", float),
    "Aicore curFreq(MHZ)": ("aicore_mhz", int),
    "Aicore Freq(MHZ)": ("aicore_rated_mhz", int),
    "Temperature(C)": ("temp_c", float),
    "NPU Real-time Power(W)": ("power_w", float),
    "HBM Usage Rate(%)": ("hbm_usage_pct", float),
}


def parse_npu_common(text: str, chip: Optional[int] = None) -> Optional[NpuCommon]:
    """The figures of chip ``chip`` (the first chip block when None or when no block names it) of
    ``npu-smi info -t common``; None when the text has none of its keys. Temperature is the chip's,
    never the MCU's; power is the chip's, else the MCU block's (310P prints it only there)."""
    blocks: Dict[str, Dict[str, str]] = {}  # "chip <id>", "mcu", "chip" (no Chip ID line: Ascend 950)
    current = "chip"
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if key == "Chip ID":
            current = "chip %s" % value
        elif key == "Chip Name" and value.lower() == "mcu":
            current = "mcu"
        blocks.setdefault(current, {})[key] = value
    chips = [name for name in blocks if name != "mcu" and name != "chip"]
    wanted = "chip %d" % chip if chip is not None and "chip %d" % chip in blocks else (chips or ["chip"])[0]
    fields = dict(blocks.get("chip", {}), **blocks.get(wanted, {}))  # NPU ID and Chip Count sit before Chip ID
    if "NPU Real-time Power(W)" not in fields and "NPU Real-time Power(W)" in blocks.get("mcu", {}):
        fields["NPU Real-time Power(W)"] = blocks["mcu"]["NPU Real-time Power(W)"]
    values: Dict[str, Any] = {}
    for key, (name, kind) in _COMMON_KEYS.items():
        values[name] = _number(fields.get(key), kind)
    if all(value is None for value in values.values()):
        return None
    return NpuCommon(**values)


def _number(text: Optional[str], kind: Callable[[str], Any]) -> Any:
    """``text`` as an int or float; None for no value, ``NA``, ``-`` or anything else."""
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        return None


# hicann/driver ascend910B/hccn_product_ext/tool_ext.c tool_get_eth_speed: "Speed: %d Mb/s" or "Speed: Unknown!"
_SPEED = lazy_re(r"^\s*Speed\s*:\s*(\d+)\s*Mb/s", re.MULTILINE)


def parse_hccn_speed(text: str) -> Optional[int]:
    """The NIC's negotiated rate in Mb/s of ``hccn_tool -i N -speed -g``; None for ``Unknown!`` or no
    such line (Ascend 950 prints a table, not read here)."""
    match = _SPEED.search(text)
    return int(match.group(1)) if match else None


def parse_hccn_stat(text: str) -> Dict[str, int]:
    """The counters of ``hccn_tool -i N -stat -g`` (``key:%llu`` lines under ``packet statistics:``;
    hicann/driver ascend910B/hccn_tool/tool.c tool_display_stat_info): lines split at ``:`` whose value is
    an integer, as MindCluster's GetNPUStatInfo reads them (component/ascend-common/devmanager/hccn/
    hccn_tool.go); Ascend 950's ``key: value`` lines are read the same way."""
    counters: Dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if sep and key and value.isdigit() and " " not in key:
            counters[key] = int(value)
    return counters
