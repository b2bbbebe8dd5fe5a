"""A rank's session options in TensorFlow's ConfigProto: merged into the NpuOptimizer's parameter_map
(.b / .i / .s by each value's JSON type), read back, and recorded in the rank's directory; and the
registration that lets npulaunch ask a hung rank for its Python stacks. The injection hook
(host/inject/sitecustomize.py) loads this file by its path, as npulaunch need not be importable in a
rank: it imports nothing of npulaunch. Scripts reach it through ``npulaunch.session`` (host/session.py).
Standard library only, Python 3.7+; TensorFlow is imported only when a config is built.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any, Dict, List, Optional, Tuple

OPTIONS_VAR = "NPULAUNCH_SESSION_OPTIONS"
PRECEDENCE_VAR = "NPULAUNCH_SESSION_PRECEDENCE"  # "script" (default) or "yaml"
RANK_DIR_VAR = "NPULAUNCH_RANK_DIR"
EFFECTIVE_FILE = "session_options.json"
STACK_SIGNAL_FILE = "stack-dump.signal"  # "<pid> <signal>": how npulaunch asks this rank for its stacks
STACK_DUMP_SIGNAL = 40  # a real-time signal (SIGRTMIN+6 on Linux): no library uses it, and it is sent
#                         only to processes that registered a handler for it here
OPTIMIZER = "NpuOptimizer"

# The options GE reads once per process, when it initialises (GEInitialize): the first session
# that initialises GE (the one running npu_ops.initialize_system(), or the first with an NPU graph)
# fixes them, and a later session's values do nothing (GePlugin::Init returns at once when GE is
# already initialised). So they go on the initialisation session too, with the training session's
# values. Sources, hicann/tensorflow @ 82957b9 (= tag tfa_v0.0.48_9.0.0 for these files):
# tf_adapter/util/npu_attrs.cc SetNpuOptimizerAttr (the parameters it copies into the process-wide
# init_options_, lines 2124-2802) and GetInitOptions (719-886); tf_adapter/util/ge_plugin.cc Init
# (154-159); tf_adapter/kernels/npu_sys_ctl_ops.cc (NPUInit). Versions (Ascend/tensorflow branches):
# deterministic moved from the session to the init path in fa96bfa (2023-01, r1.12.0 on);
# precision_mode_v2 exists from r1.13.0 (2ab9986, 2023-06); jit_compile was on the init path in
# r1.10.0 only; aicore_num, export_compile_stat, oo_constant_folding and input_batch_cpy are new in
# 9.0.0's adapter. An adapter ignores parameters it does not know, so the union of every version's
# global options is carried: what one version reads at initialisation always reaches it.
GLOBAL_OPTIONS = (
    "aicore_num",
    "aoe_config_file",
    "aoe_mode",
    "auto_tune_mode",
    "customize_dtypes",
    "debug_dir",
    "deterministic",
    "dump_data",
    "enable_exception_dump",
    "enable_scope_fusion_passes",
    "event_sync_timeout",
    "export_compile_stat",
    "fusion_switch_file",
    "graph_run_mode",
    "hccl_timeout",
    "input_batch_cpy",
    "jit_compile",
    "modify_mixlist",
    "oo_constant_folding",
    "op_compiler_cache_dir",
    "op_compiler_cache_mode",
    "op_debug_config",
    "op_debug_level",
    "op_execute_timeout",
    "op_precision_mode",
    "op_select_implmode",
    "op_wait_timeout",
    "optypelist_for_implmode",
    "precision_mode",
    "precision_mode_v2",
    "profiling_mode",
    "profiling_options",
    "static_memory_policy",
    "stream_sync_timeout",
    "variable_use_1g_huge_page",
    "work_path",
)


_warned = set()  # type: set


def warn_once(message: str) -> None:
    """``npulaunch: warning: <message>`` on the rank's stderr, once per process."""
    if message not in _warned:
        _warned.add(message)
        sys.stderr.write("npulaunch: warning: " + message + "\n")


