"""One RankSpec per rank: what every rank of a job shares (``RankJob``), each host's part of it
(``HostSlot``: its variables worked out once, ``rankenv.host_env``) and each rank's own (``rank_spec``:
its place, directories, session options, and ``rankenv.rank_own_env``); and the framework's extra
process (``helper_spec``: MindSpore's scheduler). Used by plan/build.py; pure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.config.cluster import ClusterConfig
from npulaunch.host.pace import HOOKS_VAR
from npulaunch.host.spec import RankEnv, RankSpec
from npulaunch.plan.frameworks import Contract
from npulaunch.plan.layout import JobLayout
from npulaunch.plan.rankenv import HostContext, Meeting, RankPlace, host_env, rank_own_env, session_options_text
from npulaunch.plan.rankfree import ClusterInfo

PRECEDENCE_VAR = "NPULAUNCH_SESSION_PRECEDENCE"
ATTEMPT_VAR = "NPULAUNCH_ATTEMPT"  # 1 for the first run of the job, 2 after the first restart, ...
RESTART_COUNT_VAR = "NPULAUNCH_RESTART_COUNT"  # 0 on the first run, then restarts and recoveries so far


@dataclass(frozen=True)
class RankJob:
    """What every rank of the job shares."""

    config: ClusterConfig
    job_id: str
    job_uuid: str
    layout: JobLayout  # of this attempt
    table_path: Optional[str]
    world_size: int
    cluster: Optional[ClusterInfo] = None  # rank_table: cm
    templated: bool = False  # an argument, the workdir, an env value or make_dirs may hold a placeholder
    # the session options when every rank gets the same (no placeholder, no data_preprocess additions), with
    # their NPULAUNCH_SESSION_OPTIONS text: one dictionary and one text for 32,768 ranks, not one each
    shared_options: Optional[Tuple[Dict[str, Any], str]] = None
    written: Dict[str, Tuple[Tuple[str, str], ...]] = field(default_factory=dict)  # cwd -> dirs, shared options
    # node rank -> host_env's (env, unset, sources), when not templated: one for every rank of the host
    host_envs: Dict[int, Tuple[Dict[str, str], Tuple[str, ...], Dict[str, str]]] = field(default_factory=dict)
    cpu_request: Optional[Dict[str, Any]] = None  # job.cpu_binding, for the hosts that decide it themselves
    prepend: Tuple[Dict[str, str], Dict[str, str]] = ({}, {})  # RankSpec.env_prepend of a remote, a local rank
    hooks: Tuple[str, ...] = ()  # what the injection hook installs in the ranks (NPULAUNCH_HOOKS)
    framework: Optional[Contract] = None  # plan/frameworks/: the rank contract (None: tensorflow)
    contexts: Dict[int, HostContext] = field(default_factory=dict)  # node rank -> its HostContext, when shared
    meeting: Optional[Meeting] = None  # pytorch, msrun: where the processes meet
    node_count: int = 1
    inherited: Mapping[str, str] = field(default_factory=dict)  # what this host's ranks inherit from npulaunch


def shared_options(config: ClusterConfig) -> Optional[Tuple[Dict[str, Any], str]]:
    """The session options and their text when every rank gets the same (RankJob.shared_options)."""
    options = config.session_options
    if not options or config.data_preprocess or any(isinstance(v, str) and "{" in v for v in options.values()):
        return None
    return dict(options), session_options_text(options)


@dataclass(frozen=True)
class HostSlot:
    """One host of the job, as its ranks are built."""

    host: str
    node_rank: int
    user_devices: Tuple[int, ...]  # its devices as its ranks open them (ASCEND_DEVICE_ID)
    local: bool  # the launcher's own host
    cpus: Optional[List[Tuple[int, ...]]]  # job.cpu_binding, by local rank (() not bound); None: decided there
    logical: Tuple[int, ...] = ()  # its devices as the runtime numbers them (ASCEND_RT_VISIBLE_DEVICES' ids)


def _expanded(
    job: RankJob, values: Mapping[str, Any]
) -> Tuple[Tuple[str, ...], str, Mapping[str, Optional[str]], Tuple[str, ...]]:
    """argv, working directory, env and make_dirs of one rank, placeholders expanded (checked when
    the config was read: config/values.py)."""
    config = job.config
    command, workdir, env = config.job.command, config.job.workdir, config.env
    if not job.templated:
        return command, workdir, env, config.job.make_dirs
    from npulaunch.config.placeholders import expand_placeholders as expand

    cwd = os.path.normpath(expand(workdir, values))
    made = tuple(
        os.path.normpath(os.path.join(cwd, os.path.expanduser(expand(d, values)))) for d in config.job.make_dirs
    )
    env = {name: None if value is None else expand(value, values) for name, value in env.items()}
    return tuple(expand(arg, values) for arg in command), cwd, env, made


def rank_spec(
    job: RankJob, where: HostSlot, rank: int, local_rank: int, device_id: int, tf_configs: List[Dict[str, str]]
) -> RankSpec:
    """Rank ``rank``, the ``local_rank``-th of host ``where``, on physical device ``device_id``."""
    config = job.config
    # a remote host keeps its own copy under hosts/<host>/; the launcher gathers rank-N/ (log_paths)
    paths = job.layout.rank_paths(rank, None if where.local else where.host)
    values: Mapping[str, Any] = {}
    if job.templated or job.shared_options is None:
        values = {
            "rank": rank,
            "local_rank": local_rank,
            "device_id": device_id,
            "node_rank": where.node_rank,
            "host": where.host,
            "job_id": job.job_id,
            "job_dir": job.layout.job_dir,
        }
    argv, cwd, yaml_env, made = _expanded(job, values)
    options: Dict[str, Any] = {}
    options_text: Optional[str] = None
    if job.shared_options is not None:
        options, options_text = job.shared_options
    elif config.session_options:
        from npulaunch.plan.rankoptions import options_for_rank

        options = options_for_rank(config.session_options, values)
    if config.data_preprocess:  # one main process per host feeds the host's devices (seeds: Data Augmentation)
        # in the numbering of ASCEND_DEVICE_ID: the TF Adapter's host queue dataset keeps this list beside
        # its own device id from GetDeviceID (tf_adapter/kernels/aicpu/host_queue_dataset_op.cc @ 82957b92)
        options["local_rank_id"] = local_rank
        options["local_device_list"] = ",".join(str(d) for d in where.user_devices)
    logical = where.logical[local_rank] if where.logical else None
    place = RankPlace(rank, local_rank, device_id, where.user_devices[local_rank], paths.dir, paths.plog_dir, logical)
    shared = None if job.templated else job.host_envs.get(where.node_rank)
    if shared is None:
        shared = _host_env(job, where, options_text, yaml_env)
        if not job.templated:
            job.host_envs[where.node_rank] = shared
    shared_env, unset, env_sources = shared
    ctx = job.contexts.get(where.node_rank) if options_text is not None else None
    if ctx is None:
        ctx = _context(job, where, options_text)
        if options_text is not None:
            job.contexts[where.node_rank] = ctx
    own = rank_own_env(place, _contract(job).rank_env(place, ctx), None if options_text is not None else options)
    if tf_configs:  # cpu_fallback
        own.update(tf_configs[rank])
        env_sources = {**env_sources, **dict.fromkeys(tf_configs[rank], "launcher (cpu_fallback)")}
    cpus = None if where.cpus is None else where.cpus[local_rank]
    return RankSpec(
        rank=rank,
        local_rank=local_rank,
        world_size=job.world_size,
        host=where.host,
        node_rank=where.node_rank,
        device_id=device_id,
        argv=argv,
        cwd=cwd,
        env=RankEnv(own, shared_env),
        env_unset=unset,
        env_sources=env_sources,
        session_options=options,
        rank_dir=paths.dir,
        stdout_path=paths.stdout,
        stderr_path=paths.stderr,
        plog_dir=paths.plog_dir,
        env_prepend=job.prepend[where.local],
        make_dirs=_dirs_of(job, options, cwd) + tuple(("job.make_dirs", path) for path in made),
        cpus=cpus or None,
        cpu_request=job.cpu_request if cpus is None else None,
    )


def job_specs(
    job: RankJob, slots: Sequence[HostSlot], devices: Sequence[Tuple[int, ...]], tf_configs: List[Dict[str, str]]
) -> Tuple[List[RankSpec], List[RankSpec]]:
    """``(ranks, helpers)``: every host's ranks on its devices (physical ids, in rank order), numbered
    across the job, and the framework's extra process of each host that has one."""
    ranks: List[RankSpec] = []
    helpers: List[RankSpec] = []
    for where, physical in zip(slots, devices):
        first = len(ranks)
        for local_rank, device_id in enumerate(physical):
            ranks.append(rank_spec(job, where, len(ranks), local_rank, device_id, tf_configs))
        helper = helper_spec(job, where, ranks[first]) if len(ranks) > first else None
        if helper is not None:
            helpers.append(helper)
    return ranks, helpers


