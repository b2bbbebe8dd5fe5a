"""One job, start to end, as ``npulaunch run`` and ``npulaunch check`` see it: reach the remote hosts when
there are any (over SSH, Fabric imported only then; as Slurm job steps; or with mpirun) and check every host
(the NPU health check included), plan the job, then run it under the supervisor with its restarts. The fleet
is always closed, whatever happens.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from npulaunch.diagnose.summary import JobSummary
from npulaunch.launch.restarts import run_with_restarts
from npulaunch.launch.runner import Console, RankRunner
from npulaunch.plan.checks.findings import CheckFailed, Finding, Severity, fatal
from npulaunch.plan.checks.health import HealthSettings
from npulaunch.plan.checks.preflight import check_local, local_problems
from npulaunch.plan.launchplan import LaunchPlan
from npulaunch.plan.placement import Exclusion
from npulaunch.plan.prepare import Loaded, is_remote, planner

if TYPE_CHECKING:
    from npulaunch.config.cluster import ClusterConfig
    from npulaunch.launch.fleet.fleet import Fleet
    from npulaunch.launch.fleet.link import Connect


@dataclass(frozen=True)
class CheckedJob:
    """What ``npulaunch check`` found: the plan, what the hosts' preflight warned about, the health
    check's findings (warnings, what it could not check) and what it asked (tool calls, pings)."""

    plan: LaunchPlan
    warnings: Tuple[str, ...]
    over_ssh: bool
    findings: Tuple[Finding, ...] = ()
    checked: Dict[str, Any] = field(default_factory=dict)
    health: bool = True  # False: --offline, no host was asked


def _open_fleet(loaded: Loaded, settings: HealthSettings) -> "Optional[Fleet]":
    if not is_remote(loaded):
        return None
    from npulaunch.launch.fleet.fleet import open_fleet

    if loaded.transport == "srun":
        return open_fleet(loaded, _srun_connect(loaded), settings, SRUN_PARALLEL)
    if loaded.transport == "mpirun":
        from npulaunch.launch.fleet.mpirun import mpirun_connect
        from npulaunch.plan.prepare import address_toward

        return open_fleet(loaded, mpirun_connect(loaded.config.mpi, address_toward), settings, MPIRUN_PARALLEL)
    try:
        from npulaunch.launch.fleet.ssh import ssh_connect
    except ImportError as exc:  # Fabric / Paramiko: the ssh extra
        from npulaunch.host.errors import UsageError

        raise UsageError(
            f"a job on several hosts needs the ssh extra ({exc.name or 'Fabric'} is not installed): "
            "python3 -m pip install 'npulaunch[ssh]'"
        ) from None
    config = loaded.config
    return open_fleet(loaded, ssh_connect(config), settings, int(config.ssh.get("parallel", 32)))


SRUN_PARALLEL = 64  # job steps started at once (each is an srun client on this host)
MPIRUN_PARALLEL = 32  # mpiruns started at once (each is an mpirun and its rsh agent, ssh, on this host)


def _srun_connect(loaded: Loaded) -> "Connect":
    """Slurm's job steps as the transport to the allocation's nodes (the batch script holds the allocation)."""
    from npulaunch.launch.fleet.srun import node_addresses, srun_connect
    from npulaunch.plan.prepare import address_toward

    assert loaded.view is not None and loaded.view.job_id is not None
    nodes = [h.host for h in loaded.config.hosts + loaded.config.spares]
    return srun_connect(loaded.view.job_id, node_addresses(nodes), address_toward)


def check_job(loaded: Loaded, offline: bool = False, settings: Optional[HealthSettings] = None) -> CheckedJob:
    """Plan the job and check every host (over SSH unless ``offline``, with the NPU health check of
    ``settings``); start nothing. Raises CheckFailed with every problem when the job could not start."""
    settings = settings or HealthSettings()
    fleet = None if offline else _open_fleet(loaded, settings)
    try:
        plan = planner(loaded, fleet.facts if fleet else None)(1)
    finally:
        if fleet is not None:
            fleet.close()
    findings: List[Finding] = list(fleet.findings) if fleet else []
    checked: Dict[str, Any] = dict(fleet.checked) if fleet else {}
    if plan.is_local_only():
        findings, checked = check_this_host(loaded, plan, None if offline else settings)
    warnings = plan.warnings + tuple(fleet.warnings if fleet else ())
    return CheckedJob(plan, warnings, fleet is not None, tuple(findings), checked, not offline)


