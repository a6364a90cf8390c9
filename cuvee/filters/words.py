"""Fast word and sentence splitting that mimics spaCy's English tokenizer on web text.

Why: datatrove's Gopher / FineWeb filters (and MinHash) call ``split_into_words`` which runs a blank
spaCy pipeline per document; on real pages that is ~85% of the filter time (~75 docs/s). The filters
only use aggregate statistics (word counts, mean word length, stop words, n-gram repetition), so an
approximation of spaCy's rules gives the same keep/drop decision for >= 99% of documents
(tests/test_filters_words.py, benchmarks/bench_heuristics.py) at a fraction of the cost.

How: text is split on whitespace (as spaCy does; whitespace tokens are dropped by datatrove's
``strip_strings`` anyway), then each chunk is split by spaCy's own algorithm - special cases, then
prefixes / suffixes peeled off in a loop, then infixes - with regexes that approximate spaCy's English
prefix/suffix/infix lists. Chunks are memoised: web text repeats most of its chunks, so the regex path
runs on a small share of them. Sentence splitting reproduces spaCy's ``Sentencizer`` rule on these
tokens (a sentence ends after a token made of one sentence-final character).

The abbreviation list and the sentence-final characters are copied from spaCy 3.8 (MIT licence,
Explosion AI); the code is ours.

``FastWordTokenizer`` is a datatrove ``WordTokenizer``: datatrove's ``load_word_tokenizer`` returns an
instance unchanged, so passing it as a filter's ``language`` argument is the supported hook.
"""

from __future__ import annotations

import re
import unicodedata

from datatrove.utils.word_tokenizers import WordTokenizer

# --- special cases (kept whole) --------------------------------------------------------------------
_ABBREVIATIONS = frozenset(
    """._. Adm. Ak. Ala. Apr. Ariz. Ark. Aug. Bros. Calif. Co. Colo. Conn. Corp. D.C. Dec. Del. Dr. E.G. E.g.
    Feb. Fla. Ga. Gen. Gov. I.E. I.e. Ia. Id. Ill. Inc. Ind. Jan. Jr. Jul. Jun. Kan. Kans. Ky. La. Ltd. Mar.
    Mass. Md. Messrs. Mich. Minn. Miss. Mo. Mont. Mr. Mrs. Ms. Mt. N.C. N.D. N.H. N.J. N.M. N.Y. Neb. Nebr.
    Nev. Nov. Oct. Okla. Ore. Pa. Ph.D. Prof. Rep. Rev. S.C. Sen. Sep. Sept. St. Tenn. Va. Wash. Wis. a.m.
    co. e.g. i.e. p.m. v.s. vs. °C. °F. °K. °c. °f. °k. ä. ö. ü.""".split()
) | frozenset(f"{c}." for c in "abcdefghijklmnopqrstuvwxyz")
_EMOTICONS = frozenset(
    """:) :( :-) :-( ;) ;-) :D :-D :P :-P :p :-p :/ :-/ :| :o :O <3 </3 ^_^ -_- =) =( :') :'( XD xD
    :)) :(( :-)) :] :[ 8) (: ): ;D =D =/ :* :-* o.O O.o O.O o.o 0.0 :3 =] =[ C++ and/or""".split()
)
_SPECIAL = _ABBREVIATIONS | _EMOTICONS | frozenset(
    {"'", "''", "’’", "\\n", "\\t", "'em", "'cause", "'cos", "'coz", "'cuz", "'bout", "'nuff", "ol'", "ol’", "o'clock", "ma'am",
     "'s", "'S", "’s", "’S", "'d", "’d", "'m", "’m", "'re", "'ve", "'ll", "’em", "nothin'", "[:", "(;", "(:", ";_;", "w/o"}
)
# specials that contain punctuation are also matched across the pieces of one chunk (spaCy 3 does this:
# "n/a." -> n / a. and "foo):" -> foo ):)
_MERGEABLE = frozenset(x for x in _SPECIAL if len(x) > 1 and not x.isalnum())

# contractions, as spaCy's English exceptions generate them: only after these bases, only in lower or
# Title case ("don't" -> do + n't, "Im" -> I + m, "YOU'LL" stays whole)
_NT_BASES = {"ai": "ai", "are": "are", "ca": "ca", "can": "ca", "could": "could", "dare": "dare", "did": "did",
             "does": "does", "do": "do", "had": "had", "has": "has", "have": "have", "is": "is", "might": "might",
             "must": "must", "need": "need", "ought": "ought", "sha": "sha", "should": "should", "was": "was",
             "were": "were", "wo": "wo", "would": "would"}
