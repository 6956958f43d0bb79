"""The sharded train step computes the same losses on any mesh (8 fake CPU devices).

Every test here trains with one optimizer (LAMB, 20 steps of schedule) on batches of one shape
(16 x 16), so a step jitted for a mesh the module has already compiled for loads from the
persistent compilation cache (conftest.py) instead of compiling again.
"""
import jax
import ml_collections
import numpy as np
import pytest

from albert_jax import pretraining
from albert_jax.model import get_config
from albert_jax.train import optim, sharding
from albert_jax.train import state as state_lib
from albert_jax.train import step as step_lib
from configs import pretrain as pretrain_config
from test_step import pretraining_task, synthetic_batch

pytestmark = pytest.mark.slow  # the train step compiled 12 times (meshes, variants): 60 CPU-s

LAMB = ml_collections.ConfigDict(dict(
    name="lamb", lr=1e-2, warmup_steps=1, schedule="reference", power=1.0,
    weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0))
TOTAL_STEPS = 20
BATCHES = [synthetic_batch(np.random.default_rng(i), 16, 16, 4, 128) for i in range(4)]
REFERENCE_STEPS = 3


def mesh_of(data, fsdp, tensor, **slices):
    """A data x fsdp x tensor mesh of the first data * fsdp * tensor CPU devices."""
    return sharding.make_mesh(ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor,
                                                             **slices)),
                              devices=jax.devices()[:data * fsdp * tensor])


# (model, mesh) -> (its initial train state on the host, the state's shardings on the mesh)
_initial_states: dict = {}


def initial_state(task, optimizer, mesh):
    """(task's initial train state on `mesh`, its shardings). The first time for a model and a
    mesh, init_train_state lays it out there; after that, a copy of what it gave (each run
    donates the state it trains) saves tracing the init again."""
    key = (task.model, mesh)
    if key not in _initial_states:
        _, shardings = state_lib.abstract_train_state(task.model, optimizer, mesh,
                                                      task.init_inputs())
        state = state_lib.init_train_state(task.model, optimizer, mesh, jax.random.PRNGKey(0),
                                           task.init_inputs(), shardings)
        _initial_states[key] = jax.device_get(state), shardings
    state, shardings = _initial_states[key]
    return jax.device_put(state, shardings), shardings


def train_on_mesh(task, mesh, steps, num_microbatches, bind_mesh):
    """`steps` jitted train steps of `task` on `mesh` over BATCHES (cycled), from the same
    initial state; `bind_mesh` hands the mesh to make_train_step (its activation constraints,
    microbatch split and per-replica gradient), else the compiler alone lays the step out.
    Returns (the losses, the final parameters, still on the mesh)."""
    optimizer, lr_fn = optim.make_optimizer(LAMB, total_steps=TOTAL_STEPS)
    state, shardings = initial_state(task, optimizer, mesh)
    batch_sharding, replicated = sharding.batch_sharding(mesh), sharding.replicated(mesh)
    train_step = jax.jit(
        step_lib.make_train_step(task, optimizer, lr_fn, num_microbatches=num_microbatches,
                                 mesh=mesh if bind_mesh else None),
        in_shardings=(shardings, batch_sharding, replicated),
        out_shardings=(shardings, replicated), donate_argnums=(0,))
    losses = []
    for index in range(steps):
        batch = jax.device_put(BATCHES[index % len(BATCHES)], batch_sharding)
        state, metrics = train_step(state, batch, jax.random.PRNGKey(1))
        losses.append(float(metrics["loss"]))
    return losses, state.params


@pytest.fixture(scope="module")
def one_device_reference():
    """(losses, parameters) of REFERENCE_STEPS steps on one device, the compiler's layout."""
    losses, params = train_on_mesh(pretraining_task(seq_len=16, max_predictions=4),
                                   mesh_of(1, 1, 1), REFERENCE_STEPS, 1, bind_mesh=False)
    return losses, jax.device_get(params)