def options(environ: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """This rank's session options as npulaunch planned them (empty outside npulaunch)."""
    text = (os.environ if environ is None else environ).get(OPTIONS_VAR, "")
    return json.loads(text) if text else {}


def tensorflow_classes() -> Tuple[Any, Any]:
    """(ConfigProto class, RewriterConfig class) of the installed TensorFlow, 1.15 or 2.x."""
    import tensorflow as tf  # noqa: F401 - imported here so that importing this module stays free
    from tensorflow.core.protobuf.config_pb2 import ConfigProto
    from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

    load_npu_bridge()
    return ConfigProto, RewriterConfig


def load_npu_bridge() -> bool:
    """Import npu_bridge where it exists: its import registers the NPU optimizer and ops."""
    if "npu_bridge" in sys.modules:
        return True
    try:
        import npu_bridge.npu_init  # noqa: F401
    except ImportError:
        return False
    return True


def _field(value: Any) -> str:
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int):
        return "i"
    return "s"


def _read(attr: Any) -> Any:
    """The value of a parameter_map entry (an AttrValue), by the field that is set."""
    kind = attr.WhichOneof("value")
    if kind == "s":
        return attr.s.decode("utf-8", "replace")
    return getattr(attr, kind) if kind else None


def _npu_optimizer(config: Any) -> Any:
    rewrite = config.graph_options.rewrite_options
    for custom in rewrite.custom_optimizers:
        if custom.name == OPTIMIZER:
            return custom
    custom = rewrite.custom_optimizers.add()
    custom.name = OPTIMIZER
    return custom


# Options the TF Adapter refuses together in one session ("'precision_mode' and 'precision_mode_v2' can
# not be assigned at the same time", an error at the first session.run): hicann/tensorflow
# tf_adapter/util/npu_attrs.cc @ 82957b9, SetNpuOptimizerAttr. When the script sets one and the YAML
# the other, only the side that wins the precedence keeps its own.
EXCLUSIVE_OPTIONS = (("precision_mode", "precision_mode_v2"),)


def _exclusive_conflicts(custom: Any, values: Dict[str, Any], prefer: str) -> Tuple[Dict[str, Any], List[str]]:
    """``values`` without what must give way to the script's own exclusive option (prefer
    "script"), or with the script's removed (prefer "yaml"); and what was decided."""
    kept, conflicts = dict(values), []
    for group in EXCLUSIVE_OPTIONS:
        script = [name for name in group if name in custom.parameter_map and name not in values]
        yaml = [name for name in group if name in values and name not in custom.parameter_map]
        if not script or not yaml:
            continue
        if prefer == "script":
            for name in yaml:
                del kept[name]
        else:
            for name in script:
                del custom.parameter_map[name]
        conflicts.append(
            "session options %s and %s cannot be used together: the script sets %s, the YAML %s; keeping %s"
            % (group[0], group[1], script[0], yaml[0], "the script's" if prefer == "script" else "the YAML's")
        )
    return kept, conflicts


def apply_options(config: Any, values: Dict[str, Any], prefer: str = "script") -> List[str]:
    """Merge ``values`` into ``config`` in place; return one message per option both the script
    and the YAML set differently (``prefer`` decides which wins)."""
    _, rewriter = tensorflow_classes()
    custom = _npu_optimizer(config)
    values, conflicts = _exclusive_conflicts(custom, values, prefer)
    for name in sorted(values):
        value = values[name]
        if name in custom.parameter_map:
            mine = _read(custom.parameter_map[name])
            if mine != value:
                keep = "the script's" if prefer == "script" else "the YAML's"
                conflicts.append(
                    "session option %s: the script sets %r, the YAML sets %r; keeping %s" % (name, mine, value, keep)
                )
                if prefer == "script":
                    continue
        attr = custom.parameter_map[name]
        kind = _field(value)
        if kind == "b":
            attr.b = value
        elif kind == "i":
            attr.i = value
        else:
            attr.s = str(value).encode("utf-8")
    # CANN requires TensorFlow's own remapping and memory optimisation off with the NPU optimizer.
    config.graph_options.rewrite_options.remapping = rewriter.OFF
    config.graph_options.rewrite_options.memory_optimization = rewriter.OFF
    return conflicts


