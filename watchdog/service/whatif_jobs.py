"""The agent's what-if jobs: one replay of its own flight recorder at a time, in a worker process at the lowest
CPU priority, bounded in CPU seconds, its status and result kept for a while after it ends.

The agent's tick loop must not feel a replay that may take minutes of CPU: so the replay runs in a child process
(never a thread of this one: the GIL would stretch every tick), niced to 19 and, where Linux offers it, in
SCHED_IDLE, so that it only gets a core nobody else wants. It is started with ``spawn`` (a fresh interpreter, not a
fork of an agent that holds NVML handles, sockets and threads). The replay itself is injected (``WhatIfWorker``:
``watchdog.evaluation.whatif.run_whatif`` in `gpu-watchdog run`), so the agent never imports the evaluation; the
child reports progress through a pipe, and the parent reads it in a thread, off the event loop. The worker stops
itself at ``max_cpu_seconds`` of its own CPU time with the partial result so far; RLIMIT_CPU, a little above,
is the kernel's backstop for a worker that could not.
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from watchdog.config import Policy, WhatIfSettings

log = logging.getLogger(__name__)

RUNNING, DONE, CANCELLED, FAILED, NO_DATA = "running", "done", "cancelled", "failed", "no_data"
_KERNEL_GRACE_SECONDS = 30  # RLIMIT_CPU soft limit above max_cpu_seconds: the worker's own check comes first


@dataclass(frozen=True, slots=True)
class WhatIfRequest:
    """What the worker replays: the recorder's ``directory`` within [since, until] (unix seconds; None: open)."""

    directory: str
    policy: Policy
    since: float | None
    until: float | None
    max_cpu_seconds: float
    own_namespace: str | None
    tenant_label: str | None


@dataclass(frozen=True, slots=True)
class WhatIfProgress:
    ticks_done: int
    fraction: float | None  # of the selected segments' bytes read; None: unknown
    cpu_seconds: float
    segments: int


@dataclass(frozen=True, slots=True)
class WhatIfOutcome:
    """How a worker ended: ``state`` done, cancelled (CPU bound; ``result`` partial), no_data or failed."""

    state: str
    result: dict[str, Any] | None
    error: str | None
    ticks_done: int
    segments: int
    cpu_seconds: float
    since: float | None = None  # the window replayed began here, not where posted (an agent restart within it)


class WhatIfWorker(Protocol):
    """Runs in the child process; calls ``progress`` now and then; must return (not raise) at the CPU bound."""

    def __call__(self, request: WhatIfRequest, progress: Callable[[WhatIfProgress], None]) -> WhatIfOutcome: ...


class Busy(Exception):
    """A what-if is already running (one at a time); ``job`` is it."""

    def __init__(self, job: Job) -> None:
        super().__init__(job.id)
        self.job = job


@dataclass(slots=True)
class Job:
    id: str
    since: float | None
    until: float | None
    state: str = RUNNING
    ticks_done: int = 0
    fraction: float | None = 0.0
    cpu_seconds: float = 0.0
    segments: int = 0
    result: dict[str, Any] | None = None
    error: str | None = None
    ended: float | None = None  # monotonic
    process: Any = field(default=None, repr=False)
    task: asyncio.Task | None = field(default=None, repr=False)

    def document(self, *, node: str) -> dict[str, Any]:
        """The GET answer (docs/api.md)."""
        total = self.ticks_done if self.state != RUNNING else None
        return {"id": self.id, "node": node, "state": self.state,
                "progress": {"ticks_done": self.ticks_done, "ticks_total": total,
                             "fraction": 1.0 if self.state == DONE else self.fraction},
                "cpu_seconds": round(self.cpu_seconds, 3), "window": {"since": self.since, "until": self.until},
                "segments": self.segments, "result": self.result if self.state in (DONE, CANCELLED) else None,
                "error": self.error}


