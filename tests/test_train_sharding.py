"""The sharded train step computes the same losses on any mesh (8 fake CPU devices)."""
import json
import os
import subprocess
import sys
import textwrap

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

pytestmark = pytest.mark.slow  # the train step compiled for seven meshes: 50 s

SCRIPT = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")  # conftest.py's flags
                               + " --xla_force_host_platform_device_count=8")
    import json, sys
    import jax, numpy as np, ml_collections
    sys.path.insert(0, os.path.dirname(sys.argv[1]))  # tests/
    sys.path.insert(0, os.path.dirname(os.path.dirname(sys.argv[1])))  # the checkout: configs/
    from test_step import pretraining_task, synthetic_batch
    from albert_jax.train import optim, sharding, state as state_lib, step as step_lib

    task = pretraining_task(seq_len=16, max_predictions=4)
    model = task.model
    optim_config = ml_collections.ConfigDict(dict(
        name="lamb", lr=1e-2, warmup_steps=1, schedule="reference", power=1.0,
        weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0))
    optimizer, lr_fn = optim.make_optimizer(optim_config, total_steps=10)
    batches = [synthetic_batch(np.random.default_rng(i), 8, 16, 4, 128) for i in range(3)]
    losses = {}
    # The last: 2 slices of 4 devices (consecutive CPU devices) with fsdp across them.
    for data, fsdp, tensor, dcn_fsdp in [(1, 1, 1, 0), (8, 1, 1, 0), (2, 4, 1, 0), (2, 2, 2, 0),
                                         (2, 4, 1, 2)]:
        devices = jax.devices()[:data * fsdp * tensor]
        slices = dict(num_slices=dcn_fsdp, dcn_data=1, dcn_fsdp=dcn_fsdp) if dcn_fsdp else {}
        mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor,
                                                                 **slices)), devices=devices)
        _, shardings = state_lib.abstract_train_state(model, optimizer, mesh, task.init_inputs())
        state = state_lib.init_train_state(model, optimizer, mesh, jax.random.PRNGKey(0),
                                           task.init_inputs())
        batch_sharding = sharding.batch_sharding(mesh)
        train_step = jax.jit(step_lib.make_train_step(task, optimizer, lr_fn),
                             in_shardings=(shardings, batch_sharding, sharding.replicated(mesh)),
                             out_shardings=(shardings, sharding.replicated(mesh)),
                             donate_argnums=(0,))
        run = []
        for batch in batches:
            state, metrics = train_step(state, jax.device_put(batch, batch_sharding),
                                        jax.random.PRNGKey(1))
            run.append(float(metrics["loss"]))
        # The params really are spread over the mesh.
        kernel = state.params["albert"]["encoder"]["group_0"]["inner_group_0"]["ffn"]["intermediate"]["kernel"]
        run.append(len(kernel.sharding.device_set))
        losses[f"{data},{fsdp},{tensor}" + (f" on {dcn_fsdp} slices" if dcn_fsdp else "")] = run
    print("RESULT" + json.dumps(losses))
""")


def test_losses_after_3_steps_match_on_every_mesh(tmp_path):
    script = tmp_path / "mesh_run.py"
    script.write_text(SCRIPT)
    test_step_path = os.path.join(os.path.dirname(__file__), "test_step.py")
    result = subprocess.run([sys.executable, str(script), test_step_path], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT"))
    losses = json.loads(line[len("RESULT"):])
    reference = np.array(losses.pop("1,1,1")[:3])
    assert np.all(np.isfinite(reference)) and len(set(reference.tolist())) == 3, reference
    # The FFN kernel is split over fsdp x tensor.
    expected_devices = {"8,1,1": 1, "2,4,1": 4, "2,2,2": 4, "2,4,1 on 2 slices": 4}
    for mesh, run in losses.items():
        np.testing.assert_allclose(run[:3], reference, rtol=1e-5, atol=1e-5, err_msg=mesh)
        assert run[3] >= expected_devices[mesh], (mesh, run[3])


LAMB = ml_collections.ConfigDict(dict(
    name="lamb", lr=1e-2, warmup_steps=1, schedule="reference", power=1.0,
    weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0))


def train_on_mesh(task, optimizer, lr_fn, mesh, batches, steps, num_microbatches, bind_mesh):
    """`steps` jitted train steps of `task` on `mesh` over `batches` (cycled), from the same
    initial state; `bind_mesh` hands the mesh to make_train_step (its activation constraints,
    microbatch split and per-replica gradient), else the compiler alone lays the step out.
    Returns (the losses, the final parameters on the host)."""
    _, shardings = state_lib.abstract_train_state(task.model, optimizer, mesh, task.init_inputs())
    state = state_lib.init_train_state(task.model, optimizer, mesh, jax.random.PRNGKey(0),
                                       task.init_inputs())
    batch_sharding, replicated = sharding.batch_sharding(mesh), sharding.replicated(mesh)
    train_step = jax.jit(
        step_lib.make_train_step(task, optimizer, lr_fn, num_microbatches=num_microbatches,
                                 mesh=mesh if bind_mesh else None),
        in_shardings=(shardings, batch_sharding, replicated),
        out_shardings=(shardings, replicated), donate_argnums=(0,))
    losses = []
    for index in range(steps):
        batch = jax.device_put(batches[index % len(batches)], batch_sharding)
        state, metrics = train_step(state, batch, jax.random.PRNGKey(1))
        losses.append(float(metrics["loss"]))
    return losses, jax.device_get(state.params)


def test_steps_with_the_mesh_bound_compute_the_same_losses():
    """make_train_step(mesh=...) binds the activation constraints and splits every microbatch
    over the batch devices: layouts change, the losses and parameters do not."""
    task = pretraining_task(seq_len=16, max_predictions=4)
    optimizer, lr_fn = optim.make_optimizer(LAMB, total_steps=10)
    batches = [synthetic_batch(np.random.default_rng(i), 16, 16, 4, 128) for i in range(2)]

    def run(data, fsdp, tensor, num_microbatches, bind_mesh):
        mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=data, fsdp=fsdp,
                                                                 tensor=tensor)),
                                  devices=jax.devices()[:data * fsdp * tensor])
        return train_on_mesh(task, optimizer, lr_fn, mesh, batches, len(batches),
                             num_microbatches, bind_mesh)

    reference_losses, reference_params = run(1, 1, 1, 1, bind_mesh=False)
    for data, fsdp, tensor, num_microbatches in [(1, 8, 1, 2), (2, 2, 2, 1), (4, 2, 1, 2)]:
        losses, params = run(data, fsdp, tensor, num_microbatches, bind_mesh=True)
        setting = f"mesh {data},{fsdp},{tensor} microbatches {num_microbatches}"
        np.testing.assert_allclose(losses, reference_losses, rtol=1e-5, atol=1e-5,
                                   err_msg=setting)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5,
                                                             err_msg=setting),
                     params, reference_params)


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
    optimizer, lr_fn = optim.make_optimizer(LAMB, total_steps=20)
    batches = [synthetic_batch(np.random.default_rng(i), 16, 16, 4, 128) for i in range(4)]
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=2, fsdp=4, tensor=1)))

    def run(bind_mesh):
        return train_on_mesh(task, optimizer, lr_fn, mesh, batches, 20, num_microbatches,
                             bind_mesh)

    (losses, params), (reference_losses, reference_params) = run(True), run(False)
    assert reference_losses[-1] < reference_losses[0] - 0.2, reference_losses  # it learns
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 params, reference_params)