def test_losses_after_3_steps_match_on_every_mesh(one_device_reference):
    reference = np.array(one_device_reference[0])
    assert np.all(np.isfinite(reference)) and len(set(reference.tolist())) == 3, reference
    task = pretraining_task(seq_len=16, max_predictions=4)
    # The FFN kernel is split over fsdp x tensor. The last mesh: 2 slices of 4 devices
    # (consecutive CPU devices) with fsdp across them.
    for (data, fsdp, tensor, dcn_fsdp), expected_devices in [
            ((8, 1, 1, 0), 1), ((2, 4, 1, 0), 4), ((2, 2, 2, 0), 4), ((2, 4, 1, 2), 4)]:
        slices = dict(num_slices=dcn_fsdp, dcn_data=1, dcn_fsdp=dcn_fsdp) if dcn_fsdp else {}
        losses, params = train_on_mesh(task, mesh_of(data, fsdp, tensor, **slices),
                                       REFERENCE_STEPS, 1, bind_mesh=False)
        setting = f"{data},{fsdp},{tensor}" + (f" on {dcn_fsdp} slices" if dcn_fsdp else "")
        np.testing.assert_allclose(losses, reference, rtol=1e-5, atol=1e-5, err_msg=setting)
        # The params really are spread over the mesh: the kernel is cut into that many distinct
        # pieces (its sharding's device set is the whole mesh even when it is replicated).
        kernel = params["albert"]["encoder"]["group_0"]["inner_group_0"]["ffn"]["intermediate"][
            "kernel"]
        pieces = {tuple((part.start, part.stop) for part in shard.index)
                  for shard in kernel.addressable_shards}
        assert len(pieces) >= expected_devices, (setting, len(pieces))


def test_steps_with_the_mesh_bound_compute_the_same_losses(one_device_reference):
    """make_train_step(mesh=...) binds the activation constraints and splits every microbatch
    over the batch devices: layouts change, the losses and parameters do not. One mesh where the
    compiler reduces the gradient (tensor > 1), one where each data replica sums its own
    (step._reduces_per_replica)."""
    task = pretraining_task(seq_len=16, max_predictions=4)
    reference_losses, reference_params = one_device_reference
    for data, fsdp, tensor, num_microbatches in [(2, 2, 2, 2), (4, 2, 1, 2)]:
        mesh = mesh_of(data, fsdp, tensor)
        losses, params = train_on_mesh(task, mesh, REFERENCE_STEPS, num_microbatches,
                                       bind_mesh=True)
        setting = f"mesh {data},{fsdp},{tensor} microbatches {num_microbatches}"
        np.testing.assert_allclose(losses, reference_losses, rtol=1e-5, atol=1e-5,
                                   err_msg=setting)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5,
                                                             err_msg=setting),
                     jax.device_get(params), reference_params)


@pytest.mark.parametrize("sharing, num_microbatches, remat_policy", [
    ("all", 1, "none"), ("attention", 2, "full"), ("none", 1, "dots")])
def test_per_replica_gradient_gives_the_losses_of_the_compilers_reduction(
        sharing, num_microbatches, remat_policy):
    """data=2 x fsdp=4, 20 steps: the step bound to the mesh (each data replica sums its own
    gradient, one psum a step) against the same step with the reduction left to the compiler
    (no mesh bound), in this process: the same losses and parameters."""
    config = pretrain_config.get_config("model=tiny")
    config.seq_len, config.data.max_predictions = 16, 4
    task = pretraining.PretrainingTask(
        config, get_config("tiny", sharing=sharing, remat_policy=remat_policy))
    mesh = mesh_of(2, 4, 1)

    def run(bind_mesh):
        losses, params = train_on_mesh(task, mesh, TOTAL_STEPS, num_microbatches, bind_mesh)
        return losses, jax.device_get(params)

    (losses, params), (reference_losses, reference_params) = run(True), run(False)
    assert reference_losses[-1] < reference_losses[0] - 0.2, reference_losses  # it learns
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 params, reference_params)
