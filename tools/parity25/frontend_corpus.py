"""The corpus of the IndexTTS-2.5 front-end oracle (run_frontend_oracle.py): texts in zh, en, ja, es, ar
and a few other language codes, each run through the whole chain.

It aims at every rule of the chain: the character map (full-width punctuation, quotes, brackets, `...`,
`，，，`), the normaliser's own steps (contractions, technical terms, tone pinyin, names, `$`, the
end-stripping of the Chinese route, e-mails and letter-less texts taking that route, glossaries),
per-language case, `<word|pron>` annotations (pinyin, CMU, hiragana, katakana, mixed kana, malformed),
Japanese word spacing, typed special tokens, the `!`/`"` ids, and segmentation (long texts, small
budgets that force character cuts, annotation spans longer than the budget, a tiny position table).
Standard library only: the worker imports it inside the oracle's own environment.
"""

from __future__ import annotations

DEFAULT_MAX_TEXT_TOKENS = 600  # config gpt.max_text_tokens (the position table holds 602 rows)
DEFAULT_SEGMENT_TOKENS = 120  # infer(max_text_tokens_per_segment=120)

ZH = [
    "你好，世界。",
    "我爱你！",
    "今天天气怎么样？",
    "他说：我们走吧；她说：好的。",
    "苹果、香蕉、橘子都很好吃。",
    "这是一个测试",
    "晕XUAN4是一种GAN3觉",
    "受不liao3你了",
    "最zhong4要的是：不要chong2蹈覆辙",
    "不zuo1死就不会死",
    "衣裳不读衣chang2，而是读衣shang5",
    "我们去jv2会吧，还有qu4哪里",
    "银<行|HANG2>的<行|XING2>长",
    "我要去银<行|XING2>取钱。",
    "<重|CHONG2>新开始，<长|ZHANG3>大了",
    "他的<朝|ZHAO1>气很足<朝|CHAO2>向东方",
    "<行|xing2>走在路上",
    "约瑟夫·高登-莱维特是一名演员",
    "克里斯托弗·诺兰执导了这部电影，诺兰很有名",
    "蒂姆·库克和蒂姆·库克-二世",
    "GPT-5-nano和F5-TTS都是模型",
    "我在用Fish-Speech和CosyVoice2",
    "“我爱你”的英语是“I love you”",
    "《盗梦空间》是一部电影",
    "（注意）【重要】「引用」",
    "这酒...里...有毒...",
    "只有,,,才是最好的",
    "等等，，，好吧",
    "结束了。。。",
    "好吧……",
    "他——来了～",
    "价格是$12.5元",
    "电话：135-4567-8900",
    "2025年1月11日 20:00",
    "共465篇，约315万字",
    "速度是10km/h",
    "这是3.5%的增长",
    "今天是个好日子 it's a good day",
    "where's 我的书？",
    "行尾有空格   ",
    "第一行\n第二行\n",
    "１２３全角数字",
    "我爱你!!!",
    "真的吗?!",
    "！",
    "好",
    "",
    " ",
    "我的邮箱是test@example.com",
    "<|endoftext|>你好",
    "时间戳<|0.00|>开始<|1.50|>",
    "<|SPECIAL_TOKEN_3|>自定义<|SPECIAL_TOKEN_3|>",
    "<|special_token_1|>小写特殊<|special_token_1|>",
    "<|zh|>重复的前缀",
    "<|xx|>不存在的特殊",
    "占位<n_a>测试",
    "表情😀符号",
    "半角,标点.混合!",
    "(括号)和[方括号]",
    "<上手|じょうず>的日语",
    "<東京|トウキョウ>和<今日|きょうトウ>",
    "<行|>空读音",
    "<|XING2>没有字",
    "<a|b|c>多个竖线",
    "M.2固态硬盘",
]

