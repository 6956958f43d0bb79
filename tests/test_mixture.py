"""Language mixtures: `data.corpus` as a dict of groups weighed by data.mixture_alpha. The
shares q_i and rates r_i against hand-computed values; each document's passes; the groups'
languages and sources; `tokenizer train`'s sample with q_i of each group; a mixture's own
dataset folder; bad input in one line each; and a build whose groups' instances scale by r_i,
the same bytes on the process pool and on Beam after a kill."""
import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from etils import epath

from albert_jax.data import corpus
from albert_jax.data.building import beam_build, build_unit, builder, dataset_settings, masking
from albert_jax.data.building.dataset_settings import DatasetSettings
from albert_jax.data.corpus import ReadSettings
from albert_jax.data.tokenizers import Tokenizer
from albert_jax.errors import ConfigError
from cli_fixtures import run_config
from test_beam_build import BEAM_LOCAL, build_on_the_pool_and_on_beam_after_a_kill, digests
from test_block_examples import GOLDEN
from test_block_examples import documents as block_documents


def write_text(path: Path, documents: list[list[str]]) -> str:
    """SPEC 1.2 text (one sentence a line, a blank line between documents), gzipped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join("\n".join(document) for document in documents) + "\n"
    path.write_bytes(gzip.compress(text.encode(), mtime=0))
    return str(path)


@pytest.mark.parametrize("alpha, q", [(0.5, [1 / 5, 2 / 5, 2 / 5]),  # sqrt(1/9, 4/9, 4/9)
                                      (1.0, [1 / 9, 4 / 9, 4 / 9]),
                                      (0.0, [1 / 3, 1 / 3, 1 / 3])])
def test_sampling_shares_are_the_smoothed_sizes(alpha, q):
    p, shares = corpus.sampling_shares([100, 400, 400], alpha)
    assert p == pytest.approx([1 / 9, 4 / 9, 4 / 9])
    assert shares == pytest.approx(q)
    # r_i = q_i / p_i: the small group seen 9/5 as often at alpha 0.5, 3 times at alpha 0.
    assert [q_i / p_i for q_i, p_i in zip(shares, p)] == pytest.approx(
        {0.5: [9 / 5, 9 / 10, 9 / 10], 1.0: [1, 1, 1], 0.0: [3, 3 / 4, 3 / 4]}[alpha])


def test_each_document_passes_the_whole_part_and_one_more_with_the_fraction():
    rng = np.random.default_rng(7)
    assert corpus_passes(3.0, 5, rng).tolist() == [3] * 5
    assert rng.random() == np.random.default_rng(7).random()  # a whole number draws nothing
    expected = 2 + (np.random.default_rng(11).random(8) < 0.25)
    assert corpus_passes(2.25, 8, np.random.default_rng(11)).tolist() == expected.tolist()
    many = corpus_passes(2.25, 100_000, np.random.default_rng(0))
    assert set(many.tolist()) == {2, 3} and many.mean() == pytest.approx(2.25, abs=0.01)
    fewer = corpus_passes(0.4, 100_000, np.random.default_rng(0))  # below one pass: a subsample
    assert set(fewer.tolist()) == {0, 1} and fewer.mean() == pytest.approx(0.4, abs=0.01)


def corpus_passes(passes, num_documents, rng):
    return build_unit.document_passes(passes, num_documents, rng)


def test_a_block_passes_its_documents_as_often_as_their_draws_say():
    tokenizer = Tokenizer.load(str(GOLDEN / "block_examples.model"))

    def examples(dupe_factor, passes=None):
        settings = DatasetSettings(name="mixture", seq_len=64, dupe_factor=dupe_factor)
        masking_settings = masking.MaskingSettings.from_metadata(dict(
            vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, cls_id=tokenizer.cls_id,
            sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id, settings=settings.as_dict()))
        return build_unit.block_examples(settings, tokenizer, masking_settings,
                                         block_documents()[:40], seed_prefix=(1, 0, 0),
                                         passes=passes)[0]

    two = examples(2)
    assert examples(3, passes=2.0) == two  # a whole number of passes: dupe_factor's bytes
    one = examples(1)
    one_and_a_half = examples(3, passes=1.5)
    # Pass 0 holds every document (the whole part is 1), pass 1 about half of them.
    assert one_and_a_half[:len(one)] == one
    assert 0.25 < (len(one_and_a_half) - len(one)) / len(one) < 0.75
    assert not set(one_and_a_half[len(one):]) & set(one)  # pass 1's own masks


def test_groups_read_in_their_language_and_list_their_sources(tmp_path):
    hindi = write_text(tmp_path / "hi" / "a.txt.gz", [["एक।", "दो।"]])
    other = write_text(tmp_path / "wiki" / "b.txt.gz", [["One.", "Two."], ["Three.", "Four."]])
    spec = f"{{'hi': '{tmp_path}/hi', 'wiki': '{other}'}}"
    groups = corpus.corpus_groups(spec, ReadSettings(language="ru"))
    assert [(group.name, group.reading.language) for group in groups] == [("hi", "hi"),
                                                                          ("wiki", "ru")]
    assert corpus.list_sources(spec) == [hindi, other]
    assert [source for source, _ in corpus.flat_sources(groups)] == [hindi, other]
    assert list(corpus.iter_documents(spec)) == [["एक।", "दो।"], ["One.", "Two."],
                                                 ["Three.", "Four."]]
    assert corpus.count_text(groups[1]) == corpus.TextSize(characters=4 + 4 + 6 + 5,
                                                           sentences=4)
    plain = corpus.corpus_groups(other, ReadSettings())
    assert len(plain) == 1 and plain[0].name == "" and not corpus.is_mixture(plain)


def test_units_counted_on_any_runner_add_up_to_each_groups_text(tmp_path):
    # Files cut into byte ranges (text, JSON Lines) and row groups (Parquet), many parts each:
    # counted part by part, on any runner, they sum to a whole read of each group.
    documents = [document for _, document in zip(range(120), corpus.demo_documents())]
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "a.txt").write_text(
        "\n\n".join("\n".join(document) for document in documents[:60]) + "\n")
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "b.jsonl").write_text("".join(
        json.dumps({"text": "\n".join(document)}) + "\n" for document in documents[60:100]))
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"text": ["\n".join(document) for document in documents[100:]]}),
                   tmp_path / "pq" / "c.parquet", row_group_size=2)
    spec = repr({name: str(tmp_path / name) for name in ("txt", "json", "pq")})
    groups = corpus.corpus_groups(spec, ReadSettings())
    units = builder.plan_units(groups, unit_bytes=1500)
    assert all(sum(unit.group == group.name for unit in units) >= 4 for group in groups)
    whole = [corpus.count_text(group) for group in groups]
    # As `tokenizer train` counts: in parts, on one process and on two, what reading saw kept.
    for processes in (1, 2):
        stats = corpus.CorpusStats()
        assert corpus.count_groups(groups, 1500, processes, stats) == whole
        assert stats.documents == len(documents)
        assert stats.sentences == sum(size.sentences for size in whole)
    # As `data build` counts: a unit at a time, inline, on the pool and on Beam.
    units_dir = epath.Path(tmp_path / "units")
    assert builder.count_mixture(groups, units, units_dir) == whole
    assert builder.count_mixture(groups, units, units_dir, num_processes=2) == whole
    options = beam_build.pipeline_options(BEAM_LOCAL)
    assert builder.count_mixture(groups, units, units_dir, options) == whole
    assert len(json.loads((units_dir / builder.COUNTS_FILE).read_text())) == len(units)


@pytest.mark.parametrize("spec, message", [
    ("{'hi', 'th'}", "is not a mixture: give a dict of group name -> corpus spec"),
    ("{'hi': 'a.txt'", "is not a mixture: give a dict of group name -> corpus spec"),
    ("{}", "is not a mixture: give a dict of group name -> corpus spec"),
    ("{'hi': ''}", "the mixture's group 'hi' has the corpus '': give it a corpus spec"),
    ("{'hi': 3}", "the mixture's group 'hi' has the corpus 3: give it a corpus spec"),
    ("{'': 'demo'}", "the mixture's group name '' is not a name"),
    ("{'th': 'no/such/*.txt'}", "the mixture's group 'th': corpus pattern 'no/such/*.txt' "
                                "matched no file"),
])
def test_a_bad_mixture_is_one_line(spec, message):
    with pytest.raises(ConfigError) as error:
        corpus.corpus_groups(spec, ReadSettings())
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_group_without_text_and_a_negative_alpha_are_one_line(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n\n")
    groups = corpus.corpus_groups(f"{{'th': '{tmp_path}/empty.txt'}}", ReadSettings())
    with pytest.raises(ConfigError, match=r"^config.data.corpus: the mixture's group 'th' "
                                          r"\(.*empty.txt'\) holds no text"):
        corpus.count_text(groups[0])
    with pytest.raises(ConfigError, match=r"^config.data.mixture_alpha=-0.1: give an exponent "
                                          r">= 0 \(0.7: mBERT's; 0.3: XLM-R's and mT5's"):
        corpus.sampling_shares([1, 2], -0.1)


def test_tokenizer_training_samples_q_of_each_group(tmp_path):
    # Groups of 60, 30 and 10 sentences of 11 characters: p = 0.6, 0.3, 0.1.
    def group(name, count):
        return write_text(tmp_path / f"{name}.txt.gz",
                          [[f"{name}{index:04d}...." for index in range(count)]])

    spec = f"{{'big': '{group('big', 60)}', 'mid': '{group('mid', 30)}', " \
           f"'few': '{group('few', 10)}'}}"
    groups = corpus.corpus_groups(spec, ReadSettings())
    sizes = [corpus.count_text(g) for g in groups]
    assert [size.characters for size in sizes] == [660, 330, 110]

    def sampled(alpha, num_sentences):
        sample = list(corpus.sample_mixture(groups, sizes, alpha, num_sentences, seed=0))
        return [sum(sentence.startswith(name) for sentence in sample)
                for name in ("big", "mid", "few")]

    assert sampled(1.0, 50) == [30, 15, 5]
    assert sampled(0.0, 60) == [20, 20, 20]  # the 10 sentences of `few` twice
    assert sampled(0.0, 1_000) == [33, 33, 33]  # at most the corpus's 100 sentences
    # q at alpha 0.5: sqrt(.6), sqrt(.3), sqrt(.1) over their sum.
    q = np.sqrt([0.6, 0.3, 0.1]) / np.sqrt([0.6, 0.3, 0.1]).sum()
    assert sampled(0.5, 100) == np.round(q * 100).astype(int).tolist()


def test_a_mixture_has_its_own_dataset_folder(tmp_path, demo_pretraining_data):
    text = demo_pretraining_data["data.corpus"]
    plain = DatasetSettings.from_run_config(run_config(demo_pretraining_data))
    assert not {"mixture", "mixture_alpha"} & set(plain.as_dict())  # a plain corpus as before

    def mixture(**changes):
        return DatasetSettings.from_run_config(run_config(
            {**demo_pretraining_data, "data.corpus": f"{{'en': '{text}', 'wiki': 'demo'}}",
             **changes}))

    mixed = mixture()
    assert mixed.as_dict()["mixture"] == "en [en]: 1; wiki [en]: 1"
    assert mixed.as_dict()["mixture_alpha"] == 0.7
    names = {plain.name, mixed.name, mixture(**{"data.mixture_alpha": 0.3}).name,
             DatasetSettings.from_run_config(run_config(
                 {**demo_pretraining_data,
                  "data.corpus": f"{{'de': '{text}', 'wiki': 'demo'}}"})).name}
    assert len(names) == 4
    with pytest.raises(ConfigError, match=r"^config.data.mixture_alpha=-1.0: give an exponent"):
        mixture(**{"data.mixture_alpha": -1.0})


def _group_instances(folder: str) -> dict[str, tuple[float, int]]:
    """{group: (r_i, instances)} from a built mixture's metadata."""
    metadata = json.loads(Path(folder, "metadata.json").read_text())
    return {row["group"]: (row["r"], row["instances"]) for row in metadata["mixture"]}


