"""Length buckets (train/buckets.py): a fine-tuning batch runs at the shortest bucket that holds
its longest example, with the results of the batch padded to seq_len."""
import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest

from albert_jax.errors import ConfigError
from albert_jax.finetune import run as finetune_run
from albert_jax.finetune.core import registry
from albert_jax.train import buckets, validation
from cli_fixtures import run_python_processes
from configs import glue as glue_config
from configs import squad as squad_config
from finetune_fixtures import write_glue_task
from test_finetune import small_config

GLUE_FIELDS = ("input_ids", "segment_ids", "input_mask")


def glue_batch(real_lengths: list[int], seq_len: int) -> dict[str, np.ndarray]:
    """Rows with `real_lengths` tokens, padded to seq_len as the features are."""
    mask = (np.arange(seq_len)[None] < np.array(real_lengths)[:, None]).astype(np.int32)
    return {"input_ids": mask * 7, "segment_ids": mask, "input_mask": mask,
            "labels": np.arange(len(real_lengths), dtype=np.int32),
            "example_weight": np.ones(len(real_lengths), np.float32)}


def test_bucket_lengths_end_at_seq_len():
    assert buckets.bucket_lengths((64, 128, 256), 512) == (64, 128, 256, 512)
    assert buckets.bucket_lengths((256, 64, 128), 128) == (64, 128)  # sorted, capped at seq_len
    assert buckets.bucket_lengths((), 384) == (384,)  # off: the reference's padding
    with pytest.raises(ConfigError, match=r"length_buckets=\(64, 0\): 0 is not a positive"):
        buckets.bucket_lengths((64, 0), 128)


def test_predict_runs_at_finer_lengths_unless_the_run_pads_to_seq_len():
    config = glue_config.get_config("task=mrpc,runlocal")
    with config.unlocked():
        config.seq_len = 128
        assert buckets.predict_lengths_of(config) == (16, 32, 48, 64, 80, 96, 112, 128)
        config.seq_len = 512
        assert buckets.predict_lengths_of(config)[-8:] == (160, 192, 224, 256, 320, 384, 448,
                                                           512)
        config.seq_len = 100  # seq_len itself is the last length
        assert buckets.predict_lengths_of(config)[-2:] == (96, 100)
        config.length_buckets = ()  # the reference's padding, kept
        assert buckets.predict_lengths_of(config) == (100,)


def test_a_bad_bucket_is_refused_before_the_run():
    config = glue_config.get_config("task=mrpc,runlocal")
    with config.unlocked():
        config.length_buckets = (16, -8)
    with pytest.raises(ConfigError, match="-8 is not a positive integer"):
        validation.check_numbers(config)


def test_longest_example_counts_up_to_the_last_real_token():
    assert buckets.longest_example(glue_batch([3, 17, 9], 64)) == 17
    race = {"input_mask": np.zeros((2, 4, 32), np.int32)}  # [batch, choices, seq]
    race["input_mask"][1, 2, :21] = 1
    assert buckets.longest_example(race) == 21
    assert buckets.longest_example(glue_batch([0, 0], 16)) == 0  # eval padding rows


def test_trim_cuts_only_the_sequence_fields_to_the_bucket():
    batch = glue_batch([30, 70, 12], 512)
    trimmed = buckets.trim(batch, GLUE_FIELDS, (64, 128, 256, 512))
    for name in GLUE_FIELDS:
        assert trimmed[name].shape == (3, 128)  # 70 tokens: the 128 bucket
        np.testing.assert_array_equal(trimmed[name], batch[name][:, :128])
    assert trimmed["labels"] is batch["labels"]
    # A batch that needs seq_len, a task without sequence fields, a single length: unchanged.
    assert buckets.trim(glue_batch([300], 512), GLUE_FIELDS, (64, 512))["input_ids"].shape == (1, 512)
    assert buckets.trim(batch, (), (64, 512)) is batch
    assert buckets.trim(batch, GLUE_FIELDS, (512,)) is batch
    # RACE: [batch, 4 options, seq], cut along the sequence; the longest option decides.
    race = {name: np.zeros((2, 4, 512), np.int32) for name in GLUE_FIELDS}
    race["input_mask"][0, 3, :150] = 1
    race["level"] = np.array([0, 1], np.int32)
    trimmed = buckets.trim(race, GLUE_FIELDS, (64, 128, 256, 512))
    assert {name: trimmed[name].shape for name in GLUE_FIELDS} == dict.fromkeys(GLUE_FIELDS,
                                                                              (2, 4, 256))
    assert trimmed["input_mask"][0, 3].sum() == 150 and trimmed["level"] is race["level"]


