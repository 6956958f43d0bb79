"""Orbax checkpoints of a run: train state + data iterator + config; weights-only load and save.

Layout: `<workdir>/checkpoints/<step>/{state,data,config}`:
  state   the TrainState pytree (step, params, opt_state), one tensorstore array per leaf
  data    the grain iterator state, one JSON file per process (grain's Orbax handler), each the
          same position in the global batch stream: a run resumes on any process count
  config  the run config as JSON, with the loop's state beside the data position: the best
          evaluation and the open log interval's metric sums (train/loop.py
          `_checkpoint_record`); for a weights-only checkpoint: {"model_config": {...}}

Restore modes: resume (`Checkpointer.restore`: everything, onto the mesh that the
abstract target's shardings name, which need not be the mesh that saved it); `init_from`
(`load_params_for_init`: params only, fresh optimizer); weights for inference, evaluation or
conversion (`load`: params only, one device or a given mesh).

A checkpoint is written into `<step>.orbax-checkpoint-tmp` and renamed to `<step>` only once
complete (Orbax's atomic finalize; on object stores a `commit_success.txt` marks it complete), so
a write killed half way is never listed as a step; a new manager removes such leftovers.

Integrity (train/integrity.py): every step holds `checksums.json`, written inside Orbax's commit.
`newest_intact_step` checks steps newest first; a damaged one is reported in one line and moved
aside to `<directory>/damaged/<step>-<time>` (never deleted; Orbax no longer lists it), and the
newest intact one is used. A save that fails (full disk, permission denied) raises
CheckpointWriteFailed at the next save or wait; the checkpoints already there are untouched
(Orbax removes old steps beyond max_to_keep only after a new one is committed).
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable

import grain
import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from albert_jax import config as config_lib
from albert_jax.model import ModelConfig, abstract_backbone_params, presets
from albert_jax.train import integrity, sharding, tree_names
from albert_jax.train import workdir as workdir_names

STATE, DATA, CONFIG = "state", "data", "config"
_ORBAX_TMP_SUFFIX = ".orbax-checkpoint-tmp"  # Orbax's name of a step being written


class CheckpointDamaged(ValueError):
    """No intact checkpoint where one is needed; the message names the damaged files."""


class CheckpointWriteFailed(OSError):
    """A checkpoint could not be written (full disk, permission denied); the run must stop."""


class _NoOrbaxTracebacks(logging.Filter):
    """Orbax logs a failed background write with its traceback, twice; CheckpointWriteFailed
    reports it in one line (its cause keeps the traceback: ALBERT_JAX_TRACEBACK=1 shows it).
    Orbax's message lines stay, but for its notice that a read-only checkpoint is read-only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}orbax{os.sep}" not in record.pathname:
            return True
        if record.exc_info:
            record.exc_info = record.exc_text = None
        # `checkpoint verify` and `load` open checkpoints read-only on purpose: not news.
        return not record.getMessage().startswith("Given directory is read only")


logging.getLogger("absl").addFilter(_NoOrbaxTracebacks())  # Orbax logs through absl


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _agreed_on_process_0(compute: Callable[[], int], failure: str) -> int:
    """compute() run on process 0 only, its result on every process.

    Checking checksums reads every byte of a checkpoint: on a multi-host job process 0 does it
    once (and moves damaged steps aside) instead of every host. A CheckpointDamaged raised on
    process 0 is raised on every process (`failure` is the others' message).
    """
    if jax.process_count() == 1:
        return compute()
    value, error = -2, None
    if jax.process_index() == 0:
        try:
            value = compute()
        except CheckpointDamaged as raised:
            error = raised
    value = int(multihost_utils.broadcast_one_to_all(np.int32(value)))
    if error is not None:
        raise error
    if value == -2:
        raise CheckpointDamaged(failure)
    return value


def _item_handlers() -> dict[str, Any]:
    return {STATE: ocp.PyTreeCheckpointHandler(), DATA: grain.checkpoint.CheckpointHandler(),
            CONFIG: ocp.JsonCheckpointHandler()}


