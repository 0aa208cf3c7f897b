"""Numbers, times and symbols read out as words: the small verbaliser that stands in for the original's
WeTextProcessing grammar step in `text.normalize`.

- English route: integers (with thousands separators) and decimals as words, negative numbers, percentages,
  `$` amounts (dollars and cents), ordinals 1st/2nd/3rd/Nth, 4-digit years 1100-2099 read as years
  ("nineteen ninety nine", "two thousand five", "twenty twenty five"), clock times H:MM, and the symbols
  & + = @ % as words.
- Chinese route (text with CJK ideographs, or without Latin letters): digits to Chinese numerals in the
  常规 reading (万/亿 grouping, 零 rules, 十 for 10-19 at the start), decimals with 点, percentages as
  百分之…, years before 年 and digit strings that look like codes (leading 0, or more than 8 digits) read
  digit by digit, H:MM times as …点…分, and + = % ℃ as words.

Not covered (read as plain numbers or left as written): dates in numeric form (2024-01-02, 1/2/2030),
currencies other than `$` (€, £, ¥ amounts), units and abbreviations (km/h, kg, Dr., etc.), fractions,
roman numerals, phone numbers on the English route, scientific notation, 两 vs 二 before measure words,
erhua and interjections. Casing is left to the tokenizer, which uppercases everything (as the original).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# ------------------------------------------------------------------------------------ English numbers

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen"]  # fmt: skip
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ["", "thousand", "million", "billion", "trillion", "quadrillion"]
_ORD_IRREGULAR = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}  # fmt: skip


def _en_below_1000(n: int) -> list[str]:
    words: list[str] = []
    if n >= 100:
        words += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10]))
    elif n > 0 or not words:
        words.append(_ONES[n])
    return words


def _cardinal(
    n: int, minus: str, zero: str, base: int, scales: int, spell: Callable[[list[int]], str]
) -> str:
    """What both languages' cardinals share: the sign word, the zero word, and the digits cut into groups
    of `base` (1000 in English, 10000 in Chinese), lowest group first, which `spell` reads out. A number
    with more groups than the language names (`scales`) raises OverflowError: the callers then read it
    digit by digit, clearer than invented names."""
    if n < 0:
        return minus + _cardinal(-n, minus, zero, base, scales, spell)
    if n == 0:
        return zero
    groups: list[int] = []
    while n > 0:
        n, chunk = divmod(n, base)
        groups.append(chunk)
    if len(groups) > scales:
        raise OverflowError
    return spell(groups)


def _en_groups(groups: list[int]) -> str:
    named = [" ".join(_en_below_1000(c) + ([_SCALES[s]] if s else [])) for s, c in enumerate(groups) if c]
    return " ".join(reversed(named))


def en_cardinal(n: int) -> str:
    """123456 -> 'one hundred twenty three thousand four hundred fifty six'."""
    return _cardinal(n, "minus ", "zero", 1000, len(_SCALES), _en_groups)


def en_ordinal(n: int) -> str:
    words = en_cardinal(n).split(" ")
    last = words[-1]
    if last in _ORD_IRREGULAR:
        words[-1] = _ORD_IRREGULAR[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def en_year(n: int) -> str:
    """1999 -> 'nineteen ninety nine', 2005 -> 'two thousand five', 2025 -> 'twenty twenty five'."""
    hi, lo = divmod(n, 100)
    if 2000 <= n <= 2009:
        return en_cardinal(n)
    if lo == 0:
        return en_cardinal(hi) + " hundred"
    return en_cardinal(hi) + " " + (("oh " + _ONES[lo]) if lo < 10 else en_cardinal(lo))


def _en_digits(s: str) -> str:
    return " ".join(_ONES[int(c)] for c in s)


def _en_number(int_part: str, frac: str | None) -> str:
    digits = int_part.replace(",", "")
    try:
        words = en_cardinal(int(digits))
    except OverflowError:
        words = _en_digits(digits)
    return words + (" point " + _en_digits(frac) if frac else "")


_EN_NUM = r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
_EN_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (re.compile(r"\$\s?" + _EN_NUM), lambda m: _en_money(m.group(1), m.group(2))),
    (re.compile(_EN_NUM + r"\s?%"), lambda m: _en_number(m.group(1), m.group(2)) + " percent"),
    (re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.IGNORECASE), lambda m: en_ordinal(int(m.group(1)))),
    (re.compile(r"\b(\d{1,2}):(\d{2})\b"), lambda m: _en_time(int(m.group(1)), int(m.group(2)))),
    (re.compile(r"(?<![\d.,])(1[1-9]\d\d|20\d\d)(?![\d%]|[.,]\d)"), lambda m: en_year(int(m.group(1)))),
    (re.compile(r"(?<![\w.])-(?=\d)"), lambda m: "minus "),
    (re.compile(_EN_NUM), lambda m: _en_number(m.group(1), m.group(2))),
]
_EN_SYMBOLS = {"&": " and ", "+": " plus ", "=": " equals ", "@": " at ", "%": " percent "}


def _en_money(int_part: str, frac: str | None) -> str:
    dollars = int(int_part.replace(",", ""))
    words = _en_number(int_part, None) + (" dollar" if dollars == 1 else " dollars")
    if frac:
        cents = int((frac + "0")[:2])
        if cents:
            words += " " + en_cardinal(cents) + (" cent" if cents == 1 else " cents")
    return words


def _en_time(h: int, m: int) -> str:
    if h > 24 or m > 59:
        return f"{en_cardinal(h)} {en_cardinal(m)}"
    if m == 0:
        return en_cardinal(h) + " o'clock"
    return en_cardinal(h) + " " + (("oh " + _ONES[m]) if m < 10 else en_cardinal(m))


def verbalize_english(text: str) -> str:
    for pattern, repl in _EN_RULES:
        text = pattern.sub(lambda m, r=repl: " " + r(m) + " ", text)
    for sym, word in _EN_SYMBOLS.items():
        text = text.replace(sym, word)
    return _tidy_spaces(text)


def _tidy_spaces(text: str) -> str:
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" +([,.!?;:…'])(?=\s|$)", r"\1", text)  # no space before closing punctuation
    return text.strip()


# ------------------------------------------------------------------------------------ Chinese numbers

_ZH_DIGITS = "零一二三四五六七八九"
_ZH_UNITS = ["", "十", "百", "千"]
_ZH_BIG = ["", "万", "亿", "万亿"]


def _zh_below_10000(n: int) -> str:
    out = ""
    zero = False
    for pos in range(3, -1, -1):
        d = (n // 10**pos) % 10
        if d == 0:
            zero = bool(out)
            continue
        if zero:
            out += "零"
            zero = False
        out += _ZH_DIGITS[d] + _ZH_UNITS[pos]
    return out


def zh_cardinal(n: int) -> str:
    """10 -> 十, 15 -> 十五, 105 -> 一百零五, 20010 -> 两万零一十 style without 两: 二万零一十."""
    return _cardinal(n, "负", "零", 10000, len(_ZH_BIG), _zh_groups)


def _zh_groups(groups: list[int]) -> str:
    out = ""
    need_zero = False
    for idx, chunk in reversed(list(enumerate(groups))):
        if chunk == 0:
            need_zero = bool(out)
            continue
        if out and (need_zero or chunk < 1000):
            out += "零"
        out += _zh_below_10000(chunk) + _ZH_BIG[idx]
        need_zero = False
    if out.startswith("一十"):
        out = out[1:]
    return out


def zh_digits(s: str) -> str:
    return "".join(_ZH_DIGITS[int(c)] for c in s)


def _zh_number(int_part: str, frac: str | None) -> str:
    digits = int_part.replace(",", "")
    if (len(digits) > 1 and digits.startswith("0")) or len(digits) > 8:
        words = zh_digits(digits)
    else:
        words = zh_cardinal(int(digits))
    return words + ("点" + zh_digits(frac) if frac else "")


_ZH_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (re.compile(r"(\d{2,4})(?=\s*年)"), lambda m: zh_digits(m.group(1))),
    (re.compile(_EN_NUM + r"\s?[%％]"), lambda m: "百分之" + _zh_number(m.group(1), m.group(2))),
    (re.compile(r"\$\s?" + _EN_NUM), lambda m: _zh_number(m.group(1), m.group(2)) + "美元"),
    (re.compile(r"(?<!\d)(\d{1,2}):(\d{2})(?!\d)"), lambda m: _zh_time(int(m.group(1)), int(m.group(2)))),
    (re.compile(r"(?<![\w.])-(?=\d)"), lambda m: "负"),
    (re.compile(_EN_NUM), lambda m: _zh_number(m.group(1), m.group(2))),
]
_ZH_SYMBOLS = {"+": "加", "=": "等于", "%": "百分号", "％": "百分号", "℃": "摄氏度"}


def _zh_time(h: int, m: int) -> str:
    if h > 24 or m > 59:
        return zh_cardinal(h) + "比" + zh_cardinal(m)
    return zh_cardinal(h) + "点" + ("" if m == 0 else ("零" if m < 10 else "") + zh_cardinal(m) + "分")


def verbalize_chinese(text: str) -> str:
    for pattern, repl in _ZH_RULES:
        text = pattern.sub(lambda m, r=repl: r(m), text)
    for sym, word in _ZH_SYMBOLS.items():
        text = text.replace(sym, word)
    return text
