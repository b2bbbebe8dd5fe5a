"""Reading the NPU tools' text: ``npu-smi info`` (stand-in output and a real-world sample) and
``hccn_tool -i N -ip -g``; then discovery end to end through the CLI with the stand-ins on PATH."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Optional, Sequence

import pytest
from helpers import STANDINS, base_env, full_plan, job_dirs, run_cli

from npulaunch.host.discovery import (
    NpuChip,
    discover_device_ips,
    discover_devices,
    parse_hccn_ip,
    parse_npu_smi_info,
)
from npulaunch.host.errors import PlanError

# A container that sees only NPU 5 of its server, while a training process runs on it.
CONTAINER_NPU5 = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc3                 Version: 23.0.rc3                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 5     910B2               | Warning       | 178.3       47                0    / 0             |
| 0                         | 0000:41:00.0  | 38          0    / 0          33710/ 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 5       0                 | 2915671       | python3.9                | 30773                   |
| 5       0                 | 2915702       | python3.9                | 112                     |
+===========================+===============+====================================================+
"""

# Two cards of an older server, both busy.
TWO_CARDS_BUSY = """\
+-------------------------------------------------------------------------------------------+
| npu-smi 21.0.4                   Version: 21.0.4                                          |
+----------------------+---------------+----------------------------------------------------+
| NPU   Name           | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                 | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+======================+===============+====================================================+
| 2     910A           | OK            | 68.4        37                0    / 0             |
| 0                    | 0000:61:00.0  | 0           2225 / 15665      1    / 32768         |
+======================+===============+====================================================+
| 3     910A           | OK            | 70.1        38                0    / 0             |
| 0                    | 0000:62:00.0  | 12          2225 / 15665      15120/ 32768         |
+======================+===============+====================================================+
+----------------------+---------------+----------------------------------------------------+
| NPU     Chip         | Process id    | Process name             | Process memory(MB)      |
+======================+===============+====================================================+
| 2       0            | 4001          | python3.7                | 100                     |
+======================+===============+====================================================+
| 3       0            | 4002          | python3.7                | 15000                   |
+======================+===============+====================================================+
"""


def standin_output(tool: str, *args: str, **env: str) -> str:
    done = subprocess.run(
        [str(STANDINS / tool), *args], capture_output=True, text=True, check=True, env={**os.environ, **env}
    )
    return done.stdout


@pytest.mark.parametrize("count", [8, 2])
def test_parse_standin_npu_smi(count: int) -> None:
    chips = parse_npu_smi_info(standin_output("npu-smi", "info", NPU_STANDIN_COUNT=str(count)))
    assert [(c.logical_id, c.npu_id, c.chip_id) for c in chips] == [(i, i, 0) for i in range(count)]
    assert {c.name for c in chips} == {"910B3"} and {c.health for c in chips} == {"OK"}
    assert [c.bus_id for c in chips] == ["0000:%02X:00.0" % (0xC1 + i) for i in range(count)]


def test_parse_standin_health_column() -> None:
    chips = parse_npu_smi_info(standin_output("npu-smi", "info", NPU_STANDIN_COUNT="4", NPU_STANDIN_UNHEALTHY="1,3"))
    assert [c.health for c in chips] == ["OK", "Critical", "OK", "Critical"]


@pytest.mark.parametrize(
    "text, expected",
    [
        (CONTAINER_NPU5, [NpuChip(0, 5, 0, "910B2", "Warning", "0000:41:00.0")]),
        (
            TWO_CARDS_BUSY,
            [NpuChip(0, 2, 0, "910A", "OK", "0000:61:00.0"), NpuChip(1, 3, 0, "910A", "OK", "0000:62:00.0")],
        ),
        ("", []),
        ("npu-smi: command failed: dcmi module initialize failed. ret is -8005\n", []),
    ],
    ids=["container-npu5", "two-cards-busy", "empty", "error-text"],
)
def test_parse_real_world_npu_smi(text: str, expected: list) -> None:
    assert list(parse_npu_smi_info(text)) == expected


@pytest.mark.parametrize(
    "text, ip",
    [
        ("ipaddr:192.168.100.101\nnetmask:255.255.255.0\n", "192.168.100.101"),
        ("netmask:255.255.255.0\nipaddr : 10.0.0.7 \n", "10.0.0.7"),
        ("ipaddr:\nnetmask:\n", None),
        ("Command execute failed, please check the parameters!\n", None),
        ("", None),
    ],
)
def test_parse_hccn_ip(text: str, ip: Optional[str]) -> None:
    assert parse_hccn_ip(text) == ip