EN = [
    "Hello world!",
    "Wait! What?!",
    "Hi!! How are you?",
    "Yes ! No !",
    "!",
    'Say "cheese" please',
    "It's a good day.",
    "It’s a good day.",
    "where's the money? who's there? how's it going?",
    "Don't stop, I'm fine, we'll see.",
    "See you at 8:00 AM",
    "This sales for 2.5% off, only $12.5.",
    "The 1st, 2nd and 3rd place in 1999.",
    "Counting down 3, 2, 1, go!",
    "I need a <minute|M IH1 . N AH0 T> please.",
    "<read|R EH1 D> the <read|R IY1 D> book",
    "I am <going|G OW1 . IH0 NG> home",
    "<live|l ih1 v> and <live|L AY1 V>",
    "<one2|W AH1 N>",
    "<hello|HH AH0 . L OW1>, <world|W ER1 L D>!",
    "<a|b|c> and <x|> and <|y> and < a | b >",
    "HELLO World from NASA and iPhone",
    "GPT-4o and F5-TTS and Fish-Speech",
    "a state-of-the-art model",
    "such as XTTS, CosyVoice2, Fish-Speech, and F5-TTS",
    "babala2 and beta1 and xuan4",
    "have you ever been to beta2?",
    "Email me at test@example.com",
    "test@example.com",
    "123 456",
    "$100",
    "Trailing spaces   ",
    "line one\nline two",
    "(round) [square] ~tilde~ —dash—",
    "semi; colon: comma, stop.",
    "Ellipsis... and more,,, and more",
    "a<H>b and GPT-4",
    "I said <|endoftext|> here",
    "<|SPECIAL_TOKEN_5|>custom<|SPECIAL_TOKEN_5|>",
    "<|en|> prefix typed",
    "Café naïve résumé",
    "straße",
    "Tab\tseparated",
    "Multiple   spaces   here",
    "'single' quotes",
    "Hmm!!!",
    "?!",
    "Ok.",
    "a",
    "C++ and C# are languages",
    "mixed 中文 and English",
    "<行|XING2> in English",
    "<上手|じょうず> in English",
    "e.g. i.e. etc.",
    "Mr. Smith went to Washington.",
    "the year 2025 and 1,234,567 people",
]

JA = [
    "こんにちは、世界。",
    "今日はいい天気ですね！",
    "そうですね、ほんと1年前、まあコロナだったので家のリビングからあの話して、すごい緊張してしまって",
    "また、青少年健全育成などに功績がある、市内の団体を表彰します",
    "たねん、おんてきであるは、しかがどのにこうさんして。",
    "実は昨年、11kgの減量にも成功していたという。",
    "カタカナだけのテキスト",
    "ひらがなだけのぶんしょう",
    "東京タワーに行きました",
    "今日は  晴れ",
    " 先頭に空白",
    "末尾に空白 ",
    "タブ\t区切り",
    "<上手|じょうず>に話せますね。",
    "<東京|トウキョウ>へ行く",
    "<今日|きょうトウ>は混ざった読み",
    "<行|XING2>は中国語の読み",
    "<go|G OW1>は英語",
    "「引用」と『二重引用』",
    "（括弧）と【隅付き】",
    "え？本当！？",
    "ＡＢＣと全角英字",
    "iPhoneを買った",
    "HELLO と WORLD",
    "２０２５年１月",
    "100円です",
    "ちょっと…待って",
    "ええと、、、",
    "<|SPECIAL_TOKEN_1|>特殊<|SPECIAL_TOKEN_1|>",
    "<|ja|>重ねた接頭辞",
    "！",
    "",
    "あ",
    "日本語と中文と English",
    "吾輩は猫である。名前はまだ無い。",
    "足が長く見えるように、真ん中のエンブレムのところまで、伸ばした感じで、メインの骨格を作りました。",
    "ちょうど 探しに行こうかなって 思っていたんだ。",
    "雨が降っています；傘を持って：行きます",
    "ー長音ー",
    "ヴァイオリン",
]

ES = [
    "¡Hola! ¿Cómo estás?",
    "Él está aquí.",
    "Mañana será otro día",
    "Tengo 25 años y 3,5 kilos",
    "Cuesta $100 o 20 €",
    "¡Genial!",
    "!",
    "Hola!",
    '«Comillas» y "dobles"',
    "Dijo: sí; luego: no.",
    "<hola|O L A> amigo",
    "<gato|g a t o>",
    "<上手|じょうず> en español",
    "<行|xing2> chino",
    "straße y ﬁn",
    "Ñandú y pingüino",
    "It's inglés",
    "GPT-4 y F5-TTS",
    "línea uno\nlínea dos",
    "ya... espera",
    "(paréntesis) [corchetes]",
    "MAYÚSCULAS y minúsculas",
    "<|SPECIAL_TOKEN_1|>x<|SPECIAL_TOKEN_1|>",
    "<|es|> repetido",
    "",
    "á",
    "¿Qué?!",
    "El 1º de mayo",
    "Buenos días, señor García.",
    "i̇stanbul y İstanbul",
]

