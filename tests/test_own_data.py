"""Your own data through the command line: fine-tune, evaluate, predict and export a
classification, a regression and a multiple-choice task written by the test; one-line errors
that leave the workdir empty; a killed predict. (A task of the user's own by file path:
test_docs_task_file.py; options as columns: test_custom_data.py.)"""
import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune.demo import demo_sentences
from cli_fixtures import cli, start_cli

LABELS = ("très bien", "not good", "so, so")  # spaces, non-ASCII, a comma inside a label
SMALL = ["--config.seq_len=32", "--config.batch_size=8", "--config.eval_batch_size=8",
         "--config.total_steps=4", "--config.eval_every_steps=2",
         "--config.checkpoint_every_steps=2", "--config.log_every_steps=2"]


@pytest.fixture(scope="module")
def spm(tmp_path_factory) -> str:
    """A tiny SentencePiece model: the runs start from scratch (tiny model, no init_from)."""
    directory = tmp_path_factory.mktemp("spm")
    return tokenizer_lib.train(demo_sentences(), str(directory / "spm.model"), vocab_size=200)


def _finetune(kind: str, workdir: Path, spm: str, *flags: str) -> subprocess.CompletedProcess:
    return cli("finetune", f"--config=configs/custom.py:kind={kind},runlocal",
               f"--config.tokenizer={spm}", f"--workdir={workdir}", *SMALL, *flags)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _classification_rows(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    sentences = demo_sentences()
    rows = []
    for index in range(count):
        text = sentences[int(rng.integers(len(sentences)))]
        if index % 5 == 0:  # quoted commas, quotes and a newline inside a field
            text = f'{text}, "quoted", and\na second line'
        rows.append({"id": f"row-{index}", "text": text, "label": LABELS[index % 3]})
    return rows


def _write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def classification(tmp_path_factory, spm) -> Path:
    """A finished classification run on CSV files with three string labels."""
    root = tmp_path_factory.mktemp("classification")
    train = _write_csv(root / "train.csv", _classification_rows(48, seed=0))
    dev = _write_csv(root / "dev.csv", _classification_rows(13, seed=1))
    test = _write_csv(root / "test.csv", [{"id": f"t{n}", "text": row["text"]}
                                          for n, row in enumerate(_classification_rows(5, 2))])
    workdir = root / "run"
    result = _finetune("classification", workdir, spm, f"--config.data.train_file={train}",
                       f"--config.data.dev_file={dev}", f"--config.data.test_file={test}",
                       "--config.data.id=id")
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def test_classification_evaluate_predict_and_export_agree(classification, tmp_path):
    workdir = classification
    # The label list: the sorted set of the training labels, kept in the workdir.
    assert json.loads((workdir / "labels.json").read_text(encoding="utf-8")) == sorted(LABELS)
    assert cli("evaluate", f"--workdir={workdir}", "--split=dev").returncode == 0
    metrics = json.loads((workdir / "predictions" / "dev" / "metrics.json").read_text())
    assert {"accuracy", "macro_f1", "mcc", "step"} <= set(metrics)
    evaluated = _jsonl(workdir / "predictions" / "dev" / "predictions.jsonl")
    dev_rows = _classification_rows(13, seed=1)
    assert [record["id"] for record in evaluated] == [row["id"] for row in dev_rows]
    # The dev metrics are the accuracy of the predictions written.
    accuracy = np.mean([record["prediction"] == row["label"]
                        for record, row in zip(evaluated, dev_rows)])
    assert metrics["accuracy"] == pytest.approx(accuracy)

    output = tmp_path / "dev.predictions.jsonl"
    result = cli("predict", f"--workdir={workdir}", f"--input={workdir.parent / 'dev.csv'}",
                 f"--output={output}")
    assert result.returncode == 0, result.stderr[-3000:]
    predicted = _jsonl(output)
    assert [record["id"] for record in predicted] == [record["id"] for record in evaluated]
    for mine, theirs in zip(predicted, evaluated):
        assert mine["prediction"] == theirs["prediction"]
        assert set(mine["probabilities"]) == set(LABELS)
        assert sum(mine["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert mine["prediction"] == max(mine["probabilities"], key=mine["probabilities"].get)
        for label in LABELS:
            assert mine["probabilities"][label] == pytest.approx(theirs["probabilities"][label],
                                                                 abs=1e-5)

    # Standard output carries the predictions alone.
    result = cli("predict", f"--workdir={workdir}", f"--input={workdir.parent / 'test.csv'}",
                 "--output=-")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == [
        f"t{n}" for n in range(5)]

    # The test split of evaluate: predictions.jsonl for the test file.
    assert cli("evaluate", f"--workdir={workdir}", "--split=test").returncode == 0
    assert len(_jsonl(workdir / "predictions" / "test" / "predictions.jsonl")) == 5

    # HuggingFace: AlbertForSequenceClassification with the labels, the same probabilities.
    exported = tmp_path / "hf"
    result = cli("convert", "--from=orbax", f"--path={workdir}", "--to=huggingface",
                 f"--output={exported}")
    assert result.returncode == 0, result.stderr[-3000:]
    model = transformers.AlbertForSequenceClassification.from_pretrained(exported).eval()
    assert [model.config.id2label[index] for index in range(3)] == sorted(LABELS)
    tokenizer = transformers.AlbertTokenizer(str(exported / "spiece.model"))
    inputs = tokenizer([row["text"] for row in dev_rows[1:5]], padding="max_length",
                       truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        probabilities = torch.softmax(model(**inputs).logits, dim=-1).numpy()
    for row, record in zip(probabilities, predicted[1:5]):
        ours = [record["probabilities"][model.config.id2label[index]] for index in range(3)]
        np.testing.assert_allclose(row, ours, atol=2e-3)


def _evaluated_and_predicted(workdir: Path, dev_file: Path) -> tuple[list[dict], list[dict]]:
    """evaluate's dev predictions.jsonl records, and predict's records on the dev file."""
    assert cli("evaluate", f"--workdir={workdir}").returncode == 0
    output = workdir.parent / "dev.predictions.jsonl"
    result = cli("predict", f"--workdir={workdir}", f"--input={dev_file}", f"--output={output}")
    assert result.returncode == 0, result.stderr[-3000:]
    return _jsonl(workdir / "predictions" / "dev" / "predictions.jsonl"), _jsonl(output)


def _regression_rows(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    sentences = demo_sentences()
    return [{"sentence": sentences[int(rng.integers(len(sentences)))],
             "score": round(float(rng.uniform(0, 5)), 2)} for _ in range(count)]


@pytest.mark.slow
def test_regression_jsonl(tmp_path, spm):
    for name, seed, count in (("train", 0, 32), ("dev", 1, 11)):
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps(row) + "\n" for row in _regression_rows(count, seed)))
    workdir = tmp_path / "run"
    result = _finetune("regression", workdir, spm, f"--config.data.train_file={tmp_path / 'train.jsonl'}",
                       f"--config.data.dev_file={tmp_path / 'dev.jsonl'}",
                       "--config.data.text_a=sentence", "--config.data.label=score")
    assert result.returncode == 0, result.stderr[-3000:]
    best = json.loads((workdir / "best.json").read_text())
    assert best["metric"] == "pearson" and {"pearson", "spearman", "mse"} <= set(best)
    evaluated, predicted = _evaluated_and_predicted(workdir, tmp_path / "dev.jsonl")
    assert [record["id"] for record in predicted] == [str(n) for n in range(11)]
    for mine, theirs in zip(predicted, evaluated):
        assert mine["prediction"] == mine["score"] == pytest.approx(theirs["score"], abs=1e-5)
    # The dev MSE is that of the predictions written.
    labels = [row["score"] for row in _regression_rows(11, 1)]
    mse = np.mean([(record["score"] - label) ** 2 for record, label in zip(evaluated, labels)])
    metrics = json.loads((workdir / "predictions" / "dev" / "metrics.json").read_text())
    assert metrics["mse"] == pytest.approx(mse, rel=1e-4)
    assert cli("convert", "--from=orbax", f"--path={workdir}", "--to=huggingface",
               f"--output={tmp_path / 'hf'}").returncode == 0
    exported = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert exported["architectures"] == ["AlbertForSequenceClassification"]
    assert exported["num_labels"] == 1 and exported["problem_type"] == "regression"


def _choice_rows(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    sentences = demo_sentences()
    rows = []
    for index in range(count):
        options = [sentences[int(rng.integers(len(sentences)))] for _ in range(3)]
        rows.append({"context": sentences[index], "question": "Which one follows?",
                     "options": options, "label": index % 3})
    return rows


@pytest.mark.slow
def test_multiple_choice(tmp_path, spm):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n"
                                                  for row in _choice_rows(16, 0)))
    dev = _choice_rows(9, 1)
    (tmp_path / "dev.jsonl").write_text("".join(json.dumps(row) + "\n" for row in dev))
    workdir = tmp_path / "run"
    result = _finetune("multiple_choice", workdir, spm,
                       f"--config.data.train_file={tmp_path / 'train.jsonl'}",
                       f"--config.data.dev_file={tmp_path / 'dev.jsonl'}")
    assert result.returncode == 0, result.stderr[-3000:]
    evaluated, predicted = _evaluated_and_predicted(workdir, tmp_path / "dev.jsonl")
    for mine, theirs in zip(predicted, evaluated, strict=True):
        assert mine["prediction"] == theirs["prediction"]
        assert len(mine["option_probabilities"]) == 3
        assert sum(mine["option_probabilities"]) == pytest.approx(1.0, abs=1e-5)
    exported = tmp_path / "hf"
    assert cli("convert", "--from=orbax", f"--path={workdir}", "--to=huggingface",
               f"--output={exported}").returncode == 0
    assert json.loads((exported / "config.json").read_text())["architectures"] == [
        "AlbertForMultipleChoice"]


@pytest.mark.parametrize("kind, train_rows, dev_rows, message", [
    ("classification", [{"text": "a b", "label": "x"}, {"text": "c d", "label": "y"}],
     [{"text": "e f", "label": "z"}], "dev.jsonl:1: label 'z' is not one of"),
    ("classification", [{"sentence": "a b", "label": "x"}, {"sentence": "c", "label": "y"}],
     None, "train.jsonl:1: no column 'text'"),
    ("classification", [{"text": "a b", "label": "x"}, {"text": " ", "label": "y"}],
     None, "train.jsonl:2: column 'text' (config data.text_a) is empty"),
    ("regression", [{"text": "a b", "label": 1.5}, {"text": "c d", "label": "high"}],
     None, "train.jsonl:2: regression label 'high' is not a finite number"),
], ids=["dev-label-not-in-list", "missing-column", "empty-text", "non-numeric-regression"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, spm, kind, train_rows, dev_rows,
                                                  message):
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in train_rows))
    dev.write_text("".join(json.dumps(row) + "\n" for row in dev_rows or train_rows))
    workdir = tmp_path / "run"
    result = _finetune(kind, workdir, spm, f"--config.data.train_file={train}",
                       f"--config.data.dev_file={dev}")
    assert result.returncode != 0
    assert message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not workdir.exists() or not any(workdir.iterdir()), list(workdir.iterdir())


def test_a_killed_predict_leaves_no_output(classification, tmp_path):
    rows = _classification_rows(60000, seed=3)
    big = _write_csv(tmp_path / "big.csv", rows)
    output = tmp_path / "big.predictions.jsonl"
    process = start_cli("predict", f"--workdir={classification}", f"--input={big}",
                        f"--output={output}", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True)
    for line in process.stdout:  # killed once it has written a first chunk
        if "predict: 4096/" in line:
            break
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    time.sleep(0.1)
    assert not output.exists()
    assert all(not name.startswith("big.predictions.jsonl") or ".partial-" in name
               for name in os.listdir(tmp_path))
