"""A tokenizer's text settings travel with it: a cased, keep_accents pretraining run fine-tunes,
predicts and exports with its own settings (no key repeated), an HF folder's
tokenizer_config.json is read as it says, and a key the run sets itself wins, with one warning
line when it differs."""
import csv
import json
import logging
from pathlib import Path

import pytest

from albert_jax.convert import formats, tokenizer_files
from albert_jax.data.tokenizers import TextSettings
from albert_jax.finetune import run as finetune_run
from cli_fixtures import build_demo_pretraining_data, cli, pretrain_tiny
from configs import glue as glue_config
from finetune_fixtures import WORDS, finetune_mnli, write_glue_task

# The pretraining run's settings, as every workdir and export made from it must record them.
CASED_ACCENTS = TextSettings(do_lower_case=False, keep_accents=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A cased, keep_accents pretraining run (tiny, 6 steps on 300 demo documents) and MNLI
    fine-tuned from it with no text key given: {"pretrained", "finetuned"} workdirs."""
    root = tmp_path_factory.mktemp("travel")
    settings = build_demo_pretraining_data(root, num_documents=300, changes={
        "data.dupe_factor": 1, "data.do_lower_case": False, "data.keep_accents": True})
    pretrained = pretrain_tiny(root, settings)
    return {"pretrained": pretrained,
            "finetuned": Path(finetune_mnli(root, pretrained)["workdir"])}


def _rte_config(tmp_path: Path, init_from: Path):
    config = glue_config.get_config("task=rte,runlocal")
    config.data.path = write_glue_task(str(tmp_path), "rte")
    config.init_from = str(init_from)
    return config


@pytest.mark.slow  # the fixture trains a tokenizer, builds data, pretrains, fine-tunes: 20-50 s
def test_a_cased_keep_accents_run_finetunes_predicts_and_exports_with_its_settings(runs, tmp_path):
    pretrained, finetuned = runs["pretrained"], runs["finetuned"]
    assert json.loads((pretrained / "spiece.model.json").read_text()) == CASED_ACCENTS.as_dict()
    # The fine-tuning run's config.json and tokenizer copy record what it tokenized with.
    data = json.loads((finetuned / "config.json").read_text())["data"]
    assert (data["do_lower_case"], data["keep_accents"], data["comma_rule"]) == (
        False, True, "reference")
    assert json.loads((finetuned / "spiece.model.json").read_text()) == CASED_ACCENTS.as_dict()
    for workdir in (pretrained, finetuned):  # fill-mask, and evaluate / predict / embeddings
        assert finetune_run.load_finished_run(str(workdir)).task.tokenizer.settings == \
            CASED_ACCENTS, workdir

    with open(tmp_path / "pairs.csv", "w", encoding="utf-8", newline="") as file:
        csv.writer(file).writerows([("text", "text_b")] + [(WORDS[n].title(), "a")
                                                           for n in range(3)])
    result = cli("predict", f"--workdir={finetuned}", f"--input={tmp_path / 'pairs.csv'}",
                 f"--output={tmp_path / 'predictions.jsonl'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len((tmp_path / "predictions.jsonl").read_text().splitlines()) == 3

    result = cli("export", f"--workdir={finetuned}", "--format=stablehlo",
                 f"--output={tmp_path / 'served'}")
    assert result.returncode == 0, result.stderr[-3000:]
    signature = json.loads((tmp_path / "served" / "signature.json").read_text())
    assert signature["text_settings"] == CASED_ACCENTS.as_dict()
    assert (signature["tokenizer"]["do_lower_case"], signature["tokenizer"]["keep_accents"]) == (
        False, True)

    tokenizer = finetune_run.load_finished_run(str(finetuned)).task.tokenizer
    assert tokenizer.encode("The").tolist() != tokenizer.encode("the").tolist()  # cased
    # Marks kept (needs data.keep_accents in preprocessing): "é" is not "e".
    assert tokenizer.encode("café").tolist() != tokenizer.encode("cafe").tolist()


@pytest.mark.slow
def test_an_hf_folder_is_read_as_its_tokenizer_config_says(runs, tmp_path, caplog):
    """The HF export of the run says cased and keep_accents in its tokenizer_config.json (it holds
    no record of ours); init_from of it and `convert --from=huggingface` read them from there."""
    folder = tmp_path / "hf"
    model_config = formats.convert(source="orbax", target="huggingface",
                                   path=str(runs["pretrained"]), output=str(folder),
                                   config_path=None)
    tokenizer_files.carry_tokenizer("orbax", str(runs["pretrained"]), None, "huggingface",
                                    str(folder), model_config.max_position_embeddings)
    said = json.loads((folder / "tokenizer_config.json").read_text())
    assert (said["do_lower_case"], said["keep_accents"]) == (False, True)
    assert not (folder / "spiece.model.json").exists()

    config = _rte_config(tmp_path, folder)
    with caplog.at_level(logging.WARNING):
        task = finetune_run.build_task(config)
    assert not [record for record in caplog.records if "config data." in record.getMessage()]
    # AlbertTokenizer's digit-comma rule comes with an HF folder (SPEC 2.3).
    expected = TextSettings(do_lower_case=False, keep_accents=True, comma_rule="hf")
    assert task.tokenizer.settings == expected
    assert (config.data.do_lower_case, config.data.keep_accents, config.data.comma_rule) == (
        False, True, "hf")

    tokenizer_files.carry_tokenizer("huggingface", str(folder), None, "orbax",
                                    str(tmp_path / "orbax"), 512)
    assert json.loads((tmp_path / "orbax" / "spiece.model.json").read_text()) == \
        expected.as_dict()


@pytest.mark.slow
def test_a_key_the_run_sets_wins_with_one_warning_line(runs, tmp_path, caplog):
    config = _rte_config(tmp_path, runs["pretrained"])
    config.data.do_lower_case, config.data.keep_accents = True, True  # one differs, one agrees
    with caplog.at_level(logging.WARNING):
        task = finetune_run.build_task(config)
    warnings = [record.getMessage() for record in caplog.records
                if "config data." in record.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert warnings[0].startswith("config data.do_lower_case=True differs from the init_from "
                                  "workdir checkpoint (False)")
    assert "--config.data.do_lower_case=False" in warnings[0]
    assert task.tokenizer.settings == TextSettings(do_lower_case=True, keep_accents=True)
    assert json.loads(task.workdir_files()["spiece.model.json"])["do_lower_case"] is True
