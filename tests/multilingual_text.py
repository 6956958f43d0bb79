"""Real text in eight languages and six scripts, for the tests of what happens to text that is
not English: accents, whole words, SentencePiece models trained on many scripts.

  DOCUMENTS["hi"]                      # documents (lists of sentences) of Hindi text
  sentences("hi", "th")                # every sentence of those languages, in order
  write_corpus(path, "hi", "ru")       # a text corpus: one sentence a line, a blank line between
                                       # documents (SPEC 1.2)

Wikipedia-like sentences written for these tests. The scripts: Devanagari (hi), Thai (th),
Japanese (ja: Han, Hiragana, Katakana), Cyrillic (ru), Hangul (ko), Latin with diacritics (vi,
fr) and plain Latin (en). Each language has words whose marks SPEC 2.2's accent step drops:
the Hindi virama and nukta, Thai tone marks, Japanese dakuten and handakuten, Russian й,
Vietnamese tones, French accents. `MARKS` names one such combining mark per language.
"""
from __future__ import annotations

from pathlib import Path

DOCUMENTS: dict[str, list[list[str]]] = {
    "hi": [
        ["भारत दक्षिण एशिया में स्थित एक विशाल देश है।",
         "हिन्दी भारत की सबसे अधिक बोली जाने वाली भाषा है।",
         "दिल्ली भारत की राजधानी है और यहाँ बहुत से ऐतिहासिक स्मारक हैं।",
         "गंगा नदी हिमालय से निकलकर बंगाल की खाड़ी में गिरती है।",
         "क्या आप जानते हैं कि ताजमहल आगरा शहर में स्थित है?",
         "इस फ़ाइल में भारत के सभी राज्यों के नाम लिखे हुए हैं।"],
        ["विज्ञान और प्रौद्योगिकी ने हमारे जीवन को बहुत बदल दिया है।",
         "कंप्यूटर और इंटरनेट अब गाँव गाँव तक पहुँच गए हैं।",
         "विद्यार्थी विद्यालय में गणित, इतिहास और साहित्य पढ़ते हैं।",
         "भारतीय संविधान छब्बीस जनवरी उन्नीस सौ पचास को लागू हुआ।",
         "क्रिकेट भारत में सबसे लोकप्रिय खेल माना जाता है।",
         "हर साल लाखों पर्यटक राजस्थान के किले देखने आते हैं।"],
    ],
    "th": [
        ["ประเทศไทยตั้งอยู่ในภูมิภาคเอเชียตะวันออกเฉียงใต้",
         "กรุงเทพมหานครเป็นเมืองหลวงและเมืองที่ใหญ่ที่สุดของประเทศ",
         "ภาษาไทยเป็นภาษาราชการที่ใช้กันทั่วประเทศ",
         "ที่นี่มีน้ำตกที่สวยงามและป่าไม้ที่อุดมสมบูรณ์",
         "แม่น้ำเจ้าพระยาไหลผ่านใจกลางกรุงเทพมหานคร"],
        ["อาหารไทยมีชื่อเสียงไปทั่วโลกเพราะมีรสชาติที่หลากหลาย",
         "ต้มยำกุ้งเป็นอาหารที่นักท่องเที่ยวชอบมากที่สุด",
         "คนไทยนิยมไปวัดเพื่อทำบุญในวันสำคัญทางศาสนา",
         "เชียงใหม่เป็นเมืองใหญ่ทางภาคเหนือที่มีอากาศเย็นสบาย",
         "ช้างเป็นสัตว์สัญลักษณ์ประจำชาติของประเทศไทย"],
    ],
    "ja": [
        ["日本は東アジアに位置する島国である。",
         "首都は東京で、世界で最も人口が多い都市圏の一つである。",
         "パンダは上野動物園で大変な人気がある。",
         "富士山は日本で一番高い山であり、多くの人が登山に訪れる。",
         "日本語はひらがな、カタカナ、漢字を組み合わせて書かれる。"],
        ["京都には古いお寺や神社がたくさん残っている。",
         "新幹線は東京と大阪を約二時間半で結んでいる。",
         "日本の学校では四月に新しい学年が始まる。",
         "ラーメンやすしは外国でもよく知られた料理である。",
         "桜の花が咲く季節には、公園で花見をする人が多い。"],
    ],
    "ru": [
        ["Россия является самой большой страной в мире по площади.",
         "Москва — столица России и крупнейший город страны.",
         "Русский язык принадлежит к восточнославянской группе языков.",
         "Река Волга впадает в Каспийское море.",
         "Санкт-Петербург был основан Петром Первым в тысяча семьсот третьем году."],
        ["Зимой в большей части страны идёт снег и бывает очень холодно.",
         "Байкал — самое глубокое озеро на Земле.",
         "Многие русские писатели известны во всём мире.",
         "Транссибирская магистраль соединяет Москву и Владивосток.",
         "Мой друг живёт в небольшом городе на юге страны."],
    ],
    "ko": [
        ["대한민국은 동아시아의 한반도 남부에 위치한 나라이다.",
         "서울은 대한민국의 수도이며 가장 큰 도시이다.",
         "한글은 세종대왕이 만든 한국의 고유 문자이다.",
         "한국 사람들은 김치를 거의 매일 먹는다.",
         "부산은 한국에서 두 번째로 큰 항구 도시이다."],
        ["한국의 여름은 덥고 습하며 겨울은 춥고 건조하다.",
         "많은 학생들이 대학교 입학 시험을 열심히 준비한다.",
         "제주도는 아름다운 자연으로 유명한 관광지이다.",
         "한국 음악과 드라마는 세계 여러 나라에서 인기가 많다.",
         "지하철은 서울에서 가장 편리한 교통수단이다."],
    ],
    "vi": [
        ["Việt Nam là một quốc gia nằm ở phía đông bán đảo Đông Dương.",
         "Thủ đô của Việt Nam là Hà Nội, còn thành phố lớn nhất là Thành phố Hồ Chí Minh.",
         "Tiếng Việt là ngôn ngữ chính thức và được viết bằng chữ Quốc ngữ.",
         "Sông Mê Kông chảy qua miền nam trước khi đổ ra biển.",
         "Phở là món ăn nổi tiếng nhất của người Việt."],
        ["Vịnh Hạ Long được công nhận là di sản thiên nhiên thế giới.",
         "Người dân thường đi xe máy trên những con đường đông đúc.",
         "Tết Nguyên Đán là ngày lễ quan trọng nhất trong năm.",
         "Cà phê Việt Nam được xuất khẩu sang nhiều nước trên thế giới.",
         "Học sinh đến trường từ sáng sớm và học đến chiều."],
    ],
    "fr": [
        ["La France est un pays d'Europe de l'Ouest.",
         "Paris est la capitale et la ville la plus peuplée du pays.",
         "Le français est parlé sur plusieurs continents.",
         "La tour Eiffel a été construite pour l'Exposition universelle de mille huit cent "
         "quatre-vingt-neuf.",
         "Les élèves étudient l'histoire, la géographie et les mathématiques."],
        ["Le fromage et le vin sont célèbres dans le monde entier.",
         "La Loire est le plus long fleuve qui coule entièrement en France.",
         "Noël est une fête très appréciée par les enfants.",
         "Le château de Versailles attire des millions de visiteurs chaque année.",
         "Beaucoup de Français passent l'été au bord de la mer."],
    ],
    "en": [
        ["The United Kingdom is an island country in north-western Europe.",
         "London is its capital and largest city.",
         "English is spoken as a first language by most of the population.",
         "The River Thames flows through London to the North Sea.",
         "Many visitors come every year to see its museums and castles."],
        ["Football was first codified in England in the nineteenth century.",
         "The weather is often mild and rainy throughout the year.",
         "Students usually begin school at the age of four or five.",
         "Tea is one of the most popular drinks in the country.",
         "The railway network connects most large towns and cities."],
    ],
}

