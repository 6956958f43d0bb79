"""The Optuna study of a sweep and its workers: Optuna samples, prunes and stores; this module
decides which trial a worker runs and finds the trials of workers that died.

Storage: `sweep.storage` empty -> an Optuna journal file, W/sweep.journal (one machine); else a
database URL (RDBStorage) that workers on several machines share, with Optuna's heartbeat: a
trial whose worker missed BEATS_MISSED beats (config sweep.heartbeat_seconds) is failed and
queued again by Optuna's RetryHeartbeatStaleTrialCallback. A journal file has no heartbeat, so the sweep keeps its own
books there: the worker running a trial holds the lock file W/trials/<n>/trial.lock
(file_lock.py: taken over when its holder is gone), and every worker takes the next trial under
W/sweep.lock (an OS file lock, released by the kernel when its holder dies) until it holds the
trial's lock; under it, a RUNNING trial whose lock is gone or takeable is stale, failed and
queued again the way Optuna's callback does for a database. A trial queued again keeps its
values and runs in the first trial's folder, resuming from its checkpoints (the loop's exact
resume).

A trial that Optuna records FAIL without a reason of ours (an interrupted worker) is queued again
too, at most MAX_RETRIES times; a trial that failed on its own (a diverged run) keeps its reason
(user attribute "failure") and is not rerun.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import ml_collections
from etils import epath

from albert_jax import file_lock, files
from albert_jax.errors import ConfigError, SweepStopped
from albert_jax.finetune.sweep import plan as plan_lib
from albert_jax.finetune.sweep import results
from albert_jax.finetune.sweep import trial as trial_lib
from albert_jax.finetune.sweep.plan import SweepPlan

JOURNAL_FILE = "sweep.journal"
SECTION_LOCK_FILE = "sweep.lock"
RECORD_FILE = "sweep.json"  # the study's name and storage, so a rerun joins the same study
TRIALS_SUBDIR = "trials"
TRIAL_LOCK_FILE = "trial.lock"
BEATS_MISSED = 3  # a database's trial is stale when its worker missed this many heartbeats
MAX_RETRIES = 3
OPEN_ATTEMPTS = 3  # a new database opened by several machines at once (open_storage)
POLL_SECONDS = 2.0  # a worker with nothing to start looks again for stale trials this often


def optuna_module() -> Any:
    """Optuna, or one line saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise ImportError("albert-jax sweep needs Optuna: pip install 'albert-jax[sweep]'") from None
    # Errors only: the sweep prints a line per trial itself (Optuna would add a traceback to a
    # diverged trial's).
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def redacted(url: str) -> str:
    """A database URL without its password, for messages and files."""
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def open_storage(plan: SweepPlan, workdir: str) -> Any:
    """The study's storage; ConfigError (one line) when it cannot be opened."""
    optuna = optuna_module()
    if not plan.storage:
        if not files.is_local(workdir):
            raise ConfigError(f"--workdir={workdir} is in a bucket, where a journal file cannot "
                              "be shared: set config sweep.storage to a database URL")
        epath.Path(workdir).mkdir(parents=True, exist_ok=True)
        backend = optuna.storages.journal.JournalFileBackend(os.path.join(workdir, JOURNAL_FILE))
        return optuna.storages.JournalStorage(backend)
    try:
        return _open_database(plan)
    except Exception as error:  # noqa: BLE001 - SQLAlchemy's and the drivers' errors are many
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(f"config sweep.storage={redacted(plan.storage)} cannot be opened "
                          f"({reason}); check the URL, that the server runs and that its "
                          "driver is installed") from None


def _open_database(plan: SweepPlan) -> Any:
    """Optuna's RDBStorage of `plan.storage`, with its heartbeat."""
    optuna = optuna_module()
    import sqlalchemy  # Optuna's own dependency

    def open_once() -> Any:
        return optuna.storages.RDBStorage(
            plan.storage, heartbeat_interval=plan.heartbeat_seconds,
            grace_period=BEATS_MISSED * plan.heartbeat_seconds,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                max_retry=MAX_RETRIES))

    for wait_seconds in range(1, OPEN_ATTEMPTS):
        try:
            return open_once()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            # Machines that open a new database at once all create Optuna's tables, and
            # PostgreSQL refuses all CREATE TABLEs but one (a duplicate key in pg_type, or the
            # table exists): the tables are there now, and opening again finds them.
            time.sleep(wait_seconds)
    return open_once()