_PRONOUNS = {"i": ("m", "d", "ll", "ve"), "you": ("re", "d", "ll", "ve"), "he": ("s", "d", "ll"), "she": ("s", "d", "ll"),
             "it": ("s", "d", "ll"), "we": ("re", "d", "ll", "ve"), "they": ("re", "d", "ll", "ve"),
             "who": ("s", "d", "ll", "ve", "re"), "what": ("s", "d", "ll", "ve", "re"), "where": ("s", "d"),
             "when": ("s", "d"), "why": ("s", "d"), "how": ("s", "d"), "there": ("s", "d", "ll", "re"),
             "that": ("s", "d", "ll"), "let": ("s",), "could": ("ve",), "would": ("ve",), "should": ("ve",),
             "might": ("ve",), "must": ("ve",)}
_CONTRACTION = re.compile(r"^([A-Za-z]+?)(n['’]?t|['’]?(?:m|re|ve|d|ll|s|all))$")
_WHOLE_EXC = {"cannot": ("can", "not"), "gonna": ("gon", "na"), "gotta": ("got", "ta"),
              "Cannot": ("Can", "not"), "Gonna": ("Gon", "na"), "Gotta": ("Got", "ta"),
              "lets": ("lets",), "its": ("its",), "Its": ("Its",), "Lets": ("Lets",), }
_AM_PM = re.compile(r"^(1[0-2]|[1-9])([ap]m|[ap]\.m\.)$")
# alphabetic chunks spaCy leaves whole although they look like contractions
_AMBIGUOUS = frozenset("ill well were hell shell shed its lets whore".split())
# --- affix rules (approximations of spaCy's English punctuation rules) ------------------------------
_CURRENCY = "$£€¥฿₽₹₩₪₫₴₦₱₲₵₸₺₼₾₿"
_QUOTES = "'\"”“`‘´’‚„»«「」『』"
_PUNCT = "…,:;!?¿¡()[]{}<>_#*&。？！，、；：～·।،۔؛٪（）〔〕【】《》〈〉⟦⟧"
_SYMBOLS = r"\u00A6\u00A9\u00AE\u00B0\u2100-\u214F\u2190-\u21FF\u2300-\u23FF\u2500-\u27BF\u2B00-\u2BFF\U0001F000-\U0001FAFF"
_cls = re.escape
_PREFIX = re.compile(
    rf"^(?:US\$|C\$|A\$|\.\.+|[{_cls(_CURRENCY + _QUOTES + _PUNCT)}§%=—–]|\+(?![0-9])|[{_SYMBOLS}])"
)
_UNITS = (
    "km|km²|km³|m|m²|m³|dm|dm²|dm³|cm|cm²|cm³|mm|mm²|mm³|ha|µm|nm|yd|in|ft|kg|g|mg|µg|t|lb|oz|m/s|km/h|kmh|mph|hPa|Pa|"
    "mbar|mb|MB|kb|KB|gb|GB|tb|TB|T|G|M|K|%|км|км²|км³|м|м²|м³|дм|дм²|дм³|см|см²|см³|мм|мм²|мм³|нм|кг|г|мг|м/с|км/ч|кПа|Па|мбар|Кб|КБ|кб|Мб|МБ|мб|Гб|ГБ|гб|Тб|ТБ|тб"
)
_SUFFIX = re.compile(
    rf"(?:\.\.+|[{_cls(_QUOTES + _PUNCT)}—–]|[{_SYMBOLS}]|['’][sS]|(?<=[0-9])\+|(?<=°[FfCcKk])\."
    rf"|(?<=[0-9])(?:US\$|C\$|A\$|[{_cls(_CURRENCY)}])|(?<=[0-9])(?:{_UNITS})"
    rf"|(?<=[0-9a-zß-öø-ÿā-žα-ωа-яё%²\-\+{_cls(_QUOTES + _PUNCT)}])\.|(?<=[A-ZÀ-ÖØ-Þ][A-ZÀ-ÖØ-Þ])\.)$"
)
_ALNUM = "A-Za-z0-9À-ÖØ-öø-ɏͰ-ϿЀ-ӿ"
_INFIX = re.compile(
    rf"\.\.+|…|[{_SYMBOLS}]|(?<=[0-9])[+\-*^](?=[0-9-])"
    rf"|(?<=[a-zß-öø-ÿ{_cls(_QUOTES)}])\.(?=[A-ZÀ-ÖØ-Þ])"
    r"|(?<=[^\W\d_]),(?=[^\W\d_])"
    rf"|(?<=[{_ALNUM}])(?:---|--|——|-|–|—|~)(?=[^\W\d_])"
    rf"|(?<=[{_ALNUM}])[:<>=/](?=[^\W\d_])"
)
# spaCy's url_match (simplified): scheme or www / domain-like strings with a path stay one token
_LOWER = "a-zß-öø-ÿā-žа-яёα-ω\u3040-\u30ff\u4e00-\u9fff"
_URL = re.compile(
    r"^(?:[\w+\-.]{2,}://)?(?:\S+(?::\S*)?@)?"
    r"(?:(?:[A-Za-z0-9\u00a1-\uffff][A-Za-z0-9\u00a1-\uffff_-]{0,62})?[A-Za-z0-9\u00a1-\uffff]\.)+"
    rf"[{_LOWER}]{{2,63}}(?::\d{{2,5}})?(?:[/?#]\S*)?$"
)
_ALNUM_WORD = re.compile(r"^[^\W_]+$")
_MIXED_DIGIT_ALPHA = re.compile(r"\d")

