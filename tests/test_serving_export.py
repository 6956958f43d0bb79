"""`albert-jax export`: every head as ONNX (run by onnxruntime) and as StableHLO (run by a process
with JAX alone, albert_jax not importable) gives our logits within 1e-4, at several batch sizes
and lengths from one file; the ONNX graph is fused for ONNX Runtime with the shared layer stored
once and equals HuggingFace's torch model; its int8 export quantizes every weight once, fits
the size target at albert-base's width and reports its cost on the run's dev split as
`evaluate` scores it; bad input is one line and writes nothing."""
import csv
import json
import os
import shutil
import subprocess
import sys
import types

import flax.linen as nn
import jax
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from albert_jax.convert import onnx_graph, onnx_quantize, quantization_cost, serving  # noqa: E402
from albert_jax.convert.huggingface import FinetunedHead  # noqa: E402
from albert_jax.data.tokenizers import TextSettings, Tokenizer  # noqa: E402
from albert_jax.finetune import run as finetune_run  # noqa: E402
from albert_jax.model import (  # noqa: E402
    AlbertForMultipleChoice,
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
    example_inputs,
    get_config,
)
from albert_jax.train import checkpoint  # noqa: E402
from albert_jax.train.task import Selection  # noqa: E402
from cli_fixtures import cli  # noqa: E402
from finetune_fixtures import WORDS  # noqa: E402

CONFIG = get_config("tiny", vocab_size=64, hidden_act="gelu_tanh", hidden_size=24,
                    num_attention_heads=3, max_position_embeddings=48)
SHAPES = ((1, 5), (3, 17), (2, 48))  # [batch, sequence]: lengths the export never saw
HEADS = {  # name -> (model, head)
    "classification": (AlbertForSequenceClassification(CONFIG, num_labels=3),
                       FinetunedHead("AlbertForSequenceClassification", ("a", "b", "c"))),
    "regression": (AlbertForSequenceClassification(CONFIG, num_labels=1),
                   FinetunedHead("AlbertForSequenceClassification")),
    "multiple_choice": (AlbertForMultipleChoice(CONFIG), FinetunedHead("AlbertForMultipleChoice")),
    "span": (AlbertForQuestionAnswering(CONFIG), FinetunedHead("AlbertForQuestionAnswering")),
    "tagging": (AlbertForTokenClassification(CONFIG, num_labels=5),
                FinetunedHead("AlbertForTokenClassification", ("O", "B-X", "I-X", "B-Y", "I-Y"))),
    "masked_lm": (AlbertForPreTraining(CONFIG), FinetunedHead(serving.MASKED_LM)),
}


def _served(name: str) -> serving.ServedModel:
    """The head's model with initialised params, every leaf perturbed (a zero bias hides a
    mapping mistake)."""
    model, head = HEADS[name]
    shape = (1, 2, 8) if name == "multiple_choice" else (1, 8)
    inputs = example_inputs(shape)
    if name == "masked_lm":
        inputs = (*inputs, np.zeros((1, 2), np.int32))
    params = nn.unbox(model.init(jax.random.PRNGKey(0), *inputs)["params"])
    rng = np.random.default_rng(1)
    params = jax.tree.map(lambda leaf: np.asarray(leaf) + 0.1 * rng.standard_normal(leaf.shape)
                          .astype(np.float32), params)
    return serving.ServedModel(CONFIG, model, params, head, {"spiece.model": b"tokenizer bytes"},
                               TextSettings())


def _ours(served: serving.ServedModel, batches: list[dict[str, np.ndarray]]
          ) -> list[tuple[np.ndarray, ...]]:
    """Our outputs of each of `batches`, from one call of the model on all their rows padded to
    the longest (a row's outputs do not depend on its padding: the -10000 bias, SPEC 3.2.6),
    the sequence outputs cut back to each batch's length."""
    longest = max(batch["input_ids"].shape[-1] for batch in batches)
    padded = [np.concatenate([np.pad(batch[key], [(0, 0)] * (batch[key].ndim - 1)
                                     + [(0, longest - batch[key].shape[-1])])
                              for batch in batches]) for key in serving.INPUTS]
    outputs = [np.asarray(output) for output in jax.jit(served.apply)(*padded)]
    results, start = [], 0
    for batch in batches:
        rows, length = batch["input_ids"].shape[0], batch["input_ids"].shape[-1]
        cut = [output[start:start + rows] for output in outputs]
        dims = serving.OUTPUTS[served.head.architecture].values()
        results.append(tuple(value[:, :length] if "sequence" in dim else value
                             for value, dim in zip(cut, dims)))
        start += rows
    return results