@pytest.mark.slow
def test_each_groups_instances_scale_by_r_on_every_runner_and_after_a_kill(
        tmp_path, demo_pretraining_data):
    # Three groups of demo documents, of about 6:3:1 characters, three files (units) each (names
    # that are no language code: data.language for all).
    documents = [document for _, document in zip(range(500), corpus.demo_documents())]
    spans = {"large": documents[:300], "medium": documents[300:450], "small": documents[450:500]}
    specs = {}
    for name, group_documents in spans.items():
        third = len(group_documents) // 3 + 1
        for index in range(3):
            write_text(tmp_path / "corpus" / name / f"part{index}.txt.gz",
                       group_documents[index * third:(index + 1) * third])
        specs[name] = str(tmp_path / "corpus" / name)
    settings = {**demo_pretraining_data, "data.corpus": repr(specs), "data.dupe_factor": 4,
                "data.unit_bytes": 1, "data.eval_fraction": 0.05}

    def build(alpha: float, data_dir: str) -> str:
        config = run_config({**settings, "data.mixture_alpha": alpha, "data.dir": data_dir})
        builder.build_from_config(config, num_processes=1)
        return dataset_settings.dataset_dir(config)

    as_sized = _group_instances(build(1.0, str(tmp_path / "alpha1")))
    smoothed_folder = build(0.3, str(tmp_path / "one"))
    smoothed = _group_instances(smoothed_folder)
    assert smoothed["small"][0] > 1.5 and smoothed["large"][0] < 0.9  # (the small one up-sampled)
    for name, (r, instances) in smoothed.items():
        assert as_sized[name][0] == pytest.approx(1.0)
        assert instances / as_sized[name][1] == pytest.approx(r, rel=0.04), name
    total = sum(instances for _, instances in smoothed.values())
    assert total == pytest.approx(sum(instances for _, instances in as_sized.values()), rel=0.04)
    expected = digests(smoothed_folder)
    # The process pool (2 processes), and Beam killed after its first unit and run again: the
    # same bytes, the sizes counted once (by the killed build) and read from its plan.
    pooled, beam, output = build_on_the_pool_and_on_beam_after_a_kill(
        {**settings, "data.mixture_alpha": 0.3}, tmp_path, num_units=9)
    assert pooled == expected and beam == expected
    assert "| group | language | characters | p_i | q_i | r_i | instances |" in output
    assert output.count("counted the characters") == 1  # by the pool's build only
