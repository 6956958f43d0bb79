"""`albert-jax tokenizer train` / `data build` / `data inspect`, run as a user runs them."""
import os
import pathlib
import subprocess
import sys

import pytest

from albert_jax.data.building import dataset_settings
from test_builder import write_corpus  # (tests/ is on sys.path under pytest)

REPO = pathlib.Path(__file__).resolve().parents[1]
ALBERT_JAX = os.path.join(os.path.dirname(sys.executable), "albert-jax")


def _run(*args: str) -> str:
    result = subprocess.run([ALBERT_JAX, *args], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.mark.slow
def test_tokenizer_train_then_data_build_then_inspect(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", 240)
    flags = ["--config=configs/pretrain.py:runlocal", f"--config.data.corpus={corpus}",
             f"--config.data.tokenizer={tmp_path / 'spm.model'}", "--config.data.vocab_size=200",
             f"--config.data.dir={tmp_path / 'data'}", "--config.seq_len=64",
             "--config.data.dupe_factor=2", "--config.data.eval_fraction=0.1"]
    assert "trained SentencePiece" in _run("tokenizer", "train", *flags)
    assert (tmp_path / "spm.model").exists()

    built = _run("data", "build", *flags)
    lines = {line.split(":")[0].strip(): line for line in built.splitlines()}
    assert "documents" in lines["train"] and "instances" in lines["eval"], built
    assert "240 documents" in lines["corpus read"], built  # every document, train + eval
    assert "examples/s" in built
    # TFDS's own warnings (a custom builder config, a folder without dataset_info.json yet)
    # say nothing a user can act on: the build's output is ours alone.
    assert "Using custom data configuration" not in built and "has no dataset_info" not in built
    dataset_dirs = list((tmp_path / "data" / "albert_pretraining").glob(f"seq64_pred20_dupe2_sop_*/{dataset_settings.DATASET_VERSION}"))
    assert len(dataset_dirs) == 1 and (dataset_dirs[0] / "dataset_info.json").exists()
    assert "dataset exists" in _run("data", "build", *flags)  # a rerun keeps the data

    inspected = _run("data", "inspect", *flags, "--num_examples=2")
    assert "example 0" in inspected and "example 1" in inspected and "example 2" not in inspected
    assert "[CLS]" in inspected and "[SEP]" in inspected and "→" in inspected
    assert "label 0: in order" in inspected or "label 1: swapped" in inspected
    for statistic in ("mean real length", "masked fraction", "masked runs in whole words",
                      "replacements mask", "sentence labels"):
        assert inspected.count(statistic) == 2, statistic  # train and eval