LANGUAGES = tuple(DOCUMENTS)

# One combining mark per language (as NFD writes the text) that SPEC 2.2's accent step drops.
MARKS = {"hi": "\u094d",   # virama: क्या
         "th": "\u0e48",   # mai ek tone mark: ที่
         "ja": "\u3099",   # dakuten: が, パンダ's ダ
         "ru": "\u0306",   # breve: й
         "ko": None,       # Hangul syllables decompose into jamo, which are not combining marks
         "vi": "\u0301",   # acute: Việt's tone
         "fr": "\u0301",   # acute: été
         "en": None}


def sentences(*languages: str) -> list[str]:
    """Every sentence of `languages` (all of them when none), document by document."""
    return [sentence for language in languages or LANGUAGES
            for document in DOCUMENTS[language] for sentence in document]


def write_corpus(path: Path, *languages: str, repeat: int = 1) -> Path:
    """A text corpus of the documents of `languages` (all when none), `repeat` times over: one
    sentence a line, a blank line between documents (SPEC 1.2). Returns `path`."""
    documents = [document for _ in range(repeat) for language in languages or LANGUAGES
                 for document in DOCUMENTS[language]]
    path.write_text("\n\n".join("\n".join(document) for document in documents) + "\n",
                    encoding="utf-8")
    return path
