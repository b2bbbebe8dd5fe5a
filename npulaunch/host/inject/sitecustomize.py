"""The ranks' zero-code hooks: session injection (``session_injection: auto``) and the pace of each
step (``monitor.stragglers``, host/pace.py). npulaunch puts this directory first on the ranks'
PYTHONPATH, so Python runs this file at start-up; NPULAUNCH_HOOKS says which hooks the rank gets
("session", "pace"; unset: "session"). It does three cheap things:

1. runs the user's own ``sitecustomize`` if there is one further down sys.path (it would
   otherwise be hidden by this file);
2. installs an import hook that waits for the modules it patches; nothing else happens unless the
   script imports them;
3. when one loads, patches it:
   - session: TensorFlow's ``BaseSession.__init__``, so every Session, InteractiveSession and
     MonitoredTrainingSession (anything built on BaseSession) gets this rank's options merged into a
     copy of its config (the script's own ConfigProto object is never changed);
   - pace: torch's DistributedDataParallel (a communication hook that times each step) and
     synchronous collectives, TensorFlow's MonitoredSession (a SessionRunHook) and MindSpore's
     ``Model.train`` (a callback).

At exit it warns when session injection is on but no session was created: the options then reached
nothing (for example a TF2 eager script). Standard library only, Python 3.7+.
"""

import atexit
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_HOOKS = set(os.environ.get("NPULAUNCH_HOOKS", "session").split(","))
_state = {"sessions": 0, "tensorflow": False}


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # no half-made module for the next caller
        raise
    return module


def _load_sibling(name, filename):
    """npulaunch's own ``host/<filename>`` as module ``name``: from the file beside this directory, or,
    on a remote host, from inside the agent's zip application this directory is then part of."""
    path = os.path.join(os.path.dirname(_HERE), filename)
    if os.path.isfile(path):
        return _load(name, path)
    import types
    import zipimport

    source = zipimport.zipimporter(os.path.dirname(path)).get_data(path).decode("utf-8")
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _run_user_sitecustomize():
    others = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.origin and os.path.abspath(spec.origin) != os.path.abspath(__file__):
        _load("_npulaunch_user_sitecustomize", spec.origin)


def _session_helper():
    """npulaunch's session options helper (host/configproto.py): the package's own module when the
    script imported it (one set of warnings), else the same file loaded privately (npulaunch need
    not be importable)."""
    return (
        sys.modules.get("npulaunch.host.configproto")
        or sys.modules.get("_npulaunch_configproto")
        or _load_sibling("_npulaunch_configproto", "configproto.py")
    )


def _pace():
    """npulaunch's pace recorder (host/pace.py), loaded privately: one copy per process, which the
    package's own module defers to when the script imports it."""
    return sys.modules.get("_npulaunch_pace") or _load_sibling("_npulaunch_pace", "pace.py")


def _patch_session(module):
    base = module.BaseSession
    original = base.__init__
    if getattr(original, "_npulaunch", False):
        return

    def __init__(self, target="", graph=None, config=None, *args, **kwargs):
        helper = _session_helper()
        config_class, _ = helper.tensorflow_classes()
        merged = config_class()
        if config is not None:
            merged.CopyFrom(config)
        prefer = os.environ.get(helper.PRECEDENCE_VAR, "script")
        conflicts = helper.apply_options(merged, helper.options(), prefer)
        helper.record(merged, "injection", conflicts)
        _state["sessions"] += 1
        original(self, target, graph, merged, *args, **kwargs)

    __init__._npulaunch = True
    base.__init__ = __init__


def _patches():
    """module name -> what patches it once it has loaded, for the hooks this rank gets."""
    found = {}
    if "session" in _HOOKS:
        found["tensorflow.python.client.session"] = _patch_session
    if "pace" in _HOOKS:
        found["torch.distributed"] = lambda module: _pace().time_collectives(module)
        found["torch.nn.parallel.distributed"] = lambda module: _pace().time_ddp(module)
        found["tensorflow.python.training.monitored_session"] = lambda module: _pace().time_monitored_session(module)
        found["mindspore.train.model"] = lambda module: _pace().time_mindspore_model(module)
    return found


_TARGETS = _patches()


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as exc:  # a hook must never break the script's import
            sys.stderr.write("npulaunch: warning: could not hook %s: %s\n" % (module.__name__, exc))


class _Finder(object):
    """Answers only for the modules it patches, by wrapping their real loaders."""

    def find_spec(self, name, path=None, target=None):
        patch = _TARGETS.get(name)
        if patch is None:
            if name == "tensorflow":
                _state["tensorflow"] = True
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, patch)
        return spec


def _at_exit():
    if "session" in _HOOKS and _state["sessions"] == 0 and os.environ.get("NPULAUNCH_SESSION_OPTIONS", "{}") != "{}":
        why = (
            "the script never imported TensorFlow"
            if not _state["tensorflow"]
            else "TensorFlow created no Session (eager code, or sessions made before injection)"
        )
        sys.stderr.write(
            "npulaunch: warning: session_injection is on but %s: the session options reached nothing\n" % why
        )


_run_user_sitecustomize()
if _TARGETS:
    sys.meta_path.insert(0, _Finder())
atexit.register(_at_exit)
if os.environ.get("NPULAUNCH_RANK_DIR"):  # let npulaunch ask a hung rank for its Python stacks
    try:
        _session_helper().register_stack_dump()
    except Exception:  # never the rank's failure (an unreadable helper, a full disk)
        pass
