"""SQuAD v1.1 and v2.0 end to end: a tiny model trained from scratch overfits the fixture file
(tests/squad_fixtures.py: accents, Korean, Chinese, a context of several windows), evaluated
on that same file; the files `albert-jax evaluate` writes; the best checkpoint; clear errors
for a missing file and for data of the other SQuAD version."""
import json
from pathlib import Path

import pytest

import squad_fixtures
from albert_jax.errors import ConfigError
from albert_jax.finetune import run as finetune_run
from albert_jax.finetune.core import registry
from albert_jax.finetune.squad import official_eval as squad_eval
from albert_jax.finetune.squad import postprocess as squad_postprocess
from cli_fixtures import cli
from configs import squad as squad_config

# Throughput and timing keys of metrics.jsonl, which differ between any two runs.
TIMING_KEYS = ("steps_per_second", "examples_per_second", "tokens_per_second", "mfu",
               "eta_seconds")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """train-v1.1.json, train-v2.0.json and a tokenizer trained on them."""
    root = tmp_path_factory.mktemp("squad")
    for version in ("v1.1", "v2.0"):
        squad_fixtures.write_squad_file(root, version, "train")
    squad_fixtures.train_tokenizer(root / "spm.model")
    return root


# The tiny model from scratch at 128 tokens: the long fixture context needs 4 windows of
# 128 - question - 3 tokens moved by 64. 8 fake devices (conftest.py): batches of 16. An
# evaluation and a checkpoint every 100 steps, not 50: best.json needs two evaluations to choose
# from, the training is the same, and step 150 scored what step 200 does (two fewer evaluations,
# checkpoints and best copies per run).
SMALL = dict(seq_len=128, doc_stride=64, batch_size=16, eval_batch_size=32, log_every_steps=10,
             eval_every_steps=100, checkpoint_every_steps=100)


def small_config(version: str, data: Path, total_steps: int):
    config = squad_config.get_config(f"version={version},runlocal")
    train_file = str(data / f"train-v{version}.json")
    config.data.train_file = config.data.dev_file = train_file  # overfit: dev = train
    config.tokenizer = str(data / "spm.model")
    config.model_overrides.max_position_embeddings = 128
    for key, value in SMALL.items():
        config[key] = value
    config.total_steps = total_steps
    config.optim.lr, config.optim.warmup_steps = 2e-3, 10
    return config


def cli_flags(version: str, data: Path, workdir: Path, total_steps: int) -> list[str]:
    """The same run as `small_config`, as command-line flags; a constant learning rate, so that
    a run killed on its way to more steps computes the same first steps."""
    return ["finetune", f"--config=configs/squad.py:version={version},runlocal",
            f"--config.data.train_file={data / f'train-v{version}.json'}",
            f"--config.data.dev_file={data / f'train-v{version}.json'}",
            f"--config.tokenizer={data / 'spm.model'}", f"--workdir={workdir}",
            "--config.model_overrides.max_position_embeddings=128",
            *[f"--config.{key}={value}" for key, value in SMALL.items()],
            f"--config.total_steps={total_steps}", "--config.optim.lr=2e-3",
            "--config.optim.warmup_steps=10", "--config.optim.schedule=constant"]


def records(workdir: Path) -> list[dict]:
    return [{key: value for key, value in json.loads(line).items() if key not in TIMING_KEYS}
            for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def dev_records(workdir: Path) -> dict[int, dict]:
    return {record["step"]: record for record in records(workdir) if record.get("split") == "dev"}


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def check_best(workdir: Path, metric: str) -> dict:
    """best.json names the evaluation with the largest `metric` (the first one on ties), and its
    checkpoint is kept."""
    best = read_json(workdir / "best.json")
    evaluations = dev_records(workdir)
    assert best["metric"] == metric and len(evaluations) >= 2
    best_step = max(sorted(evaluations), key=lambda step: evaluations[step][metric])
    assert best["step"] == best_step and best["value"] == evaluations[best_step][metric]
    assert (workdir / "best" / str(best_step)).is_dir()
    return best


def check_prediction_files(directory: Path, dataset: dict, n_best_size: int,
                           score_names: tuple[str, str]) -> dict[str, str]:
    """predictions.json and nbest_predictions.json: every question id, the answer = the first
    n-best text, n-best probabilities a distribution over at most n_best_size distinct texts."""
    qids = {qa["id"] for article in dataset["data"] for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]}
    predictions = read_json(directory / "predictions.json")
    nbest = read_json(directory / "nbest_predictions.json")
    assert set(predictions) == set(nbest) == qids
    for qid, entries in nbest.items():
        assert 1 <= len(entries) <= n_best_size
        assert entries[0]["text"] == predictions[qid] != ""
        assert len({entry["text"] for entry in entries}) == len(entries)
        assert sum(entry["probability"] for entry in entries) == pytest.approx(1.0)
        totals = [entry[score_names[0]] + entry[score_names[1]] for entry in entries]
        assert totals == sorted(totals, reverse=True)
        assert all(set(entry) == {"text", "probability", *score_names} for entry in entries)
    return predictions