def load_study(plan: SweepPlan, storage: Any) -> Any:
    """The study (created by the first worker, joined by the others)."""
    optuna = optuna_module()
    if plan.sampler == "grid":
        sampler = optuna.samplers.GridSampler(plan.grid(), seed=plan.seeds[0])
    elif plan.sampler == "tpe":
        # constant_liar: the trials other workers are running count, so that two workers do
        # not try the same point.
        sampler = optuna.samplers.TPESampler(constant_liar=True)
    else:
        sampler = optuna.samplers.RandomSampler()
    if plan.pruner == "median":
        # Pruning starts once a whole configuration (every seed) has finished.
        pruner = optuna.pruners.MedianPruner(
            n_startup_trials=len(plan.seeds) if plan.trial_per_seed else 1, n_warmup_steps=0)
    elif plan.pruner == "hyperband":
        pruner = optuna.pruners.HyperbandPruner(min_resource=plan.eval_every_steps,
                                                max_resource=plan.total_steps)
    else:
        pruner = optuna.pruners.NopPruner()
    return optuna.create_study(study_name=plan.study_name, storage=storage, sampler=sampler,
                               pruner=pruner, direction="maximize", load_if_exists=True)


def _check_record(plan: SweepPlan, workdir: str) -> None:
    """W/sweep.json names the study of W; a config that makes another study is refused (its
    trials would share W/trials/ with the first)."""
    path = epath.Path(workdir) / RECORD_FILE
    record = {"study_name": plan.study_name, "metric": plan.metric, "split": plan.split,
              "objective": plan.objective,
              "storage": redacted(plan.storage) if plan.storage else JOURNAL_FILE}
    if path.exists():
        held = json.loads(path.read_text())
        if held["study_name"] != plan.study_name:
            raise ConfigError(f"--workdir={workdir} holds the sweep {held['study_name']}, of "
                              "another config (sweep.json): use a new --workdir, or the same "
                              "config and sweep settings")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomically(path, json.dumps(record, indent=2))


# --- Which trials count -------------------------------------------------------------------------

def folder_number(trial: Any) -> int:
    """The number of the trial folder: the first trial's, for a trial queued again."""
    return int(trial.system_attrs.get("failed_trial", trial.number))


def trial_folder(workdir: str, number: int) -> epath.Path:
    return epath.Path(workdir) / TRIALS_SUBDIR / str(number)


def _open_work(plan: SweepPlan, trials: list[Any]) -> tuple[bool, int]:
    """Whether a new or queued trial is there to take, and how many live trials run."""
    optuna = optuna_module()
    states = optuna.trial.TrialState
    live = results.live_trials(trials)
    running = sum(trial.state == states.RUNNING for trial in live)
    if any(trial.state == states.WAITING for trial in live):
        return True, running
    if plan.sampler == "grid":
        taken = {trial.system_attrs.get("grid_id") for trial in live}
        return len(taken - {None}) < len(plan.grid()[plan_lib.SEED]) * plan.trials, running
    return len(live) < plan.trials, running


# --- Stale trials -------------------------------------------------------------------------------

def _holder_is_gone(workdir: str, trial: Any) -> bool:
    """Whether nobody holds the trial's lock (it is absent, or its holder is gone)."""
    path = trial_folder(workdir, folder_number(trial)) / TRIAL_LOCK_FILE
    if not path.exists():
        return True
    try:
        lock = file_lock.acquire(path, in_use="", advice="")
    except file_lock.LockHeld:
        return False
    lock.release()
    return True


def _queue_again(study: Any, trials: list[Any], workdir: str, journal: bool) -> None:
    """Queues again (Optuna's retry callback) each trial whose worker is gone: on a journal
    file a RUNNING trial whose lock holder is gone (then failed first, as Optuna's heartbeat
    does on a database); on any storage a FAIL without a reason of ours."""
    optuna = optuna_module()
    states = optuna.trial.TrialState
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)
    for trial in results.live_trials(trials):
        if journal and trial.state == states.RUNNING and _holder_is_gone(workdir, trial):
            # What optuna.storages.fail_stale_trials does to a database's stale trial.
            study._storage.set_trial_state_values(trial._trial_id, state=states.FAIL)
            print(f"trial {trial.number}: its worker is gone; queued again to resume in "
                  f"{TRIALS_SUBDIR}/{folder_number(trial)}", flush=True)
        elif not (trial.state == states.FAIL and "failure" not in trial.user_attrs):
            continue
        retry(study, study._storage.get_trial(trial._trial_id))


