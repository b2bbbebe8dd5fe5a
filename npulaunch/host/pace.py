"""Each rank's pace, measured inside the rank for npulaunch's straggler detection (the agent reads it:
host/agent/paces.py; the launcher judges it: diagnose/stragglers.py).

In synchronous data-parallel training every rank takes the same time per step: the fast ones wait in
the collective for the slow one. What tells them apart is where the time goes, so each step is cut
in two: **busy** (the rank's own work: data, forward, backward, optimizer) and **wait** (from the
moment its gradients were ready until the collective that needs every rank finished). The slow rank
is busy longer; its peers wait longer.

Where the numbers come from:
- torch DDP, with no change to the script: each parameter's gradient-accumulated hook (torch 2.1 and
  later) tells when backward has every gradient ready, and a callback queued behind DDP's own at the end of
  backward when DDP has waited for its all-reduces (DdpBackward; DDP's C++ all-reduce and a script's own
  communication hook are left alone). On older torch, a communication hook (DDP's ``register_comm_hook``)
  sees each bucket become ready and its all-reduce finish, and calls a script's own hook.
- torch without DDP: the synchronous collectives of ``torch.distributed`` are timed (the wait), and
  the script marks its steps with ``npulaunch.session.step()``.
- TensorFlow's MonitoredSession (Estimator, MonitoredTrainingSession) and MindSpore's ``Model.train``:
  the step's whole time (their public hooks do not show the collective inside the graph; host/inject/).
- any loop: ``npulaunch.session.step()`` once per step.

Each step is one line of ``<rank dir>/pace``: ``<wall time> <step> <busy s> <wait s or ->``, written
with one unbuffered write (a rank that dies loses none). Standard library only, Python 3.7+: the
injection hook loads this file on its own when npulaunch itself is not importable.
"""

import atexit
import os
import sys
import threading
import time

PACE_FILE = "pace"
HOOKS_VAR = "NPULAUNCH_HOOKS"  # what the injection hook installs: "session", "pace" (comma-separated)
RANK_DIR_VAR = "NPULAUNCH_RANK_DIR"
UNKNOWN_WAIT = "-"


class Recorder(object):
    """Writes a rank's steps to its pace file. Steps come from the framework's hook (``framework_step``)
    or, once the script calls ``step()`` itself, from the script: the hook's waits then add up into the
    script's steps."""

    FLUSH_S = 1.0  # lines are written at most this often (the agent reads the file every 5 s), and at exit

    def __init__(self, path):
        self._path = path
        self._fd = None
        self._failed = False
        self._lines = []
        self._flushed = time.time()
        atexit.register(self.flush)
        self._lock = threading.Lock()
        self.step = 0
        self.manual = False
        self._last = None  # perf_counter of the last step's end (manual steps)
        self._wait = 0.0  # collective waits since then
        self.waits_known = False  # a timed collective or hook exists: a wait of 0 means no wait

    def add_wait(self, seconds):
        with self._lock:
            self._wait += seconds
            self.waits_known = True

    def mark(self):
        """The script's own step boundary (``session.step()``)."""
        now = time.perf_counter()
        with self._lock:
            self.manual = True
            last, self._last = self._last, now
            wait, self._wait = self._wait, 0.0
            if last is None:
                return
            total = now - last
            wait = min(wait, total)
            self._write(total - wait, wait if self.waits_known else None)

    def framework_step(self, busy, wait):
        """A step the framework's hook saw end (``wait`` None when it cannot be told)."""
        with self._lock:
            if self.manual:  # the script counts steps itself: the hook only tells the wait
                if wait is not None:
                    self._wait += wait
                    self.waits_known = True
                return
            self._write(busy, wait)

    def _write(self, busy, wait):
        if self._failed:
            return
        self.step += 1
        now = time.time()
        self._lines.append(
            "%.6f %d %.6f %s\n"
            % (now, self.step, max(busy, 0.0), UNKNOWN_WAIT if wait is None else "%.6f" % max(wait, 0.0))
        )
        if now - self._flushed >= self.FLUSH_S:
            self._flush(now)

    def flush(self):
        with self._lock:
            self._flush(time.time())

    def _flush(self, now):
        lines, self._lines, self._flushed = self._lines, [], now
        if not lines or self._failed:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.write(self._fd, "".join(lines).encode())
        except OSError:
            self._failed = True  # the pace is extra: never the rank's failure


