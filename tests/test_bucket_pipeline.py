"""The pod job from a bucket, end to end, against a Cloud Storage server on the loopback: corpus in
the bucket -> tokenizer -> data build into the bucket -> pretraining with its workdir in the
bucket, SIGKILLed and resumed (metrics identical to the same run kept on local disk) -> a
fine-tune from the bucket run with its own workdir in the bucket -> evaluate -> predict ->
export. The commands are those of docs/launching.md, "Running from a bucket"."""
import csv
import io
import json
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from etils import epath

from albert_jax.data import corpus
from albert_jax.finetune.demo import demo_sentences
from cli_fixtures import REPO, cli, start_cli

pytestmark = pytest.mark.slow

DOC = REPO / "docs" / "launching.md"
DOC_BUCKET = "gs://my-bucket/albert"  # the docs' bucket folder, replaced by the test's own
TIMING = ("steps_per_second", "examples_per_second", "tokens_per_second", "mfu",
          "eta_seconds")


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
    process = start_cli(*arguments, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True)
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


def documented_commands() -> list[list[str]]:
    """The albert-jax commands of docs/launching.md "Running from a bucket", as argument lists
    (continuation lines joined, the program name dropped), in order."""
    section = DOC.read_text().split("## Running from a bucket", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines()]
    return [command[1:] for command in commands if command and command[0] == "albert-jax"]


def at(command: list[str], root) -> list[str]:
    return [argument.replace(DOC_BUCKET, str(root)) for argument in command]


def test_the_documented_pipeline_runs_from_a_bucket_and_matches_local_disk(bucket, tmp_path):
    commands = documented_commands()
    names = [" ".join(command[:2]) if command[0] in ("tokenizer", "data", "checkpoint")
             else command[0] for command in commands]
    assert names == ["tokenizer train", "data build", "pretrain", "checkpoint verify",
                     "finetune", "evaluate", "predict", "convert"]
    remote, local = epath.Path(bucket), tmp_path / "local"
    for name, text in corpus_files().items():
        (remote / "corpus" / name).write_text(text)
        (local / "corpus").mkdir(parents=True, exist_ok=True)
        (local / "corpus" / name).write_text(text)
    for split, rows in (("train", review_rows(48, 0)), ("dev", review_rows(16, 100)),
                        ("new", review_rows(9, 200))):
        (remote / "reviews" / f"{split}.csv").write_text(csv_text(rows))

    # --- Corpus -> tokenizer -> data -> pretraining, on local disk, straight.
    for command in commands[:4]:
        ok(cli(*at(command, local)))
    # --- The same in the bucket, the pretraining SIGKILLed once past its first checkpoint.
    tokenizer_train, data_build, pretrain, verify, *finetuning = commands
    ok(cli(*at(tokenizer_train, bucket)))
    ok(cli(*at(data_build, bucket)))
    assert (remote / "tokenizer" / "spm.model").read_bytes() == \
        (local / "tokenizer" / "spm.model").read_bytes()
    assert not Path(REPO / "gs:").exists()  # nothing written to a local folder named "gs:"
    # `data inspect` of the bucket's dataset: the examples of the local one (its first shard).
    inspected = {root: ok(cli("data", "inspect", *at(data_build[2:], root), "--num_examples=3",
                              f"--config.data.local_dir={tmp_path / 'inspect_copy'}"))
                 for root in (bucket, local)}
    assert inspected[bucket].split("example 0", 1)[1].split("\ntrain:")[0] == \
        inspected[local].split("example 0", 1)[1].split("\ntrain:")[0]
    kill_after_first_checkpoint(at(pretrain, bucket), remote / "run1" / "checkpoints")
    resumed = ok(cli(*at(pretrain, bucket)))
    assert "Resuming" in resumed, resumed[-3000:]
    assert records(remote / "run1" / "metrics.jsonl") == \
        records(epath.Path(local) / "run1" / "metrics.jsonl")
    ok(cli(*at(verify, bucket)))

    # --- Fine-tune from the bucket run (workdir in the bucket), evaluate, predict, export.
    for command in finetuning:
        ok(cli(*at(command, bucket)))
    reviews = remote / "reviews"
    assert json.loads((reviews / "best.json").read_text())
    dev_metrics = json.loads((reviews / "predictions" / "dev" / "metrics.json").read_text())
    assert 0.0 <= dev_metrics["accuracy"] <= 1.0
    predictions = [json.loads(line) for line in
                   (reviews / "new_predictions.jsonl").read_text().splitlines()]
    assert [record["id"] for record in predictions] == [f"r{200 + index}" for index in range(9)]
    assert all(record["prediction"] in ("no", "yes") for record in predictions)
    exported = json.loads((remote / "reviews_hf" / "config.json").read_text())
    assert exported["id2label"] == {"0": "no", "1": "yes"}