def helper_spec(job: RankJob, where: HostSlot, first: RankSpec) -> Optional[RankSpec]:
    """The framework's extra process on host ``where`` (MindSpore's scheduler), or None: ``first``'s
    command, directory and shared variables, with the framework's own for it. It holds no NPU, is
    numbered HELPER_RANK and has its own directory; the agent starts, watches and stops it as a rank."""
    from npulaunch.host.spec import HELPER_RANK

    ctx = _context(job, where, None)
    own = _contract(job).helper_env(ctx)
    if own is None:
        return None
    paths = job.layout.rank_paths(HELPER_RANK, None if where.local else where.host)
    own.update(
        {"ASCEND_PROCESS_LOG_PATH": paths.plog_dir, "NPULAUNCH_LOCAL_RANK": "-1", "NPULAUNCH_RANK_DIR": paths.dir}
    )
    shared = first.env.shared if isinstance(first.env, RankEnv) else first.env
    return replace(
        first,
        rank=HELPER_RANK,
        local_rank=HELPER_RANK,
        device_id=HELPER_RANK,
        env=RankEnv(own, shared),
        session_options={},
        rank_dir=paths.dir,
        stdout_path=paths.stdout,
        stderr_path=paths.stderr,
        plog_dir=paths.plog_dir,
        make_dirs=(),
        cpus=None,
        cpu_request=None,
    )