def _lower_priority(pid: int = 0) -> None:
    """nice 19 and, where the platform has it, SCHED_IDLE (sched(7)): the worker runs only on idle CPU time."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except (OSError, AttributeError) as exc:
        log.debug("what-if worker: cannot lower its priority: %s", exc)
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        except OSError as exc:
            log.debug("what-if worker: no SCHED_IDLE: %s", exc)


def _child(worker: WhatIfWorker, request: WhatIfRequest, conn: Any) -> None:
    """The worker process's entry: lowest priority, the kernel's CPU backstop, then the replay."""
    _lower_priority()
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s (what-if worker): %(message)s")
    # The segment being written always "ends early" to a reader; the agent's own log need not say so per what-if.
    logging.getLogger("watchdog.trace.io").setLevel(logging.ERROR)
    try:
        import resource

        soft = math.ceil(request.max_cpu_seconds) + _KERNEL_GRACE_SECONDS
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 5))
    except (ImportError, ValueError, OSError):
        pass
    try:
        outcome = worker(request, lambda progress: conn.send(progress))
    except Exception as exc:  # a bad segment, a recorded policy that does not validate: the job fails, says why
        outcome = WhatIfOutcome(FAILED, None, f"{type(exc).__name__}: {exc}", 0, 0, time.process_time())
    conn.send(outcome)
    conn.close()


def _receive(conn: Any) -> Any:
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def _reap(process: Any) -> None:
    """Wait for the worker to exit, killing one that lingers after its outcome: no process outlives its job."""
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()


class WhatIfJobs:
    """Starts, tracks and expires what-if jobs; ``directory`` None: the flight recorder is off."""

    def __init__(self, settings: WhatIfSettings, *, directory: str | None, worker: WhatIfWorker | None, node: str,
                 own_namespace: str | None, tenant_label: str | None, monotonic: Callable[[], float]) -> None:
        self.settings = settings
        self.directory = directory
        self.worker = worker
        self.node = node
        self._overlay = {"own_namespace": own_namespace, "tenant_label": tenant_label}
        self._monotonic = monotonic
        self._jobs: dict[str, Job] = {}
        self._context = multiprocessing.get_context("spawn")
        self._stopping = False

    def __len__(self) -> int:
        """Jobs held: the running one and the finished ones not yet expired."""
        self._expire()
        return len(self._jobs)

    def running(self) -> Job | None:
        return next((job for job in self._jobs.values() if job.state == RUNNING), None)

    def get(self, job_id: str) -> Job | None:
        self._expire()
        return self._jobs.get(job_id)

    def start(self, policy: Policy, *, since: float | None, until: float | None) -> Job:
        """Start a replay now; raises Busy while one runs. Only called with the recorder on and a worker."""
        self._expire()
        busy = self.running()
        if busy is not None:
            raise Busy(busy)
        assert self.directory is not None and self.worker is not None
        request = WhatIfRequest(self.directory, policy, since, until, self.settings.max_cpu_seconds, **self._overlay)
        job = Job(id=secrets.token_hex(8), since=since, until=until)
        receiving, sending = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_child, args=(self.worker, request, sending), daemon=True,
                                        name=f"gpu-watchdog-whatif-{job.id}")
        process.start()
        sending.close()  # the child holds the writing end: its exit is our EOF
        _lower_priority(process.pid)  # at once, before the child's imports: nice and SCHED_IDLE from the start
        job.process = process
        job.task = asyncio.get_running_loop().create_task(self._supervisor(job, receiving),
                                                          name=f"whatif-{job.id}")
        self._jobs[job.id] = job
        log.info("what-if %s started (pid %d) over %s, window %s – %s", job.id, process.pid, self.directory,
                 since, until)
        return job

    async def _supervisor(self, job: Job, conn: Any) -> None:
        """Reads the worker's messages (in a thread: a large result never blocks the loop) until its outcome."""
        try:
            while True:
                message = await asyncio.to_thread(_receive, conn)
                if isinstance(message, WhatIfProgress):
                    job.ticks_done, job.fraction = message.ticks_done, message.fraction
                    job.cpu_seconds, job.segments = message.cpu_seconds, message.segments
                    continue
                if isinstance(message, WhatIfOutcome):
                    job.state, job.result, job.error = message.state, message.result, message.error
                    job.ticks_done, job.segments, job.cpu_seconds = message.ticks_done, message.segments, \
                        message.cpu_seconds
                    job.since = message.since if message.since is not None else job.since
                else:
                    await asyncio.to_thread(job.process.join, 5)
                    job.state = FAILED
                    job.error = self._lost(job.process.exitcode)
                break
        finally:
            if job.state == RUNNING:  # cancelled (the agent stops): the worker goes with it
                job.state, job.error = FAILED, "the agent stopped before the what-if ended"
                job.process.kill()
            job.ended = self._monotonic()
            await asyncio.to_thread(_reap, job.process)
            conn.close()  # after the worker is gone: the reading thread, if any, has its EOF
            log.info("what-if %s ended %s after %d ticks, %.1f CPU seconds%s", job.id, job.state, job.ticks_done,
                     job.cpu_seconds, f": {job.error}" if job.error else "")

    def _lost(self, exitcode: int | None) -> str:
        if self._stopping:
            return "the agent stopped before the what-if ended"
        if exitcode is not None and -exitcode in (getattr(signal, "SIGXCPU", -1), signal.SIGKILL):
            return (f"the worker process was killed at its CPU limit (max_cpu_seconds "
                    f"{self.settings.max_cpu_seconds:g} + {_KERNEL_GRACE_SECONDS} s) without a result")
        return f"the worker process ended without a result (exit code {exitcode})"

    def _expire(self) -> None:
        """Drop the results past their TTL, and the oldest past ``max_results``: a result may be megabytes."""
        now = self._monotonic()
        ended = sorted((job for job in self._jobs.values() if job.ended is not None), key=lambda job: job.ended)
        surplus = max(0, len(ended) - self.settings.max_results)
        for index, job in enumerate(ended):
            if index < surplus or now - job.ended >= self.settings.result_ttl_seconds:
                del self._jobs[job.id]

    async def close(self) -> None:
        """Stop a running worker (the agent is stopping) and wait for its supervisor."""
        self._stopping = True
        for job in list(self._jobs.values()):
            if job.task is not None and not job.task.done():
                job.process.kill()
                try:
                    await job.task
                except asyncio.CancelledError:
                    pass
