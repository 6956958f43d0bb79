"""Fine-tuning end to end: a GLUE task (MNLI with AX) from a pretraining workdir, RACE from a
converted HuggingFace checkpoint, the best dev checkpoint, leaderboard files that parse back,
resume after SIGKILL, and one-line errors for bad input."""
import csv
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import ml_collections
import numpy as np
import pytest

import squad_fixtures
from albert_jax import config as config_lib
from albert_jax import pretraining
from albert_jax.data import corpus
from albert_jax.finetune import run as finetune_run
from albert_jax.finetune.glue import data as glue
from albert_jax.finetune.race import data as race
from cli_fixtures import cli, start_cli
from configs import glue as glue_config
from configs import race as race_config
from configs import squad as squad_config
from finetune_fixtures import finetune_flags, write_glue_task, write_race


def small_config(module, arg: str, data_path: Path, init_from: Path, **overrides):
    config = module.get_config(arg + ",runlocal")
    config.data.path, config.init_from = str(data_path), str(init_from)
    # 8 fake devices in this process (conftest.py): batches are multiples of 8.
    config.seq_len, config.batch_size, config.eval_batch_size = 32, 8, 8
    config.total_steps, config.eval_every_steps, config.checkpoint_every_steps = 4, 2, 2
    config.log_every_steps = 2
    for key, value in overrides.items():
        config[key] = value
    return config


def read_tsv(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as file:
        return list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))


def eval_records(workdir: Path, split: str = "dev") -> dict[int, dict]:
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {record["step"]: record for record in records if record.get("split") == split}


@pytest.mark.slow
def test_glue_mnli_from_a_pretraining_workdir(finetuned_mnli, tmp_path):
    """One GLUE task end to end (MNLI: two dev sets, three test sets with AX; the shared run of
    conftest.py, copied here since evaluate writes into its workdir); every task's reader,
    labels, metrics, selection metric and submission file have their unit tests
    (test_glue_data.py, test_finetune_metrics.py, test_registry.py)."""
    data_path = finetuned_mnli["data_path"]
    workdir = Path(shutil.copytree(finetuned_mnli["workdir"], tmp_path / "run"))
    # What each file gave: 12 (6) rows, none skipped.
    summary = json.loads((workdir / "data_summary.json").read_text())
    assert sorted(summary) == ["dev", "dev_mismatched", "train"]
    assert [summary[split]["examples"] for split in ("train", "dev", "dev_mismatched")] == [
        12, 6, 6]
    assert [(record["skipped"], record["first_skipped_lines"])
            for record in summary.values()] == [(0, [])] * 3
    # The best dev checkpoint is the step with the best selection metric, and best.json says so.
    best = json.loads((workdir / "best.json").read_text())
    records = eval_records(workdir)
    assert sorted(records) == [2, 4]
    assert best["metric"] == "accuracy"
    values = {step: record["accuracy"] for step, record in records.items()}
    assert best["value"] == max(values.values()) and values[best["step"]] == best["value"]
    assert (workdir / "best" / str(best["step"])).is_dir()
    # The contract's "step and the metrics of the best checkpoint", at the top level of best.json.
    dev_record = {key: value for key, value in records[best["step"]].items()
                  if key not in ("step", "split")}
    assert {key: best[key] for key in dev_record} == dev_record

    finetune_run.evaluate(str(workdir), "dev")
    metrics = json.loads((workdir / "predictions" / "dev" / "metrics.json").read_text())
    assert metrics["accuracy"] == pytest.approx(best["value"])  # the best checkpoint's dev score
    assert "dev_mismatched" in metrics and eval_records(workdir, "dev_mismatched")
    # `albert-jax predict` on the task's own dev file gives what evaluate gave.
    predicted = finetune_run.predict(str(workdir), str(data_path / "dev_matched.tsv"),
                                     str(tmp_path / "dev.jsonl"))
    assert_same_records(Path(predicted), workdir / "predictions" / "dev" / "predictions.jsonl")

    finetune_run.evaluate(str(workdir), "test")
    sets = glue.read_eval_sets("mnli", str(data_path), "test")
    assert {eval_set.submission_file for eval_set in sets} == {"MNLI-m.tsv", "MNLI-mm.tsv",
                                                               "AX.tsv"}
    for eval_set in sets:
        rows = read_tsv(workdir / "predictions" / "test" / eval_set.submission_file)
        assert rows[0] == ["index", "prediction"]
        assert [row[0] for row in rows[1:]] == [example.id for example in eval_set.examples]
        assert all(prediction in glue.labels("mnli") for _, prediction in rows[1:])