def _contract(job: RankJob) -> Contract:
    if job.framework is not None:
        return job.framework
    from npulaunch.plan.frameworks import tensorflow

    return tensorflow  # type: ignore[return-value]


def _context(job: RankJob, where: HostSlot, options_text: Optional[str]) -> HostContext:
    """What the framework's contract knows of host ``where``."""
    framework = job.config.framework
    return HostContext(
        world_size=job.world_size,
        local_world_size=len(where.user_devices),
        node_rank=where.node_rank,
        host=where.host,
        job_id=job.job_id,
        job_uuid=job.job_uuid,
        job_dir=job.layout.job_dir,
        rank_table_path=job.table_path,
        cluster_env=None if job.cluster is None else job.cluster.rank_env(where.node_rank),
        session_options_text=options_text,
        node_count=job.node_count,
        visible=tuple(sorted(where.logical or where.user_devices)),
        meeting=job.meeting,
        restart_count=max(job.layout.attempt, 1) - 1,
        max_restarts=job.config.job.max_restarts,
        role=framework.role,
        mode=framework.start_mode.value if framework.start_mode else "",
        yaml_env=job.config.env,
        inherited=job.inherited if where.local else {},
    )


def _host_env(
    job: RankJob, where: HostSlot, options_text: Optional[str], yaml_env: Mapping[str, Optional[str]]
) -> Tuple[Dict[str, str], Tuple[str, ...], Dict[str, str]]:
    """What the ranks of ``where`` share of their environment (rankenv.host_env), with npulaunch's own."""
    ctx = _context(job, where, options_text)
    env, unset, sources = host_env(ctx, yaml_env, _contract(job).host_env(ctx))
    env[PRECEDENCE_VAR] = job.config.session_precedence.value
    env[ATTEMPT_VAR] = str(max(job.layout.attempt, 1))
    env[RESTART_COUNT_VAR] = str(max(job.layout.attempt, 1) - 1)
    if job.hooks:
        env[HOOKS_VAR] = ",".join(job.hooks)
    return env, unset, sources


def _dirs_of(job: RankJob, options: Dict[str, Any], cwd: str) -> Tuple[Tuple[str, str], ...]:
    """The directories a rank's options write to; once per working directory when the options are shared."""
    if job.shared_options is None or options is not job.shared_options[0]:
        return _written_dirs(options, cwd)
    if cwd not in job.written:
        job.written[cwd] = _written_dirs(options, cwd)
    return job.written[cwd]


def _written_dirs(options: Dict[str, Any], cwd: str) -> Tuple[Tuple[str, str], ...]:
    if not options:
        return ()
    from npulaunch.plan.rankoptions import written_dirs  # with the catalog: imported only when options exist

    return written_dirs(options, cwd)