def _restore_args(abstract_tree: Any) -> Any:
    """Orbax restore args that place every leaf with its ShapeDtypeStruct's sharding."""
    return ocp.checkpoint_utils.construct_restore_args(abstract_tree)


def _flat(tree: Any) -> dict[str, Any]:
    """{"a/b/c": leaf}: a TrainState and Orbax's saved metadata tree of it get the same names."""
    return tree_names.named_leaves(tree)


def _mismatches(saved: Any, wanted: Any, extra_allowed: bool) -> list[str]:
    """Lines naming each leaf of `wanted` absent from `saved` or of another shape, and (unless
    `extra_allowed`) each saved leaf that `wanted` lacks."""
    saved, wanted = _flat(saved), _flat(wanted)
    lines = [f"  missing in the checkpoint: {name}"
             for name in sorted(wanted.keys() - saved.keys())]
    if not extra_allowed:
        lines += [f"  in the checkpoint only: {name}"
                  for name in sorted(saved.keys() - wanted.keys())]
    lines += [f"  shape mismatch: {name}: checkpoint {tuple(saved[name].shape)}, model "
              f"{tuple(leaf.shape)}" for name, leaf in sorted(wanted.items())
              if name in saved and tuple(saved[name].shape) != tuple(leaf.shape)]
    return lines


def _saved_data_position(data_dir: epath.Path) -> dict[str, Any]:
    """The train iterator's state saved in `data_dir`, for this process, at any process count.

    Each saving process wrote its iterator's state as `process_<i>-of-<n>.json` (grain's Orbax
    handler). Every train iterator of this project comes from `pipeline.make_dataset`: one global
    stream of batches of which each process reads its rows, so the state is the position in
    that global stream, the same in every file and for any n (tests/test_multihost.py compares
    a 2-process run's files with a 1-process run's). A run resumed on the n that saved reads its
    own file; on another count, each process reads the saved files, which must agree, and goes
    on with the global batches an uninterrupted run would have seen.
    """
    if not data_dir.exists():
        raise FileNotFoundError(f"the checkpoint in {data_dir.parent} holds no data iterator "
                                "state (it was saved without one)")
    process, count = jax.process_index(), jax.process_count()
    own = data_dir / f"process_{process}-of-{count}.json"
    if own.exists():
        return json.loads(own.read_text())
    saved = {path.name: json.loads(path.read_text())
             for path in sorted(data_dir.glob("process_*-of-*.json"))}
    if not saved:
        raise FileNotFoundError(f"{data_dir} holds no process_<i>-of-<n>.json data iterator "
                                "state; restore the checkpoint from a copy")
    saved_count = int(next(iter(saved)).rsplit("-of-", 1)[1].removesuffix(".json"))
    if any(state != next(iter(saved.values())) for state in saved.values()):
        raise ValueError(
            f"the data iterator states in {data_dir} differ between the {saved_count} processes "
            f"that saved them ({', '.join(saved)}), so a run with process count {count} cannot "
            f"continue their data order: resume this checkpoint with process count {saved_count}")
    if process == 0:
        print(f"Data position: saved with process count {saved_count}, restored with {count}: "
              "every process saved the same position in the global batch stream, so the run "
              "goes on with the batches an uninterrupted run would see.", flush=True)
    return next(iter(saved.values()))


def _absolute(path: str | epath.Path) -> epath.Path:
    """Orbax needs absolute paths: a relative local path is taken from the current directory."""
    path = epath.Path(path)
    return path if "://" in str(path) else epath.Path(os.path.abspath(path))


