"""The segmenter: paragraphs cut into sentences per language, as sentencex cuts them and as a reader
of the language would (hand-written), and the language codes it takes."""
import pytest
import sentencex

from albert_jax.data.corpus import segmenter
from albert_jax.data.corpus.segmenter import sentencex_language, split_sentences
from albert_jax.errors import ConfigError

# (language, paragraph, the sentences a reader of the language expects), written by hand.
CASES = [
    pytest.param(
        "zh", "他说：“你好。”然后走了。今天天气很好！你来吗？好的。",
        ["他说：“你好。”", "然后走了。", "今天天气很好！", "你来吗？", "好的。"],
        id="zh-fullwidth-terminators",
    ),
    pytest.param(
        "ja", "今日は晴れです。公園に行きましょう！来ますか？はい。",
        ["今日は晴れです。", "公園に行きましょう！", "来ますか？", "はい。"],
        id="ja-fullwidth-terminators",
    ),
    pytest.param(
        "hi", "यह एक वाक्य है। यह दूसरा वाक्य है। क्या यह तीसरा है?",
        ["यह एक वाक्य है।", "यह दूसरा वाक्य है।", "क्या यह तीसरा है?"],
        id="hi-danda",
    ),
    pytest.param(
        "ar", "هل أنت بخير؟ أنا بخير. شكرا لك!",
        ["هل أنت بخير؟", "أنا بخير.", "شكرا لك!"],
        id="ar-question-mark",
    ),
    pytest.param(
        "en", "Dr. Smith arrived at 3.14 today, e.g. on time. He paid $2.50 for tea.",
        ["Dr. Smith arrived at 3.14 today, e.g. on time.", "He paid $2.50 for tea."],
        id="en-abbreviations-and-decimals",
    ),
    pytest.param(
        "en", "The result was final. it was late! was it? Yes.",
        ["The result was final.", "it was late!", "was it?", "Yes."],
        id="en-lower-case-starts",
    ),
    pytest.param(
        "de", "Das ist z.B. ein Satz. Am 3. Oktober war es kalt. Es kostet 3,50 Euro.",
        ["Das ist z.B. ein Satz.", "Am 3. Oktober war es kalt.", "Es kostet 3,50 Euro."],
        id="de-abbreviation-ordinal-decimal",
    ),
    # Thai writes no sentence punctuation (a space separates clauses): one sentence per line.
    pytest.param(
        "th", "วันนี้อากาศดี เราไปสวนสาธารณะกัน",
        ["วันนี้อากาศดี เราไปสวนสาธารณะกัน"],
        id="th-one-sentence",
    ),
]


@pytest.mark.parametrize("language,paragraph,expected", CASES)
def test_split_sentences_as_a_reader_expects(language, paragraph, expected):
    assert split_sentences(paragraph, language) == expected


@pytest.mark.parametrize("language,paragraph,expected", CASES)
def test_split_sentences_is_sentencex_stripped(language, paragraph, expected):
    # Nothing of ours between the library and the sentences but the strip and the empty drop.
    library = [s.strip() for s in sentencex.segment(language, paragraph)]
    assert split_sentences(paragraph, language) == [s for s in library if s]


def test_sentences_are_stripped_and_non_empty():
    assert split_sentences("  One.   Two!  ", "en") == ["One.", "Two!"]
    assert split_sentences("   ", "en") == []
    assert split_sentences("", "en") == []
    assert split_sentences("A heading with no full stop", "en") == ["A heading with no full stop"]


@pytest.mark.parametrize(
    "language,code",
    [("en", "en"), ("EN", "en"), ("pt-BR", "pt-br"), ("zh_Hant", "zh-hant"),
     ("deu", "de"), ("arb", "ar"), ("cmn_Hani", "cmn-hani"), ("als", "als")],
)
def test_language_codes_normalized_for_sentencex(language, code):
    assert sentencex_language(language) == code


def test_three_letter_code_gets_the_languages_abbreviations():
    # FineWeb-2 names German `deu`: its sentences keep German abbreviations as `de` does.
    paragraph = "Das ist z.B. ein Satz. Noch einer."
    assert split_sentences(paragraph, "deu") == split_sentences(paragraph, "de")
    assert split_sentences(paragraph, "deu") == ["Das ist z.B. ein Satz.", "Noch einer."]


def test_code_without_rules_of_its_own_gets_englishs():
    # Swahili has neither rules nor a fallback chain in sentencex: the documented fallback is
    # English's rules, whose terminators are every script's (Chinese's here).
    assert split_sentences("Habari. Nzuri sana! 你好。再见。", "sw") == [
        "Habari.", "Nzuri sana!", "你好。", "再见。",
    ]
    paragraph = "Dr. Smith came, e.g. at 5 p.m. today. He left."
    assert split_sentences(paragraph, "sw") == split_sentences(paragraph, "en") == [
        "Dr. Smith came, e.g. at 5 p.m. today.", "He left.",
    ]


@pytest.mark.parametrize("language", ["english", "", "e1", "zh-", "en us", "x"])
def test_a_value_that_is_no_language_code_is_one_config_error(language):
    with pytest.raises(ConfigError) as caught:
        split_sentences("One. Two.", language)
    message = str(caught.value)
    assert message.startswith(f"config.data.language={language!r} is not an ISO 639")
    assert "iso639-3.sil.org" in message and "\n" not in message


def test_key_named_in_the_error_is_the_callers():
    with pytest.raises(ConfigError, match=r"^config\.data\.language_column='klingon!' is not"):
        sentencex_language("klingon!", key="config.data.language_column")


def test_a_long_paragraph_gets_the_sentences_of_the_whole(monkeypatch):
    # Windows of 300 characters over a paragraph of ~40 sentences: the same sentences as
    # sentencex cutting the whole paragraph at once.
    monkeypatch.setattr(segmenter, "WINDOW_CHARACTERS", 300)
    paragraph = " ".join(
        f"Sentence {i} is about Dr. Smith, e.g. his {i}.5 cats. it ends here!" for i in range(40))
    whole = [s.strip() for s in sentencex.segment("en", paragraph)]
    assert len(whole) == 80
    assert split_sentences(paragraph, "en") == whole


def test_a_long_paragraph_without_terminators_is_cut_at_spaces(monkeypatch):
    monkeypatch.setattr(segmenter, "WINDOW_CHARACTERS", 100)
    words = [f"word{i}" for i in range(100)]
    pieces = split_sentences(" ".join(words), "th")
    assert len(pieces) > 1 and all(len(piece) <= 100 for piece in pieces)
    assert " ".join(pieces).split() == words  # every word kept whole, in order


def test_a_code_with_a_fallback_chain_gets_its_relatives_rules():
    # MediaWiki's chain in sentencex: Alemannic (`als`) -> German, whose ordinals stay whole.
    paragraph = "Am 3. Oktober war es kalt. Noch einer."
    assert split_sentences(paragraph, "als") == ["Am 3. Oktober war es kalt.", "Noch einer."]
    assert split_sentences(paragraph, "en") != split_sentences(paragraph, "als")