_recorder = [None]
PRIVATE_NAME = "_npulaunch_pace"  # this file as the injection hook loads it (npulaunch may not be importable)


def recorder():
    """This rank's recorder, or None when npulaunch does not watch its pace. One per process: the
    injection hook's copy of this file owns it when the hook loaded one."""
    private = sys.modules.get(PRIVATE_NAME)
    if private is not None and private.recorder is not recorder:
        return private.recorder()
    if _recorder[0] is None:
        rank_dir = os.environ.get(RANK_DIR_VAR)
        if not rank_dir or "pace" not in os.environ.get(HOOKS_VAR, "").split(",") or not os.path.isdir(rank_dir):
            return None
        _recorder[0] = Recorder(os.path.join(rank_dir, PACE_FILE))
    return _recorder[0]


def step():
    """Mark the end of a training step (call it once per step, after the optimizer's). Does nothing
    when npulaunch does not watch the rank's pace."""
    found = recorder()
    if found is not None:
        found.mark()


# -- torch ----------------------------------------------------------------------------------------

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
)


def time_collectives(dist):
    """Time torch.distributed's synchronous collectives (``async_op`` false): their time is waiting for
    the other ranks. An asynchronous one returns at once; its wait is the script's, in ``Work.wait()``."""
    found = recorder()
    if found is None:
        return
    modules = [dist] + [m for m in (getattr(dist, "distributed_c10d", None),) if m is not None]
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is None or getattr(original, "_npulaunch", False):
            continue
        timed = _timed_collective(original, found)
        for module in modules:
            if getattr(module, name, None) is original:
                setattr(module, name, timed)


def _timed_collective(original, found):
    def collective(*args, **kwargs):
        if kwargs.get("async_op"):
            return original(*args, **kwargs)
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            found.add_wait(time.perf_counter() - start)

    collective.__name__ = getattr(original, "__name__", "collective")
    collective.__doc__ = getattr(original, "__doc__", None)
    collective.__wrapped__ = original
    collective._npulaunch = True
    return collective


class DdpSteps(object):
    """One DDP model's steps, from its communication hook: a step's wait runs from its last bucket being
    ready (backward done) until every bucket's all-reduce finished; its busy time from the previous
    step's end until that last bucket was ready."""

    def __init__(self, found):
        self._recorder = found
        self._lock = threading.Lock()
        self._pending = 0
        self._last_ready = None
        self._previous_end = None

    def ready(self, is_last):
        now = time.perf_counter()
        with self._lock:
            self._pending += 1
            if is_last:
                self._last_ready = now

    def done(self):
        now = time.perf_counter()
        with self._lock:
            self._pending -= 1
            if self._pending > 0 or self._last_ready is None:
                return
            ready, self._last_ready = self._last_ready, None
            previous, self._previous_end = self._previous_end, now
        if previous is not None:  # the first step's busy time would include the start-up
            self._recorder.framework_step(ready - previous, now - ready)


