"""Checkpointer (state, data iterator, config); load, save_weights, init_from (8 CPU devices)."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")

import importlib.util  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402

import grain  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from albert_jax import config as config_lib  # noqa: E402
from albert_jax import pretraining  # noqa: E402
from albert_jax.model import AlbertForPreTraining, AlbertForSequenceClassification, get_config  # noqa: E402
from albert_jax.train import checkpoint, optim, sharding  # noqa: E402
from albert_jax.train import state as state_lib

SEQ_LEN, MAX_PREDICTIONS = 16, 3
REPO = pathlib.Path(__file__).resolve().parents[1]


def run_config():
    """The real pretraining config, shrunk to the tiny model."""
    spec = importlib.util.spec_from_file_location("pretrain_config", REPO / "configs/pretrain.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("model=tiny")
    config.seq_len = SEQ_LEN
    config.data.vocab_size = 128
    config.data.max_predictions = MAX_PREDICTIONS
    return config


def mesh_of(data, fsdp, tensor):
    return sharding.make_mesh(ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor)))


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    ids = jnp.asarray(rng.integers(0, 128, (2, SEQ_LEN)), jnp.int32)
    return (ids, jnp.zeros_like(ids), jnp.ones_like(ids),
            jnp.asarray(rng.integers(0, SEQ_LEN, (2, MAX_PREDICTIONS)), jnp.int32))


def trained_state(mesh, model, optimizer):
    """A state whose moments and step are not their init values: two LAMB updates."""
    state = state_lib.init_train_state(model, optimizer, mesh, jax.random.key(0),
                                       pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))

    @jax.jit
    def step(state):
        grads = jax.tree.map(lambda p: 0.1 * p + 0.01, state.params)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                             opt_state=opt_state)

    return step(step(state))


def data_iterator():
    return iter(grain.MapDataset.range(100).shuffle(seed=7).batch(4).to_iter_dataset())


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A workdir with one checkpoint (step 2) of a tiny pretraining run, saved from an (8, 1, 1)
    mesh, and what was saved: (workdir, config, model, optimizer, state, next batches)."""
    config = run_config()
    model = AlbertForPreTraining(config_lib.model_config(config))
    optimizer, _ = optim.make_optimizer(config.optim, total_steps=100)
    state = trained_state(mesh_of(8, 1, 1), model, optimizer)
    assert int(state.step) == 2
    assert float(jnp.abs(state.opt_state[1][0].mu["predictions"]["output_bias"]).sum()) > 0
    iterator = data_iterator()
    for _ in range(3):
        next(iterator)
    workdir = tmp_path_factory.mktemp("run")
    checkpointer = checkpoint.Checkpointer(workdir / "checkpoints", max_to_keep=3)
    assert checkpointer.latest_step() is None
    assert checkpointer.save(2, state, iterator, config_lib.to_json(config))
    checkpointer.wait_until_finished()
    continued = [next(iterator).tolist() for _ in range(4)]
    checkpointer.close()
    return workdir, config, model, optimizer, state, continued


def assert_trees_identical(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for left, right in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        assert left.dtype == right.dtype
        np.testing.assert_array_equal(np.asarray(left), np.asarray(right))


def test_round_trip_state_data_and_config(saved_run):
    workdir, config, model, optimizer, state, continued = saved_run
    assert (workdir / "checkpoints/2/state").is_dir()
    abstract, _ = state_lib.abstract_train_state(model, optimizer, mesh_of(8, 1, 1),
                                                 pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))
    reopened = checkpoint.Checkpointer(workdir / "checkpoints", max_to_keep=3)
    assert reopened.latest_step() == 2
    fresh_iterator = data_iterator()
    restored, saved_config = reopened.restore(2, abstract, fresh_iterator)
    reopened.close()
    assert isinstance(restored, state_lib.TrainState)
    assert_trees_identical(restored, state)
    assert saved_config == json.loads(config_lib.to_json(config))
    # The restored iterator continues exactly where the saved one was.
    assert [next(fresh_iterator).tolist() for _ in range(4)] == continued


def test_restore_onto_a_different_mesh(saved_run):
    workdir, _, model, optimizer, state, _ = saved_run
    abstract, shardings = state_lib.abstract_train_state(
        model, optimizer, mesh_of(2, 2, 2), pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))
    checkpointer = checkpoint.Checkpointer(workdir / "checkpoints", read_only=True)
    restored, _ = checkpointer.restore(None, abstract)
    checkpointer.close()
    assert_trees_identical(restored, state)
    for leaf, leaf_sharding in zip(jax.tree.leaves(restored), jax.tree.leaves(shardings)):
        assert leaf.sharding == leaf_sharding
    query = restored.params["albert"]["encoder"]["group_0"]["inner_group_0"]["attention"]["query"]
    assert query["kernel"].sharding.spec == P("fsdp", "tensor")


