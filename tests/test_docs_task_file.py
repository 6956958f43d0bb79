"""The task file of docs/adding-a-task.md, copied out of the page and run as its commands run it:
finetune with `--config.task=FILE:Sentiment`, then predict, evaluate and export, on a tiny model
from scratch."""
import csv
import json
import re
from pathlib import Path

import pytest

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune.demo import demo_sentences
from cli_fixtures import REPO, cli

PAGE = REPO / "docs" / "adding-a-task.md"
SMALL = ["--config.seq_len=32", "--config.batch_size=8", "--config.eval_batch_size=8",
         "--config.total_steps=4", "--config.eval_every_steps=2",
         "--config.checkpoint_every_steps=2", "--config.log_every_steps=2"]


def _task_file() -> str:
    """The page's one Python block that defines a class (the task file)."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    files = [block for block in blocks if "\nclass Sentiment(" in block]
    assert len(files) == 1, f"{PAGE} should hold one task file defining Sentiment"
    return files[0]


def _write_csv(path: Path, labels: list[str], first: int) -> Path:
    sentences = demo_sentences()
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["text", "label"])
        for index, label in enumerate(labels):
            writer.writerow([sentences[first + index], label])
    return path


@pytest.mark.slow
def test_the_documented_task_file_runs_through_the_command_line(tmp_path):
    (tmp_path / "my_task.py").write_text(_task_file(), encoding="utf-8")
    spm = tokenizer_lib.train(demo_sentences(), str(tmp_path / "spm.model"), vocab_size=200)
    # No "neutral" review in the training file: the task's label list still has it.
    train = _write_csv(tmp_path / "train.csv", ["negative", "positive"] * 12, first=0)
    dev = _write_csv(tmp_path / "dev.csv", ["negative", "positive", "neutral"] * 3, first=24)
    workdir = tmp_path / "run"
    result = cli("finetune", "--config=configs/custom.py:kind=classification,runlocal",
                 f"--config.task={tmp_path / 'my_task.py'}:Sentiment",
                 f"--config.data.train_file={train}", f"--config.data.dev_file={dev}",
                 f"--config.tokenizer={spm}", f"--workdir={workdir}", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sentiment: 24 training examples" in result.stdout
    assert json.loads((workdir / "labels.json").read_text()) == ["negative", "neutral", "positive"]
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    recalls = [record["negative_recall"] for record in records if record.get("split") == "dev"]
    assert len(recalls) == 2 and all(0.0 <= recall <= 1.0 for recall in recalls)

    result = cli("predict", f"--workdir={workdir}", f"--input={dev}", "--output=-")
    assert result.returncode == 0, result.stderr[-3000:]
    predictions = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(predictions) == 9
    assert all(set(record["probabilities"]) == {"negative", "neutral", "positive"}
               for record in predictions)
    # evaluate and the HuggingFace export find the task by its file too (the workdir names it).
    assert cli("evaluate", f"--workdir={workdir}").returncode == 0
    assert {"accuracy", "negative_recall"} <= set(
        json.loads((workdir / "predictions" / "dev" / "metrics.json").read_text()))
    assert cli("convert", "--from=orbax", f"--path={workdir}", "--to=huggingface",
               f"--output={tmp_path / 'hf'}").returncode == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
