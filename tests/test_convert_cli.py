"""`albert-jax convert`: TF -> HuggingFace -> Orbax -> HuggingFace keeps every weight bit for bit."""
import json

import jax
import numpy as np
import pytest

from albert_jax import cli
from albert_jax.convert import load_huggingface, load_tf_checkpoint, save_tf_checkpoint
from albert_jax.convert.formats import convert
from albert_jax.train import checkpoint
from test_convert_tf import TINY, _reference_variables  # tests/ is on sys.path (pytest rootdir)


def _tf_checkpoint(tmp_path) -> tuple[str, str]:
    save_tf_checkpoint(_reference_variables(TINY), str(tmp_path / "tf" / "model.ckpt-1"))
    with open(tmp_path / "tf" / "albert_config.json", "w") as config_file:
        json.dump(TINY, config_file)
    return str(tmp_path / "tf" / "model.ckpt-1"), str(tmp_path / "tf" / "albert_config.json")


def test_formats_chain_without_loss(tmp_path):
    prefix, config_path = _tf_checkpoint(tmp_path)
    config, params = load_tf_checkpoint(prefix, config_path)
    # The real command line, as a user types it.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["albert-jax", "convert", "--from=tf", f"--path={prefix}",
                  f"--config_path={config_path}", "--to=huggingface", f"--output={tmp_path / 'hf'}"])
    assert not exit_info.value.code
    convert("huggingface", "orbax", str(tmp_path / "hf"), str(tmp_path / "orbax"), None)
    convert("orbax", "huggingface", str(tmp_path / "orbax"), str(tmp_path / "hf_again"), None)
    hf_config, from_hf = load_huggingface(str(tmp_path / "hf_again"))
    orbax_config, from_orbax = checkpoint.load(str(tmp_path / "orbax"))
    for other_config, other in ((hf_config, from_hf), (orbax_config, from_orbax)):
        assert other_config.to_dict() == config.to_dict()
        assert jax.tree.structure(other) == jax.tree.structure(params)
        jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, other), params)


def test_refusals_name_the_problem(tmp_path):
    prefix, config_path = _tf_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="config_path"):
        convert("tf", "orbax", prefix, str(tmp_path / "out"), None)
    with pytest.raises(ValueError, match="config_path"):
        convert("huggingface", "orbax", str(tmp_path), str(tmp_path / "out"), config_path)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not an empty directory"):
        convert("tf", "huggingface", prefix, str(occupied), config_path)
    assert (occupied / "notes.txt").read_text() == "keep me"
    assert not (tmp_path / "out").exists()
