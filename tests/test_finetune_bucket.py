"""Fine-tuning, evaluate, predict and convert with paths in a bucket (gs://, the storage emulator
of conftest.py, spoken to by the real clients): each gives from the bucket what it gives from a
local copy: the same examples read, the same prediction and leaderboard file bytes, the same
weights. The workdirs of the runs are local where the workdir is not the point (the training
workdir in a bucket is train/'s)."""
import csv
import dataclasses
import json
import random
import uuid
from pathlib import Path

import jax
import numpy as np
import pyarrow.parquet
import pytest
from etils import epath

from albert_jax import cli
from albert_jax.convert import load_huggingface, load_tf_checkpoint, save_tf_checkpoint
from albert_jax.convert.formats import convert
from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune import run as finetune_run
from albert_jax.finetune.core import pretrained, tables
from albert_jax.finetune.custom import data as custom_data
from albert_jax.finetune.glue import data as glue
from albert_jax.finetune.race import data as race
from albert_jax.finetune.squad import official_eval as squad_eval
from albert_jax.train import checkpoint
from configs import custom as custom_config
from finetune_fixtures import sentence, write_glue_task, write_race
from squad_fixtures import squad_dataset, tokenizer_sentences, write_json
from test_convert_tf import TINY, _reference_variables

LABELS = ("très bien", "not good", "so, so")  # non-ASCII and a comma inside a label


def upload(local: Path, remote: str) -> str:
    """Copies every file under the folder `local` to the folder `remote`; returns `remote`."""
    for path in sorted(local.rglob("*")):
        if path.is_file():
            (epath.Path(remote) / path.relative_to(local).as_posix()).write_bytes(
                path.read_bytes())
    return remote


def contents(folder: str | Path, prefix: str = "") -> dict[str, bytes]:
    """Relative path -> bytes of every file under `folder` (local or gs://)."""
    found = {}
    for entry in epath.Path(folder).iterdir():
        if entry.is_dir():
            found.update(contents(entry, f"{prefix}{entry.name}/"))
        else:
            found[prefix + entry.name] = entry.read_bytes()
    return found


def _objects(folder: str) -> list[str]:
    """The objects under a gs:// folder, as google-cloud-storage lists them (not through
    gcsfs and its listing cache, which epath reads)."""
    from google.cloud import storage

    bucket, prefix = folder.removeprefix("gs://").split("/", 1)
    return sorted(blob.name.removeprefix(prefix + "/")
                  for blob in storage.Client(project="test").list_blobs(bucket,
                                                                        prefix=prefix + "/"))


def _examples(examples: list, folder: str) -> list:
    """Examples (or RACE questions) with `folder` in their `source` replaced: anything else
    that differs between a local and a bucket copy is a reader's fault."""
    return [dataclasses.replace(example, source=example.source.replace(folder, "<folder>"))
            if hasattr(example, "source") else example for example in examples]


# --- Readers ----------------------------------------------------------------------------------

def _rows(count: int) -> list[dict]:
    rng = random.Random(0)
    return [{"id": f"row-{n}", "text": sentence(rng) + (', "quoted",\nsecond line' if n % 4 == 0
                                                        else ""),
             "label": LABELS[n % 3]} for n in range(count)]


def _write_custom_files(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "data.csv").open("w", encoding="utf-8-sig", newline="") as file:  # a BOM
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (folder / "data.tsv").write_text("id\ttext\tlabel\n" + "".join(
        f"{row['id']}\t{row['text'].replace(chr(10), ' ')}\t{row['label']}\n" for row in rows),
        encoding="utf-8")
    (folder / "data.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n"
                                               for row in rows), encoding="utf-8")
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), str(folder / "data.parquet"),
                                row_group_size=3)