# --- Workers ------------------------------------------------------------------------------------

class _Section:
    """W/sweep.lock held (journal storage) from before a worker asks for a trial until it holds
    the trial's lock: no other worker judges a trial stale in between. Released by the kernel
    if the worker dies. On a database, nothing: Optuna's heartbeat finds stale trials."""

    def __init__(self, workdir: str, journal: bool) -> None:
        self._file = None
        if journal:
            self._file = open(os.path.join(workdir, SECTION_LOCK_FILE), "a")  # noqa: SIM115
            fcntl.flock(self._file, fcntl.LOCK_EX)

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing releases the lock
            self._file = None


@contextlib.contextmanager
def _section(workdir: str, journal: bool) -> Iterator[_Section]:
    section = _Section(workdir, journal)
    try:
        yield section
    finally:
        section.release()


def _take_trial_lock(path: epath.Path, journal: bool) -> file_lock.FileLock:
    """The trial's lock. On a database, the lock of a worker on another machine that Optuna
    found stale may not be stale to file_lock yet (its own, longer wait): waited for."""
    deadline = time.monotonic() + (0 if journal else file_lock.STALE_AFTER_SECONDS * 2)
    while True:
        try:
            return file_lock.acquire(path, in_use=f"trial folder {path.parent} is in use",
                                     advice="Another worker runs this trial.")
        except file_lock.LockHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(file_lock.HEARTBEAT_SECONDS)


def _objective(plan: SweepPlan, config_args: list[str], workdir: str, journal: bool,
               section: _Section) -> Callable[[Any], float]:
    optuna = optuna_module()

    def objective(trial: Any) -> float:
        params = {dimension.key: dimension.suggest(trial) for dimension in plan.dimensions}
        if plan.trial_per_seed:
            params[plan_lib.SEED] = trial.suggest_categorical(plan_lib.SEED, list(plan.seeds))
        trials = trial.study.get_trials(deepcopy=False)
        frozen = next(other for other in trials if other.number == trial.number)
        grid_id = frozen.system_attrs.get("grid_id")
        if grid_id is not None and any(
                other.system_attrs.get("grid_id") == grid_id and other.number != trial.number
                and other.state != optuna.trial.TrialState.WAITING
                for other in results.live_trials(trials)):
            # Two machines asked for the last grid point at once: the other one runs it.
            trial.set_user_attr("duplicate", True)
            raise trial_lib.TrialFailed(f"grid point {grid_id} is another trial's")
        number = folder_number(frozen)
        folder = trial_folder(workdir, number)
        folder.mkdir(parents=True, exist_ok=True)
        lock = _take_trial_lock(folder / TRIAL_LOCK_FILE, journal)
        section.release()
        values = ", ".join(f"{key}={value}" for key, value in params.items())
        print(f"trial {trial.number} ({values}) in {TRIALS_SUBDIR}/{number}", flush=True)
        try:
            trial.set_user_attr("folder", f"{TRIALS_SUBDIR}/{number}")
            runs = trial_lib.run_trial(trial, plan, config_args, params, folder, workdir)
        finally:
            lock.release()
        value = results.objective_value(plan, [run["value"] for run in runs])
        print(f"trial {trial.number} ({values}): dev {plan.metric} {value:.4f}", flush=True)
        return value

    return objective


def work(plan: SweepPlan, config_args: list[str], workdir: str) -> None:
    """One worker: trials until none is left to start or running (while others' trials run it
    waits, to run again any that turns stale)."""
    optuna = optuna_module()
    storage = open_storage(plan, workdir)
    journal = not plan.storage
    study = load_study(plan, storage)
    while True:
        with _section(workdir, journal) as section:
            trials = study.get_trials(deepcopy=False)
            _queue_again(study, trials, workdir, journal)
            can_start, running = _open_work(plan, study.get_trials(deepcopy=False))
            if can_start:
                study.optimize(_objective(plan, config_args, workdir, journal, section),
                               n_trials=1, catch=(trial_lib.TrialFailed,))
                continue
        if running == 0:
            return
        time.sleep(POLL_SECONDS)
        if not journal:
            optuna.storages.fail_stale_trials(study)