class Checkpointer:
    """The checkpoints of one run, in `directory` (`<workdir>/checkpoints`)."""

    def __init__(self, directory: str | epath.Path, *, max_to_keep: int | None = None,
                 save_interval_steps: int = 1, async_save: bool = True,
                 read_only: bool = False):
        """max_to_keep: newest checkpoints kept (None: all); save_interval_steps: `save`
        without `force` writes only on multiples of it; async_save: write in a background
        thread after the arrays are copied to host (the step can go on); read_only: never
        create, write or delete anything."""
        self.directory = _absolute(directory)
        self.read_only = read_only
        self._async_save = async_save
        self._saving_step: int | None = None
        # Always Orbax's async path, whose post-finalization callback writes the checksums
        # inside the commit; a synchronous save waits for it (`save`).
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, save_interval_steps=0 if read_only else save_interval_steps,
            enable_async_checkpointing=True, create=not read_only, read_only=read_only,
            cleanup_tmp_directories=not read_only,
            async_options=ocp.AsyncOptions(post_finalization_callback=self._write_checksums))
        self._manager = ocp.CheckpointManager(self.directory, options=options,
                                              item_names=(STATE, DATA, CONFIG),
                                              item_handlers=_item_handlers())

    def all_steps(self) -> list[int]:
        """The steps of every complete checkpoint, ascending."""
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, or None if there is none."""
        return self._manager.latest_step()

    def save(self, step: int, state: Any, data_iterator: Any, config_json: str,
             force: bool = False) -> bool:
        """Saves (state, data iterator state, config) as step `step`; returns whether it did.

        Without `force`, only steps on the save interval, and the first save of a run, are
        written, and never a step at or before the latest checkpoint. The iterator's state is
        taken now, synchronously; `data_iterator` may be None (nothing saved for it). A step
        that already has a checkpoint is left as it is (returns False).

        Raises CheckpointWriteFailed if this save, or the previous async one, failed.
        """
        self.wait_until_finished()  # the previous save is committed: `_saving_step` is free
        if step in self._manager.all_steps():
            logging.warning("a checkpoint for step %d already exists in %s; not overwriting it",
                            step, self.directory)
            return False
        items = {STATE: ocp.args.PyTreeSave(state),
                 CONFIG: ocp.args.JsonSave(json.loads(config_json))}
        if data_iterator is not None:
            items[DATA] = grain.checkpoint.CheckpointSave(data_iterator)
        self._saving_step = step
        try:
            saved = self._manager.save(step, args=ocp.args.Composite(**items), force=force,
                                       custom_metadata=integrity.CUSTOM_METADATA)
        except Exception as error:  # the synchronous part: directories, copies to host
            raise self._write_failed(error) from error
        if saved and not self._async_save:
            self.wait_until_finished()
        return saved

    def _write_checksums(self) -> None:
        """Orbax's post-finalization callback (process 0, Orbax's background thread): every
        process's files of the step are written and finalised, and not yet committed."""
        step = self._saving_step
        pending = sorted(self.directory.glob(f"{step}{_ORBAX_TMP_SUFFIX}*"))
        # Object stores commit in place: the step directory is already <step>.
        integrity.write(pending[0] if pending else self.directory / str(step))

    def _write_failed(self, error: BaseException) -> CheckpointWriteFailed:
        self._manager.reload()  # what is on disk now
        steps = self._manager.all_steps()
        kept = (f"the checkpoints already there are untouched (newest: step {max(steps)})"
                if steps else "there is no earlier checkpoint")
        return CheckpointWriteFailed(
            f"could not write the checkpoint of step {self._saving_step} in {self.directory}: "
            f"{_first_line(error)}. Training stopped; {kept}. Free disk space or fix the "
            "permissions, then rerun the same command to resume.")

    def check(self, step: int) -> str | None:
        """Why checkpoint `step` is damaged, naming the file; None if intact."""
        return integrity.problem(self.directory / str(step))

    def move_aside(self, step: int) -> epath.Path:
        """Moves checkpoint `step` to `<directory>/damaged/<step>-<UTC time>` (never deletes
        it); Orbax no longer lists it. Returns where it went."""
        target = integrity.move_aside(self.directory / str(step))
        self._manager.reload()
        return target

    def newest_intact_step(self, *, stop_if_all_damaged: bool = True) -> int | None:
        """The newest checkpoint whose files match their checksums; None if there is none.

        Each newer damaged checkpoint is reported in one line and moved aside (a read-only
        Checkpointer only skips it). When every checkpoint is damaged: with
        `stop_if_all_damaged`, CheckpointDamaged and nothing is moved (a run must not start
        afresh and write over them); without, all are moved aside and None is returned.
        """
        def compute() -> int:
            damaged, intact = [], None
            for step in reversed(self.all_steps()):
                reason = self.check(step)
                if reason is None:
                    intact = step
                    break
                damaged.append((step, reason))
            if intact is None and damaged and stop_if_all_damaged:
                details = "; ".join(f"step {step}: {reason}" for step, reason in damaged)
                raise CheckpointDamaged(
                    f"no intact checkpoint in {self.directory} ({details}). Nothing was moved. "
                    "Restore the checkpoints from a copy, or move the directory away to start "
                    "afresh (`albert-jax checkpoint verify --workdir=...` lists them)")
            for step, reason in damaged:
                if self.read_only:
                    logging.warning("checkpoint %s/%d is damaged (%s); skipping it",
                                    self.directory, step, reason)
                else:
                    logging.warning("checkpoint %s/%d is damaged (%s); moved it to %s",
                                    self.directory, step, reason, self.move_aside(step))
            if damaged and intact is not None:
                logging.warning("using step %d, the newest intact checkpoint in %s", intact,
                                self.directory)
            return -1 if intact is None else intact

        step = _agreed_on_process_0(
            compute, f"no intact checkpoint in {self.directory}; process 0's log names them")
        if jax.process_count() > 1:
            self._manager.reload()  # process 0 may have moved steps aside
        return None if step == -1 else step

    def resolve_step(self, step: int | None) -> int:
        """`step` if it has a checkpoint, the latest if None; else a clear error."""
        steps = self.all_steps()
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        if step is None:
            return steps[-1]
        if step not in steps:
            raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory}; "
                                    f"available steps: {steps}")
        return step

    def restore(self, step: int | None, abstract_state: Any,
                data_iterator: Any = None) -> tuple[Any, dict[str, Any]]:
        """(state, config dict) of checkpoint `step` (None: the latest).

        `abstract_state` is the target: a tree of jax.ShapeDtypeStruct whose `.sharding` says
        where each restored array goes (state.abstract_train_state), so a checkpoint saved on
        one mesh restores onto another. `data_iterator`, if given, is set to the saved position,
        whatever the number of processes that saved it (`_saved_data_position`).
        """
        step = self.resolve_step(step)
        problems = _mismatches(self._manager.item_metadata(step)[STATE].tree, abstract_state,
                               extra_allowed=False)
        if problems:
            raise ValueError("\n".join(
                [f"the checkpoint for step {step} in {self.directory} does not fit this run's "
                 "train state:", *problems,
                 "the model or optimizer config changed since it was saved: restore with the "
                 "saved config, or start a new workdir with config.init_from=<this checkpoint> "
                 "(weights only, fresh optimizer)"]))
        # The data position first: a checkpoint without one fails before the arrays are read.
        position = (None if data_iterator is None
                    else _saved_data_position(self.directory / str(step) / DATA))
        restored = self._manager.restore(step, args=ocp.args.Composite(**{
            STATE: ocp.args.PyTreeRestore(abstract_state,
                                          restore_args=_restore_args(abstract_state)),
            CONFIG: ocp.args.JsonRestore()}))
        if data_iterator is not None:
            data_iterator.set_state(position)
            data_iterator.start_prefetch()  # as grain's own restore does
        return restored[STATE], restored[CONFIG]

    def restore_config(self, step: int | None = None) -> dict[str, Any]:
        """The config saved with checkpoint `step` (None: the latest)."""
        step = self.resolve_step(step)
        return self._manager.restore(step, args=ocp.args.Composite(
            **{CONFIG: ocp.args.JsonRestore()}))[CONFIG]

    def saved_params(self, step: int) -> Any:
        """The saved params' tree of Orbax ArrayMetadata (shape, dtype), read from disk."""
        return self._manager.item_metadata(step)[STATE].tree["params"]

    def restore_params(self, step: int, abstract_params: Any) -> Any:
        """Only the params (Orbax partial restore: the optimizer state is not read).

        `abstract_params` may be any subtree of the saved params, e.g. the backbone only.
        """
        target = {"params": abstract_params}
        restored = self._manager.restore(step, args=ocp.args.Composite(**{
            STATE: ocp.args.PyTreeRestore(target, restore_args=_restore_args(target),
                                          partial_restore=True)}))
        return restored[STATE]["params"]

    def raise_if_save_failed(self) -> None:
        """CheckpointWriteFailed if an async save has finished and failed; never blocks."""
        if self._saving_step is not None and not self._manager.is_saving_in_progress():
            self.wait_until_finished()

    def wait_until_finished(self) -> None:
        """Blocks until every async save is committed; CheckpointWriteFailed if one failed."""
        try:
            self._manager.wait_until_finished()
        except Exception as error:
            raise self._write_failed(error) from error

    def close(self) -> None:
        """Waits for pending saves (CheckpointWriteFailed if one failed) and releases the
        manager's threads."""
        try:
            self.wait_until_finished()
        finally:
            self._manager.close()