def test_custom_files_read_from_a_bucket_as_locally(tmp_path, bucket):
    _write_custom_files(tmp_path, _rows(10))
    remote = upload(tmp_path, f"{bucket}/data")
    columns = tables.Columns(text_a="text", label="label", id="id")
    for name in ("data.csv", "data.tsv", "data.jsonl", "data.parquet"):
        local = tables.read_file(str(tmp_path / name), "classification", columns)
        in_bucket = tables.read_file(f"{remote}/{name}", "classification", columns)
        assert len(local) == 10
        assert _examples(in_bucket, remote) == _examples(local, str(tmp_path)), name
        chunks = list(tables.iter_example_chunks(f"{remote}/{name}", "classification",
                                                 columns, chunk_rows=4))
        assert [len(chunk) for chunk in chunks] == [4, 4, 2]
        assert tables.column_names(f"{remote}/{name}") == ("id", "text", "label")
    # A fault is the same one line, naming the file in the bucket.
    (epath.Path(remote) / "bad.csv").write_text("text,label\nfine,x\nno label\n")
    with pytest.raises(ValueError, match=rf"^{remote}/bad\.csv:3: 1 fields, but the header "
                                         r"has 2 \(text, label\)"):
        tables.read_file(f"{remote}/bad.csv", "classification",
                         tables.Columns(text_a="text", label="label"))
    data = custom_config.get_config("kind=classification").data
    data.train_file = f"{remote}/missing.csv"
    with pytest.raises(FileNotFoundError, match=rf"data\.train_file={remote}/missing\.csv: no "
                                                "such file"):
        custom_data.read_split(data, "classification", "train")


def test_glue_and_race_folders_read_from_a_bucket_as_locally(tmp_path, bucket):
    mnli = Path(write_glue_task(str(tmp_path / "glue_data"), "mnli", num_train=6, num_dev=3,
                                num_test=3))
    remote = upload(tmp_path / "glue_data", f"{bucket}/glue_data")
    local_root, remote_root = str(tmp_path / "glue_data"), remote
    examples, skipped = glue.read_train("mnli", str(mnli))
    assert _examples(glue.read_train("mnli", f"{remote}/MNLI")[0], remote_root) == _examples(
        examples, local_root)
    for split in ("dev", "test"):  # test: matched, mismatched and AX from diagnostic/ beside
        local_sets = glue.read_eval_sets("mnli", str(mnli), split)
        remote_sets = glue.read_eval_sets("mnli", f"{remote}/MNLI", split)
        assert [eval_set.name for eval_set in remote_sets] == [
            eval_set.name for eval_set in local_sets]
        for mine, theirs in zip(remote_sets, local_sets):
            assert _examples(mine.examples, remote_root) == _examples(theirs.examples, local_root)
    assert "ax" in [eval_set.name for eval_set in remote_sets]
    # The leaderboard files evaluate writes, into a folder in the bucket.
    for eval_set in remote_sets:
        labels = glue.labels("mnli")
        predicted = [labels[n % 3] for n in range(len(eval_set.examples))]
        glue.write_predictions(str(tmp_path / "glue_out"), eval_set, predicted)
        assert glue.write_predictions(f"{bucket}/glue_out", eval_set, predicted) == (
            f"{bucket}/glue_out/{eval_set.submission_file}")
    assert contents(f"{bucket}/glue_out") == contents(tmp_path / "glue_out")
    assert _examples(glue.read_official_file("mnli", f"{remote}/MNLI/dev_matched.tsv"),
                     remote_root) == _examples(
        glue.read_official_file("mnli", str(mnli / "dev_matched.tsv")), local_root)

    race_path = Path(write_race(str(tmp_path / "race"), articles_per_level=2,
                                questions_per_article=2, splits=("dev",)))
    remote = upload(race_path, f"{bucket}/RACE")
    local_questions = race.read_split(str(race_path), "dev")
    assert _examples(race.read_split(remote, "dev"), remote) == _examples(local_questions,
                                                                          str(race_path))
    # predict's folder and file readers: the same ids ("dev/high/3.txt-0") as the local copy.
    for local, remote_path in ((race_path / "dev", f"{remote}/dev"),
                               (race_path / "dev" / "high", f"{remote}/dev/high/"),
                               (race_path / "dev" / "middle" / "1.txt",
                                f"{remote}/dev/middle/1.txt")):
        assert _examples(race.read_path(remote_path), remote) == _examples(
            race.read_path(str(local)), str(race_path))
    assert [question.id for question in race.read_path(f"{remote}/dev")] == [
        question.id for question in local_questions]
    chosen = [n % 4 for n in range(len(local_questions))]
    race.write_predictions(str(tmp_path / "race_out"), local_questions, chosen)
    race.write_predictions(f"{bucket}/race_out", local_questions, chosen)
    assert contents(f"{bucket}/race_out") == contents(tmp_path / "race_out")