def check_this_host(
    loaded: Loaded, plan: LaunchPlan, settings: Optional[HealthSettings]
) -> Tuple[List[Finding], Dict[str, Any]]:
    """The preflight of a job on this host alone: its files and command (plan/checks/preflight.py) and, unless
    ``settings`` is None, the NPU health check, run here by the remote probe's own code. Raises
    CheckFailed with every problem; returns the findings that do not stop the job."""
    problems = local_problems(plan, os.environ)
    findings: List[Finding] = []
    checked: Dict[str, Any] = {}
    if settings is not None and not loaded.config.cpu_fallback:
        from npulaunch.host.agent.probe import probe
        from npulaunch.plan.checks.remote import probe_asks, review_health

        asks = probe_asks(loaded.config, loaded.job_id, settings)
        if loaded.node is not None:  # one node of several (a scheduler's, or --node-rank): its own host only
            asks = {host: ask for host, ask in asks.items() if host == loaded.config.hosts[loaded.node].host}
        answers = {host: probe(ask) for host, ask in asks.items()}
        findings, checked = review_health(loaded.config, answers, asks, settings)
    if problems or fatal(findings):
        raise CheckFailed("the job cannot start on this host; nothing was started", problems, findings, checked)
    return findings, checked


def _run_settings(loaded: Loaded) -> HealthSettings:
    """``run`` checks the NPU NICs (and pings across hosts) when the job spans hosts: one host's NPUs
    talk over HCCS, and its start should not wait on 6 hccn_tool calls per NPU."""
    return HealthSettings(nics=len(loaded.config.hosts) > 1)


def run_job(
    loaded: Loaded,
    make_console: Callable[[LaunchPlan], Console],
    finished: Optional[Callable[[JobSummary, str], object]] = None,
    phase: Callable[[Optional[str]], object] = lambda text: None,
) -> int:
    """Run the job until it ends; returns the process's exit code (0, 1 or 128+N). ``finished``:
    called with the job's summary and the directory of its summary.json (the views write the
    HTML report there). ``phase``: told what happens before the ranks start (a spinner on a
    terminal), then None."""
    if is_remote(loaded):
        hosts = len(loaded.config.hosts + loaded.config.spares)
        how = {"srun": "starting a job step on each of", "mpirun": "starting mpirun for each of"}.get(
            loaded.transport, "connecting over SSH to"
        )
        phase(f"{how} {hosts} hosts, shipping the agent, probing each host")
    fleet = _open_fleet(loaded, _run_settings(loaded))
    try:
        phase("planning the job")
        plan_for = planner(loaded, fleet.facts if fleet else None)
        if loaded.membership is not None:
            plan_for = _reforming(loaded)
        plan = plan_for(1)
        phase(None)
        make_runner: Optional[Callable[[LaunchPlan], RankRunner]] = None
        findings: List[Finding] = []
        if fleet is None and plan.is_local_only():
            findings, _ = check_this_host(loaded, plan, _run_settings(loaded))
        elif fleet is None:  # a node of a scheduler's job: this node's files and command
            check_local(plan, os.environ)
        else:
            fleet.warnings.extend(f.render() for f in _worth_showing(fleet.findings))  # FleetRun shows them
            from npulaunch.launch.fleet.run import FleetRun

            open_fleet = fleet

            beats = _heartbeat_timeout(loaded)

            def make_runner(plan: LaunchPlan) -> RankRunner:
                return FleetRun(plan, open_fleet, beats)

        console = make_console(plan)
        for note in plan.notes:
            console.message(f"note: {note}")
        for warning in plan.warnings:
            console.message(warning)
        for finding in _worth_showing(findings):
            console.message(
                ("warning: " if finding.severity is Severity.WARNING else "not checked: ") + finding.render()
            )
        recheck = _recheck_here(loaded) if fleet is None else _recheck_fleet(fleet, loaded)
        excluded = [] if fleet is None else unusable_spares(fleet, loaded.config)
        requeue = None
        if loaded.transport == "srun":  # the Slurm job npulaunch holds: requeued without broken nodes
            from npulaunch.launch.requeue import slurm_requeue

            requeue = slurm_requeue(plan, os.environ)
        summary = run_with_restarts(
            plan_for,
            console,
            plan.max_restarts,
            make_runner=make_runner,
            recheck=recheck,
            excluded=excluded,
            requeue=requeue,
            reform=loaded.membership,
        )
        if finished is not None:
            finished(summary, plan.layout.own_dir)
        return summary.exit_code
    finally:
        if fleet is not None:
            fleet.close()
        if loaded.membership is not None:
            loaded.membership.leave()


def _reforming(loaded: Loaded) -> Callable[..., LaunchPlan]:
    """torchrun's c10d rendezvous: each attempt after the first meets the other nodes again (a new round),
    and is planned on the world they form: its node rank, number of nodes, node 0's store, and node 0's
    attempt number, which every node takes."""
    assert loaded.membership is not None and loaded.again is not None
    membership, again = loaded.membership, loaded.again
    first = planner(loaded)

    def plan_for(attempt: int, exclusions: Sequence[Exclusion] = ()) -> LaunchPlan:
        if attempt <= max(1, loaded.attempt):
            return first(attempt, exclusions)
        membership.attempt = attempt
        reloaded = again()
        return planner(reloaded)(max(attempt, reloaded.attempt), exclusions)

    return plan_for