AR = [
    "مرحبا بالعالم!",
    "كيف حالك؟",
    "أنا بخير، شكرا.",
    "هذا كتاب؛ وهذا قلم.",
    "العدد ١٢٣ والعدد 456",
    "مرحبا Hello",
    "HELLO بالعربية",
    "مُحَمَّدٌ رَسُولُ",
    "كـــتـــاب",
    "\u200fنص من اليمين\u200f",
    "<كتاب|K I T A B> جميل",
    "<book|B UH1 K> كتاب",
    "<行|XING2> صيني",
    "<上手|じょうず> ياباني",
    '«اقتباس» و"مزدوج"',
    "قال: نعم; ثم: لا.",
    "(قوسين) [معقوفين]",
    "!",
    "",
    "ا",
    "نص... ونص",
    "السعر $50",
    "It's عربي",
    "سطر\nسطر آخر",
    "<|SPECIAL_TOKEN_2|>ع<|SPECIAL_TOKEN_2|>",
    "<|ar|>مكرر",
    "يا!",
    "الله أكبر",
    "ﻻ ﷲ",
    "٣٫١٤ و ٪٥٠",
]

OTHER = [
    ("de", "Guten Tag! Wie geht's dir? Straße 5."),
    ("de", "<Haus|HH AW1 S> am See"),
    ("ko", "안녕하세요! 반갑습니다."),
    ("fr", "Bonjour, ça va? C'est l'été."),
    ("ru", "Привет, мир! КАК ДЕЛА?"),
    ("yue", "你好呀，食咗飯未？"),
    ("zhen", "我爱你 I love you!"),
    ("zhen", "It's 晕XUAN4"),
    ("ZH", "大写的语言代码"),
    ("En", "Mixed Case Language Code!"),
    ("common", "common language"),
    ("zh/en", "斜杠语言"),
    ("haw", "Aloha!"),
    ("su", "Wilujeng sumping"),
    ("minnan", "食飽未？"),
]

LONG = {
    "zh": [
        "《盗梦空间》是一部由美国公司出品的电影，由一位英国导演执导并编剧，多位演员联袂主演，2010年7月16日在美国上映，"
        "2010年9月1日在中国内地上映，2020年8月28日在中国内地重映。影片剧情游走于梦境与现实之间，被定义为“发生在意识结构内"
        "的当代动作科幻片”，讲述了造梦师带领特工团队进入他人梦境，从他人的潜意识中盗取机密，并重塑他人梦境的故事。",
        "清晨拉开窗帘，阳光洒在窗台的花艺礼盒上——薰衣草香薰蜡烛唤醒嗅觉，永生花束折射出晨露般光泽。设计师将“自然绽放美学”"
        "融入每个细节：手工陶瓷花瓶可作首饰收纳，香薰精油含舒缓配方。限量款附赠《365天插花灵感手册》，让每个平凡日子都有花开"
        "仪式感。\n宴会厅灯光暗下的刹那，星月系列耳坠开始发光——冷珐琅工艺让蓝宝石如银河流动，钛合金骨架仅3.2g无负重感。",
        "电影1：“黑暗骑士”（导演：克里斯托弗·诺兰）；电影2：“盗梦空间”（导演：克里斯托弗·诺兰）；电影3：“钢琴家”；"
        "电影4：“泰坦尼克号”（导演：詹姆斯·卡梅隆）；电影5：“阿凡达”（导演：詹姆斯·卡梅隆）；电影6：“南方公园”",
        "没有标点的很长很长的一句话" * 12,
        "银<行|HANG2>" * 30 + "。",
        "我们<重|CHONG2>新来过，" * 20,
    ],
    "en": [
        "The quick brown fox jumps over the lazy dog. " * 8,
        "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of "
        "Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair!",
        "Wow! " * 60,
        "Supercalifragilisticexpialidocious" * 30,
        "I need a <minute|M IH1 . N AH0 T> to think about it, " * 10,
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four "
        "twenty-five twenty-six twenty-seven twenty-eight twenty-nine thirty thirty-one thirty-two",
    ],
    "ja": [
        "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所でニャーニャー泣いていた"
        "事だけは記憶している。吾輩はここで始めて人間というものを見た。しかもあとで聞くとそれは書生という人間中で一番獰悪な"
        "種族であったそうだ。この書生というのは時々我々を捕えて煮て食うという話である。",
        "<上手|じょうず>に話せるようになりたいです、" * 12,
        "ありがとうございます" * 20,
    ],
    "es": [
        "En un lugar de la Mancha, de cuyo nombre no quiero acordarme, no ha mucho tiempo que vivía un "
        "hidalgo de los de lanza en astillero, adarga antigua, rocín flaco y galgo corredor. Una olla de "
        "algo más vaca que carnero, salpicón las más noches, duelos y quebrantos los sábados, lentejas "
        "los viernes.",
        "¡Hola! " * 50,
    ],
    "ar": [
        "كان يا ما كان في قديم الزمان، كان هناك ملك عظيم يحكم مملكة واسعة. وكان لهذا الملك ثلاثة أبناء، "
        "وكان كل واحد منهم يحلم بأن يصبح ملكا بعد أبيه. وفي يوم من الأيام، دعا الملك أبناءه الثلاثة "
        "وقال لهم: من يأتيني بأجمل هدية سيكون الملك من بعدي. فخرج الأبناء الثلاثة يبحثون عن الهدية.",
        "مرحبا " * 80,
    ],
}