def _inputs(shape: tuple[int, ...], multiple_choice: bool, seed: int = 0) -> dict[str, np.ndarray]:
    """Random ids, two segments, and padding after a different length in each row."""
    rng = np.random.default_rng(seed)
    shape = (shape[0], 3, shape[1]) if multiple_choice else shape
    input_ids = rng.integers(0, CONFIG.vocab_size, shape).astype(np.int32)
    lengths = rng.integers(2, shape[-1] + 1, shape[:-1])
    positions = np.arange(shape[-1])
    input_mask = (positions < lengths[..., None]).astype(np.int32)
    segment_ids = ((positions >= lengths[..., None] // 2) & (input_mask == 1)).astype(np.int32)
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}


def _hf_torch(served: serving.ServedModel, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """HuggingFace's torch model of `served` (what the ONNX export traces) on `inputs`."""
    with torch.no_grad():
        outputs = serving.huggingface_model(served)(
            *(torch.from_numpy(inputs[name]) for name in serving.INPUTS))
    return [output.numpy() for output in outputs]


@pytest.mark.slow  # an export traces the model in torch: about 10 s each
@pytest.mark.parametrize("name", list(HEADS))
def test_onnx_runtime_gives_our_outputs(name, tmp_path):
    """The default export, fused for ONNX Runtime: one Attention, two SkipLayerNormalization and
    one FastGelu per layer (the MLM head's transform one more), the embeddings one
    EmbedLayerNormalization; each shared weight stored once; our outputs and HuggingFace
    torch's within 1e-4."""
    served = _served(name)
    written = serving.export(served, "onnx", str(tmp_path / "out"))
    assert sorted(os.path.basename(path) for path in written) == [
        "model.onnx", "signature.json", "spiece.model"]
    signature = json.loads((tmp_path / "out" / "signature.json").read_text())
    assert signature["inputs"] == ["input_ids", "input_mask", "segment_ids"]
    assert signature["outputs"] == list(serving.OUTPUTS[served.head.architecture])
    assert signature["labels"] == list(served.head.labels)
    assert signature["optimize"] == "onnxruntime" and "quantized" not in signature
    model = onnx.load(str(tmp_path / "out" / "model.onnx"))
    layers = CONFIG.num_hidden_layers
    assert {op: onnx_graph.op_counts(model).get(op, 0) for op in onnx_graph.FUSED_OPS} == {
        "Attention": layers, "SkipLayerNormalization": 2 * layers,
        "FastGelu": layers + (name == "masked_lm"), "BiasGelu": 0, "Gelu": 0,
        "EmbedLayerNormalization": 1}
    attention_weights = {node.input[1] for node in model.graph.node if node.op_type == "Attention"}
    assert len(attention_weights) == 1  # every layer's fused Attention reads one packed QKV
    _assert_no_equal_initializers(model)
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    assert [node.name for node in session.get_inputs()] == signature["inputs"]
    batches = [_inputs(shape, name == "multiple_choice") for shape in SHAPES]
    for number, (inputs, ours) in enumerate(zip(batches, _ours(served, batches))):
        theirs = session.run(signature["outputs"], inputs)
        assert len(theirs) == len(ours)
        for got, want in zip(theirs, ours):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, np.asarray(want), atol=1e-4, rtol=0)
        if number < 2:  # HuggingFace's torch model, at two batches and lengths
            for got, want in zip(theirs, _hf_torch(served, inputs)):
                np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def _assert_no_equal_initializers(model) -> None:
    digests = [hash(onnx.numpy_helper.to_array(tensor).tobytes()) for tensor in
               model.graph.initializer if np.prod(tensor.dims) > 1]
    assert len(digests) == len(set(digests)), "a weight is stored twice"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HEADS))