@pytest.mark.parametrize("device, ip", [(0, "192.168.100.101"), (3, "192.168.103.101"), (5, "192.168.101.102")])
def test_parse_hccn_ip_of_standin(device: int, ip: str) -> None:
    assert parse_hccn_ip(standin_output("hccn_tool", "-i", str(device), "-ip", "-g")) == ip


def test_discover_with_injected_runners() -> None:
    calls = []

    def runner(argv: Sequence[str]) -> str:
        calls.append(list(argv))
        return CONTAINER_NPU5 if argv[0] == "npu-smi" else f"ipaddr:10.9.0.{argv[2]}\n"

    assert [c.logical_id for c in discover_devices(runner)] == [0]
    assert discover_device_ips([0, 4], runner) == ("10.9.0.0", "10.9.0.4")
    assert calls == [["npu-smi", "info"], ["hccn_tool", "-i", "0", "-ip", "-g"], ["hccn_tool", "-i", "4", "-ip", "-g"]]
    with pytest.raises(PlanError, match="listed no NPU chips"):
        discover_devices(lambda argv: "")
    assert discover_device_ips([0, 1], lambda argv: "ipaddr:10.0.0.1" if argv[2] == "0" else "") is None


# --- through the CLI, with the stand-ins on PATH


def write_yaml(tmp_path: Path, log_dir: Path, extra: str = "") -> Path:
    path = tmp_path / "all devices.yaml"
    path.write_text(
        "version: 1\njob:\n  command: [python3, train.py]\n"
        f"  log_dir: {json.dumps(str(log_dir))}\nhosts:\n  - host: localhost\n    devices: all\n" + extra
    )
    return path


def plan_json(path: Path, **env: str) -> dict:
    result = run_cli("plan", str(path), "--json", standins=True, env=env)
    assert result.returncode == 0, result.stderr
    return full_plan(json.loads(result.stdout))


def test_standins_are_kept_off_path_unless_asked() -> None:
    # the CLI tests below rely on this: without standins=True, devices: all must fail
    assert str(STANDINS) not in base_env()["PATH"].split(os.pathsep)
    assert str(STANDINS) in base_env(standins=True)["PATH"].split(os.pathsep)


def test_cli_devices_all_gives_one_rank_per_standin_npu(tmp_path: Path, log_dir: Path) -> None:
    plan = plan_json(write_yaml(tmp_path, log_dir))
    assert plan["world_size"] == 8
    assert [(r["rank"], r["device_id"], r["env"]["DEVICE_ID"]) for r in plan["ranks"]] == [
        (i, i, str(i)) for i in range(8)
    ]
    assert plan["sources"]["hosts[0].devices"] == "discovery (npu-smi info)"
    assert job_dirs(log_dir) == []


def test_cli_devices_all_follows_the_card_count(tmp_path: Path, log_dir: Path) -> None:
    assert plan_json(write_yaml(tmp_path, log_dir), NPU_STANDIN_COUNT="2")["world_size"] == 2


def test_cli_no_chips_is_a_clear_error(tmp_path: Path, log_dir: Path) -> None:
    result = run_cli("plan", str(write_yaml(tmp_path, log_dir)), standins=True, env={"NPU_STANDIN_COUNT": "0"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "hosts[0].devices" in result.stderr and "npu-smi info listed no NPU chips" in result.stderr


def test_cli_rank_table_required_uses_standin_ips(tmp_path: Path, log_dir: Path) -> None:
    plan = plan_json(write_yaml(tmp_path, log_dir, "rank_table: required\n"))
    table = plan["rank_table"]
    assert table["server_count"] == "1" and table["server_list"][0]["server_id"] == "localhost"
    devices = table["server_list"][0]["device"]
    assert [(d["device_id"], d["device_ip"], d["rank_id"]) for d in devices] == [
        (str(n), "192.168.%d.%d" % (100 + n % 4, 101 + n // 4), str(n)) for n in range(8)
    ]
    assert plan["rank_table_path"] == os.path.join(plan["job_dir"], "rank_table.json")
    assert {r["env"]["RANK_TABLE_FILE"] for r in plan["ranks"]} == {plan["rank_table_path"]}
    assert plan["sources"]["hosts[0].device_ips"] == "discovery (hccn_tool)"


def test_cli_devices_all_refuses_an_unhealthy_npu(tmp_path: Path, log_dir: Path) -> None:
    result = run_cli(
        "plan",
        str(write_yaml(tmp_path, log_dir)),
        standins=True,
        env={"NPU_STANDIN_COUNT": "4", "NPU_STANDIN_UNHEALTHY": "2"},
    )
    assert result.returncode == 2
    assert "device 2 (NPU 2) health Critical" in result.stderr
    assert "list the healthy devices" in result.stderr