def test_squad_refuses_buckets():
    config = squad_config.get_config("version=1.1,runlocal")
    assert config.length_buckets == ()
    with config.unlocked():
        config.length_buckets = (64,)
    with pytest.raises(ConfigError, match="SQuAD runs every batch at seq_len"):
        registry.get(config.task)(config, None, None, None)


def test_two_processes_agree_on_the_bucket(tmp_path):
    """Each process sees its own rows; the global batch must have one shape: process 0's
    longest example is 10 tokens, process 1's 40, both run at 64."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scripts = []
    for rank, longest in enumerate((10, 40)):
        scripts.append(
            "import numpy as np; from albert_jax import distributed; "
            f"distributed.initialize(True, coordinator_address='localhost:{port}', "
            f"num_processes=2, process_id={rank}); "
            "from albert_jax.train import buckets; "
            f"mask = (np.arange(128)[None] < np.array([[3], [{longest}]])).astype(np.int32); "
            "batch = {'input_ids': mask, 'segment_ids': mask, 'input_mask': mask}; "
            "trimmed = buckets.trim(batch, tuple(batch), (16, 32, 64, 128)); "
            "print('length', trimmed['input_ids'].shape[-1])")
    environment = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    for returncode, output in run_python_processes(scripts, [environment, environment]):
        assert returncode == 0, output[-3000:]
        assert "length 64" in output, output[-3000:]


def train_losses(workdir: Path) -> list[float]:
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [record["loss"] for record in records if record.get("split") is None
            and "loss" in record]


@pytest.mark.slow
def test_a_bucketed_run_gives_the_padded_runs_results(pretrained_tiny, tmp_path, monkeypatch):
    """SST-2 (single sentences) at seq_len 64 with buckets (16, 32, 48) against the same run
    padded to 64: the same losses and dev metrics (fp32 rounding apart), with batches that did
    run shorter."""
    data_path = Path(write_glue_task(str(tmp_path / "glue_data"), "sst2", num_train=24,
                                     num_dev=16, num_test=4, seed=3))
    lengths_run = []
    trim = buckets.trim

    def recording_trim(host_batch, sequence_fields, lengths):
        trimmed = trim(host_batch, sequence_fields, lengths)
        lengths_run.append(trimmed["input_ids"].shape[-1])
        return trimmed

    results = {}
    for name, length_buckets in (("padded", ()), ("bucketed", (16, 32, 48))):
        config = small_config(glue_config, "task=sst2", data_path, pretrained_tiny,
                              seq_len=64, length_buckets=length_buckets)
        monkeypatch.setattr(buckets, "trim", recording_trim)
        lengths_run.clear()
        workdir = tmp_path / name
        finetune_run.finetune(config, str(workdir))
        best = json.loads((workdir / "best.json").read_text())
        # `evaluate` reads the buckets from the saved config and scores the best checkpoint.
        finetune_run.evaluate(str(workdir), "dev")
        scored = json.loads((workdir / "predictions" / "dev" / "metrics.json").read_text())
        assert scored["accuracy"] == pytest.approx(best["value"])
        results[name] = (train_losses(workdir), best, sorted(set(lengths_run)))
    padded, bucketed = results["padded"], results["bucketed"]
    assert padded[2] == [64]
    assert bucketed[2] and min(bucketed[2]) < 64, bucketed[2]
    assert len(padded[0]) == len(bucketed[0]) > 0
    np.testing.assert_allclose(bucketed[0], padded[0], rtol=1e-5)
    assert bucketed[1]["step"] == padded[1]["step"]
    assert bucketed[1]["accuracy"] == pytest.approx(padded[1]["accuracy"], abs=1e-6)