def test_int8_export_of_every_head(name, tmp_path):
    """--quantize=int8: no float operator with a weight left (counted from the graph), every
    weight quantized once, signature.json saying what; ONNX Runtime runs it, near the float32
    outputs (random weights: 5% of the outputs' range)."""
    served = _served(name)
    serving.export(served, "onnx", str(tmp_path / "int8"), quantize="int8")
    model = onnx.load(str(tmp_path / "int8" / "model.onnx"))
    assert onnx_quantize.float_weight_ops(model) == {}
    counts = onnx_graph.op_counts(model)
    assert counts["QAttention"] == CONFIG.num_hidden_layers
    assert counts["QEmbedLayerNormalization"] == 1
    # The layer's matrices (attention output, FFN in and out) once each per use, the embedding
    # projection, and the head's one or two (pooler and classifier; the MLM transform and
    # decoder; the span or tagging classifier).
    head_matmuls = {"span": 1, "tagging": 1}.get(name, 2)
    assert counts["MatMulInteger"] == 3 * CONFIG.num_hidden_layers + 1 + head_matmuls
    _assert_no_equal_initializers(model)
    int8_weights = [tensor for tensor in model.graph.initializer
                    if tensor.data_type == onnx.TensorProto.INT8 and np.prod(tensor.dims) > 1]
    assert len(int8_weights) == 5 + head_matmuls  # shared QKV, 3 layer matrices, projection, head
    signature = json.loads((tmp_path / "int8" / "signature.json").read_text())
    assert signature["quantized"]["scheme"] == onnx_quantize.SCHEME
    assert signature["quantized"]["operators"]["QAttention"] == CONFIG.num_hidden_layers
    assert signature["quantized"]["float_operators_left"] == {}
    int8_session = ort.InferenceSession(str(tmp_path / "int8" / "model.onnx"))
    inputs = _inputs(SHAPES[1], name == "multiple_choice")
    ((ours, *_),) = _ours(served, [inputs])
    theirs = int8_session.run(None, inputs)[0]
    assert theirs.shape == ours.shape
    _assert_near(theirs, ours)


def _assert_near(int8: np.ndarray, fp32: np.ndarray) -> None:
    """An int8 model's outputs within 5% of the float32 outputs' scale (range plus size)."""
    assert np.abs(int8 - fp32).max() < 0.05 * (np.ptp(fp32) + np.abs(fp32).max())


def test_plain_graph_with_optimize_none(tmp_path):
    """--optimize=none: torch.onnx's graph as traced, no fused operator; still our outputs."""
    served = _served("classification")
    serving.export(served, "onnx", str(tmp_path / "plain"), optimize="none")
    model = onnx.load(str(tmp_path / "plain" / "model.onnx"))
    assert not set(onnx_graph.op_counts(model)) & set(onnx_graph.FUSED_OPS)
    session = ort.InferenceSession(str(tmp_path / "plain" / "model.onnx"))
    inputs = _inputs(SHAPES[1], False)
    ((ours,),) = _ours(served, [inputs])
    np.testing.assert_allclose(session.run(None, inputs)[0], ours, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_int8_size_at_albert_base_width(tmp_path):
    """albert-base's widths (hidden 768, embedding 128, vocabulary 30000; two layers, as the
    layer is shared the size does not depend on the count): the fused float32 file within 1.2x
    its float32 weights, the int8 file within 0.30x; the int8 model's logits near float32."""
    config = get_config("albert-base-v2", num_hidden_layers=2)
    model = AlbertForSequenceClassification(config, num_labels=3)
    params = nn.unbox(model.init(jax.random.PRNGKey(0), *example_inputs((1, 8)))["params"])
    weights = sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(params))
    served = serving.ServedModel(config, model, jax.tree.map(np.asarray, params),
                                 FinetunedHead("AlbertForSequenceClassification", ("a", "b", "c")),
                                 {}, TextSettings())
    serving.export(served, "onnx", str(tmp_path / "fp32"))
    serving.export(served, "onnx", str(tmp_path / "int8"), quantize="int8")
    fp32_size = os.path.getsize(tmp_path / "fp32" / "model.onnx")
    int8_size = os.path.getsize(tmp_path / "int8" / "model.onnx")
    assert fp32_size <= 1.2 * weights, (fp32_size, weights)
    assert int8_size <= 0.30 * weights, (int8_size, weights)
    rng = np.random.default_rng(0)
    inputs = {"input_ids": rng.integers(0, config.vocab_size, (2, 64)).astype(np.int32),
              "input_mask": np.ones((2, 64), np.int32), "segment_ids": np.zeros((2, 64), np.int32)}
    fp32 = ort.InferenceSession(str(tmp_path / "fp32" / "model.onnx")).run(None, inputs)[0]
    int8 = ort.InferenceSession(str(tmp_path / "int8" / "model.onnx")).run(None, inputs)[0]
    _assert_near(int8, fp32)


