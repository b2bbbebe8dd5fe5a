"""The ``framework`` key: whose start-up contract the ranks get (plan/frameworks/ has one module each).

``framework: pytorch`` is the short form of ``framework: {name: pytorch}``. The long form adds where the
processes meet (``master_addr``, ``master_port``: torch's TCPStore, msrun's scheduler), torchrun's
``role``, and MindSpore's ``mode`` (``msrun`` or ``rank_table``). Checked here for shape and range; what
each framework refuses of the rest of the YAML (session options, ...) is the plan's (``refuse``).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from npulaunch.config.checker import Checker, describe, did_you_mean
from npulaunch.config.cluster import Framework, FrameworkConfig, StartMode
from npulaunch.host.errors import YamlPath

FRAMEWORK_KEYS = ("name", "mode", "master_addr", "master_port", "role")
NAMES = tuple(member.value for member in Framework)
MAX_PORT = 65535


def parse_framework(check: Checker, value: Any) -> FrameworkConfig:
    if value is None:
        return FrameworkConfig()
    path: YamlPath = ("framework",)
    section: Dict[str, Any] = {"name": value} if isinstance(value, str) else check.mapping(value, path, FRAMEWORK_KEYS)
    if not isinstance(value, (str, dict)):
        return FrameworkConfig()
    name_path = path + ("name",) if isinstance(value, dict) else path
    name = _name(check, section.get("name", "tensorflow"), name_path)
    if name is None:
        return FrameworkConfig()
    found: Dict[str, Any] = {"name": name}
    if "mode" in section:
        if name is not Framework.MINDSPORE:
            check.add(path + ("mode",), describe(section["mode"]), "no mode (only framework: mindspore has modes)")
        else:
            found["mode"] = check.choice(section["mode"], path + ("mode",), StartMode)
    for key in ("master_addr", "master_port"):
        if key not in section:
            continue
        if name is Framework.TENSORFLOW or found.get("mode") is StartMode.RANK_TABLE:
            check.add(
                path + (key,),
                describe(section[key]),
                f"no {key}",
                "only pytorch and mindspore's msrun mode meet at an address and port (the TF Adapter and a "
                "rank table need none)",
            )
        elif key == "master_port":
            found[key] = check.integer(section[key], path + (key,), 1, MAX_PORT)
        else:
            found[key] = check.string(section[key], path + (key,), "an address or host name")
    if "role" in section:
        if name is not Framework.PYTORCH:
            check.add(path + ("role",), describe(section["role"]), "no role (torchrun's ROLE_NAME: pytorch only)")
        else:
            found["role"] = check.string(section["role"], path + ("role",), "a role name") or "default"
    return FrameworkConfig(**{key: item for key, item in found.items() if item is not None})


def _name(check: Checker, value: Any, path: YamlPath) -> Optional[Framework]:
    if isinstance(value, str) and value.lower() in NAMES:
        return Framework(value.lower())
    hint = did_you_mean(value, NAMES) if isinstance(value, str) else ""
    if isinstance(value, str) and value.lower() in ("torch", "torch_npu", "torchrun"):
        hint = "framework: pytorch"
    elif isinstance(value, str) and value.lower() in ("tf", "tf_adapter", "npu_bridge"):
        hint = "framework: tensorflow"
    check.add(path, describe(value), "one of " + ", ".join(NAMES), hint)
    return None
