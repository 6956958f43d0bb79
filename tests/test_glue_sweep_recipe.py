"""`configs/glue.py:task=T,sweep=grid`: every GLUE task's sweep, the reference's settings
(google-research/albert run_glue.sh) one point of a grid over BERT's, RoBERTa's and XLNet's
learning rates and batch sizes, five seeds, their median."""
import pytest

from albert_jax.errors import ConfigError
from albert_jax.finetune.glue import data as glue
from albert_jax.finetune.sweep import plan as sweep_plan
from configs import glue as glue_config
from finetune_fixtures import write_glue_task

# run_glue.sh's `run_task TASK warmup lr steps save_every batch` lines, typed from the script
# (WNLI has none: the paper's Table 14 row, SPEC 8.2).
RUN_GLUE_SH = {  # task: (lr, batch, steps, warmup)
    "sst2": (1e-5, 32, 20935, 1256), "mnli": (3e-5, 128, 10000, 1000),
    "cola": (1e-5, 16, 5336, 320), "qnli": (1e-5, 32, 33112, 1986),
    "qqp": (5e-5, 128, 14000, 1000), "rte": (3e-5, 32, 800, 200),
    "stsb": (2e-5, 16, 3598, 214), "mrpc": (2e-5, 32, 800, 200),
    "wnli": (2e-5, 16, 2000, 250),
}


def recipe_plan(task: str, tmp_path) -> sweep_plan.SweepPlan:
    """The sweep `albert-jax sweep --config=configs/glue.py:task=T,sweep=grid` would run, read
    and checked by the sweep itself (it checks the data folder too: a small one is written)."""
    config = glue_config.get_config(f"task={task},sweep=grid")
    config.data.path = write_glue_task(str(tmp_path), task, num_train=2, num_dev=2, num_test=2)
    return sweep_plan.read_plan(config)


@pytest.mark.parametrize("task", glue.TASKS)
def test_every_task_has_a_grid_around_the_reference(task, tmp_path):
    config = glue_config.get_config(f"task={task},sweep=grid")
    lr, batch_size, total_steps, warmup_steps = RUN_GLUE_SH[task]
    # The trials' fixed settings are the reference's, and so is the config's own point.
    assert (config.optim.lr, config.batch_size) == (lr, batch_size)
    assert (config.total_steps, config.optim.warmup_steps) == (total_steps, warmup_steps)
    plan = recipe_plan(task, tmp_path)
    grid = plan.grid()
    assert set(grid) == {"optim.lr", "batch_size", "seed"}
    assert lr in grid["optim.lr"] and batch_size in grid["batch_size"]
    assert {5e-5, 4e-5, 3e-5, 2e-5, 1e-5} <= set(grid["optim.lr"])  # BERT's, RoBERTa's
    assert {16, 32} <= set(grid["batch_size"])
    assert len(grid["seed"]) == 5
    assert (plan.sampler, plan.objective) == ("grid", "median")
    # The dev metric each configuration is ranked by: the one that picks the best checkpoint.
    assert plan.metric == {"cola": "mcc", "stsb": "pearson"}.get(task, "accuracy")


def test_the_grids_sizes(tmp_path):
    """Five learning rates everywhere; batch 128 only where the reference trains with it."""
    assert recipe_plan("rte", tmp_path / "rte").trials == 5 * 2
    assert recipe_plan("mnli", tmp_path / "mnli").trials == 5 * 3
    assert recipe_plan("qqp", tmp_path / "qqp").grid()["batch_size"] == [16, 32, 128]


def test_without_sweep_the_block_stays_empty_and_an_unknown_recipe_is_one_error():
    assert glue_config.get_config("task=rte").sweep.space == ""
    with pytest.raises(ConfigError, match="sweep=grid"):
        glue_config.get_config("task=rte,sweep=random")