# Texts whose cuts are worth seeing at small budgets: punctuation splits, character cuts, annotation
# spans longer than the budget, and a first word that merges with the prefix space.
SMALL_BUDGET = [
    ("zh", "你好，世界。我爱你！今天天气怎么样？"),
    ("zh", "我要去银<行|XING2>取钱，然后<重|CHONG2>新开始。"),
    ("zh", "没有标点的很长很长的一句话没有标点的很长很长的一句话"),
    ("en", "Hello world! Wait, what? I need a <minute|M IH1 . N AH0 T> please."),
    ("en", "Supercalifragilisticexpialidocious and antidisestablishmentarianism"),
    ("en", "Wow! Wow! Wow!"),
    ("ja", "こんにちは、世界。今日はいい天気ですね！<上手|じょうず>に話せますね。"),
    ("es", "¡Hola! ¿Cómo estás? Muy bien, gracias."),
    ("ar", "مرحبا بالعالم! كيف حالك؟ أنا بخير، شكرا."),
]
BUDGETS = (30, 12, 5, 3, 1)

GLOSSARY = [
    ("en", "TTS and C++ on an M.2 drive", {"TTS": "T T S", "C++": {"en": "C plus plus", "zh": "C 加加"}}),
    ("zh", "我的TTS和C++在M.2上", {"TTS": "T T S", "C++": {"en": "C plus plus", "zh": "C 加加"}}),
    ("en", "an M.2 drive", {"M.2": {"zh": "M 二"}}),
    ("zh", "一个M.2硬盘", {"M.2": {"zh": "M 二"}}),
    ("en", "PCIe 5.0 and PCIe", {"PCIe": "P C I E", "PCIe 5.0": {"en": "PCIE five"}}),
    ("ja", "TTSは便利", {"TTS": "T T S"}),
]


def _case(case_id: str, lang: str, text: str, **kw: object) -> dict:
    return {
        "id": case_id,
        "lang": lang,
        "text": text,
        "max_text_tokens": kw.get("max_text_tokens", DEFAULT_MAX_TEXT_TOKENS),
        "max_text_tokens_per_segment": kw.get("max_text_tokens_per_segment", DEFAULT_SEGMENT_TOKENS),
        "text_normalization": kw.get("text_normalization", True),
        **({"glossary": kw["glossary"]} if "glossary" in kw else {}),
    }


def cases() -> list[dict]:
    out: list[dict] = []
    for lang, texts in (("zh", ZH), ("en", EN), ("ja", JA), ("es", ES), ("ar", AR)):
        out += [_case(f"{lang}-{i:03d}", lang, t) for i, t in enumerate(texts)]
        # the same texts without normalisation (more of zh/en: the languages it changes)
        step = 2 if lang in ("zh", "en") else 5
        out += [
            _case(f"{lang}-{i:03d}-nonorm", lang, t, text_normalization=False)
            for i, t in enumerate(texts)
            if i % step == 0
        ]
        out += [_case(f"{lang}-long-{i}", lang, t) for i, t in enumerate(LONG[lang])]
        out += [
            _case(f"{lang}-long-{i}-seg40", lang, t, max_text_tokens_per_segment=40)
            for i, t in enumerate(LONG[lang])
        ]
    out += [_case(f"other-{i:02d}-{lang.replace('/', '_')}", lang, t) for i, (lang, t) in enumerate(OTHER)]
    for i, (lang, text) in enumerate(SMALL_BUDGET):
        out += [_case(f"budget-{i}-{lang}-{b}", lang, text, max_text_tokens_per_segment=b) for b in BUDGETS]
        # the position table, not the per-call cap, sets the budget
        out.append(_case(f"table-{i}-{lang}-20", lang, text, max_text_tokens=20))
        out.append(
            _case(f"table-{i}-{lang}-2", lang, text, max_text_tokens=2, max_text_tokens_per_segment=500)
        )
    out += [_case(f"glossary-{i}-{lang}", lang, t, glossary=g) for i, (lang, t, g) in enumerate(GLOSSARY)]
    return out