# Run with JAX alone: no albert_jax on the path, and any attempt to import it fails.
_JAX_ALONE = """
import importlib.util, json, sys
sys.path = [entry for entry in sys.path if entry not in ("", {root!r})]
sys.meta_path = [finder for finder in sys.meta_path if "albert_jax" not in repr(finder)]
assert importlib.util.find_spec("albert_jax") is None, "albert_jax is importable"
sys.modules["albert_jax"] = None
import jax, numpy as np
for folder, inputs in json.loads(sys.argv[1]):
    signature = json.load(open(folder + "/signature.json"))
    exported = jax.export.deserialize(open(folder + "/model.jax_export", "rb").read())
    arrays = np.load(inputs)
    outputs = exported.call(*(arrays[name] for name in signature["inputs"]))
    np.savez(inputs + ".out.npz", *outputs)
"""


@pytest.mark.slow
def test_stablehlo_runs_with_jax_alone(tmp_path):
    """Every head exported once, run at three shapes by one fresh process."""
    jobs, expected = [], {}
    for name in HEADS:
        served = _served(name)
        folder = tmp_path / name
        serving.export(served, "stablehlo", str(folder))
        signature = json.loads((folder / "signature.json").read_text())
        assert signature["inputs"] == ["input_ids", "input_mask", "segment_ids"]
        batches = [_inputs(shape, name == "multiple_choice", seed=number)
                   for number, shape in enumerate(SHAPES)]
        for number, (inputs, ours) in enumerate(zip(batches, _ours(served, batches))):
            path = str(tmp_path / f"{name}-{number}.npz")
            np.savez(path, **inputs)
            jobs.append((str(folder), path))
            expected[path] = ours
    root = os.path.dirname(os.path.dirname(os.path.abspath(serving.__file__)))
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", _JAX_ALONE.format(root=root), json.dumps(jobs)],
                            cwd=tmp_path, env=environment, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for path, ours in expected.items():
        theirs = np.load(path + ".out.npz")
        assert len(theirs.files) == len(ours)
        for index, want in enumerate(ours):
            np.testing.assert_allclose(theirs[f"arr_{index}"], np.asarray(want), atol=1e-4,
                                       rtol=0)


