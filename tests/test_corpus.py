"""Corpus readers (SPEC 1.2 input format) and the demo corpus."""
import gzip
import importlib.util
import json
import re

import pytest
from etils import epath

from albert_jax.data import corpus
from albert_jax.data.building import dataset_settings
from albert_jax.data.corpus import (
    CorpusStats,
    demo,
    documents,
    iter_documents,
    lines,
    list_sources,
    read_documents,
)


def _write(path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def test_blank_lines_separate_documents(tmp_path):
    # SPEC 1.2.1: one sentence per line, blank line = boundary; whitespace-only lines are blank.
    path = _write(tmp_path / "a.txt", b"First one.\n  Second one.  \n\nThird.\n \t \n\n\nFourth.\n"
                                      b"Fifth.")  # No final newline.
    stats = CorpusStats()
    assert list(read_documents(path, stats=stats)) == [
        ["First one.", "Second one."], ["Third."], ["Fourth.", "Fifth."]]
    assert (stats.sources, stats.documents, stats.sentences) == (1, 3, 5)
    assert stats.empty_documents == 2  # The second and third blank line in a row.
    assert "3 documents, 5 sentences from 1 sources; 2 empty documents" == stats.report()


def test_one_sentence_documents_and_empty_file(tmp_path):
    assert list(read_documents(_write(tmp_path / "one.txt", b"A.\n\nB.\n\nC.\n"))) == [
        ["A."], ["B."], ["C."]]
    stats = CorpusStats()
    assert list(read_documents(_write(tmp_path / "empty.txt", b""), stats=stats)) == []
    assert (stats.documents, stats.sentences, stats.sources) == (0, 0, 1)


def test_gzip(tmp_path):
    data = gzip.compress("Ünïcode line.\nTwo.\n\nThree.\n".encode())
    path = _write(tmp_path / "a.txt.gz", data)
    assert list(read_documents(path)) == [["Ünïcode line.", "Two."], ["Three."]]


def test_truncated_gzip_is_counted(tmp_path):
    data = gzip.compress(b"One.\nTwo.\n\n" + b"Three.\n" * 20000)
    path = _write(tmp_path / "cut.txt.gz", data[:len(data) // 2])
    stats = CorpusStats()
    documents = list(read_documents(path, stats=stats))
    assert documents[0] == ["One.", "Two."] and set(documents[1]) == {"Three."}
    assert stats.truncated_files == 1 and "1 truncated files" in stats.report()


def test_long_line_is_skipped_and_counted(tmp_path):
    long_line = b"x" * 1_500_000
    path = _write(tmp_path / "long.txt", b"Before.\n" + long_line + b"\nAfter.\n\nNext doc.\n"
                  + long_line)  # A long line at end of file without a newline, too.
    stats = CorpusStats()
    assert list(read_documents(path, stats=stats)) == [["Before.", "After."], ["Next doc."]]
    assert stats.skipped_long_lines == 2
    assert "2 skipped long lines" in stats.report()


def test_line_of_exactly_the_limit_is_kept(tmp_path):
    line = b"y" * (lines.MAX_LINE_BYTES - 1) + b"\n"  # 1 MB including its newline.
    stats = CorpusStats()
    assert [len(d[0]) for d in read_documents(_write(tmp_path / "a.txt", line), stats=stats)] == [
        lines.MAX_LINE_BYTES - 1]
    assert stats.skipped_long_lines == 0


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    path = _write(tmp_path / "bad.txt", b"Good line.\nBad \xff\xfe bytes.\nAlso \xc3 bad.\n")
    stats = CorpusStats()
    assert list(read_documents(path, stats=stats)) == [
        ["Good line.", "Bad \ufffd\ufffd bytes.", "Also \ufffd bad."]]
    assert stats.invalid_utf8_lines == 2


def test_very_long_document_is_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(documents, "MAX_DOCUMENT_SENTENCES", 3)
    path = _write(tmp_path / "a.txt", b"1\n2\n3\n4\n5\n6\n\n7\n")
    stats = CorpusStats()
    assert list(read_documents(path, stats=stats)) == [["1", "2", "3"], ["4", "5", "6"], ["7"]]
    assert (stats.split_documents, stats.empty_documents) == (2, 0)


def test_list_sources_globs_directories_lists(tmp_path):
    a = _write(tmp_path / "d" / "b.txt", b"B.\n")
    b = _write(tmp_path / "d" / "sub" / "a.txt.gz", gzip.compress(b"A.\n"))
    c = _write(tmp_path / "c.txt", b"C.\n")
    assert list_sources(str(tmp_path / "d")) == sorted([a, b])  # Recursive.
    assert list_sources(str(tmp_path / "**" / "*.txt")) == sorted([a, c])
    assert list_sources(f"{c},{tmp_path / 'd'}") == [c] + sorted([a, b])  # List keeps its order.
    assert list(iter_documents(f"{c},{tmp_path / 'd'}")) == [["C."], ["B."], ["A."]]
    assert list_sources("demo") == ["demo"]


def test_list_sources_errors(tmp_path):
    with pytest.raises(ValueError, match=r"nothing/\*\.txt.*matched no file"):
        list_sources(str(tmp_path / "nothing" / "*.txt"))
    with pytest.raises(ValueError, match="corpus/missing.txt"):
        list_sources("corpus/missing.txt")  # Looks like a file, not a TFDS name.
    with pytest.raises(ValueError, match="names no source"):
        list_sources(" , ")


def _upload(local_root, bucket_root):
    """Copies every file under `local_root` to the same relative path under `bucket_root`."""
    for path in sorted(local_root.rglob("*")):
        if path.is_file():
            target = epath.Path(bucket_root) / str(path.relative_to(local_root))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())


def test_bucket_corpus_reads_as_the_same_files_locally(tmp_path, bucket):
    local = tmp_path / "corpus"
    _write(local / "b.txt", b"Bee one.\nBee two.\n\nBee three.\n")
    _write(local / "a.txt", b"Ay one.\nAy two.\n")
    _write(local / "deep" / "c.txt.gz", gzip.compress(b"Sea one.\nSea two.\n\nSea three.\n"))
    _write(local / "notes.md", b"Not matched by *.txt.\n")
    _upload(local, f"{bucket}/corpus")
    for local_spec, bucket_spec in [
            (f"{local}/*.txt", f"{bucket}/corpus/*.txt"),  # a glob
            (str(local), f"{bucket}/corpus"),  # a folder, recursively
            (f"{local}/deep/c.txt.gz,{local}/a.txt",  # a list keeps its order; gzip
             f"{bucket}/corpus/deep/c.txt.gz,{bucket}/corpus/a.txt")]:
        assert ([source.replace(bucket + "/corpus", str(local))
                 for source in list_sources(bucket_spec)] == list_sources(local_spec))
        assert list(iter_documents(bucket_spec)) == list(iter_documents(local_spec))
        # The same files give the same dataset identity, wherever they lie.
        assert (dataset_settings._corpus_signature(corpus.sized_sources(bucket_spec))
                == dataset_settings._corpus_signature(corpus.sized_sources(local_spec)))
    assert list(iter_documents(f"{bucket}/corpus/*.txt")) == [
        ["Ay one.", "Ay two."], ["Bee one.", "Bee two."], ["Bee three."]]
    assert corpus.describe(f"{bucket}/corpus/*.txt") == (
        f"corpus '{bucket}/corpus/*.txt': 2 text files, 46 bytes")  # 30 + 16
    assert corpus.describe(f"demo,{local}/a.txt") == (
        f"corpus 'demo,{local}/a.txt': 1 text file, 16 bytes; demo")


def test_bucket_corpus_errors(bucket):
    with pytest.raises(ValueError, match=r"corpus pattern 'gs://.*/nothing/\*\.txt' matched no file"):
        list_sources(f"{bucket}/nothing/*.txt")
    with pytest.raises(ValueError, match=r"a bucket glob cannot take `\*\*`; give the folder"):
        list_sources(f"{bucket}/corpus/**/*.txt")


def test_tfds_names():
    assert list_sources("wikipedia/20230601.en") == ["tfds:wikipedia/20230601.en:train"]
    assert list_sources("bookcorpus") == ["tfds:bookcorpus:train"]
    assert list_sources("tfds:c4/en:validation") == ["tfds:c4/en:validation"]
    assert list_sources("tfds:c4/en:train[:1%]") == ["tfds:c4/en:train[:1%]"]
    assert list_sources("tfds:c4/en") == ["tfds:c4/en:train"]
    if importlib.util.find_spec("tensorflow") is None:
        with pytest.raises(ImportError, match=r"pip install albert-jax\[tf\]"):
            next(read_documents("tfds:bookcorpus:train"))


def test_docstring_sentences_of_the_demo_corpus():
    assert demo._docstring_sentences(
        "It works. See e.g. the docs! Is 3.5 ok? \"Yes.\" Done") == [
        "It works.", "See e.g. the docs!", "Is 3.5 ok?", "\"Yes.\"", "Done"]


@pytest.fixture(scope="module")
def demo_corpus():
    return list(corpus.demo_documents())


def test_demo_corpus_is_large_multi_sentence_english(demo_corpus):
    sentences = [sentence for document in demo_corpus for sentence in document]
    assert len(demo_corpus) >= 3000
    assert sum(len(document) >= 2 for document in demo_corpus) >= 0.9 * len(demo_corpus)
    assert len(sentences) >= 15000
    assert sum(map(len, sentences)) >= 1_000_000  # characters
    assert all(sentence[-1] in ".!?" and len(sentence.split()) >= 3 for sentence in sentences)
    assert not any(re.match(r"(>>>|\.\.\. |\.\. )", sentence) for sentence in sentences)
    words = [word.lower() for sentence in sentences for word in sentence.split()]
    # English function words make up a large share of running English text.
    common = sum(word in {"the", "a", "of", "to", "is", "and", "in", "if", "be", "it"}
                 for word in words)
    assert common / len(words) > 0.2


@pytest.mark.slow
def test_demo_corpus_is_deterministic(demo_corpus, tmp_path, monkeypatch):
    assert list(corpus.demo_documents()) == demo_corpus  # Cached: the same, and a fresh copy.
    assert demo_corpus[0] is not next(corpus.demo_documents())
    monkeypatch.setattr(demo, "DEMO_CACHE_DIR", str(tmp_path / "cache"))
    demo._demo_corpus.cache_clear()
    assert list(corpus.demo_documents()) == demo_corpus  # Rebuilt from the stdlib sources...
    (cache_file,) = (tmp_path / "cache").iterdir()
    demo._demo_corpus.cache_clear()
    assert list(corpus.demo_documents()) == demo_corpus  # ... and read back from the cache file.
    assert list(read_documents("demo")) == demo_corpus

    cache_file.write_text(cache_file.read_text()[:1000])  # cut short: built again, and rewritten
    demo._demo_corpus.cache_clear()
    assert list(corpus.demo_documents()) == demo_corpus
    assert json.loads(cache_file.read_text()) == [list(document) for document in demo_corpus]
    demo._demo_corpus.cache_clear()  # later tests read the machine's own cache again