# sentence-final characters of spaCy's Sentencizer (default_punct_chars)
SENTENCE_PUNCT = frozenset(
    "!.?։؟۔܀܁܂߹।॥၊။።፧፨᙮᜵᜶᠃᠉᥄᥅᪨᪩᪪᪫᭚᭛᭞᭟᰻᰼᱾᱿‼‽⁇⁈⁉⸮⸼꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝꩞꩟꫰꫱꯫﹒﹖﹗！．？"
    "𐩖𐩗𑁇𑁈𑂾𑂿𑃀𑃁𑅁𑅂𑅃𑇅𑇆𑇍𑇞𑇟𑈸𑈹𑈻𑈼𑊩𑑋𑑌𑗂𑗃𑗉𑗊𑗋𑗌𑗍𑗎𑗏𑗐𑗑𑗒𑗓𑗔𑗕𑗖𑗗𑙁𑙂𑜼𑜽𑜾𑩂𑩃𑪛𑪜𑱁𑱂𖩮𖩯𖫵𖬷𖬸𖭄𛲟𝪈｡。"
)
_CHUNK = re.compile(r"\S+")
_CACHE_MAX = 200_000


def _special(s: str) -> tuple[str, ...] | None:
    """spaCy special cases: abbreviations, emoticons, contractions, times like "5pm"."""
    if s in _SPECIAL:
        return (s,)
    exc = _WHOLE_EXC.get(s)
    if exc is not None:
        return exc
    if len(s) > 12 or not (s[:1].isalnum()):
        return None
    m = _CONTRACTION.match(s)
    if m:
        base, tail = m.group(1), m.group(2)
        low = base.lower()
        if s.lower() in _AMBIGUOUS:
            return None
        if not (base == low or base == low.capitalize()) or not (tail == tail.lower()):
            return None
        bare = tail.replace("'", "").replace("’", "")
        if bare == "nt":
            if low in _NT_BASES or low + "n" in _NT_BASES:
                return (base, tail)
        elif bare in _PRONOUNS.get(low, ()):
            return (base, tail)
        return None
    m = _AM_PM.match(s)
    if m:
        return (m.group(1), m.group(2))
    return None


def _merge_specials(out: list[str]) -> list[str]:
    """Re-join neighbouring pieces that form an emoticon, e.g. ')' + ':' -> '):'."""
    i = 0
    while i < len(out) - 1:
        if out[i] + out[i + 1] in _MERGEABLE:
            out[i : i + 2] = [out[i] + out[i + 1]]
        else:
            i += 1
    return out


def split_chunk(chunk: str) -> list[str]:
    """Tokens of one whitespace-free chunk, following spaCy's tokenizer loop."""
    sp = _special(chunk)
    if sp is not None:
        return list(sp)
    prefixes: list[str] = []
    suffixes: list[str] = []
    s = chunk
    last = -1
    while s and len(s) != last:
        if _special(s) is not None:
            break
        last = len(s)
        m = _PREFIX.match(s)
        pre_len = m.end() if m else 0
        if pre_len and _special(s[pre_len:]) is not None:
            prefixes.append(s[:pre_len])
            s = s[pre_len:]
            break
        m = _SUFFIX.search(s[pre_len:])
        suf_len = (m.end() - m.start()) if m else 0
        if suf_len and _special(s[:-suf_len]) is not None:
            suffixes.append(s[-suf_len:])
            s = s[:-suf_len]
            break
        if pre_len and suf_len and pre_len + suf_len <= len(s):
            prefixes.append(s[:pre_len])
            suffixes.append(s[-suf_len:])
            s = s[pre_len:-suf_len]
        elif pre_len:
            prefixes.append(s[:pre_len])
            s = s[pre_len:]
        elif suf_len:
            suffixes.append(s[-suf_len:])
            s = s[:-suf_len]
    out = prefixes
    if s:
        sp = _special(s)
        if sp is not None:
            out.extend(sp)
        elif _URL.match(s):
            out.append(s)
        else:
            start = 0
            for m in _INFIX.finditer(s):
                if m.start() == 0 or m.start() == m.end():
                    continue
                if m.start() > start:
                    out.append(s[start : m.start()])
                out.append(s[m.start() : m.end()])
                start = m.end()
            if start < len(s):
                out.append(s[start:])
    out.extend(reversed(suffixes))
    return _merge_specials(out) if len(out) > 1 else out