@pytest.mark.slow
def test_race_from_a_converted_huggingface_checkpoint(pretrained_tiny, tmp_path):
    hf = tmp_path / "hf"
    converted = cli("convert", "--from=orbax", f"--path={pretrained_tiny}", "--to=huggingface",
                    f"--output={hf}")
    assert converted.returncode == 0, converted.stderr[-3000:]
    shutil.copy(pretrained_tiny / "spiece.model", hf / "spiece.model")
    data_path = Path(write_race(str(tmp_path), articles_per_level=2, questions_per_article=2,
                                seed=3))
    workdir = tmp_path / "race"
    result = cli(*finetune_flags("configs/race.py:runlocal", data_path, hf, workdir, 4,
                                 "--config.max_qa_length=8"))
    assert result.returncode == 0, result.stderr[-3000:]
    best = json.loads((workdir / "best.json").read_text())
    assert best["metric"] == "accuracy"
    assert {"accuracy", "accuracy_middle", "accuracy_high"} <= set(eval_records(workdir)[4])
    finetune_run.evaluate(str(workdir), "dev")
    rows = read_tsv(workdir / "predictions" / "dev" / "RACE.tsv")
    questions = race.read_split(str(data_path), "dev")
    assert rows[0] == ["id", "prediction"]
    assert [row[0] for row in rows[1:]] == [question.id for question in questions]
    assert rows[1][0].startswith("dev/middle/") and all(row[1] in "ABCD" for row in rows[1:])
    metrics = json.loads((workdir / "predictions" / "dev" / "metrics.json").read_text())
    assert metrics["accuracy"] == pytest.approx(best["value"])
    predicted = finetune_run.predict(str(workdir), str(data_path / "dev"),
                                     str(tmp_path / "dev.jsonl"))
    assert_same_records(Path(predicted), workdir / "predictions" / "dev" / "predictions.jsonl")


def assert_same_records(predicted: Path, evaluated: Path) -> None:
    """`predict`'s records are evaluate's (same ids, order, predictions; scores to 1e-5)."""
    mine = [json.loads(line) for line in predicted.read_text().splitlines()]
    theirs = [json.loads(line) for line in evaluated.read_text().splitlines()]
    assert [record["id"] for record in mine] == [record["id"] for record in theirs]
    for record, other in zip(mine, theirs):
        assert record.keys() == other.keys()
        for key, value in record.items():
            if isinstance(value, (float, dict, list)):  # scores, probabilities
                assert value == pytest.approx(other[key], abs=1e-5)
            else:
                assert value == other[key], key