def test_bad_format_and_used_output_write_nothing(tmp_path):
    served = _served("classification")
    with pytest.raises(ValueError, match="--format='tflite': choose one of onnx, stablehlo"):
        serving.export(served, "tflite", str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an empty directory"):
        serving.export(served, "onnx", str(tmp_path / "used"))
    assert os.listdir(tmp_path / "used") == ["keep.txt"]
    unknown = serving.ServedModel(CONFIG, served.model, served.params,
                                  FinetunedHead("AlbertForQuestionAnsweringV2"), {},
                                  TextSettings())
    with pytest.raises(ValueError, match="AlbertForQuestionAnsweringV2 head has no serving export"):
        serving.export(unknown, "stablehlo", str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def test_onnx_and_litert_without_their_extra_name_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'albert-jax\[serving\]'"):
        serving.export(_served("regression"), "onnx", str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(ImportError, match=r"pip install 'albert-jax\[litert\]'"):
        serving.export(_served("regression"), "litert", str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_export_command_on_a_pretraining_run(pretrained_tiny, tmp_path):
    """A pretraining run's MLM logits on real text, ONNX against our predict's model; the
    tokenizer travels; an unknown format is one line that writes nothing."""
    output = tmp_path / "onnx"
    result = cli("export", f"--workdir={pretrained_tiny}", "--format=onnx", f"--output={output}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(os.listdir(output)) == [
        "model.onnx", "signature.json", "special_tokens_map.json", "spiece.model",
        "tokenizer.json", "tokenizer_config.json"]
    signature = json.loads((output / "signature.json").read_text())
    assert signature["tokenizer"] == {  # the run's casing, as its tokenizer_config.json says
        "tokenizer_class": "AlbertTokenizer", "do_lower_case": True, "keep_accents": False,
        "remove_space": True, "split_special_tokens": False}
    assert signature["text_settings"] == {  # what tokenizer_config.json cannot say too
        "kind": "sentencepiece", "do_lower_case": True, "keep_accents": False,
        "comma_rule": "reference", "word_boundaries": "reference"}
    tokenizer = Tokenizer.load(str(output / "spiece.model"))
    model_config, params = checkpoint.load(str(pretrained_tiny / "checkpoints"))
    served = serving.ServedModel(model_config, AlbertForPreTraining(model_config),
                                 jax.tree.map(np.asarray, params), FinetunedHead(serving.MASKED_LM),
                                 {}, tokenizer.settings)
    session = ort.InferenceSession(str(output / "model.onnx"))
    for text in ("the cat sat on the mat", "a man walked his dog along the river to the city "
                 "and back again before the train left"):
        ids = np.asarray([[tokenizer.cls_id, *tokenizer.encode(text).tolist(), tokenizer.sep_id]],
                         np.int32)
        inputs = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": 0 * ids}
        (theirs,) = session.run(None, inputs)
        ((ours,),) = _ours(served, [inputs])
        np.testing.assert_allclose(theirs, np.asarray(ours), atol=1e-4, rtol=0)
    result = cli("export", f"--workdir={pretrained_tiny}", "--format=tflite",
                 f"--output={tmp_path / 'bad'}")
    assert result.returncode != 0 and "--format" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_export_command_on_a_finetuned_run(finetuned_mnli, tmp_path):
    """A fine-tuned classification run (the shared MNLI run of conftest.py, only read) as ONNX:
    its labels in signature.json, ONNX Runtime's logits on the run's own features of pairs of
    three lengths equal to the run's model."""
    workdir = finetuned_mnli["workdir"]
    result = cli("export", f"--workdir={workdir}", "--format=onnx",
                 f"--output={tmp_path / 'onnx'}")
    assert result.returncode == 0, result.stderr[-3000:]
    signature = json.loads((tmp_path / "onnx" / "signature.json").read_text())
    assert signature["labels"] == ["contradiction", "entailment", "neutral"]
    assert signature["output_shapes"] == {"logits": ["batch", 3]}
    run = finetune_run.load_finished_run(str(workdir))
    served = serving.ServedModel(run.task.model_config, run.task.model,
                                 jax.tree.map(np.asarray, run.params), run.task.huggingface_head(),
                                 {}, run.task.tokenizer.settings)
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    # MNLI's rows fill the run's 32 tokens (its tokenizer has 400 pieces); pairs of 1 to 4 words
    # and "a" are shorter.
    with open(tmp_path / "pairs.csv", "w", encoding="utf-8", newline="") as file:
        csv.writer(file).writerows([("text", "text_b")] + [
            (" ".join(WORDS[n:n + 1 + n // 3]), "a") for n in range(12)])
    examples = list(run.task.read_inputs(str(tmp_path / "pairs.csv"), 64))[0]
    lengths = []
    for chosen in (examples[:1], examples[1:4], examples[4:12]):
        features = run.task.input_features(chosen)
        lengths.append(int(features["input_mask"].sum(axis=1).max()))  # cut to the longest row
        inputs = {key: features[key][:, :lengths[-1]] for key in serving.INPUTS}
        (theirs,) = session.run(None, inputs)
        ((ours,),) = _ours(served, [inputs])
        np.testing.assert_allclose(theirs, ours, atol=1e-4, rtol=0)
    assert len(set(lengths)) == 3 and max(lengths) < 32, lengths


@pytest.mark.slow
def test_int8_export_reports_its_cost_as_evaluate_scores(finetuned_mnli, tmp_path):
    """`export --quantize=int8` of the shared MNLI run (copied: evaluate writes into its
    workdir): the float32 graph's dev accuracy, printed and in signature.json, is `evaluate`'s
    (the same rows, the same metric); the int8 graph agrees with it on most predictions."""
    workdir = tmp_path / "run"
    shutil.copytree(finetuned_mnli["workdir"], workdir)
    result = cli("export", f"--workdir={workdir}", "--format=onnx", "--quantize=int8",
                 f"--output={tmp_path / 'int8'}")
    assert result.returncode == 0, result.stderr[-3000:]
    quantized = json.loads((tmp_path / "int8" / "signature.json").read_text())["quantized"]
    assert cli("evaluate", f"--workdir={workdir}", "--split=dev").returncode == 0
    evaluated = json.loads((workdir / "predictions" / "dev" / "metrics.json").read_text())
    rows = sum(1 for _ in open(workdir / "predictions" / "dev" / "predictions.jsonl"))
    assert quantized["metric"] == "accuracy" and quantized["rows"] == rows
    assert quantized["fp32"] == pytest.approx(evaluated["accuracy"], abs=1e-6)
    assert quantized["agreement"] >= 0.9 and abs(quantized["int8"] - quantized["fp32"]) <= 0.1
    line = (f"accuracy fp32 {quantized['fp32']:.4f}, int8 {quantized['int8']:.4f}; "
            f"{100 * quantized['agreement']:.1f}% of predictions agree")
    assert line in result.stdout, result.stdout


@pytest.mark.slow
def test_int8_export_of_a_pretraining_run_reports_masked_lm_agreement(pretrained_tiny, tmp_path):
    """A pretraining run has no dev metric: the export reports how often float32 and int8 agree
    on the top-1 piece at the masked positions of one eval batch of its data."""
    result = cli("export", f"--workdir={pretrained_tiny}", "--format=onnx", "--quantize=int8",
                 f"--output={tmp_path / 'int8'}")
    assert result.returncode == 0, result.stderr[-3000:]
    quantized = json.loads((tmp_path / "int8" / "signature.json").read_text())["quantized"]
    assert quantized["metric"] == "masked_lm_top1_agreement" and quantized["positions"] > 0
    assert quantized["agreement"] >= 0.8
    assert f"agrees at {100 * quantized['agreement']:.1f}% of" in result.stdout, result.stdout


def test_int8_cost_without_a_dev_split_is_one_line(capsys):
    """A run whose config has no dev split (an own-data run without data.dev_file): one line,
    nothing measured, nothing recorded."""
    task = types.SimpleNamespace(selection=Selection("dev", "accuracy"), eval_splits=())
    assert quantization_cost.finetuned_cost(types.SimpleNamespace(task=task), b"", b"") == {}
    printed = capsys.readouterr().out
    assert printed.startswith("no dev split") and len(printed.strip().splitlines()) == 1


def test_bad_quantize_is_one_line(tmp_path):
    result = cli("export", f"--workdir={tmp_path}", "--format=onnx", "--quantize=int4",
                 f"--output={tmp_path / 'out'}")
    assert result.returncode != 0 and "--quantize" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    served = _served("classification")
    with pytest.raises(ValueError, match="--quantize and --optimize are options of --format=onnx"):
        serving.export(served, "stablehlo", str(tmp_path / "new"), quantize="int8")
    with pytest.raises(ValueError, match="--quantize='int4': choose one of none, int8"):
        serving.export(served, "onnx", str(tmp_path / "new"), quantize="int4")
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in HEADS if name != "multiple_choice"])
def test_litert_runs_in_the_litert_interpreter(name, tmp_path):
    """--format=litert (the `litert` extra): int8 weights at the fixed shape [1, length], run
    by ai-edge-litert's interpreter near our outputs (int8 weights: 5% of the outputs' scale),
    the same class or piece at 90% of the output rows; multiple choice is refused in one
    line."""
    pytest.importorskip("tensorflow")
    interpreter_module = pytest.importorskip("ai_edge_litert.interpreter")
    served = _served(name)
    serving.export(served, "litert", str(tmp_path / "litert"))
    signature = json.loads((tmp_path / "litert" / "signature.json").read_text())
    assert signature["input_shape"] == [1, CONFIG.max_position_embeddings]  # 48 < 128
    interpreter = interpreter_module.Interpreter(model_path=str(tmp_path / "litert" /
                                                              "model.tflite"))
    interpreter.allocate_tensors()
    inputs = _inputs((1, CONFIG.max_position_embeddings), False)
    for detail, key in zip(interpreter.get_input_details(), serving.INPUTS):
        interpreter.set_tensor(detail["index"], inputs[key])
    interpreter.invoke()
    # The outputs in the function's order: LiteRT names them StatefulPartitionedCall:<index>.
    details = sorted(interpreter.get_output_details(), key=lambda detail: detail["name"])
    theirs = [interpreter.get_tensor(detail["index"]) for detail in details]
    (ours,) = _ours(served, [inputs])
    assert len(theirs) == len(ours)
    for got, want in zip(theirs, ours):
        assert got.shape == want.shape
        _assert_near(got, want)
        if want.shape[-1] > 1:  # random weights leave near ties: most rows, not all
            assert np.mean(got.argmax(-1) == want.argmax(-1)) >= 0.9
    with pytest.raises(ValueError, match="multiple-choice head has no --format=litert"):
        serving.export(_served("multiple_choice"), "litert", str(tmp_path / "mc"))