def _is_punct_token(tok: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in tok)


class FastWordTokenizer(WordTokenizer):
    """Regex approximation of spaCy's English tokenizer + sentencizer (see module docstring)."""

    def __init__(self, language: str = "en"):
        super().__init__(language)
        self._cache: dict[str, tuple[str, ...]] = {}

    def __reduce__(self):  # pickled into executor tasks without the memo
        return (FastWordTokenizer, (self.language,))

    # Equal per language: the output depends on nothing else (the memo only caches). datatrove's
    # ``split_into_words`` keeps its last texts' words keyed by (text, tokenizer), so the Gopher, FineWeb and C4
    # stages, each holding its own instance, tokenize a page once between them instead of once each.
    def __eq__(self, other):
        return type(other) is type(self) and other.language == self.language

    def __hash__(self):
        return hash((type(self).__name__, self.language))

    def _chunk_tokens(self, chunk: str) -> tuple[str, ...]:
        toks = self._cache.get(chunk)
        if toks is None:
            if chunk.isalpha() and (len(chunk) > 7 or _special(chunk) is None):
                toks = (chunk,)
            else:
                toks = tuple(split_chunk(chunk))
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[chunk] = toks
        return toks

    def word_tokenize(self, text: str) -> list[str]:
        out: list[str] = []
        get = self._cache.get
        for chunk in text.split():
            toks = get(chunk)
            if toks is None:
                toks = self._chunk_tokens(chunk)
            if len(toks) == 1:
                out.append(toks[0])
            else:
                out.extend(toks)
        return out

    def _token_spans(self, text: str):
        for m in _CHUNK.finditer(text):
            pos = m.start()
            for tok in self._chunk_tokens(m.group()):
                yield tok, pos, pos + len(tok)
                pos += len(tok)

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        """Sentence spans by spaCy's Sentencizer rule: a sentence ends after a sentence-final token once a
        non-punctuation token follows.

        Most chunks are plain words (``str.isalnum``): whatever tokens such a chunk splits into, none is
        punctuation, so the rule only sees "a word starts here" and the chunk is handled without splitting it
        (same spans; ~2x faster on prose, which makes the C4 rules' sentence count cheap)."""
        spans: list[tuple[int, int]] = []
        start = 0
        seen_period = False
        prev_end = 0
        get, tokens_of = self._cache.get, self._chunk_tokens
        for m in _CHUNK.finditer(text):
            chunk = m.group()
            pos = m.start()
            if chunk.isalnum():
                if seen_period:
                    spans.append((start, prev_end))
                    start = pos
                    seen_period = False
                prev_end = pos + len(chunk)
                continue
            toks = get(chunk)
            if toks is None:
                toks = tokens_of(chunk)
            for tok in toks:
                a, b = pos, pos + len(tok)
                pos = b
                in_punct = tok in SENTENCE_PUNCT
                if seen_period and not in_punct and not _is_punct_token(tok):
                    spans.append((start, prev_end))
                    start = a
                    seen_period = False
                elif in_punct:
                    seen_period = True
                prev_end = b
        if prev_end > start or not spans:
            spans.append((start, len(text.rstrip()) if prev_end else len(text)))
        return spans

    def sent_tokenize(self, text: str) -> list[str]:
        return [s for s in (text[a:b].strip() for a, b in self.span_tokenize(text)) if s]


def make_word_tokenizer(kind: str, language: str = "en"):
    """What to pass as datatrove's ``language`` argument: our fast tokenizer or the language code (spaCy)."""
    if kind == "fast":
        return FastWordTokenizer(language)
    if kind == "spacy":
        return language
    raise ValueError(f"word_tokenizer must be 'fast' or 'spacy', got {kind!r}")