@pytest.mark.slow
def test_seeds_report_each_and_the_median(pretrained_tiny, tmp_path):
    """`config.seeds=3` through the command line (one device): seeds.json holds each seed's
    best.json and the median, and the output reports them."""
    data_path = Path(write_glue_task(str(tmp_path / "glue_data"), "rte", num_train=8, num_dev=5,
                                     num_test=2, seed=2))
    workdir = tmp_path / "rte"
    result = cli(*finetune_flags("configs/glue.py:task=rte,runlocal", data_path, pretrained_tiny,
                                 workdir, 2, "--config.seeds=3"))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((workdir / "seeds.json").read_text())
    assert [run["seed"] for run in record["runs"]] == [12345, 12346, 12347]
    for run in record["runs"]:  # each seed's run in its own folder, its best.json in seeds.json
        assert run["workdir"] == str(workdir / f"seed_{run['seed']}")
        best = json.loads((workdir / f"seed_{run['seed']}" / "best.json").read_text())
        assert {key: value for key, value in run.items() if key not in ("seed", "workdir")} == best
        assert f"seed {run['seed']}: accuracy {run['metrics']['dev']['accuracy']:.4f}" in (
            result.stdout)
    accuracies = sorted(run["metrics"]["dev"]["accuracy"] for run in record["runs"])
    assert record["median"]["accuracy"] == accuracies[1]
    assert f"median over 3 seeds: accuracy {accuracies[1]:.4f}" in result.stdout


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_uninterrupted_result(pretrained_tiny, tmp_path):
    data_path = Path(write_glue_task(str(tmp_path / "glue_data"), "sst2", num_train=40,
                                     num_dev=8, num_test=2, seed=4))

    def flags(workdir: Path, total_steps: int) -> list[str]:
        return ["finetune", "--config=configs/glue.py:task=sst2,runlocal",
                f"--config.data.path={data_path}", f"--config.init_from={pretrained_tiny}",
                f"--workdir={workdir}", "--config.seq_len=32", "--config.batch_size=8",
                f"--config.total_steps={total_steps}", "--config.eval_every_steps=5",
                "--config.checkpoint_every_steps=4", "--config.log_every_steps=3",
                "--config.optim.schedule=constant"]

    straight = cli(*flags(tmp_path / "straight", 10))
    assert straight.returncode == 0, straight.stderr[-3000:]
    workdir = tmp_path / "killed"
    process = start_cli(*flags(workdir, 1000), stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (workdir / "checkpoints" / "4").is_dir():
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    # Resumed at step 4 or 8, inside a log interval (3): its records are the straight run's.
    resumed = cli(*flags(workdir, 10))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming from the checkpoint at step" in resumed.stdout

    def lines(path: Path) -> list[dict]:
        return [{key: value for key, value in json.loads(line).items()
                 if key not in ("steps_per_second", "examples_per_second", "tokens_per_second",
                                "mfu", "eta_seconds")}
                for line in (path / "metrics.jsonl").read_text().splitlines()]

    assert lines(workdir) == lines(tmp_path / "straight")  # every train and dev record, bit-exact
    assert (json.loads((workdir / "best.json").read_text())
            == json.loads((tmp_path / "straight" / "best.json").read_text()))
    again = cli(*flags(workdir, 10))
    assert again.returncode == 0 and "Training is done" in again.stdout


def test_bad_input_gets_one_line_errors(pretrained_tiny, tmp_path):
    data_path = Path(write_glue_task(str(tmp_path / "glue_data"), "rte", num_train=4, num_dev=2,
                                     num_test=2, seed=5))
    def error_of(config_flag: str, *flags: str) -> str:
        result = cli("finetune", config_flag, f"--workdir={tmp_path / 'run'}",
                     "--config.seq_len=32", f"--config.data.path={data_path}", *flags)
        assert result.returncode != 0
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("albert-jax")]
        assert len(errors) == 1, result.stderr[-2000:]
        return errors[0]

    assert "needs task=<name>" in error_of("--config=configs/glue.py:task=nope,runlocal")
    message = error_of("--config=configs/glue.py:task=rte,runlocal")
    assert "has no tokenizer" in message and "--config.tokenizer" in message
    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(pretrained_tiny, no_tokenizer)
    (no_tokenizer / "spiece.model").unlink()
    config = json.loads((no_tokenizer / "config.json").read_text())
    config["data"]["tokenizer"] = str(tmp_path / "gone.model")
    (no_tokenizer / "config.json").write_text(json.dumps(config))
    message = error_of("--config=configs/glue.py:task=rte,runlocal",
                       f"--config.init_from={no_tokenizer}")
    assert "carries no tokenizer" in message
    other = tmp_path / "other.model"
    from albert_jax.data import tokenizers
    tokenizers.train((" ".join(document) for _, document in
                     zip(range(200), corpus.demo_documents())), str(other), 300)
    message = error_of("--config=configs/glue.py:task=rte,runlocal",
                       f"--config.init_from={pretrained_tiny}", f"--config.tokenizer={other}")
    assert "300 pieces" in message and "vocab_size=400" in message
    (data_path / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n")
    message = error_of("--config=configs/glue.py:task=rte,runlocal",
                       f"--config.init_from={pretrained_tiny}")
    assert "train.tsv" in message and "maybe" in message
    (data_path / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\n")
    message = error_of("--config=configs/glue.py:task=rte,runlocal",
                       f"--config.init_from={pretrained_tiny}")
    assert "train.tsv" in message and ":2" in message or "line 2" in message


def _shapes(tree) -> dict:
    return {key: (tuple(value.shape), np.dtype(value.dtype)) for key, value in tree.items()}


def test_train_batch_spec_is_the_batch_the_iterator_yields(pretrained_tiny, tmp_path):
    """What `albert-jax plan` compiles for (Task.train_batch_spec) is, key for key, the shape
    and dtype of a real train batch: pretraining, GLUE classification, STS-B, RACE, SQuAD."""
    saved = ml_collections.ConfigDict(json.loads((pretrained_tiny / "config.json").read_text()))
    tasks = [pretraining.PretrainingTask(saved, config_lib.model_config(saved))]
    for task in ("mrpc", "stsb"):
        data_path = write_glue_task(str(tmp_path / task), task, num_train=12, num_dev=6, seed=1)
        tasks.append(finetune_run.build_task(small_config(glue_config, f"task={task}",
                                                          Path(data_path), pretrained_tiny)))
    race_path = write_race(str(tmp_path / "race"), articles_per_level=2, questions_per_article=2)
    tasks.append(finetune_run.build_task(small_config(race_config, "", Path(race_path),
                                                      pretrained_tiny, max_qa_length=8)))
    for version in ("1.1", "2.0"):
        config = squad_config.get_config(f"version={version},runlocal")
        config.data.train_file = config.data.dev_file = squad_fixtures.write_squad_file(
            tmp_path, f"v{version}", "train")
        config.init_from, config.seq_len, config.batch_size = str(pretrained_tiny), 64, 8
        tasks.append(finetune_run.build_task(config))
    for task in tasks:
        batch = next(iter(task.train_iterator()))
        assert _shapes(task.train_batch_spec(len(batch["input_ids"]))) == _shapes(batch), task
