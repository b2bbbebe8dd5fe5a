"""Show a LaunchPlan to people: the per-rank table (``npulaunch plan``). The JSON form for tools
and plan.json is npulaunch.plan.planjson. Pure rendering.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict, List, Optional, Tuple

from npulaunch.host.redact import redact_argv
from npulaunch.host.topology import format_cpulist
from npulaunch.host.words import counted
from npulaunch.plan.launchplan import LaunchPlan

SHOWN_RANKS = 8  # per-rank lines (arguments, directories) before "... more in plan --json"


def render_rank(entry: Dict[str, Any], inherited_shown: bool) -> str:
    """One rank (``plan --rank N``, from planjson.rank_to_dict): where it runs, its command, and its
    complete environment with where each value comes from (``inherited_shown``: the launcher's own
    environment is part of it, as on this host)."""
    device, env = entry["device"], entry["env"]
    # the variable that says which NPU the rank opens: the TF Adapter's, torch_npu's idiom, msrun's
    opened = next((name for name in ("ASCEND_DEVICE_ID", "LOCAL_RANK", "DEVICE_ID") if name in env), "")
    said = f"ASCEND_DEVICE_ID {device['ascend_device_id']}" if opened in ("ASCEND_DEVICE_ID", "") else ""
    said = said or f"{opened} {env[opened]}"
    lines = [
        f"rank {entry['rank']} of {entry['world_size']} on {entry['host']} (node {entry['node_rank']}, "
        f"local rank {entry['local_rank']}): device {device['physical']}, logical {device['logical']}, {said}",
        f"command: {' '.join(shlex.quote(arg) for arg in entry['argv'])}",
        f"workdir: {entry['cwd']}",
        f"logs: {entry['stdout']}, {entry['stderr']}; plogs under {entry['plog_dir']}",
    ]
    if entry.get("session_options"):
        lines.append("session options: " + json.dumps(entry["session_options"], sort_keys=True))
    sources = entry["env_sources"]
    where = "" if inherited_shown else " (what npulaunch sets; the host's own environment is read there)"
    lines.append(f"environment, {len(env)} variable{'s' if len(env) != 1 else ''}{where}:")
    width = min(max((len(name) for name in env), default=0), 40)
    lines.extend(f"  {name:<{width}} = {value}   [{sources.get(name, '?')}]" for name, value in env.items())
    if entry.get("env_unset"):
        lines.append("removed from the inherited environment: " + ", ".join(entry["env_unset"]))
    return "\n".join(lines) + "\n"


def render_plan_table(plan: LaunchPlan) -> str:
    """A header, one row per rank (its device as the rank table names it, as the runtime numbers
    it, and as the rank opens it), then the notes."""
    bound = any(spec.cpus or spec.cpu_request for spec in plan.ranks)
    opened = OPENED_BY.get(plan.framework, "ASCEND_DEVICE_ID")  # the variable that says which NPU a rank opens
    rows: List[Tuple[str, ...]] = [("rank", "local_rank", "host", "device_id", "logical", opened)]
    for spec in plan.ranks:
        physical, logical, user = plan.rank_device(spec)
        said = str(user) if opened == "ASCEND_DEVICE_ID" else spec.env.get(opened, "-")
        rows.append((str(spec.rank), str(spec.local_rank), spec.host, str(physical), str(logical), said))
    rows.extend(("sched", "-", spec.host, "-", "-", "-") for spec in plan.helpers)
    cpus = ["cpus"] + [_cpus(spec.cpus, spec.cpu_request) for spec in plan.processes]
    logs = ["log"] + [spec.stdout_path for spec in plan.processes]
    rows = [row + ((cpu,) if bound else ()) + (log,) for row, cpu, log in zip(rows, cpus, logs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        f"job {plan.job_id} ({counted(plan.world_size, 'rank')} on {counted(len(plan.hosts), 'host')})",
        f"command: {' '.join(redact_argv(plan.ranks[0].argv)) if plan.ranks else '-'}",
        f"job directory: {plan.job_dir}",
        f"rank table: {_rank_table(plan)}",
    ]
    lines.extend(_framework(plan))
    lines.extend(_recovery(plan))
    lines.extend(f"devices on {mapped.host}: {mapped.describe()}" for mapped in plan.host_devices if mapped.describe())
    sources = ", ".join(f"{key} from {value}" for key, value in sorted(plan.sources.items()))
    lines.append(f"values: {sources}")
    lines.append("")
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    cwds = {spec.cwd for spec in plan.ranks}
    if len(cwds) > 1 or any(spec.argv != plan.ranks[0].argv for spec in plan.ranks):
        lines.append(
            "each rank's command (placeholders expanded)" + (" and working directory:" if len(cwds) > 1 else ":")
        )
        lines.extend(
            f"  rank {s.rank}: {shlex.join(redact_argv(s.argv))}" + (f"  (in {s.cwd})" if len(cwds) > 1 else "")
            for s in plan.ranks[:SHOWN_RANKS]
        )
        if len(plan.ranks) > SHOWN_RANKS:
            lines.append(f"  ... {len(plan.ranks) - SHOWN_RANKS} more ranks in plan --json")
    shown = [spec for spec in plan.ranks if spec.session_options][:8]
    if shown:
        lines.append(
            "session options (as each rank's session will get them; what a rank's session really got "
            "is written to rank-N/session_options.json when it runs):"
        )
        lines.extend(f"  rank {s.rank}: {json.dumps(s.session_options, sort_keys=True)}" for s in shown)
        if len(plan.ranks) > len(shown):
            lines.append(f"  ... {len(plan.ranks) - len(shown)} more ranks in plan --json")
    with_dirs = [spec for spec in plan.ranks if spec.make_dirs][:8]
    if with_dirs:
        lines.append("directories made before each rank starts (job.make_dirs, and those CANN writes to):")
        lines.extend(
            f"  rank {s.rank}: " + ", ".join(f"{option} {path}" for option, path in s.make_dirs) for s in with_dirs
        )
        if len(plan.ranks) > len(with_dirs):
            lines.append(f"  ... {len(plan.ranks) - len(with_dirs)} more ranks in plan --json")
    for note in plan.notes:
        lines.append(f"note: {note}")
    lines.extend(plan.warnings)
    return "\n".join(lines) + "\n"


# the variable whose value is the NPU a rank opens, by framework (plan/frameworks/)
OPENED_BY = {"tensorflow": "ASCEND_DEVICE_ID", "pytorch": "LOCAL_RANK", "mindspore": "DEVICE_ID"}


def _framework(plan: LaunchPlan) -> List[str]:
    """The framework's contract: each of its variables with rank 0's value, what it means and its source."""
    from npulaunch.config.cluster import Framework
    from npulaunch.plan.frameworks import contract

    module = contract(Framework(plan.framework))
    first = plan.ranks[0].env if plan.ranks else {}
    helper = plan.helpers[0].env if plan.helpers else {}
    rows = []
    for variable in module.VARIABLES:
        value = first.get(variable.name)
        if value is None and variable.name in helper:
            value = f"(scheduler: {helper[variable.name]})"
        rows.append((variable.name, "-" if value is None else value, f"{variable.meaning} [{variable.source}]"))
    name_width = max(len(row[0]) for row in rows)
    value_width = min(max(len(row[1]) for row in rows), 24)
    lines = [f"framework: {plan.framework}: {module.SUMMARY}; rank 0's values:"]
    lines.extend(f"  {name:<{name_width}}  {value:<{value_width}}  {what}" for name, value, what in rows)
    lines.append("  sources: " + "; ".join(module.SOURCES))
    return lines


def _recovery(plan: LaunchPlan) -> List[str]:
    """The spares held back, and what a recovery excluded and moved (``recovery`` of the plan)."""
    facts = plan.recovery or {}
    kept = {host: ids for host, ids in (facts.get("spare_devices") or {}).items() if ids}
    spares = [f"{host} NPU{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}" for host, ids in kept.items()]
    hosts = list(facts.get("spare_hosts") or ())
    lines = []
    if spares or hosts:
        held = "; ".join(spares + [f"host {h}" for h in hosts])
        lines.append(
            f"spares: {held} (recovery: at most {facts.get('max_recoveries')} faults"
            + (f", resuming from {facts['checkpoint_dir']}" if facts.get("checkpoint_dir") else "")
            + (
                f", shrinking to no fewer than {facts['shrink_min_ranks']} ranks"
                if facts.get("shrink_min_ranks")
                else ""
            )
            + ")"
        )
    for excluded in facts.get("excluded") or ():
        if not excluded.get("attempt") and str(excluded.get("reason")).startswith("fault history: "):
            continue  # the plan's notes say what the fault history keeps off (plan/faulthistory.py)
        what = f"NPU {excluded['device']}" if excluded.get("device") is not None else "the host"
        lines.append(f"excluded: {excluded.get('host')} {what}: {excluded.get('reason')}")
    if plan.health_interval_s:
        lines.append(f"health watch: every {plan.health_interval_s:g} s (monitor.health_interval_s)")
    lines.extend(history_lines(plan))
    return lines


def history_lines(plan: LaunchPlan) -> List[str]:
    """What the fault history (plan/faulthistory.py) is and keeps off, in one line (the notes say why):
    ``plan`` and ``check`` always show it."""
    facts = (plan.recovery or {}).get("history")
    if not facts:
        return []
    kept = facts.get("kept_off") or []
    places = [f"host {k['host']}" if k.get("device") is None else f"{k['host']} NPU {k['device']}" for k in kept]
    entries = facts.get("entries", 0)
    head = (
        f"fault history: {facts.get('ledger')} ({entries} entr{'y' if entries == 1 else 'ies'}; a fault keeps its "
        f"NPU or host off for {facts.get('window_h', 0):g} h, a repeated code until cleared)"
    )
    if not places:
        return [f"{head}: keeps nothing off this job"]
    if not facts.get("applied", True):
        return [f"{head}: would keep {', '.join(places)} off, but the scheduler placed this job"]
    return [f"{head}: keeps {', '.join(places)} off (the notes say why)"]


def _rank_table(plan: LaunchPlan) -> str:
    """Where the table goes, its version and why; or why there is none."""
    if plan.rank_table_path is None:
        return "none" + (f" ({plan.rank_table_reason})" if plan.rank_table_reason else "")
    version = f"version {plan.rank_table_version}" if plan.rank_table_version else "a version"
    return f"{plan.rank_table_path} ({version}: {plan.rank_table_reason})"


def _cpus(cpus: Optional[Tuple[int, ...]], request: Optional[Dict[str, Any]]) -> str:
    """A rank's CPUs as a CPU list, "-" when not bound, or when its host decides them at start."""
    if request:
        return "at start"
    return format_cpulist(cpus) if cpus else "-"
