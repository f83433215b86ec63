"""The Ray backend: one evaluator actor per GPU, addressed from any node through the ``Evaluator`` interface.

``RayEvaluator`` is a client. It starts a small keeper actor that owns the evaluator actors (one per
GPU, ``num_gpus=1``; each wraps an evaluator built by a factory: the local GPU evaluator by default, any
picklable ``() -> Evaluator`` otherwise, e.g. ``NullEvaluator`` for CPU tests). ``evaluate`` and
``evaluate_many`` send each candidate to the least-loaded actor and return verdicts in input order.

**Artifacts.** A candidate is a built ``.so`` on the node that built it. When the chosen actor runs on
the caller's node, the path is sent (fast path); otherwise the file's bytes are ``ray.put`` and the
actor writes them into its own scratch folder, checks them against ``artifact_sha256`` and evaluates
a copy of the candidate whose ``so_path`` points there (deleted after the verdict).

**Faults.** An actor that dies (``RayActorError``: a crash, a lost node, ``ray.kill``) is replaced by
the keeper; the candidates it held are sent again once, and a candidate whose second attempt is lost
too gets an ``INFRA_ERROR`` verdict: never lost, never rewarded. Any other failure of our machinery
for a candidate is that candidate's ``INFRA_ERROR``; ``evaluate_many`` itself does not raise.

**Clusters.** With no Ray instance running, ``RayEvaluator`` calls ``ray.init()``, which starts one on
this host (or joins the cluster named by ``RAY_ADDRESS``); call ``ray.init(address="auto")`` or
``ray.init(address="ray://head:10001")`` yourself first to use a cluster, with ptxgym (and its ``gpu``
extra on GPU nodes) installed on every node. The client is picklable: a copy sent into a Ray task (the
``RayPipeline`` runs each step as one, so builds happen on CPU nodes) talks to the same actors.

Ray is imported lazily: importing this module does not import it.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import importlib.util
import itertools
import os
import shutil
import tempfile
import threading
import traceback
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from ptxgym.evaluation.trusted.base import BuiltCandidate, EvalSettings, Evaluator, GpuVerdict
from ptxgym.records.errors import EvaluatorUnavailableError
from ptxgym.records.feedback import EnvironmentInfo, Stage, Status
from ptxgym.records.tasks import Task

#: Builds the evaluator inside an actor; must be picklable (a module-level function or a partial of one).
EvaluatorFactory = Callable[[], Evaluator]

#: Attempts per candidate when its actor dies: the first and one retry on the replacement.
ATTEMPTS = 2
#: Sends per candidate at most: its own attempts and resends after deaths it did not cause.
MAX_SENDS = 6
#: Calls per actor whose start the keeper remembers (more than any actor runs at once).
STARTED_KEPT = 64
#: Threads of the keeper actor (a notice of a started call must not wait behind a replacement).
KEEPER_THREADS = 8
#: Seconds an actor waits for the keeper to take its notice of a started call before running it anyway.
STARTED_WAIT_S = 10.0
#: Seconds a replacement actor may take to start (a lost node must not hang the slot for good).
ACTOR_START_S = 600.0

#: The process whose Ray connection this module last saw; a forked child inherits it (and a dead one).
_ray_pid: int | None = None


def ray_unavailable_reason() -> str | None:
    """Why the Ray backend cannot run here (ray is not installed), or None."""
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (pip install 'ptxgym[ray]')"
    return None


def _ray() -> Any:
    reason = ray_unavailable_reason()
    if reason is not None:
        raise EvaluatorUnavailableError(f"the Ray backend cannot run: {reason}")
    import ray

    return ray


def local_gpu_evaluator(settings: EvalSettings | None = None) -> Evaluator:
    """The default factory: the local GPU evaluator on the one GPU Ray gave this actor (device 0)."""
    from ptxgym.evaluation.trusted.local import LocalGpuEvaluator

    return LocalGpuEvaluator(settings=settings, device=0)


class EvaluatorHost:
    """Runs inside an actor: holds one evaluator and a scratch folder for candidates sent as bytes.

    ``keeper``, ``slot``, ``generation``: where it tells which call it starts (``PoolKeeper.started``),
    before running it, so that the call its death interrupts is known whatever order its calls ran in.
    """

    def __init__(
        self, factory: EvaluatorFactory, keeper: Any = None, slot: int = -1, generation: int = -1
    ) -> None:
        self.evaluator = factory()
        self.scratch = Path(tempfile.mkdtemp(prefix="ptxgym-ray-"))
        self.keeper, self.slot, self.generation = keeper, slot, generation

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        return str(_ray().get_runtime_context().get_node_id())

    def evaluate(
        self, task: Task, candidate: BuiltCandidate, artifact: bytes | None, call_id: str = ""
    ) -> GpuVerdict:
        """Evaluate; ``artifact`` (the .so's bytes, or None for the path fast path) is written here first."""
        if self.keeper is not None and call_id:
            try:  # a keeper that cannot answer in time loses the notice, not the call
                _ray().get(
                    self.keeper.started.remote(self.slot, self.generation, call_id), timeout=STARTED_WAIT_S
                )
            except Exception:  # noqa: BLE001 S110 - the batch then charges by the order of sending
                pass
        if artifact is None:
            return _tag(self.evaluator.evaluate(task, candidate), transfer="path", node=self.node_id())
        digest = hashlib.sha256(artifact).hexdigest()
        if candidate.artifact_sha256 and digest != candidate.artifact_sha256:
            raise ValueError(
                f"the artifact that arrived has sha256 {digest}, the candidate says "
                f"{candidate.artifact_sha256}: refusing to evaluate a different file"
            )
        folder = Path(tempfile.mkdtemp(prefix=f"{digest[:16]}-", dir=self.scratch))
        try:
            path = folder / (candidate.so_path.name or "candidate.so")
            path.write_bytes(artifact)
            verdict = self.evaluator.evaluate(task, candidate.model_copy(update={"so_path": path}))
            return _tag(verdict, transfer="bytes", node=self.node_id())
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Close the evaluator and remove the scratch folder."""
        try:
            self.evaluator.close()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)


class PoolKeeper:
    """Runs inside an actor: owns the evaluator actors (they outlive the clients) and replaces dead ones.

    It also keeps, per actor, the calls it started last (``started``): a threaded actor
    (``KEEPER_THREADS``), so that an evaluator actor's notice never waits behind a replacement.
    """

    def __init__(
        self, factory: EvaluatorFactory, count: int, num_gpus: float, num_cpus: float, concurrency: int
    ) -> None:
        self.factory, self.num_gpus, self.num_cpus = factory, num_gpus, num_cpus
        self.concurrency = concurrency
        self._replacing = [threading.Lock() for _ in range(count)]  # one per slot: slots replace at once
        self._ledger = threading.Lock()
        self._started: dict[tuple[int, int], collections.deque[str]] = {}
        handles = [self._launch(slot, 0) for slot in range(count)]  # all start at once; then wait for each
        nodes = _ray().get([handle.node_id.remote() for handle in handles])
        self.slots = [(0, handle, node) for handle, node in zip(handles, nodes, strict=True)]

    def started(self, slot: int, generation: int, call_id: str) -> None:
        """An evaluator actor is about to run ``call_id`` (it waits for this before running it)."""
        with self._ledger:
            self._started.setdefault((slot, generation), collections.deque(maxlen=STARTED_KEPT)).append(
                call_id
            )

    def started_calls(self, slot: int, generation: int) -> list[str]:
        """The calls that actor said it started, the latest ``STARTED_KEPT``."""
        with self._ledger:
            return list(self._started.get((slot, generation), ()))

    def _launch(self, slot: int, generation: int) -> Any:
        actor_class = (
            _ray()
            .remote(EvaluatorHost)
            .options(
                num_gpus=self.num_gpus,
                num_cpus=self.num_cpus,
                max_restarts=0,
                max_concurrency=self.concurrency,
            )
        )
        keeper = _ray().get_runtime_context().current_actor
        return actor_class.remote(self.factory, keeper, slot, generation)

    def _start(self, slot: int, generation: int) -> tuple[Any, str]:
        handle = self._launch(slot, generation)
        return handle, _ray().get(handle.node_id.remote(), timeout=ACTOR_START_S)

    def current(self) -> list[tuple[int, Any, str]]:
        """(generation, handle, node id) of every slot."""
        return list(self.slots)

    def replace(self, index: int, generation: int) -> tuple[int, Any, str]:
        """Start a new actor in slot ``index`` unless that generation was already replaced."""
        with self._replacing[index]:
            current, handle, _node = self.slots[index]
            if current == generation:
                try:
                    _ray().kill(handle, no_restart=True)
                except Exception:  # noqa: BLE001 S110 - it is dead or dying already; the new one matters
                    pass
                self.slots[index] = (current + 1, *self._start(index, current + 1))
            return self.slots[index]

    def shutdown(self) -> None:
        """Close every evaluator (its worker processes, GPU memory) and end the actors."""
        ray = _ray()
        for _generation, handle, _node in self.slots:
            try:
                ray.get(handle.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 S110 - a dead actor has nothing left to close
                pass
            ray.kill(handle, no_restart=True)


class RayEvaluator(Evaluator):
    """Sends candidates to evaluator actors (one per GPU) on a Ray cluster, or on this host."""

    name = "ray"
    thread_safe = True
    """Many threads may call it at once (the runner does not serialise it)."""

    def __init__(
        self,
        factory: EvaluatorFactory | None = None,
        *,
        settings: EvalSettings | None = None,
        actors: int | None = None,
        num_gpus: float = 1.0,
        num_cpus: float = 1.0,
        transfer: Literal["auto", "bytes"] = "auto",
        remote_builds: bool = True,
        concurrency: int = 1,
        start_timeout_s: float = 600.0,
    ) -> None:
        """Start the actors.

        ``factory`` builds each actor's evaluator (default: the local GPU evaluator with ``settings``).
        ``actors`` defaults to the cluster's GPUs divided by ``num_gpus``. ``transfer="bytes"`` always
        ships the .so's bytes, even to an actor on this node. ``remote_builds`` makes the env run each
        step (its builds) as a Ray task (``RayPipeline``). ``concurrency`` is how many calls one actor
        runs at once: 1 (the default) serialises them; more only for a thread-safe evaluator that
        schedules its GPU itself (a dead actor's death is then charged to the oldest call it held).
        Raises ``EvaluatorUnavailableError`` with the reason when Ray is missing, the cluster lacks the
        GPUs, or an actor's evaluator fails to start.
        """
        ray = _ray()
        started_ray = not ray.is_initialized()
        if started_ray:
            ray.init(ignore_reinit_error=True, include_dashboard=False)
        try:
            self._start(ray, factory, settings, actors, num_gpus, num_cpus, concurrency, start_timeout_s)
        except EvaluatorUnavailableError:
            if started_ray:
                ray.shutdown()
            raise
        self.transfer = transfer
        self.remote_builds = remote_builds
        global _ray_pid
        _ray_pid = os.getpid()
        self.address = str(ray.get_runtime_context().gcs_address)
        """The cluster's address: a copy unpickled in a process not yet in Ray joins this cluster."""
        self._owner = True
        self._lock = threading.Lock()
        self._setup_local_state()

    def _start(
        self,
        ray: Any,
        factory: EvaluatorFactory | None,
        settings: EvalSettings | None,
        actors: int | None,
        num_gpus: float,
        num_cpus: float,
        concurrency: int,
        start_timeout_s: float,
    ) -> None:
        """Check the cluster's resources, start the keeper and wait for its actors."""
        if factory is None:
            factory = functools.partial(local_gpu_evaluator, settings)
        resources = ray.cluster_resources()
        if actors is None:
            actors = int(resources.get("GPU", 0) // num_gpus) if num_gpus > 0 else 1
        if actors < 1:
            raise EvaluatorUnavailableError(
                f"the Ray cluster has no GPU for an evaluator actor (resources: {_describe(resources)}). "
                "Join a cluster with GPU nodes (ray.init(address=...) before making the env) or choose "
                "another evaluator."
            )
        for resource, each in (("GPU", num_gpus), ("CPU", num_cpus)):
            if each * actors > resources.get(resource, 0):
                raise EvaluatorUnavailableError(
                    f"{actors} evaluator actor(s) need {each * actors:g} {resource}, the Ray cluster has "
                    f"{resources.get(resource, 0):g}: pass fewer actors or join a larger cluster"
                )
        keeper_class = ray.remote(PoolKeeper).options(
            num_cpus=0, max_concurrency=KEEPER_THREADS, max_restarts=0
        )
        self._keeper = keeper_class.remote(factory, actors, num_gpus, num_cpus, concurrency)
        try:
            self._slots: list[tuple[int, Any, str]] = ray.get(
                self._keeper.current.remote(), timeout=start_timeout_s
            )
        except Exception as exc:
            ray.kill(self._keeper, no_restart=True)
            raise EvaluatorUnavailableError(
                f"the Ray evaluator actors did not start (waited up to {start_timeout_s:g} s): "
                f"{type(exc).__name__}: {_root_cause(exc)}"
            ) from exc

    # ------------------------------------------------------------------------------ pickling (clients)

    def _setup_local_state(self) -> None:
        self._replacing = threading.Lock()
        self._load = [0] * len(self._slots)
        self._turn = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        # Actor handles unpickle only in a process connected to Ray: they travel as bytes, opened by
        # connect() once the copy has joined the cluster.
        self.connect()
        handles = _ray().cloudpickle.dumps((self._keeper, self._slots))
        local = {"_lock", "_replacing", "_load", "_turn", "_keeper", "_slots"}
        return {
            **{k: v for k, v in self.__dict__.items() if k not in local},
            "_owner": False,
            "_handles": handles,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def connect(self) -> Any:
        """Ray, joined to this evaluator's cluster if this process is not in one yet (an unpickled copy)."""
        global _ray_pid
        ray = _ray()
        with self._lock:
            if ray.is_initialized() and _ray_pid not in (None, os.getpid()):
                raise EvaluatorUnavailableError(
                    "this process was forked from a Ray driver and cannot use its Ray connection: start "
                    "subprocesses that use the Ray evaluator with spawn (e.g. gymnasium's "
                    "AsyncVectorEnv(..., context='spawn'))"
                )
            if not ray.is_initialized():
                ray.init(address=self.address, ignore_reinit_error=True, log_to_driver=False)
            _ray_pid = os.getpid()
            handles = self.__dict__.pop("_handles", None)
            if handles is not None:
                self._keeper, self._slots = ray.cloudpickle.loads(handles)
                self._setup_local_state()
        return ray

    # -------------------------------------------------------------------------------------- interface

    def actors(self) -> list[Any]:
        """The current actor handles, one per slot (operations and tests: ``ray.kill`` one)."""
        self.connect()
        with self._lock:
            return [handle for _generation, handle, _node in self._slots]

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        """Evaluate one candidate on the least-loaded actor."""
        return self.evaluate_many([(task, candidate)])[0]

    def evaluate_many(self, task_candidates: Sequence[tuple[Task, BuiltCandidate]]) -> list[GpuVerdict]:
        """Evaluate a batch over the actors at once; one verdict per pair, in input order."""
        self.connect()
        return _Batch(self, list(task_candidates)).run()

    def close(self) -> None:
        """Close the actors' evaluators and end the actors (only the client that started them does)."""
        if not getattr(self, "_owner", False):
            return
        self._owner = False
        ray = _ray()
        try:
            ray.get(self._keeper.shutdown.remote(), timeout=120)
        except Exception:  # noqa: BLE001 S110 - closing must not raise; the keeper is ended below
            pass
        ray.kill(self._keeper, no_restart=True)

    # ---------------------------------------------------------------------------------------- helpers

    def _artifact(self, candidate: BuiltCandidate, actor_node: str) -> Any:
        """None when the actor can read ``so_path`` itself (same node), else an object ref to its bytes."""
        ray = _ray()
        if self.transfer == "auto" and actor_node == ray.get_runtime_context().get_node_id():
            return None
        return ray.put(Path(candidate.so_path).read_bytes())

    def _acquire(self) -> tuple[int, int, Any, str]:
        """The least-loaded slot (ties in turn), counted busy until ``_release``."""
        with self._lock:
            start = next(self._turn) % len(self._slots)
            order = [(start + k) % len(self._slots) for k in range(len(self._slots))]
            slot = min(order, key=lambda s: self._load[s])
            self._load[slot] += 1
            generation, handle, node = self._slots[slot]
            return slot, generation, handle, node

    def _release(self, slot: int) -> None:
        with self._lock:
            self._load[slot] -= 1

    def _replace(self, slot: int, generation: int) -> str | None:
        """Have the keeper replace a dead actor (once per generation, whoever notices first).

        Returns None when the slot holds a live actor again, else why not.
        """
        ray = _ray()
        with self._replacing:
            with self._lock:
                if self._slots[slot][0] != generation:
                    return None
            try:
                fresh = ray.get(self._keeper.replace.remote(slot, generation))
            except Exception as exc:  # noqa: BLE001 - reported in the candidate's INFRA_ERROR verdict
                return f"{type(exc).__name__}: {_first_line(exc)}"
            with self._lock:
                self._slots[slot] = fresh
            return None

    def _started_calls(self, slot: int, generation: int) -> set[str] | None:
        """The calls the keeper heard that actor start (``PoolKeeper.started``); None if it cannot say."""
        try:
            return set(_ray().get(self._keeper.started_calls.remote(slot, generation), timeout=30))
        except Exception:  # noqa: BLE001 - the batch falls back to the order the calls were sent in
            return None

    def _infra(self, message: str, exc: BaseException, candidate_ran: bool = False) -> GpuVerdict:
        return GpuVerdict(
            status=Status.INFRA_ERROR,
            stage=Stage.RUN,
            message=message,
            environment=EnvironmentInfo(evaluator=self.name),
            candidate_ran=candidate_ran,
            log="".join(traceback.format_exception(exc))[-3000:],
        )


class _Batch:
    """One ``evaluate_many`` call: what is in flight on which actor, and whose actor died how often.

    When an actor dies, the calls of this batch it had not finished are settled: the one it had started
    (it tells the keeper before running a call, ``PoolKeeper.started``; with several started, as a
    threaded actor runs them, the earliest sent) is charged the death, the others are sent again without
    charge. Where the keeper cannot say, the earliest sent is charged (an actor runs its calls in the
    order sent, as a rule; a reordering once charged an innocent call). A candidate charged ``ATTEMPTS``
    deaths, or sent ``MAX_SENDS`` times, gets ``INFRA_ERROR``.
    """

    def __init__(self, client: RayEvaluator, items: list[tuple[Task, BuiltCandidate]]) -> None:
        self.client, self.items = client, items
        self.verdicts: list[GpuVerdict | None] = [None] * len(items)
        self.sends = [0] * len(items)
        self.deaths = [0] * len(items)
        self.pending: dict[Any, tuple[int, int, int, int, str]] = {}
        """ref -> (item, slot, actor generation, send order, call id)"""
        self.order = itertools.count()
        self.id = uuid.uuid4().hex[:12]

    def run(self) -> list[GpuVerdict]:
        ray = _ray()
        for i in range(len(self.items)):
            self.submit(i)
        while self.pending:
            ready, _ = ray.wait(list(self.pending), num_returns=1)
            self.collect(ready[0])
        return [v for v in self.verdicts if v is not None]

    def submit(self, i: int) -> None:
        """Send item ``i`` to the least-loaded actor, or record its INFRA_ERROR if it cannot be sent."""
        task, candidate = self.items[i]
        self.sends[i] += 1
        call_id = f"{self.id}:{i}:{self.sends[i]}"
        slot, generation, handle, node = self.client._acquire()
        try:
            artifact = self.client._artifact(candidate, node)
            ref = handle.evaluate.remote(task, candidate, artifact, call_id)
        except Exception as exc:  # noqa: BLE001 - e.g. the .so vanished before it could be sent
            self.client._release(slot)
            self.verdicts[i] = self.client._infra(
                f"the candidate could not be sent to an evaluator actor: {exc}", exc
            )
            return
        self.pending[ref] = (i, slot, generation, next(self.order), call_id)

    def collect(self, ref: Any, timeout: float | None = None) -> bool:
        """Take a finished call's verdict; False (nothing recorded) when its actor died or did not answer."""
        ray = _ray()
        from ray.exceptions import GetTimeoutError, RayActorError

        i, slot, generation, sent, call_id = self.pending.pop(ref)
        self.client._release(slot)
        try:
            self.verdicts[i] = _tag(ray.get(ref, timeout=timeout), actor=slot, attempt=self.sends[i])
        except (RayActorError, GetTimeoutError) as exc:
            if timeout is None:  # the first call seen failing: settle every call sent to that actor
                self.actor_died(slot, generation, (i, sent, call_id), exc)
            return False
        except Exception as exc:  # noqa: BLE001 - our machinery's fault, this candidate's verdict
            self.verdicts[i] = self.client._infra(f"the Ray evaluator failed: {_first_line(exc)}", exc)
        return True

    def actor_died(self, slot: int, generation: int, first: tuple[int, int, str], exc: BaseException) -> None:
        """Replace the actor; charge the call that was running (class docstring), send the others again."""
        dead = [first]
        for ref, (i, s, g, sent, call_id) in list(self.pending.items()):
            if (s, g) == (slot, generation) and not self.collect(ref, timeout=30):
                dead.append((i, sent, call_id))
        started = self.client._started_calls(slot, generation)
        candidates = dead if started is None else [d for d in dead if d[2] in started]
        running = min(candidates, key=lambda d: d[1])[0] if candidates else None
        why = self.client._replace(slot, generation)
        for i, _sent, _call in dead:
            if why is not None:
                self.verdicts[i] = self.client._infra(
                    f"a dead evaluator actor could not be replaced: {why}", exc
                )
                continue
            self.deaths[i] += i == running
            if self.deaths[i] >= ATTEMPTS:
                self.verdicts[i] = self.client._infra(
                    f"the evaluator actor died while evaluating this candidate, {ATTEMPTS} times (it was "
                    f"replaced each time): {_first_line(exc)}",
                    exc,
                    candidate_ran=True,  # it was running this candidate each time
                )
            elif self.sends[i] >= MAX_SENDS:
                self.verdicts[i] = self.client._infra(
                    f"the candidate was sent {MAX_SENDS} times and an evaluator actor died each time before "
                    f"it could finish: {_first_line(exc)}",
                    exc,
                )
            else:
                self.submit(i)


def _tag(verdict: GpuVerdict, **facts: Any) -> GpuVerdict:
    """The verdict with ``facts`` added to ``details["ray"]`` (the actor slot, the attempt, the transfer)."""
    ray_facts = {**verdict.details.get("ray", {}), **facts}
    return verdict.model_copy(update={"details": {**verdict.details, "ray": ray_facts}})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


def _root_cause(exc: BaseException) -> str:
    """The last line of a Ray error's text (the original exception, for an error raised in an actor)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else type(exc).__name__


def _describe(resources: dict[str, float]) -> str:
    shown = [f"{k}={resources[k]:g}" for k in ("CPU", "GPU") if k in resources]
    return ", ".join(shown) or "none"
