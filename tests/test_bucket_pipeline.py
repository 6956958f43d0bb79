"""The pod job from a bucket, end to end, against a Cloud Storage server on the loopback: corpus in
the bucket -> tokenizer -> data build into the bucket -> pretraining with its workdir in the
bucket, SIGKILLed and resumed (metrics identical to the same run kept on local disk) -> a
fine-tune from the bucket run with its own workdir in the bucket -> evaluate -> predict ->
export. The commands are those of docs/launching.md, "Running from a bucket"."""
import csv
import io
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from etils import epath

from albert_jax.data import corpus
from albert_jax.finetune.demo import demo_sentences
from cli_fixtures import CLI, DEMO_DATA, REPO, cli

pytestmark = pytest.mark.slow

PRETRAIN = ["--config=configs/pretrain.py:runlocal", "--config.model=tiny",
            "--config.batch_size=8", "--config.total_steps=16", "--config.log_every_steps=1",
            "--config.eval_every_steps=8", "--config.checkpoint_every_steps=4",
            *[f"--config.{key}={value}" for key, value in DEMO_DATA.items()]]
FINETUNE = ["--config=configs/custom.py:kind=classification", "--config.seq_len=32",
            "--config.batch_size=8", "--config.eval_batch_size=8", "--config.total_steps=6",
            "--config.eval_every_steps=3", "--config.checkpoint_every_steps=3",
            "--config.log_every_steps=1", "--config.data.id=id"]
TIMING = ("seconds", "steps_per_second", "examples_per_second", "tokens_per_second", "time",
          "elapsed", "wall_seconds", "mfu")


def corpus_files(count: int = 2, documents: int = 400) -> dict[str, str]:
    """The demo documents in `count` text files (SPEC 1.2 layout), name -> text."""
    texts = ["" for _ in range(count)]
    for index, (_, document) in enumerate(zip(range(documents), corpus.demo_documents())):
        texts[index % count] += "\n".join(document) + "\n\n"
    return {f"part-{index}.txt": text for index, text in enumerate(texts)}


def review_rows(count: int, offset: int) -> list[dict]:
    sentences = demo_sentences()
    return [{"id": f"r{offset + index}", "text": sentences[(offset + index) * 7 % len(sentences)],
             "label": ("yes", "no")[len(sentences[(offset + index) * 7 % len(sentences)]) % 2]}
            for index in range(count)]


def csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result.stdout


def records(metrics_file: epath.Path) -> list[dict]:
    """metrics.jsonl without its timing fields, in file order."""
    lines = metrics_file.read_text().splitlines()
    return [{key: value for key, value in json.loads(line).items() if key not in TIMING}
            for line in lines]


def kill_after_first_checkpoint(arguments: list[str], checkpoints: epath.Path) -> None:
    """Starts `albert-jax ARGUMENTS` and SIGKILLs it once a step past the first checkpoint has
    trained (so a later checkpoint's upload may be under way)."""
    process = subprocess.Popen(CLI + arguments, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    reader.start()
    deadline = time.time() + 400
    while not any(line.startswith("step ") and int(line.split()[1].split("/")[0]) >= 9
                  for line in list(output)):
        assert process.poll() is None, "".join(output)[-4000:]
        assert time.time() < deadline, "the run did not reach step 9 in time"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    reader.join()
    assert checkpoints.exists() and any(checkpoints.iterdir()), "".join(output)[-4000:]


def test_the_pod_pipeline_runs_from_a_bucket_and_matches_local_disk(bucket, tmp_path):
    remote, local = epath.Path(bucket), tmp_path / "local"
    for name, text in corpus_files().items():
        (remote / "corpus" / name).write_text(text)
        (local / "corpus").mkdir(parents=True, exist_ok=True)
        (local / "corpus" / name).write_text(text)

    def pretraining_flags(root) -> list[str]:
        return [*PRETRAIN, f"--config.data.corpus={root}/corpus/*.txt",
                f"--config.data.tokenizer={root}/tokenizer/spm.model",
                f"--config.data.dir={root}/data"]

    # --- Corpus -> tokenizer -> data, in the bucket and on local disk.
    for root in (bucket, local):
        ok(cli("tokenizer", "train", *pretraining_flags(root)))
        ok(cli("data", "build", *pretraining_flags(root)))
    assert (remote / "tokenizer" / "spm.model").read_bytes() == \
        (local / "tokenizer" / "spm.model").read_bytes()
    assert not Path("gs:").exists()  # nothing written to a local folder named after the bucket

    # --- Pretraining: killed and resumed in the bucket; straight on local disk.
    run = remote / "run1"
    kill_after_first_checkpoint(["pretrain", *pretraining_flags(bucket), f"--workdir={run}"],
                                run / "checkpoints")
    resumed = ok(cli("pretrain", *pretraining_flags(bucket), f"--workdir={run}"))
    assert "Resuming" in resumed or "resum" in resumed.lower()
    ok(cli("pretrain", *pretraining_flags(local), f"--workdir={local / 'run1'}"))
    assert records(run / "metrics.jsonl") == records(local / "run1" / "metrics.jsonl")
    ok(cli("checkpoint", "verify", f"--workdir={run}"))

    # --- Fine-tuning from the bucket run, its workdir in the bucket.
    for split, rows in (("train", review_rows(48, 0)), ("dev", review_rows(16, 100)),
                        ("new", review_rows(9, 200))):
        (remote / "reviews" / f"{split}.csv").write_text(csv_text(rows))
    reviews = remote / "runs" / "reviews"
    ok(cli("finetune", *FINETUNE, f"--config.data.train_file={remote}/reviews/train.csv",
           f"--config.data.dev_file={remote}/reviews/dev.csv", f"--config.init_from={run}",
           f"--workdir={reviews}"))
    assert json.loads((reviews / "best.json").read_text())
    ok(cli("evaluate", f"--workdir={reviews}", "--split=dev"))
    dev_metrics = json.loads((reviews / "predictions" / "dev" / "metrics.json").read_text())
    assert 0.0 <= dev_metrics["accuracy"] <= 1.0
    ok(cli("predict", f"--workdir={reviews}", f"--input={remote}/reviews/new.csv",
           f"--output={remote}/reviews/new_predictions.jsonl"))
    predictions = [json.loads(line) for line in
                   (remote / "reviews" / "new_predictions.jsonl").read_text().splitlines()]
    assert [record["id"] for record in predictions] == [f"r{200 + index}" for index in range(9)]
    assert all(record["prediction"] in ("no", "yes") for record in predictions)
    ok(cli("convert", "--from=orbax", f"--path={reviews}", "--to=huggingface",
           f"--output={tmp_path / 'reviews_hf'}"))
    assert (tmp_path / "reviews_hf" / "config.json").exists()