# ----------------------------------------------------------------------------------------------
# v1.1 through the CLI. A run killed and resumed gives the straight run's records: the loop and
# the base task's train iterator are every task's (test_finetune.py, test_train_loop.py).
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def v1_run(data, tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("v1") / "run"
    result = cli(*cli_flags("1.1", data, workdir, 200))
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


@pytest.mark.slow
def test_v1_overfits_and_evaluate_writes_its_files(v1_run, data, monkeypatch, tmp_path):
    workdir = v1_run
    calls = []
    search = squad_postprocess.postprocess_v1
    monkeypatch.setattr(squad_postprocess, "postprocess_v1",
                        lambda *args, **kwargs: calls.append(1) or search(*args, **kwargs))
    best = check_best(workdir, "f1")
    # SPEC 8.3: windows without the answer trained as [CLS] (the default), recorded.
    assert read_json(workdir / "config.json")["train_windows_without_answer"] == "cls"
    last = dev_records(workdir)[200]
    assert set(last) == {"step", "split", "exact_match", "f1"}
    # 20 of the 21 answers can be exact: "한강" ends inside the piece "강은" (squad_fixtures).
    assert best["metrics"]["dev"]["exact_match"] > 80

    written = finetune_run.evaluate(str(workdir), "dev")
    directory = workdir / "predictions" / "dev"
    assert sorted(Path(path).name for path in written) == [
        "metrics.json", "nbest_predictions.json", "predictions.json", "predictions.jsonl"]
    assert len(calls) == 1  # the metrics and the files come from one n-best search
    dataset = read_json(data / "train-v1.1.json")
    predictions = check_prediction_files(directory, dataset, 20, ("start_logit", "end_logit"))
    # metrics.json is the official v1.1 evaluator's output on predictions.json, for the best
    # checkpoint.
    metrics = read_json(directory / "metrics.json")
    assert metrics == squad_eval.evaluate_v1(dataset, predictions)
    assert metrics["f1"] == pytest.approx(best["value"])
    with pytest.raises(ConfigError, match="no public test set"):
        finetune_run.evaluate(str(workdir), "test")
    check_predict(workdir, data / "train-v1.1.json", predictions, tmp_path)


def check_predict(workdir: Path, dev_file: Path, predictions: dict, tmp_path: Path) -> list:
    """predictions.jsonl holds predictions.json's answers, and `albert-jax predict` on the dev
    file gives the same records; returns them."""
    evaluated = [json.loads(line) for line in
                 (workdir / "predictions" / "dev" / "predictions.jsonl").read_text().splitlines()]
    assert {record["id"]: record["prediction"] for record in evaluated} == predictions
    output = finetune_run.predict(str(workdir), str(dev_file), str(tmp_path / "predict.jsonl"))
    predicted = [json.loads(line) for line in Path(output).read_text().splitlines()]
    assert [record["id"] for record in predicted] == [record["id"] for record in evaluated]
    for mine, theirs in zip(predicted, evaluated):
        assert mine["prediction"] == theirs["prediction"]
        assert mine.keys() == theirs.keys()
        for key in set(mine) - {"id", "prediction"}:
            assert mine[key] == pytest.approx(theirs[key], abs=1e-5)
            assert 0 <= mine[key] <= 1
    return predicted


# ----------------------------------------------------------------------------------------------
# v2.0 in process
# ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_v2_overfits_and_evaluate_writes_its_files(data, tmp_path):
    workdir = tmp_path / "v2"
    finetune_run.finetune(small_config("2.0", data, 200), str(workdir))
    best = check_best(workdir, "best_f1")
    assert {"exact_match", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1",
            "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} <= set(
                dev_records(workdir)[200])
    best_dev = best["metrics"]["dev"]
    assert best_dev["HasAns_exact"] > 70 and best_dev["NoAns_exact"] > 70

    finetune_run.evaluate(str(workdir), "dev")
    directory = workdir / "predictions" / "dev"
    dataset = read_json(data / "train-v2.0.json")
    predictions = check_prediction_files(directory, dataset, 20,
                                         ("start_log_prob", "end_log_prob"))
    null_odds = read_json(directory / "null_odds.json")
    assert set(null_odds) == set(predictions)
    assert all(isinstance(value, float) for value in null_odds.values())
    # metrics.json: the official v2.0 evaluator on predictions.json with null_odds.json as
    # na_probs (what `albert-jax squad-eval ... --na-prob-file=null_odds.json` prints).
    metrics = read_json(directory / "metrics.json")
    assert metrics == squad_eval.evaluate_v2(dataset, predictions, na_probs=null_odds)
    assert metrics["best_f1"] == pytest.approx(best["value"])
    # predictions_with_null.json: "" exactly where null_odds is above the tuned threshold, and so
    # it scores the evaluator's best_f1.
    with_null = read_json(directory / "predictions_with_null.json")
    threshold = metrics["best_f1_thresh"]
    assert with_null == {qid: "" if null_odds[qid] > threshold else text
                         for qid, text in predictions.items()}
    assert squad_eval.evaluate_v2(dataset, with_null)["f1"] == pytest.approx(metrics["best_f1"])
    unanswerable = {qa["id"] for article in dataset["data"] for paragraph in article["paragraphs"]
                    for qa in paragraph["qas"] if qa["is_impossible"]}
    assert {qid for qid, text in with_null.items() if not text} >= unanswerable
    predicted = check_predict(workdir, data / "train-v2.0.json", predictions, tmp_path)
    assert all("no_answer_probability" in record for record in predicted)


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------

def test_data_of_the_other_version_is_a_clear_error(data, tmp_path):
    config = small_config("1.1", data, 10)
    config.data.train_file = str(data / "train-v2.0.json")
    with pytest.raises(ConfigError, match=r"train-v2.0.json key 'version' is 'v2.0' .* set the "
                                          r"SQuAD version to v2.0"):
        finetune_run.finetune(config, str(tmp_path / "v2_data"))
    # A v1.1 run on a file without a top-level version whose questions have is_impossible.
    dataset = read_json(data / "train-v2.0.json")
    del dataset["version"]
    squad_fixtures.write_json(tmp_path / "unversioned.json", dataset)
    config = small_config("1.1", data, 10)
    config.data.dev_file = str(tmp_path / "unversioned.json")  # the dev file is read at start
    with pytest.raises(ConfigError, match=r"unversioned.json: .* has key 'is_impossible', which "
                                          r"only SQuAD v2.0 files have"):
        finetune_run.finetune(config, str(tmp_path / "is_impossible"))
    config = small_config("2.0", data, 10)
    config.data.dev_file = str(data / "train-v1.1.json")
    with pytest.raises(ConfigError, match="set the SQuAD version to v1.1"):
        finetune_run.finetune(config, str(tmp_path / "v1_data"))


def test_missing_files_are_one_line_errors(data, tmp_path):
    def error_of(*flags: str, config: str = "version=1.1,runlocal") -> str:
        result = cli("finetune", f"--config=configs/squad.py:{config}",
                     f"--workdir={tmp_path / 'run'}", *flags)
        assert result.returncode != 0
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("albert-jax")]
        assert len(errors) == 1, result.stderr[-2000:]
        return errors[0]

    message = error_of(f"--config.tokenizer={data / 'spm.model'}",
                       f"--config.data.train_file={tmp_path / 'nope.json'}",
                       f"--config.data.dev_file={data / 'train-v1.1.json'}")
    assert f"data.train_file={tmp_path / 'nope.json'} does not exist" in message
    assert "data.train_file is empty" in error_of()
    assert "needs version=1.1 or version=2.0" in error_of(config="version=3")
    message = error_of(f"--config.tokenizer={data / 'spm.model'}",
                       f"--config.data.train_file={data / 'train-v2.0.json'}",
                       f"--config.data.dev_file={data / 'train-v2.0.json'}",
                       "--config.train_windows_without_answer=drop",
                       config="version=2.0,runlocal")
    assert "config train_windows_without_answer='drop' is for SQuAD v1.1 only" in message


def test_config_validation(data):
    config = small_config("1.1", data, 10)
    config.max_query_length = 126
    with pytest.raises(ConfigError, match="seq_len=128 leaves no room"):
        registry.get(config.task).validate_config(config)
    config = small_config("2.0", data, 10)
    config.data.tfds_name = "squad/v2.0"
    with pytest.raises(ConfigError, match="are both set"):
        registry.get(config.task).validate_config(config)
    assert squad_config.get_config("version=2.0").seq_len == 512  # SPEC 8.3, paper Table 14
    assert squad_config.get_config("version=1.1").train_windows_without_answer == "cls"
    config = small_config("1.1", data, 10)
    config.train_windows_without_answer = "drop"
    registry.get(config.task).validate_config(config)
    config.train_windows_without_answer = "none"
    with pytest.raises(ConfigError, match=r"config train_windows_without_answer='none' must be "
                                          r"one of \('cls', 'drop'\)"):
        registry.get(config.task).validate_config(config)