@pytest.mark.slow
def test_a_two_slice_checkpoint_restores_on_one_slice_and_back(tmp_path, saved_run):
    """A run on 2 slices (data=4 over them, fsdp=2 inside each; 8 CPU devices as 2 slices of 4)
    loses a slice and resumes on one (data=2, fsdp=4), then goes back to 2: bit-identical."""
    _, config, model, optimizer, trained, _ = saved_run
    init_inputs = pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS)
    two_slices = sharding.make_mesh(ml_collections.ConfigDict(
        dict(data=4, fsdp=2, tensor=1, num_slices=2, dcn_data=2, dcn_fsdp=1)))
    one_slice = mesh_of(2, 4, 1)
    abstract, shardings = state_lib.abstract_train_state(model, optimizer, two_slices,
                                                         init_inputs)
    # The module's trained state, laid out as the two-slice run holds it.
    state = jax.device_put(trained, shardings)
    checkpointer = checkpoint.Checkpointer(tmp_path, max_to_keep=3)
    assert checkpointer.save(2, state, None, config_lib.to_json(config))
    checkpointer.wait_until_finished()
    on_one, _ = checkpointer.restore(2, state_lib.abstract_train_state(
        model, optimizer, one_slice, init_inputs)[0])
    assert_trees_identical(on_one, state)
    assert checkpointer.save(3, on_one, None, config_lib.to_json(config))
    checkpointer.wait_until_finished()
    back, _ = checkpointer.restore(3, abstract)
    checkpointer.close()
    assert_trees_identical(back, state)
    for leaf, leaf_sharding in zip(jax.tree.leaves(back), jax.tree.leaves(shardings)):
        assert leaf.sharding == leaf_sharding


def test_restore_into_a_changed_run_names_the_differences(saved_run):
    workdir, config, model, _, _, _ = saved_run
    optim_config = ml_collections.ConfigDict(config.optim.to_dict())
    optim_config.name = "adamw"  # no trust-ratio stage: the optimizer state has one entry less
    adamw, _ = optim.make_optimizer(optim_config, total_steps=100)
    abstract, _ = state_lib.abstract_train_state(model, adamw, mesh_of(8, 1, 1),
                                                 pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))
    checkpointer = checkpoint.Checkpointer(workdir / "checkpoints", read_only=True)
    with pytest.raises(ValueError) as error:
        checkpointer.restore(2, abstract)
    checkpointer.close()
    message = str(error.value)
    assert "the checkpoint for step 2" in message and "does not fit" in message
    assert "in the checkpoint only: opt_state/1/3/count" in message
    assert "missing in the checkpoint: opt_state/1/2/count" in message
    assert "config.init_from" in message


def small_state(value):
    params = {"dense": {"kernel": jnp.full((2, 2), value, jnp.float32)}}
    return state_lib.TrainState(step=jnp.int32(value), params=params,
                                opt_state=optim.lamb(0.1).init(params))


def test_max_to_keep_interval_and_existing_step(tmp_path):
    checkpointer = checkpoint.Checkpointer(tmp_path, max_to_keep=2, save_interval_steps=2)
    assert checkpointer.save(1, small_state(1), None, "{}")  # the first save always writes
    assert not checkpointer.save(3, small_state(3), None, "{}")  # off the interval
    for step in (2, 4, 6):
        assert checkpointer.save(step, small_state(step), None, "{}")
    assert checkpointer.save(7, small_state(7), None, "{}", force=True)
    checkpointer.wait_until_finished()
    assert checkpointer.all_steps() == [6, 7]
    assert not (tmp_path / "1").exists() and not (tmp_path / "4").exists()
    assert not checkpointer.save(7, small_state(8), None, "{}", force=True)  # never overwritten
    restored, _ = checkpointer.restore(7, jax.eval_shape(lambda: small_state(7)))
    checkpointer.close()
    assert int(restored.step) == 7


def test_interrupted_write_is_never_the_latest(tmp_path):
    checkpointer = checkpoint.Checkpointer(tmp_path)
    checkpointer.save(1, small_state(1), None, "{}", force=True)
    checkpointer.close()
    # What a write of step 5 killed before its atomic rename leaves behind.
    leftover = tmp_path / "5.orbax-checkpoint-tmp"
    shutil.copytree(tmp_path / "1", leftover)
    (leftover / "state" / "manifest.ocdbt").unlink(missing_ok=True)

    reopened = checkpoint.Checkpointer(tmp_path)
    assert reopened.latest_step() == 1
    assert reopened.all_steps() == [1]
    restored, _ = reopened.restore(None, jax.eval_shape(lambda: small_state(1)))
    assert int(restored.step) == 1
    assert reopened.save(2, small_state(2), None, "{}", force=True)
    reopened.wait_until_finished()
    assert reopened.latest_step() == 2
    assert not leftover.exists()  # a writable Checkpointer clears what a killed write left
    reopened.close()