def _heartbeat_timeout(loaded: Loaded) -> Optional[float]:
    """How long an agent may be silent before its host is lost: the fleet's default over SSH (a WAN link may
    stall), a few seconds for Slurm's job steps and mpirun's agents on the cluster's own network
    (NPULAUNCH_HEARTBEAT_TIMEOUT_S sets each)."""
    from npulaunch.launch.fleet.run import TIMEOUT_VARIABLE

    if loaded.transport not in ("srun", "mpirun") or os.environ.get(TIMEOUT_VARIABLE):
        return None
    if loaded.transport == "mpirun":
        from npulaunch.launch.fleet.mpirun import HEARTBEAT_TIMEOUT_S as MPIRUN_TIMEOUT_S

        return MPIRUN_TIMEOUT_S
    from npulaunch.launch.fleet.srun import HEARTBEAT_TIMEOUT_S

    return HEARTBEAT_TIMEOUT_S


def _recheck_here(loaded: Loaded) -> Callable[[LaunchPlan], List[Exclusion]]:
    """The health check of a re-planned job on this host: what it finds fatal on an NPU is excluded too."""

    def recheck(plan: LaunchPlan) -> List[Exclusion]:
        if not plan.is_local_only() or loaded.config.cpu_fallback:
            return []
        try:
            check_this_host(loaded, plan, HealthSettings(nics=False))
        except CheckFailed as failed:
            return _excluded_by(fatal(failed.findings), plan.attempt)
        return []

    return recheck


def _recheck_fleet(fleet: "Fleet", loaded: Loaded) -> Callable[[LaunchPlan], List[Exclusion]]:
    """Over SSH, the health check of a re-planned job: each host of the new placement is asked again (a
    fresh agent on its open connection, the NPU health check on the NPUs it now runs); what is fatal on an
    NPU is excluded, and a host that does not answer in time is excluded whole."""

    def recheck(plan: LaunchPlan) -> List[Exclusion]:
        config = _as_placed(loaded.config, plan)
        if config.cpu_fallback:
            return []
        from npulaunch.launch.fleet.fleet import PROBE_TIMEOUT_S
        from npulaunch.plan.checks.health import judge_health
        from npulaunch.plan.checks.remote import probe_asks

        asks = probe_asks(config, plan.job_id, HealthSettings(nics=len(config.hosts) > 1))
        answers = fleet.ask_round(asks, PROBE_TIMEOUT_S)
        silent = [
            Exclusion(
                host,
                None,
                f"no answer to the health check of the new placement: {fleet.unanswered.get(host, 'none')}",
                None,
                None,
                plan.attempt,
            )
            for host, answer in answers.items()
            if answer is None
        ]
        answered = {host: answer for host, answer in answers.items() if answer is not None}
        return silent + _excluded_by(fatal(judge_health(config, answered, asks)), plan.attempt)

    return recheck


def _as_placed(config: "ClusterConfig", plan: LaunchPlan) -> "ClusterConfig":
    """The config's host entries (spares included) as the plan places the job: each with the NPUs it runs."""
    from dataclasses import replace

    entries = {h.host: h for h in config.hosts + config.spares}
    hosts = tuple(
        replace(entries[host], devices=ids, device_ips=None, spare_devices=(), spare_device_ips=None)
        for host, ids in plan.devices_by_host().items()
    )
    return replace(config, hosts=hosts, spares=())


def unusable_spares(fleet: "Fleet", config: "ClusterConfig") -> List[Exclusion]:
    """The spare hosts the fleet could not reach or probe when the job started: never placed."""
    return [
        Exclusion(h.host, None, "could not be reached or probed when the job started", None, None, 1)
        for h in config.spares
        if h.host not in fleet.connections
    ]


def _excluded_by(findings: List[Finding], attempt: int) -> List[Exclusion]:
    return [
        Exclusion(f.host, device, f"health check: {f.seen}", None, None, attempt)
        for f in findings
        if f.severity is Severity.FATAL and f.host
        for device in f.devices
    ]


def _worth_showing(findings: List[Finding]) -> List[Finding]:
    """What ``run`` shows of the health check: its warnings, and what it could not check on an NPU host
    (on a host without npu-smi, a CPU or development machine, there is nothing to say)."""
    no_npu = {f.host for f in findings if f.check == "chip_health" and f.severity is Severity.NOT_CHECKED}
    return [
        f
        for f in findings
        if f.severity is Severity.WARNING or (f.severity is Severity.NOT_CHECKED and f.host not in no_npu)
    ]