# --- A finished run trained from files in the bucket ------------------------------------------

SMALL = dict(seq_len=32, batch_size=8, eval_batch_size=8, total_steps=4, eval_every_steps=2,
             checkpoint_every_steps=2, log_every_steps=2)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, storage_emulator):
    """A classification run fine-tuned from train/dev/test CSV files in the bucket, in a local
    workdir, and a copy of the finished workdir in the bucket: (local root, bucket root); each
    holds data/ and run/."""
    root = tmp_path_factory.mktemp("finished")
    remote = f"gs://{storage_emulator.bucket}/{uuid.uuid4().hex[:12]}"
    rows = _rows(40)
    for name, part in (("train", rows[:24]), ("dev", rows[24:35]),
                       ("test", [{"id": row["id"], "text": row["text"]} for row in rows[35:]])):
        (root / "data").mkdir(exist_ok=True)
        with (root / "data" / f"{name}.csv").open("w", encoding="utf-8", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(part[0]))
            writer.writeheader()
            writer.writerows(part)
    upload(root / "data", f"{remote}/data")
    config = custom_config.get_config("kind=classification,runlocal")
    config.tokenizer = tokenizer_lib.train(tokenizer_sentences(), str(root / "spm.model"),
                                           vocab_size=200)
    config.data.train_file, config.data.dev_file, config.data.test_file, config.data.id = (
        f"{remote}/data/train.csv", f"{remote}/data/dev.csv", f"{remote}/data/test.csv", "id")
    for key, value in SMALL.items():
        config[key] = value
    finetune_run.finetune(config, str(root / "run"))
    assert json.loads((root / "run" / "labels.json").read_text(encoding="utf-8")) == sorted(
        LABELS)
    upload(root / "run", f"{remote}/run")
    return root, remote


def test_predict_reads_its_input_from_and_writes_its_output_to_a_bucket(finished):
    root, remote = finished
    local = finetune_run.predict(str(root / "run"), str(root / "data" / "dev.csv"),
                                 str(root / "dev.jsonl"))
    written = finetune_run.predict(str(root / "run"), f"{remote}/data/dev.csv",
                                   f"{remote}/out/dev.jsonl")
    assert written == f"{remote}/out/dev.jsonl"
    assert epath.Path(written).read_bytes() == Path(local).read_bytes()
    assert len(Path(local).read_text(encoding="utf-8").splitlines()) == 11
    assert _objects(f"{remote}/out") == ["dev.jsonl"]  # no partial object left
    # A failed predict leaves nothing in the bucket, and the output that was there as it was.
    (epath.Path(remote) / "data" / "empty.csv").write_text("id,text\n")
    with pytest.raises(ValueError, match=rf"--input={remote}/data/empty\.csv holds no example"):
        finetune_run.predict(str(root / "run"), f"{remote}/data/empty.csv", written)
    assert _objects(f"{remote}/out") == ["dev.jsonl"]
    assert epath.Path(written).read_bytes() == Path(local).read_bytes()
    with pytest.raises(FileNotFoundError, match=rf"--input={remote}/data/none\.csv does not "
                                                "exist"):
        finetune_run.predict(str(root / "run"), f"{remote}/data/none.csv", written)


def test_evaluate_a_workdir_in_a_bucket_writes_what_it_writes_locally(finished):
    root, remote = finished
    for split in ("dev", "test"):
        finetune_run.evaluate(str(root / "run"), split)
        finetune_run.evaluate(f"{remote}/run", split)
        local = contents(root / "run" / "predictions" / split)
        assert sorted(local) == (["metrics.json", "predictions.jsonl"] if split == "dev"
                                 else ["predictions.jsonl"])
        assert contents(f"{remote}/run/predictions/{split}") == local