# ---------------------------------------------------------------------------------------------
# Weights only: `load` (inference, evaluation, conversion), `save_weights`, `init_from`.


def _open(path: str | epath.Path, step: int | None) -> tuple[Checkpointer, int]:
    """A read-only Checkpointer and the step for `path`: a workdir (has checkpoints/), a
    checkpoints directory (has <step>/ folders) or one checkpoint folder (<step>/)."""
    path = epath.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint path {path} does not exist")
    if (path / workdir_names.CHECKPOINTS_SUBDIR).is_dir():
        directory = path / workdir_names.CHECKPOINTS_SUBDIR
    elif (path / STATE).is_dir() and path.name.isdigit():
        if step is not None and step != int(path.name):
            raise ValueError(f"{path} is the checkpoint of step {path.name}, not step {step}")
        directory, step = path.parent, int(path.name)
    else:
        directory = path
    checkpointer = Checkpointer(directory, read_only=True)
    if not checkpointer.all_steps():
        raise FileNotFoundError(
            f"no checkpoint found at {path}: expected a workdir with "
            f"{workdir_names.CHECKPOINTS_SUBDIR}/<step>/, "
            f"a directory of <step>/ checkpoints, or one <step>/ checkpoint folder")
    if step is None:
        newest = checkpointer.newest_intact_step()
        assert newest is not None  # there are checkpoints, and all of them damaged raises
        return checkpointer, newest
    step = checkpointer.resolve_step(step)

    def check() -> int:
        reason = checkpointer.check(step)
        if reason is not None:
            raise CheckpointDamaged(f"the checkpoint of step {step} in {directory} is damaged: "
                                    f"{reason}. Restore it from a copy, or train it again")
        return step

    return checkpointer, _agreed_on_process_0(
        check, f"the checkpoint of step {step} in {directory} is damaged; process 0's log "
        "says which file")