class DdpBackward(object):
    """One DDP model's steps without a communication hook, so DDP's own C++ all-reduce stays (it divides the
    gradients while copying them into its buckets; a Python hook needs a pass of its own for that): a
    parameter's gradient-accumulated hook tells when backward produced its gradient (the last one: every
    bucket is ready), and a callback queued behind DDP's own at the end of backward tells when DDP has waited
    for every all-reduce. A backward under ``no_sync()`` (no all-reduce) is part of the next synchronised step.

    A hook is a call from autograd into Python, ~6 µs a parameter a step on this machine: every parameter is
    hooked for the first ``LEARN`` synchronised steps, then only those whose gradients came among the last
    ``KEEP`` of any of them (a static graph produces its gradients in the same order every step). When a
    synchronised backward ends without any kept hook firing (the graph changed), the next forward hooks
    every parameter again and learns anew."""

    LEARN = 8
    KEEP = 3

    def __init__(self, found, model):
        self._recorder = found
        self._model = model
        self._last_ready = None
        self._previous_end = None
        self._queued = False
        self._parameters = []
        self._handles = {}  # id(parameter) -> its hook's handle
        self._learning = 0
        self._order = []  # while learning: the ids of this backward's gradients, in the order they came
        self._lasts = set()
        self._pending = False  # a forward with gradients ran, and its backward has not ended yet

    def watch(self, parameters):
        """Hook every parameter that takes a gradient, and learn which come last; the hooks' handles
        (``remove()`` of each, or ``unwatch()``, ends the timing)."""
        self._parameters = [p for p in parameters if p.requires_grad]
        self._learning, self._lasts = self.LEARN, set()
        for parameter in self._parameters:
            if id(parameter) not in self._handles:
                self._handles[id(parameter)] = parameter.register_post_accumulate_grad_hook(self._accumulated)
        return list(self._handles.values())

    def unwatch(self):
        for handle in self._handles.values():
            handle.remove()
        self._handles = {}

    def forward(self):
        """Called at each forward of the model: a synchronised backward that no kept hook saw means the
        graph changed; hook every parameter again."""
        import torch

        if self._pending and not self._learning:
            self.watch(self._parameters)
        self._pending = torch.is_grad_enabled() and getattr(self._model, "require_backward_grad_sync", True)

    def _accumulated(self, parameter):
        self._last_ready = time.perf_counter()
        if self._learning:
            self._order.append(id(parameter))
        if not self._queued:  # the first hooked gradient of this backward: at its end, queue the real callback
            self._queued = True
            _engine().queue_callback(self._behind_ddp)

    def _behind_ddp(self):
        # DDP queued its finalize (which waits for every all-reduce) during backward, after this one was:
        # a callback queued now runs after it
        _engine().queue_callback(self._ended)

    def _ended(self):
        now = time.perf_counter()
        self._queued = False
        if not getattr(self._model, "require_backward_grad_sync", True):
            return  # no_sync(): nothing was all-reduced; this work is part of the next step's
        self._pending = False
        if self._learning:
            self._learn()
        ready, self._last_ready = self._last_ready, None
        previous, self._previous_end = self._previous_end, now
        if previous is not None and ready is not None:  # the first step's busy time would include the start-up
            self._recorder.framework_step(ready - previous, now - ready)

    def _learn(self):
        self._lasts.update(self._order[-self.KEEP :])
        self._order = []
        self._learning -= 1
        if self._learning:
            return
        for key in [key for key in self._handles if key not in self._lasts]:
            self._handles.pop(key).remove()


def _engine():
    import torch

    return torch.autograd.Variable._execution_engine


def time_ddp(module):
    """Time every step of the first DistributedDataParallel model (from its first forward): with gradient
    hooks (DdpBackward, torch 2.1 and later), else with npulaunch's communication hook, which calls the
    script's own hook, or DDP's all-reduce when it has none."""
    found = recorder()
    ddp = getattr(module, "DistributedDataParallel", None)
    if found is None or ddp is None or getattr(ddp.forward, "_npulaunch", False):
        return
    original_forward = ddp.forward
    original_register = ddp.register_comm_hook
    builtin_name = next(
        (n for n in ("register_builtin_comm_hook", "_register_builtin_comm_hook") if hasattr(ddp, n)), None
    )
    original_builtin = getattr(ddp, builtin_name) if builtin_name else None
    steps = []  # the first model's timer: a second model (a GAN's) is not counted twice
    import torch

    by_gradients = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")

    def attach(self, state=None, hook=None):
        self._npulaunch_hook = (state, hook)
        if getattr(self, "_npulaunch_attached", False):
            return
        self._npulaunch_attached = True
        timer = None
        if not steps:
            timer = DdpSteps(found)
            steps.append(timer)
            found.waits_known = True
        model = self

        def npulaunch_pace_hook(state, bucket):
            user_state, user_hook = model._npulaunch_hook
            if timer is not None:
                timer.ready(bucket.is_last())
            if user_hook is not None:
                future = user_hook(user_state, bucket)
            else:
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                future = default_hooks.allreduce_hook(model.process_group, bucket)
            if timer is None:
                return future

            def finished(done):
                timer.done()
                return done.value()

            return future.then(finished)

        original_register(self, None, npulaunch_pace_hook)

    def forward(self, *args, **kwargs):
        timer = getattr(self, "_npulaunch_timer", None)
        if timer is not None:
            timer.forward()
        elif by_gradients and not getattr(self, "_npulaunch_seen", False):
            self._npulaunch_seen = True
            if not steps:
                try:
                    timer = DdpBackward(found, self)
                    timer.watch(self.module.parameters())
                    timer.forward()
                    self._npulaunch_timer = timer
                    steps.append(timer)
                    found.waits_known = True
                except Exception as exc:  # never the rank's failure: the model runs untimed
                    _warn("npulaunch: pace of this DDP model not measured (%s)" % exc)
        elif not by_gradients and not getattr(self, "_npulaunch_attached", False):
            if not getattr(self, "_npulaunch_builtin", False):
                try:
                    attach(self)
                except Exception as exc:
                    self._npulaunch_builtin = True
                    _warn("npulaunch: pace of this DDP model not measured (%s)" % exc)
        return original_forward(self, *args, **kwargs)

    def register_comm_hook(self, state, hook):
        if by_gradients:  # timed by its gradients: the script's hook is DDP's business alone
            return original_register(self, state, hook)
        if getattr(self, "_npulaunch_attached", False):
            self._check_comm_hook(hook)  # DDP's own check of the script's hook, then it is called from ours
            self._npulaunch_hook = (state, hook)
            return None
        return attach(self, state, hook) if _checked(self, hook) else None

    def register_builtin_comm_hook(self, comm_hook_type):
        self._npulaunch_builtin = True  # a C++ hook cannot be wrapped: without gradient hooks, untimed
        return original_builtin(self, comm_hook_type)

    for function, original in ((forward, original_forward), (register_comm_hook, original_register)):
        function.__doc__ = original.__doc__
        function.__wrapped__ = original
        function._npulaunch = True
    ddp.forward = forward
    ddp.register_comm_hook = register_comm_hook
    if original_builtin is not None:
        register_builtin_comm_hook.__wrapped__ = original_builtin
        setattr(ddp, builtin_name, register_builtin_comm_hook)


