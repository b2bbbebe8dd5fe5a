"""Resume: before an attempt after the first, every rank's checkpoint directory (``recovery.
checkpoint_dir``, placeholders expanded per rank) is made to hold the newest *complete* checkpoint any
rank wrote (host/checkpoint.py finds, checks and places it), and each rank is told where it is: of a
TensorFlow job a V2 checkpoint's prefix, of a PyTorch job the file torch.save wrote (host/torchckpt.py).

Why the launcher does it: TF resumes from ``model_dir`` by itself (the Estimator restores the
``checkpoint`` state file's newest), but every rank restores from its *own* directory, and a rank moved
to another NPU has an empty one when the directory is keyed by device id, as ModelZoo's scripts key it
(``output/$ASCEND_DEVICE_ID/ckpt``): it would start from step 0 while the others resume (NPUEstimator
broadcasts only the trainable variables: hicann/tensorflow tf_adapter/python/npu_bridge/estimator/npu/
npu_hook.py, NPUBroadcastGlobalVariablesHook). The directories must be on storage the launcher sees: a
shared file system for a job on several hosts, as MindCluster's recovery also requires.

A torch script resumes from what it is told (NPULAUNCH_RESUME_CHECKPOINT, NPULAUNCH_RESUME_STEP); the
launcher's part is the same: the newest file every rank can load, in the rank's own directory. It suits
checkpoints every rank can load alike (DDP's, saved by rank 0 or by every rank), not one shard a rank.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from npulaunch.host.spec import RankEnv
from npulaunch.plan.launchplan import LaunchPlan

RESUME_CHECKPOINT_VAR = "NPULAUNCH_RESUME_CHECKPOINT"
RESUME_STEP_VAR = "NPULAUNCH_RESUME_STEP"
CHECKPOINT_KINDS = {"tensorflow": "tf", "pytorch": "torch"}  # plan.framework -> host/checkpoint.py's kind


@dataclass(frozen=True)
class Resumed:
    """What an attempt resumed from (summary.json's attempt entry)."""

    step: Optional[int]  # None: none anywhere, or its name carries no step (a torch file's)
    checkpoint: Optional[str]  # the checkpoint it came from (a prefix, a torch file); None: none anywhere
    skipped: Tuple[Tuple[str, str], ...] = ()  # newer checkpoints passed over: (prefix, why)
    placed: int = 0  # rank directories that did not hold it and were given it
    error: str = ""  # a directory that could not be given it (the attempt does not start)
    # who resumes: "npulaunch" (recovery.checkpoint_dir: it gives each rank the newest checkpoint) or
    # "script" (no checkpoint_dir: the ranks run the script again, which may resume from its own snapshot)
    by: str = "npulaunch"

    def to_json(self) -> Dict[str, Any]:
        return {
            "step": self.step,
            "checkpoint": self.checkpoint,
            "skipped": [list(pair) for pair in self.skipped],
            "placed": self.placed,
            "by": self.by,
        }

    def lines(self) -> List[str]:
        said = [f"skipped checkpoint {prefix}: {why}" for prefix, why in self.skipped]
        if self.by == "script":
            said.append(
                "npulaunch gives the ranks no checkpoint (no recovery.checkpoint_dir): they run the script again, "
                "which resumes from a snapshot of its own if it keeps one"
            )
        elif self.checkpoint is None:
            said.append("no complete checkpoint yet: every rank starts from the beginning")
        else:
            plural = "directory" if self.placed == 1 else "directories"
            given = f"; given to {self.placed} rank {plural} that lacked it" if self.placed else ""
            step = f"step {self.step}" if self.step is not None else "a checkpoint whose name carries no step"
            said.append(f"every rank resumes from {step} ({self.checkpoint}){given}")
        return said


def checkpoint_dirs(plan: LaunchPlan, template: str) -> Dict[int, str]:
    """Each rank's checkpoint directory: ``template`` with the rank's placeholders, relative to its workdir."""
    from npulaunch.config.placeholders import expand_placeholders

    found = {}
    for spec in plan.ranks:
        values = {
            "rank": spec.rank,
            "local_rank": spec.local_rank,
            "device_id": spec.device_id,
            "node_rank": spec.node_rank,
            "host": spec.host,
            "job_id": plan.job_id,
            "job_dir": plan.job_dir,
        }
        path = os.path.expanduser(expand_placeholders(template, values))
        found[spec.rank] = os.path.normpath(os.path.join(spec.cwd, path))
    return found


def planned_checkpoint_dirs(plan_json: str, template: str) -> List[str]:
    """Each rank's checkpoint directory in an earlier attempt's plan.json (a requeued job's earlier runs),
    ``template`` expanded as checkpoint_dirs does; none when the file cannot be read."""
    import json

    from npulaunch.config.placeholders import expand_placeholders

    try:
        with open(plan_json, encoding="utf-8") as handle:
            data = json.load(handle)
        found = []
        for spec in data["ranks"]:
            values = {name: spec[name] for name in ("rank", "local_rank", "device_id", "node_rank", "host")}
            values.update(job_id=data["job_id"], job_dir=data["job_dir"])
            path = os.path.expanduser(expand_placeholders(template, values))
            found.append(os.path.normpath(os.path.join(spec["cwd"], path)))
        return found
    except (OSError, ValueError, KeyError, TypeError):
        return []


def resume(plan: LaunchPlan, earlier: Sequence[str]) -> Tuple[LaunchPlan, Resumed]:
    """The plan whose ranks resume from the newest complete checkpoint among ``earlier`` directories (the
    previous attempts' ranks') and its own, placed in every rank's directory first; of the kind the plan's
    framework writes (CHECKPOINT_KINDS; another framework's plan has no checkpoint_dir: it is refused)."""
    from npulaunch.host.checkpoint import ResumeError, checkpoint_step, newest_complete, place, resume_variables

    template = plan.recovery.get("checkpoint_dir")
    kind = CHECKPOINT_KINDS.get(plan.framework)
    if not template or kind is None:
        return plan, Resumed(None, None, by="script")
    dirs = checkpoint_dirs(plan, template)
    candidates = list(dict.fromkeys(list(earlier) + list(dirs.values())))
    found = newest_complete([d for d in candidates if os.path.isdir(d)], kind)
    skipped = tuple((str(prefix), str(why)) for prefix, why in found.skipped)
    if found.prefix is None:
        return plan, Resumed(None, None, skipped)
    variables: Dict[int, Dict[str, str]] = {}
    placed_in: Dict[str, Any] = {}
    for rank, directory in dirs.items():
        if directory not in placed_in:
            try:
                placed_in[directory] = place(found, directory)
            except (ResumeError, OSError) as exc:  # ResumeError's message names the directory
                return plan, Resumed(found.step, found.prefix, skipped, error=str(exc))
        prefix = placed_in[directory].prefix_in_directory
        variables[rank] = resume_variables(prefix, checkpoint_step(prefix) if kind == "tf" else found.step)
    given = sum(1 for p in placed_in.values() if not p.unchanged)
    return with_rank_env(plan, variables), Resumed(found.step, found.prefix, skipped, given)


def with_rank_env(plan: LaunchPlan, variables: Mapping[int, Mapping[str, str]]) -> LaunchPlan:
    """The plan with more variables of each rank's own (set by the launcher)."""
    ranks = []
    for spec in plan.ranks:
        extra = variables.get(spec.rank)
        if not extra:
            ranks.append(spec)
            continue
        env = spec.env
        own, shared = (dict(env.own), env.shared) if isinstance(env, RankEnv) else (dict(env), {})
        own.update(extra)
        ranks.append(replace(spec, env=RankEnv(own, shared)))
    return replace(plan, ranks=tuple(ranks))