def test_load_returns_model_config_and_params_that_apply(saved_run):
    workdir, config, model, _, state, _ = saved_run
    apply = jax.jit(model.apply)  # one compile for both parameter sets
    expected = apply({"params": state.params}, *inputs(1))
    for path in (workdir, workdir / "checkpoints", workdir / "checkpoints" / "2"):
        model_config, params = checkpoint.load(str(path))
        assert model_config.to_dict() == config_lib.model_config(config).to_dict()
        assert_trees_identical(params, state.params)
        assert {leaf.sharding for leaf in jax.tree.leaves(params)} == {
            jax.sharding.SingleDeviceSharding(jax.local_devices()[0])}
    assert AlbertForPreTraining(model_config) == model
    outputs = apply({"params": params}, *inputs(1))
    for output, want in zip(outputs, expected):
        np.testing.assert_array_equal(np.asarray(output), np.asarray(want))

    _, sharded = checkpoint.load(str(workdir), step=2, mesh=mesh_of(2, 2, 2))
    assert sharded["albert"]["pooler"]["kernel"].sharding.spec == P("fsdp", None)
    assert_trees_identical(sharded, state.params)


def test_save_weights_load_and_init_from(tmp_path, saved_run):
    _, config, model, optimizer, state, _ = saved_run
    model_config = config_lib.model_config(config)
    checkpoint.save_weights(str(tmp_path / "weights"), model_config, state.params)
    assert (tmp_path / "weights/checkpoints/0/state").is_dir()

    loaded_config, loaded = checkpoint.load(str(tmp_path / "weights"))
    assert loaded_config.to_dict() == model_config.to_dict()
    assert_trees_identical(loaded, state.params)

    abstract, _ = state_lib.abstract_train_state(model, optimizer, mesh_of(2, 2, 2),
                                                 pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))
    initialised = checkpoint.load_params_for_init(str(tmp_path / "weights"), abstract.params)
    assert_trees_identical(initialised, state.params)
    for leaf, target in zip(jax.tree.leaves(initialised), jax.tree.leaves(abstract.params)):
        assert leaf.sharding == target.sharding
    # A subtree (the backbone only, as fine-tuning takes it) reads only that subtree.
    backbone = checkpoint.load_params_for_init(str(tmp_path / "weights"),
                                               {"albert": abstract.params["albert"]})
    assert_trees_identical(backbone, {"albert": state.params["albert"]})

    with pytest.raises(FileExistsError, match="already holds checkpoints"):
        checkpoint.save_weights(str(tmp_path / "weights"), model_config, state.params)


def test_init_from_lists_missing_and_mismatched(saved_run):
    workdir = saved_run[0]
    wider = get_config("tiny", hidden_size=48, vocab_size=128)
    classifier = AlbertForSequenceClassification(wider, num_labels=3)
    target = sharding.unbox(state_lib.boxed_abstract_params(classifier, (jnp.zeros((1, SEQ_LEN), jnp.int32),) * 3))
    with pytest.raises(ValueError) as error:
        checkpoint.load_params_for_init(str(workdir), target)
    message = str(error.value)
    assert "(step 2) does not fit the model" in message
    assert "missing in the checkpoint: classifier/dense/kernel" in message
    assert "shape mismatch: albert/pooler/kernel: checkpoint (32, 32), model (48, 48)" in message
    assert "word_embeddings" not in message  # same shape [128, 16]: fits


def test_errors_name_path_and_steps(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        checkpoint.load(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoint found at .*empty"):
        checkpoint.load(str(tmp_path / "empty"))

    checkpointer = checkpoint.Checkpointer(tmp_path / "run")
    for step in (3, 5):
        checkpointer.save(step, small_state(step), None, "{}", force=True)
    checkpointer.wait_until_finished()
    abstract = jax.eval_shape(lambda: small_state(3))
    with pytest.raises(FileNotFoundError,
                       match=r"no checkpoint for step 4 .*available steps: \[3, 5\]"):
        checkpointer.restore(4, abstract)
    with pytest.raises(FileNotFoundError, match="holds no data iterator state"):
        checkpointer.restore(5, abstract, data_iterator())
    checkpointer.close()
    with pytest.raises(FileNotFoundError, match=r"available steps: \[3, 5\]"):
        checkpoint.load(str(tmp_path / "run"), step=9)
