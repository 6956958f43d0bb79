"""Tiny SQuAD files in the official JSON format, written into a test's tmp dir.

  path = write_squad_file(tmp_path, "v2.0", "dev")      # tmp_path/dev-v2.0.json
  tokenizer = train_tokenizer(tmp_path / "spm.model")   # covers every script of the files

The paragraphs hold what breaks character alignment: accents (café, São Paulo, Zürich), Korean
and Chinese, several spaces and tabs, text the tokenizer normalises (the "ﬁ" ligature, fullwidth
letters, a final sigma, a dotted capital I, digit-commas), answers that start or end inside a
word, and long contexts that need several windows. "train" files have one answer per question,
"dev" files several (as the official dev sets); v2.0 files add unanswerable questions.
"""
from __future__ import annotations

import json
import os
import random
from typing import Any

from albert_jax.data import tokenizers as tokenizer_lib

# (context, [(question, [answer texts] or [] when unanswerable), ...]); an answer starts at the
# first occurrence of its text in the context.
_LONG_FILLER = ("the old {} market opened early and traders sold fish bread and red apples "
                "to people walking along the river")
_LONG_WORDS = ["north", "south", "harbour", "castle", "village", "mountain", "forest", "lake"]


def _long_context() -> str:
    sentences = [_LONG_FILLER.format(word).capitalize() + "." for word in _LONG_WORDS * 3]
    sentences.insert(2, "The bridge of Kalomir was built in 1832 by Vorden masons.")
    sentences.insert(19, "A lighthouse named Quibazo stands at the end of the pier.")
    return " ".join(sentences)


PARAGRAPHS: list[tuple[str, list[tuple[str, list[str]]]]] = [
    ("Le Procope is a café in Paris. Founded in 1686, it served crème brûlée and sorbet to "
     "naïve visitors from São Paulo and Zürich.",
     [("When was Le Procope founded?", ["1686"]),
      ("Which dessert did the café serve?", ["crème brûlée", "crème brûlée and sorbet"]),
      ("Where did the visitors come from?", ["São Paulo", "São Paulo and Zürich"]),
      ("Which ending does the Swiss city have?", ["rich"]),  # Inside the word Zürich.
      ("Who served the pizza?", [])]),
    ("The  river\tLomizo   flows\t\tnorth  of the  Kabampish  hills, past the well-known "
     "Franco-Prussian  fort.",
     [("Which river flows north?", ["Lomizo"]),
      ("What does the river do?", ["Lomizo   flows\t\tnorth", "flows"]),
      ("Which hills?", ["Kabampish", "bampish"]),  # The second starts inside the word.
      ("Which war gave the fort its name?", ["Prussian", "Franco-Prussian"]),
      ("How tall are the hills?", [])]),
    ("서울은 대한민국의 수도이다. 한강은 서울을 가로질러 흐른다.",
     [("대한민국의 수도는?", ["서울", "서울은"]),
      ("서울을 가로지르는 강은?", ["한강"]),
      ("부산의 인구는?", [])]),
    ("北京是中华人民共和国的首都。长城位于北京的北部，全长两万多公里。",
     [("中国的首都是哪里？", ["北京"]),
      ("长城有多长？", ["两万多公里"]),
      ("上海的人口是多少？", [])]),
    ("The ﬁnal score was ＡＢＣ１２３ in the oﬃcial record; the word ΣΟΦΟΣ means wise in "
     "İstanbul, and the ticket cost 1,000, said the Übermensch.",
     [("What was the final score?", ["ＡＢＣ１２３"]),
      ("Which score?", ["ﬁnal"]),
      ("Which word means wise?", ["ΣΟΦΟΣ"]),
      ("How much did the ticket cost?", ["1,000", "1,000,"]),
      ("Where?", ["İstanbul"]),
      ("Who said it?", ["Übermensch"])]),
    (_long_context(),
     [("When was the bridge of Kalomir built?", ["1832"]),
      ("Who built the bridge?", ["Vorden masons", "Vorden"]),
      ("What is the lighthouse called?", ["Quibazo"]),
      ("What colour are the pears?", [])]),
]


def _answer(context: str, text: str) -> dict[str, Any]:
    return {"text": text, "answer_start": context.index(text)}


def squad_dataset(version: str, split: str) -> dict[str, Any]:
    """The official structure: {"version", "data": [{"title", "paragraphs": [{"context",
    "qas": [{"id", "question", "answers", ("is_impossible", "plausible_answers")}]}]}]}.

    v1.1 leaves out the unanswerable questions; "train" keeps the first answer only.
    """
    articles = []
    for paragraph_index, (context, questions) in enumerate(PARAGRAPHS):
        qas = []
        for question_index, (question, answers) in enumerate(questions):
            if not answers and version == "v1.1":
                continue
            qa = {"id": f"q{paragraph_index}_{question_index}", "question": question,
                  "answers": [_answer(context, answer)
                              for answer in (answers[:1] if split == "train" else answers)]}
            if version == "v2.0":
                qa["is_impossible"] = not answers
                if not answers:
                    qa["plausible_answers"] = [_answer(context, context[:2])]
            qas.append(qa)
        articles.append({"title": f"article_{paragraph_index}",
                         "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "1.1" if version == "v1.1" else "v2.0", "data": articles}


def write_json(path: str | os.PathLike, obj: Any) -> str:
    with open(path, "w", encoding="utf-8") as file:
        json.dump(obj, file, ensure_ascii=False)
    return os.fspath(path)


def write_squad_file(directory: str | os.PathLike, version: str, split: str) -> str:
    """Writes `directory/{split}-{version}.json` (e.g. dev-v2.0.json); returns its path."""
    return write_json(os.path.join(directory, f"{split}-{version}.json"),
                      squad_dataset(version, split))


def tokenizer_sentences(count: int = 400, seed: int = 0) -> list[str]:
    """Sentences for a test SentencePiece model: the fixture contexts and questions, and
    shuffled words of them, so every script of the files is in the vocabulary."""
    texts = [context for context, _ in PARAGRAPHS]
    texts += [question for _, questions in PARAGRAPHS for question, _ in questions]
    words = " ".join(texts).split()
    rng = random.Random(seed)
    sentences = list(texts)
    for _ in range(count):
        sentences.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))))
    return sentences


def train_tokenizer(model_path: str | os.PathLike, vocab_size: int = 200
                    ) -> tokenizer_lib.Tokenizer:
    """Trains (a few seconds) and loads a SentencePiece model for the fixture files."""
    tokenizer_lib.train(tokenizer_sentences(), os.fspath(model_path), vocab_size)
    return tokenizer_lib.Tokenizer.load(os.fspath(model_path))