def visible_gpus() -> list[str]:
    """The NVIDIA GPUs this process may use: CUDA_VISIBLE_DEVICES where it is set, else the
    machine's /dev/nvidia<N> devices (found without starting a JAX backend)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [device.strip() for device in listed.split(",") if device.strip()]
    numbers = [int(match.group(1)) for name in sorted(os.listdir("/dev")) if
               (match := re.fullmatch(r"nvidia(\d+)", name))] if os.path.isdir("/dev") else []
    return [str(number) for number in sorted(numbers)]


def gpu_shares(workers: int, gpus: list[str]) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES of each of `workers` workers: the GPUs dealt out in equal,
    consecutive shares (8 GPUs, 4 workers: "0,1", "2,3", ...), so that no two workers' trials
    allocate memory on one GPU; None each on a machine without GPUs (CPU, TPU: one worker a
    host there, docs/sweeps.md). More workers than GPUs: a ConfigError, nothing started."""
    if not gpus:
        return [None] * workers
    if workers > len(gpus):
        raise ConfigError(f"--workers={workers} is more than the {len(gpus)} GPU(s) visible here "
                          f"({','.join(gpus)}): give at most --workers={len(gpus)}, one GPU or "
                          "more for each worker")
    share = len(gpus) // workers
    return [",".join(gpus[index * share:(index + 1) * share]) for index in range(workers)]


def _worker_process(plan: SweepPlan, config_args: list[str], workdir: str,
                    gpus: str | None) -> None:
    """A worker of `--workers=N`, in a process of its own that ends with the sweep command; its
    trials' runs see only its share of the GPUs."""
    trial_lib.die_with_parent()
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    work(plan, config_args, workdir)


def _run_workers(plan: SweepPlan, config_args: list[str], workdir: str, workers: int,
                 shares: list[str | None]) -> int:
    """`workers` worker processes until each ends; returns how many ended with an error."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_worker_process,
                                 args=(plan, config_args, workdir, shares[index]))
                 for index in range(workers)]
    for process in processes:
        process.start()
    running = list(processes)
    while running:
        # Each worker is joined as soon as it ends: a killed one must not linger as a zombie,
        # whose pid would still look alive to the others' check of its trial lock.
        ended = multiprocessing.connection.wait([process.sentinel for process in running])
        for process in [process for process in running if process.sentinel in ended]:
            process.join()
            running.remove(process)
    return sum(process.exitcode != 0 for process in processes)


def run_sweep(config: ml_collections.ConfigDict, config_args: list[str], workdir: str,
              workers: int) -> None:
    """`albert-jax sweep`: every setting and the storage checked (nothing is started on bad
    input), the study created or joined, `workers` workers here until no trial is left, then
    the results (results.py, pictures.py) from everything the study holds."""
    plan = plan_lib.read_plan(config)
    shares: list[str | None] = gpu_shares(workers, visible_gpus()) if workers > 1 else [None]
    storage = open_storage(plan, workdir)
    _check_record(plan, workdir)
    load_study(plan, storage)
    print(f"Sweep {plan.study_name}: {plan.trials} configuration(s) x {len(plan.seeds)} "
          f"seed(s), sampler {plan.sampler}, pruner {plan.pruner}, dev {plan.metric}; "
          f"{workers} worker(s) here, trials in {epath.Path(workdir) / TRIALS_SUBDIR}.",
          flush=True)
    failed = 0
    if workers == 1:
        work(plan, config_args, workdir)
    else:
        failed = _run_workers(plan, config_args, workdir, workers, shares)
    study = load_study(plan, storage)
    for path in results.write_results(plan, study.get_trials(deepcopy=False), workdir):
        print(f"wrote {path}", flush=True)
    if failed:
        raise SweepStopped(f"{failed} of {workers} workers stopped with an error (see above); "
                           "rerun the same command to finish what they left")