def _model_config(saved_config: dict[str, Any]) -> ModelConfig:
    """The model config from a saved config: a run config, or a weights-only record."""
    if "model_config" in saved_config:
        return presets.from_dict(saved_config["model_config"])
    return config_lib.model_config(ml_collections.ConfigDict(saved_config))


def _load_shardings(saved_params: Any, model_config: ModelConfig,
                    mesh: jax.sharding.Mesh | None) -> Any:
    """Where each loaded parameter goes: device 0, or on `mesh` by the logical-axis rules.

    The logical names come from the backbone's tree (`albert/...`); a parameter it does not
    have (a task head, small) is replicated.
    """
    if mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return jax.tree.map(lambda _: device, saved_params)
    boxed = {"albert": abstract_backbone_params(model_config)}
    boxes = tree_names.named_leaves(boxed, is_leaf=sharding.is_boxed)

    def placement(path: Any, metadata: Any) -> jax.sharding.NamedSharding:
        box = boxes.get(tree_names.path_name(path))
        if box is None or tuple(box.value.shape) != tuple(metadata.shape):
            return sharding.replicated(mesh)
        return jax.sharding.NamedSharding(mesh, sharding.partition_spec(box, mesh))

    return jax.tree_util.tree_map_with_path(placement, saved_params)


