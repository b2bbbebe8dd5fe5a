"""Show a LaunchPlan to people: the per-rank table (``npulaunch plan``). The JSON form for tools
and plan.json is npulaunch.plan.planjson. Pure rendering.
"""

from __future__ import annotations

import json

from npulaunch.host.redact import redact_argv
from npulaunch.plan.launchplan import LaunchPlan


def render_plan_table(plan: LaunchPlan) -> str:
    """A header, one row per rank (its device as the rank table names it, as the runtime numbers
    it, and as the rank opens it), then the notes."""
    rows = [("rank", "local_rank", "host", "device_id", "logical", "ASCEND_DEVICE_ID", "log")]
    for spec in plan.ranks:
        physical, logical, user = plan.rank_device(spec)
        rows.append(
            (str(spec.rank), str(spec.local_rank), spec.host, str(physical), str(logical), str(user), spec.stdout_path)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        f"job {plan.job_id} ({plan.world_size} ranks on {len(plan.hosts)} host{'s' if len(plan.hosts) > 1 else ''})",
        f"command: {' '.join(redact_argv(plan.ranks[0].argv)) if plan.ranks else '-'}",
        f"job directory: {plan.job_dir}",
        f"rank table: {_rank_table(plan)}",
    ]
    lines.extend(f"devices on {mapped.host}: {mapped.describe()}" for mapped in plan.host_devices if mapped.describe())
    sources = ", ".join(f"{key} from {value}" for key, value in sorted(plan.sources.items()))
    lines.append(f"values: {sources}")
    lines.append("")
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
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
        lines.append("directories CANN writes to, made before each rank starts:")
        lines.extend(
            f"  rank {s.rank}: " + ", ".join(f"{option} {path}" for option, path in s.make_dirs) for s in with_dirs
        )
        if len(plan.ranks) > len(with_dirs):
            lines.append(f"  ... {len(plan.ranks) - len(with_dirs)} more ranks in plan --json")
    for note in plan.notes:
        lines.append(f"note: {note}")
    lines.extend(plan.warnings)
    return "\n".join(lines) + "\n"


def _rank_table(plan: LaunchPlan) -> str:
    """Where the table goes, its version and why; or why there is none."""
    if plan.rank_table_path is None:
        return "none" + (f" ({plan.rank_table_reason})" if plan.rank_table_reason else "")
    version = f"version {plan.rank_table_version}" if plan.rank_table_version else "a version"
    return f"{plan.rank_table_path} ({version}: {plan.rank_table_reason})"