def effective_options(config: Any) -> Dict[str, Any]:
    """What a ConfigProto's NpuOptimizer carries, as plain values."""
    for custom in config.graph_options.rewrite_options.custom_optimizers:
        if custom.name == OPTIMIZER:
            return {name: _read(attr) for name, attr in sorted(custom.parameter_map.items())}
    return {}


_sessions = []  # type: List[Dict[str, Any]]  # what record() saw, in order
_ge_globals = None  # type: Optional[Dict[str, Any]]  # the global options of this process's first NPU session


def global_differences(effective: Dict[str, Any]) -> List[str]:
    """One message per global option (read once, when GE initialises) that this session sets
    differently from the first NPU session of the process, which GE took them from."""
    global _ge_globals
    mine = {name: value for name, value in effective.items() if name in GLOBAL_OPTIONS}
    if _ge_globals is None:
        if effective:
            _ge_globals = mine
        return []
    return [
        "session option %s is read once, when GE initialises: the process's first NPU session had %s, "
        "this one %s; GE keeps the first (set it the same on every session, initialize_system's included)"
        % (name, _shown(_ge_globals.get(name)), _shown(mine.get(name)))
        for name in sorted(set(mine) | set(_ge_globals))
        if mine.get(name) != _ge_globals.get(name)
    ]


def _shown(value: Any) -> str:
    return "no value" if value is None else repr(value)


def record(config: Any, via: str, conflicts: List[str]) -> None:
    """Write what this rank's session actually got into its directory of the job."""
    effective = effective_options(config)
    conflicts = conflicts + global_differences(effective)
    rank_dir = os.environ.get(RANK_DIR_VAR)
    for message in conflicts:
        warn_once(message)
    if not rank_dir or not os.path.isdir(rank_dir):
        return
    if len(_sessions) < 16:  # a script may make a session per evaluation: the first few tell the story
        _sessions.append({"via": via, "options": effective, "conflicts": conflicts})
    # the newest session's at the top level; every session of the process in order under "sessions"
    data = {"via": via, "pid": os.getpid(), "options": effective, "conflicts": conflicts, "sessions": _sessions}
    path = os.path.join(rank_dir, EFFECTIVE_FILE)
    with open_private(path + ".tmp", "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)


def open_private(path: str, mode: str) -> IO[str]:
    """``open(path, mode)`` for a file of the job directory: 0600 whatever the umask (the README's
    promise; the directory holds environments and logs)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o600), mode)


_stack_file = None  # kept open: faulthandler writes to its descriptor from a signal handler


def register_stack_dump() -> bool:
    """Let npulaunch ask for this process's Python stacks (written to rank-N/stacks-<pid>.txt)
    before it stops a hung job. Returns False outside npulaunch or where it is not possible (never
    raises: a full disk must not fail the rank). True also when the injection hook's copy of this file
    registered this process already."""
    global _stack_file
    if any(getattr(other, "_stack_file", None) is not None for other in _other_copies()):
        return True
    rank_dir = os.environ.get(RANK_DIR_VAR)
    if _stack_file is not None or not rank_dir or not os.path.isdir(rank_dir) or not hasattr(os, "getpid"):
        return _stack_file is not None
    import faulthandler
    import signal

    if STACK_DUMP_SIGNAL >= getattr(signal, "NSIG", 65):
        return False
    try:  # the rank's first Python process claims it; its Python children do not
        marker = os.open(os.path.join(rank_dir, STACK_SIGNAL_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:  # claimed already, or the directory cannot take it
        return False
    try:
        _stack_file = open_private(os.path.join(rank_dir, "stacks-%d.txt" % os.getpid()), "w")
        faulthandler.register(STACK_DUMP_SIGNAL, file=_stack_file, all_threads=True, chain=False)
        os.write(marker, ("%d %d\n" % (os.getpid(), STACK_DUMP_SIGNAL)).encode())
    except OSError:
        return _stack_file is not None
    finally:
        os.close(marker)
    return True


def _other_copies() -> List[Any]:
    """This file loaded under its other name in this process (the package's, the injection hook's)."""
    here = sys.modules.get(__name__)
    found = [sys.modules.get(name) for name in ("npulaunch.host.configproto", "_npulaunch_configproto")]
    return [module for module in found if module is not None and module is not here]