def load(path: str, step: int | None = None, *,
         mesh: jax.sharding.Mesh | None = None) -> tuple[ModelConfig, Any]:
    """(model config, params) of a run's checkpoint, for inference, evaluation or conversion.

    `path`: a workdir, its checkpoints directory, or one checkpoint folder; `step`: None for the
    latest. The model config is what `AlbertForPreTraining(config)` (or the task model the run
    trained) takes; params are the plain tree `model.apply({"params": params}, ...)` takes, on
    one device, or sharded on `mesh` by the logical-axis rules. The optimizer state is not read.
    """
    checkpointer, step = _open(path, step)
    try:
        model_config = _model_config(checkpointer.restore_config(step))
        saved = checkpointer.saved_params(step)
        shardings = _load_shardings(saved, model_config, mesh)
        abstract = jax.tree.map(lambda metadata, leaf_sharding: jax.ShapeDtypeStruct(
            metadata.shape, metadata.dtype, sharding=leaf_sharding), saved, shardings)
        params = checkpointer.restore_params(step, abstract)
    finally:
        checkpointer.close()
    return model_config, params


def save_weights(directory: str, model_config: ModelConfig, params: Any) -> None:
    """Writes a weights-only checkpoint (step 0) that `load` and `config.init_from` read.

    Layout: `<directory>/checkpoints/0/{state,config}`, state = {"step": 0, "params": params},
    config = {"model_config": <model config fields>}. Refuses a directory that already holds
    checkpoints (nothing is overwritten).
    """
    checkpoints = epath.Path(directory) / workdir_names.CHECKPOINTS_SUBDIR
    if checkpoints.exists() and any(checkpoints.iterdir()):
        raise FileExistsError(f"{checkpoints} already holds checkpoints; choose an empty "
                              "directory for the weights")
    params = jax.tree.map(jax.numpy.asarray, sharding.unbox(params))
    checkpointer = Checkpointer(checkpoints, async_save=False)
    try:
        record = json.dumps({"model_config": model_config.to_dict()})
        checkpointer.save(0, {"step": jax.numpy.int32(0), "params": params}, None, record,
                          force=True)
        checkpointer.wait_until_finished()
    finally:
        checkpointer.close()


def load_params_for_init(path: str, abstract_params: Any) -> Any:
    """The params of the checkpoint at `path` (latest step) for `config.init_from`.

    `abstract_params` is the target (ShapeDtypeStruct leaves carrying shardings, e.g.
    `abstract_train_state(...)[0].params`, or a subtree such as {"albert": ...} to take the
    backbone only). Every target parameter must be in the checkpoint with the same shape;
    saved parameters the target lacks (e.g. pretraining heads) are not read.
    """
    checkpointer, step = _open(path, None)
    try:
        problems = _mismatches(checkpointer.saved_params(step), abstract_params,
                               extra_allowed=True)
        if problems:
            raise ValueError("\n".join(
                [f"init_from={path} (step {step}) does not fit the model:", *problems,
                 "check the model config (preset and overrides) matches the run that saved "
                 "the checkpoint"]))
        return checkpointer.restore_params(step, abstract_params)
    finally:
        checkpointer.close()
