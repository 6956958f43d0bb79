"""Fine-tuned models to HuggingFace: a GLUE workdir opens as AlbertForSequenceClassification (its
labels in config.json), RACE as AlbertForMultipleChoice, SQuAD v1.1 as
AlbertForQuestionAnswering, each computing our logits; and back (SPEC 11.6)."""
import json

import flax.linen as nn
import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from albert_jax import cli  # noqa: E402
from albert_jax.convert import load_huggingface, save_huggingface  # noqa: E402
from albert_jax.convert.huggingface import FinetunedHead  # noqa: E402
from albert_jax.errors import ConfigError  # noqa: E402
from albert_jax.finetune import run as finetune_run  # noqa: E402
from albert_jax.finetune.core import registry  # noqa: E402
from albert_jax.model import (  # noqa: E402
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    get_config,
)
from albert_jax.train import checkpoint  # noqa: E402
from albert_jax.train.workdir import TOKENIZER_FILE  # noqa: E402
from configs import glue as glue_config  # noqa: E402
from configs import squad as squad_config  # noqa: E402
from finetune_fixtures import write_glue_task  # noqa: E402

CONFIG = get_config("tiny", vocab_size=64, hidden_act="gelu_tanh", hidden_size=24,
                    num_attention_heads=3)


def _inputs(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    input_ids = rng.integers(0, CONFIG.vocab_size, shape).astype(np.int32)
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[..., 6:] = 1
    attention_mask = np.ones_like(input_ids)
    attention_mask[..., 9:] = 0
    return input_ids, token_type_ids, attention_mask


def _random_params(model: nn.Module, inputs) -> dict:
    """Initialised params with every bias perturbed (a zero bias hides a mapping mistake)."""
    params = nn.unbox(model.init(jax.random.PRNGKey(0), *inputs)["params"])
    rng = np.random.default_rng(1)
    return jax.tree.map(lambda leaf: np.asarray(leaf) + 0.1 * rng.standard_normal(leaf.shape)
                        .astype(np.float32), params)


def _hf(cls, path):
    model, info = cls.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


def _torch(inputs):
    names = ("input_ids", "token_type_ids", "attention_mask")
    return {name: torch.tensor(array, dtype=torch.long) for name, array in zip(names, inputs)}


@pytest.mark.parametrize("labels", [("contradiction", "entailment", "neutral"), ()],
                         ids=["three_labels", "regression"])
def test_sequence_classification_round_trip(labels, tmp_path):
    inputs = _inputs((3, 12))
    model = AlbertForSequenceClassification(CONFIG, num_labels=len(labels) or 1)
    params = _random_params(model, inputs)
    save_huggingface(CONFIG, params, str(tmp_path), head=FinetunedHead(
        "AlbertForSequenceClassification", labels))
    hf = _hf(transformers.AlbertForSequenceClassification, tmp_path)
    if labels:
        assert hf.config.id2label == dict(enumerate(labels))
        assert hf.config.problem_type == "single_label_classification"
    else:
        assert hf.config.num_labels == 1 and hf.config.problem_type == "regression"
    with torch.no_grad():
        hf_logits = hf(**_torch(inputs)).logits.numpy()
    np.testing.assert_allclose(model.apply({"params": params}, *inputs), hf_logits, atol=2e-5)
    # And back: the same tree, head included.
    _, loaded = load_huggingface(str(tmp_path))
    jax.tree.map(np.testing.assert_array_equal, loaded, jax.tree.map(np.asarray, params))


def _exported(model: nn.Module, inputs, architecture: str, directory) -> tuple[dict, object]:
    """Random params of `model`, saved as transformers' `architecture` and opened with it."""
    params = _random_params(model, inputs)
    save_huggingface(CONFIG, params, str(directory), head=FinetunedHead(architecture))
    return params, _hf(getattr(transformers, architecture), directory)


def test_multiple_choice_and_question_answering_match_transformers(tmp_path):
    inputs = _inputs((2, 4, 12))
    model = AlbertForMultipleChoice(CONFIG)
    params, hf = _exported(model, inputs, "AlbertForMultipleChoice", tmp_path / "race")
    with torch.no_grad():
        hf_logits = hf(**_torch(inputs)).logits.numpy()
    np.testing.assert_allclose(model.apply({"params": params}, *inputs), hf_logits, atol=2e-5)

    inputs = _inputs((3, 12))
    model = AlbertForQuestionAnswering(CONFIG)
    params, hf = _exported(model, inputs, "AlbertForQuestionAnswering", tmp_path / "squad")
    with torch.no_grad():
        output = hf(**_torch(inputs))
    start_logits, end_logits = model.apply({"params": params}, *inputs)
    np.testing.assert_allclose(start_logits, output.start_logits.numpy(), atol=2e-5)
    np.testing.assert_allclose(end_logits, output.end_logits.numpy(), atol=2e-5)
    # transformers' QA model has no pooler, which our backbone needs: loading it says so.
    with pytest.raises(ValueError, match="no pooler"):
        load_huggingface(str(tmp_path / "squad"))


def test_a_head_that_does_not_match_is_refused(tmp_path):
    params = _random_params(AlbertForSequenceClassification(CONFIG, num_labels=3),
                            _inputs((2, 12)))
    with pytest.raises(ValueError, match="one option: width 1"):
        save_huggingface(CONFIG, params, str(tmp_path / "a"),
                         head=FinetunedHead("AlbertForMultipleChoice"))
    with pytest.raises(ValueError, match="2 label names"):
        save_huggingface(CONFIG, params, str(tmp_path / "b"), head=FinetunedHead(
            "AlbertForSequenceClassification", ("0", "1")))
    with pytest.raises(ValueError, match="'albert' and 'squad'"):
        save_huggingface(CONFIG, params, str(tmp_path / "c"),
                         head=FinetunedHead("AlbertForQuestionAnswering"))


@pytest.mark.slow
def test_a_finetuned_workdir_converts_from_the_command_line(finetuned_mnli, tmp_path):
    """`albert-jax convert --from=orbax --path=<GLUE workdir> --to=huggingface`: the best dev
    checkpoint, as AlbertForSequenceClassification with MNLI's labels and the tokenizer (the
    shared MNLI run of conftest.py, only read)."""
    workdir = finetuned_mnli["workdir"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["albert-jax", "convert", "--from=orbax", f"--path={workdir}",
                  "--to=huggingface", f"--output={tmp_path / 'hf'}"])
    assert not exit_info.value.code
    hf = _hf(transformers.AlbertForSequenceClassification, tmp_path / "hf")
    assert hf.config.id2label == {0: "contradiction", 1: "entailment", 2: "neutral"}
    assert (tmp_path / "hf" / TOKENIZER_FILE).read_bytes() == (workdir / TOKENIZER_FILE).read_bytes()
    best = json.loads((workdir / "best.json").read_text())
    model_config, params = checkpoint.load(str(workdir / "best"), best["step"])
    inputs = _inputs((2, 12))
    ours = AlbertForSequenceClassification(model_config, num_labels=3).apply(
        {"params": params}, *inputs)
    with torch.no_grad():
        np.testing.assert_allclose(ours, hf(**_torch(inputs)).logits.numpy(), atol=2e-5)
    # And the HF directory serves as init_from of a new run (the backbone; a fresh head).
    rte = glue_config.get_config("task=rte,runlocal")
    rte.data.path = write_glue_task(str(tmp_path / "glue"), "rte", num_train=8, num_dev=4,
                                    num_test=4, seed=0)
    rte.init_from = str(tmp_path / "hf")
    task = finetune_run.build_task(rte)
    assert task.pretrained.kind == "huggingface"
    jax.tree.map(np.testing.assert_array_equal, task.pretrained.backbone,
                 jax.tree.map(np.asarray, params["albert"]))


def test_squad_v2_has_no_transformers_class():
    config = squad_config.get_config("version=2.0,runlocal")
    with pytest.raises(ConfigError, match="no transformers class"):
        registry.get("squad").for_shapes(config).huggingface_head()