def _same_tree(mine, theirs) -> None:
    assert jax.tree.structure(mine) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(theirs)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_init_from_and_convert_read_runs_and_checkpoints_in_a_bucket(finished, tmp_path, bucket):
    root, remote = finished
    # init_from=<a finished run in the bucket>: its architecture, backbone and tokenizer.
    local, in_bucket = pretrained.load(str(root / "run")), pretrained.load(f"{remote}/run")
    assert (in_bucket.model_config, in_bucket.kind, in_bucket.text) == (
        local.model_config, local.kind, local.text)
    _same_tree(in_bucket.backbone, local.backbone)
    assert epath.Path(in_bucket.tokenizer).read_bytes() == Path(local.tokenizer).read_bytes()

    # `albert-jax convert --from=orbax --path=<the run> --to=huggingface`, from and to the bucket.
    finetune_run.export_huggingface(str(root / "run"), str(tmp_path / "hf"))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["albert-jax", "convert", "--from=orbax", f"--path={remote}/run",
                  "--to=huggingface", f"--output={bucket}/hf"])
    assert not exit_info.value.code
    exported = contents(tmp_path / "hf")
    assert sorted(exported) == ["config.json", "model.safetensors", "special_tokens_map.json",
                                "spiece.model", "tokenizer.json", "tokenizer_config.json"]
    assert contents(f"{bucket}/hf") == exported
    with pytest.raises(FileExistsError, match=f"output directory {bucket}/hf is not empty"):
        finetune_run.export_huggingface(f"{remote}/run", f"{bucket}/hf")

    # A HuggingFace directory in the bucket: init_from and convert --from=huggingface.
    hf_config, hf_params = load_huggingface(f"{bucket}/hf")
    assert hf_config == load_huggingface(str(tmp_path / "hf"))[0]
    _same_tree(hf_params, load_huggingface(str(tmp_path / "hf"))[1])
    from_hf = pretrained.load(f"{bucket}/hf")
    assert (from_hf.kind, from_hf.tokenizer) == ("huggingface", f"{bucket}/hf/spiece.model")
    _same_tree(from_hf.backbone, local.backbone)
    convert("huggingface", "orbax", f"{bucket}/hf", f"{bucket}/orbax", None)
    _same_tree(checkpoint.load(f"{bucket}/orbax")[1], hf_params)
    with pytest.raises(FileExistsError, match=f"output {bucket}/orbax exists"):
        convert("huggingface", "orbax", f"{bucket}/hf", f"{bucket}/orbax", None)


def test_tf_checkpoints_in_a_bucket(tmp_path, bucket):
    variables = _reference_variables(TINY)
    save_tf_checkpoint(variables, str(tmp_path / "tf" / "model.ckpt-best"))
    save_tf_checkpoint(variables, f"{bucket}/tf/model.ckpt-best")
    assert contents(f"{bucket}/tf") == contents(tmp_path / "tf")
    (tmp_path / "tf" / "albert_config.json").write_text(json.dumps(TINY))
    (epath.Path(bucket) / "tf" / "albert_config.json").write_text(json.dumps(TINY))
    local = load_tf_checkpoint(str(tmp_path / "tf" / "model.ckpt-best"),
                               str(tmp_path / "tf" / "albert_config.json"))
    in_bucket = load_tf_checkpoint(f"{bucket}/tf/model.ckpt-best",
                                   f"{bucket}/tf/albert_config.json")
    assert in_bucket[0] == local[0]
    _same_tree(in_bucket[1], local[1])
    # init_from=<the folder>: the prefix found by its name, as in the official releases.
    from_folder = pretrained.load(f"{bucket}/tf")
    assert (from_folder.kind, from_folder.model_config) == ("tf", local[0])
    _same_tree(from_folder.backbone, local[1]["albert"])


def test_squad_eval_reads_its_files_from_a_bucket(tmp_path, bucket, capsys):
    dataset = squad_dataset("v2.0", "dev")
    answers = {question["id"]: (question["answers"] or [{"text": ""}])[0]["text"]
               for article in dataset["data"] for paragraph in article["paragraphs"]
               for question in paragraph["qas"]}
    local = [write_json(tmp_path / "dev.json", dataset), write_json(tmp_path / "pred.json",
                                                                    answers)]
    remote = upload(tmp_path, f"{bucket}/squad")
    assert squad_eval.main(local) == 0
    printed = capsys.readouterr().out
    assert squad_eval.main([f"{remote}/dev.json", f"{remote}/pred.json"]) == 0
    assert capsys.readouterr().out == printed
    assert squad_eval.main([f"{remote}/dev.json", f"{remote}/none.json"]) == 2
    assert f"cannot read {remote}/none.json" in capsys.readouterr().err