# -- TensorFlow and MindSpore: the step's whole time --------------------------------------------------


class _Interval(object):
    """Steps as the time between two ends of a step (the framework's hook cannot see the wait)."""

    def __init__(self, found):
        self._recorder = found
        self._last = None

    def ended(self):
        now = time.perf_counter()
        last, self._last = self._last, now
        if last is not None:
            self._recorder.framework_step(now - last, None)


def time_monitored_session(module):
    """Add a SessionRunHook to every TensorFlow MonitoredSession (what Estimator and
    MonitoredTrainingSession train in): each ``run`` is a step."""
    found = recorder()
    inner = getattr(module, "_MonitoredSession", None)
    if found is None or inner is None or getattr(inner.__init__, "_npulaunch", False):
        return
    from tensorflow.python.training import session_run_hook

    class NpulaunchPaceHook(session_run_hook.SessionRunHook):
        def __init__(self):
            self._steps = _Interval(found)

        def after_run(self, run_context, run_values):
            self._steps.ended()

    original = inner.__init__

    def __init__(self, session_creator, hooks, *args, **kwargs):
        hooks = list(hooks or []) + [NpulaunchPaceHook()]
        original(self, session_creator, hooks, *args, **kwargs)

    __init__._npulaunch = True
    __init__.__wrapped__ = original
    inner.__init__ = __init__


def time_mindspore_model(module):
    """Add a callback to every MindSpore ``Model.train``: each train step's end (a sink loop's, in
    dataset sink mode) ends a step."""
    found = recorder()
    model = getattr(module, "Model", None)
    if found is None or model is None or getattr(model.train, "_npulaunch", False):
        return
    from mindspore.train.callback import Callback

    class NpulaunchPace(Callback):
        def __init__(self):
            super(NpulaunchPace, self).__init__()
            self._steps = _Interval(found)

        def on_train_step_end(self, run_context):
            self._steps.ended()

    original = model.train

    def train(self, epoch, train_dataset, callbacks=None, *args, **kwargs):
        given = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        return original(self, epoch, train_dataset, given + [NpulaunchPace()], *args, **kwargs)

    train._npulaunch = True
    train.__wrapped__ = original
    train.__doc__ = original.__doc__
    model.train = train


def _checked(model, hook):
    model._check_comm_hook(hook)
    return True


def _warn(text):
    try:
        import sys

        sys.stderr.write(text + "\n")
    except Exception:
        pass
