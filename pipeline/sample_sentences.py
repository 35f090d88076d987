"""Generated English-like sentences: the engine's calibration texts, the benches' workloads,
and the demo model's training and evaluation sentences.

The demo task is character-level, so the generator aims for coverage rather
than meaning: common words, invented words, names, acronyms, numbers in many
formats, punctuation, quotes, words with Latin-1 and Latin Extended-A letters
(which en-XA keeps as they are), typographic symbols, the odd non-Latin word
or emoji, and sentence lengths from 1 to 45 words.

Held-out words never reach training: every invented or rare word whose digest
falls in the held-out bucket (see :func:`is_heldout`) and every word of
:data:`RARE_WORDS` is rejected by the training generator and used only by the
held-out generator, so evaluation measures generalization, not memory.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Callable, Iterator

from pipeline.fidelity.tokens import token

_COMMON_TEXT = """
the of and to a in is it you that he was for on are with as I his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no most
people my over know water than call first who may down side been now find any new work part
take get place made live where after back little only round man year came show every good me
give our under name very through just form sentence great think say help low line differ turn
cause much mean before move right boy old too same tell does set three want air well also play
small end put home read hand port large spell add even land here must big high such follow act
why ask men change went light kind off need house picture try us again animal point mother
world near build self earth father head stand own page should country found answer school grow
study still learn plant cover food sun four between state keep eye never last let thought city
tree cross farm hard start might story saw far sea draw left late run while press close night
real life few north open seem together next white children begin got walk example ease paper
group always music those both mark often letter until mile river car feet care second book
carry took science eat room friend began idea fish mountain stop once base hear horse cut sure
watch color face wood main enough plain girl usual young ready above ever red list though feel
talk bird soon body dog family direct pose leave song measure door product black short numeral
class wind question happen complete ship area half rock order fire south problem piece told
knew pass since top whole king space heard best hour better true during hundred five remember
step early hold west ground interest reach fast verb sing listen six table travel less morning
ten simple several vowel toward war lay against pattern slow center love person money serve
appear road map rain rule govern pull cold notice voice unit power town fine certain fly fall
lead cry dark machine note wait plan figure star box noun field rest correct able pound done
beauty drive stood contain front teach week final gave green oh quick develop ocean warm free
minute strong special mind behind clear tail produce fact street inch multiply nothing course
stay wheel full force blue object decide surface deep moon island foot system busy test record
boat common gold possible plane stead dry wonder laugh thousand ago ran check game shape
equate miss brought heat snow tire bring yes distant fill east paint language among queue jazz
quiz zone exact vex jump lazy fox quartz sphinx oxygen zebra yacht kiwi juicy buzz jinx wax
fjord
"""
COMMON_WORDS: tuple[str, ...] = tuple(_COMMON_TEXT.split())

# Rare words and names the training generator never emits.
_RARE_TEXT = """
zephyr quixotic syzygy mnemonic pneumatic xylophone juxtapose bequeath fjeldmark kumquat
czarina phlegm rhythm sphygmomanometer obfuscate labyrinth ubiquitous zugzwang haberdashery
onomatopoeia periwinkle wherewithal kerfuffle flibbertigibbet bamboozle gobbledygook
persnickety cantankerous brouhaha hullabaloo skedaddle lackadaisical Xiomara Quetzalli
Zbigniew Yevgenia Thaddeus Wilhelmina Oluwaseun Kjartan Bartholomew Jocasta Vytautas Gwendolyn
Ignatius Philippa Ezekiel Hyacinth Leopold Marguerite Nkechi Svetlana Tobiah Ulrike Vivienne
Xavier Yusuf Zuleika Cornelius Delphine Quillon Jakarta Reykjavik Ouagadougou Kyzylorda
Wroclaw Zanzibar Vladivostok Yerevan Tegucigalpa Bujumbura Quezaltenango Nizhny Kharkiv Lhasa
Ljubljana Ushuaia
"""
RARE_WORDS: tuple[str, ...] = tuple(_RARE_TEXT.split())

_ONSETS_TEXT = """
b c d f g h j k l m n p r s t v w x y z bl br ch cl cr dr fl fr gl gr kl pl pr qu sc sh sk sl
sm sn sp st str sw th tr tw wh wr
"""
_ONSETS = tuple(_ONSETS_TEXT.split())
_NUCLEI = tuple(
    ["a", "e", "i", "o", "u", "y", "ai", "au", "ea", "ee", "ei", "ie", "oa", "oo", "ou", "ue"]
)
_CODAS = (
    "",
    "",
    "",
    "b",
    "ck",
    "d",
    "ff",
    "g",
    "k",
    "l",
    "ll",
    "m",
    "n",
    "ng",
    "nk",
    "p",
    "r",
    "rd",
    "rk",
    "rm",
    "rn",
    "rt",
    "s",
    "sh",
    "ss",
    "st",
    "t",
    "th",
    "tch",
    "x",
    "z",
    "zz",
)
_NON_LATIN = (
    "中文",
    "日本語",
    "東京",
    "한국어",
    "你好",
    "世界",
    "Москва",
    "привет",
    "Ελλάδα",
    "λόγος",
    "مرحبا",
    "שלום",
    "नमस्ते",
    "ไทย",
    "😀",
    "🚀",
    "👍",
    "🎉",
    "❤",
    "★",
    "→",
    "€",
    "£",
    "°C",
    "©",
    "™",
    "½",
    "…",
    "—",
    "«",
    "»",
    "¿",
    "¡",
)
# Letters of Latin-1 Supplement and Latin Extended-A: the demo vocabulary holds
# each as one piece; en-XA copies them (the map knows only ASCII letters).
LATIN_LETTERS: str = (
    "".join(
        chr(c)
        for c in (*range(0xC0, 0x100), *range(0x100, 0x180))
        if chr(c).isalpha() and c not in (0xD7, 0xF7)
    )
    + "ªºµ"
)
# Printable Latin-1 symbols and common typographic punctuation, one piece each.
EXTRA_SYMBOLS: str = (
    "".join(chr(c) for c in range(0xA1, 0xC0) if c not in (0xAA, 0xAD, 0xB5, 0xBA))
    + "×÷–—‘’‚“”„†‡•…‰‹›€™→"
)
_ACCENTED_TEXT = """
café naïve résumé façade jalapeño crème brûlée São Zürich Ångström Øresund Straße Müller
Łódź Kraków Gdańsk Dvořák Škoda Čapek Ōsaka Māori Ærø Þórr İstanbul œuvre señor mañana
Málaga Göteborg Tromsø Ñuñoa Bogotá Curaçao Besançon Reykjavík Ľubomír Žižkov Ćevapi Đakovo
Şişli Ğ Ľ Ŀ ĳssel Ŧ ŉ ſ ĸ déjà vu über fiancée piñata smörgåsbord
"""
ACCENTED_WORDS: tuple[str, ...] = tuple(_ACCENTED_TEXT.split())
_PUNCT_AFTER = (",", ",", ",", ";", ":", "", "...")
_SENTENCE_END = (".", ".", ".", "!", "?", "", "?!", "...")


def is_heldout(word: str) -> bool:
    """True for words reserved for evaluation: a fixed tenth of all spellings."""
    digest = hashlib.blake2b(word.lower().encode("utf-8"), digest_size=2).digest()
    return int.from_bytes(digest, "big") % 10 == 0 or word.lower() in _RARE_LOWER


_RARE_LOWER = frozenset(w.lower() for w in RARE_WORDS)


class SentenceGenerator:
    """Reproducible generator of English-like sentences.

    ``heldout=False`` gives training sentences (no held-out word ever);
    ``heldout=True`` gives evaluation sentences in which about half of the
    words are held-out rare words, names or invented words.
    """

    def __init__(
        self,
        seed: int,
        *,
        heldout: bool = False,
        min_words: int = 1,
        max_words: int = 45,
        accented_share: float = 0.08,
    ) -> None:
        self._rng = random.Random(seed)
        self._accented_share = accented_share
        self._heldout = heldout
        self._min_words = min_words
        self._max_words = max_words
        self._common = tuple(w for w in COMMON_WORDS if not is_heldout(w))

    def __iter__(self) -> Iterator[str]:
        while True:
            yield self.sentence()

    def sentence(self) -> str:
        """One sentence of ``min_words``..``max_words`` words."""
        rng = self._rng
        n = rng.randint(self._min_words, self._max_words)
        words = [self._word() for _ in range(n)]
        for i in range(len(words) - 1):
            if rng.random() < 0.12:
                words[i] += rng.choice(_PUNCT_AFTER)
        if rng.random() < 0.08:
            i = rng.randrange(len(words))
            q = rng.choice(('"', "'", "()", "[]"))
            words[i] = (q[0] + words[i] + q[-1]) if len(q) == 2 else q + words[i] + q
        if rng.random() < 0.8 and words[0][:1].islower():
            words[0] = words[0][0].upper() + words[0][1:]
        sep = "  " if rng.random() < 0.02 else " "
        return sep.join(words) + rng.choice(_SENTENCE_END)

    def _word(self) -> str:
        rng = self._rng
        r = rng.random()
        if self._heldout and r < 0.5:
            return self._heldout_word()
        if rng.random() < self._accented_share:
            return self._fresh(self._accented)
        if rng.random() < 0.015:
            return rng.choice(EXTRA_SYMBOLS)
        if r < 0.45:
            return rng.choice(self._common)
        if r < 0.60:
            return self._fresh(lambda: self._invented())
        if r < 0.70:
            return self._fresh(lambda: self._invented().capitalize())
        if r < 0.82:
            return self._number()
        if r < 0.86:
            return self._fresh(
                lambda: "".join(
                    rng.choice(string.ascii_uppercase) for _ in range(rng.randint(2, 5))
                )
            )
        if r < 0.90:
            return self._fresh(
                lambda: "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(1, 10)))
            )
        if r < 0.94:
            return self._fresh(
                lambda: (
                    self._invented()
                    + rng.choice(("'s", "n't", "-"))
                    + (self._invented() if rng.random() < 0.3 else "")
                )
            )
        if r < 0.97:
            return rng.choice(_NON_LATIN)
        return self._fresh(
            lambda: self._invented() + rng.choice(("@", "#", "/", ".", "_")) + self._invented()
        )

    def _heldout_word(self) -> str:
        rng = self._rng
        r = rng.random()
        if r < 0.35:
            return rng.choice(RARE_WORDS)
        if r < 0.55:
            return self._number()
        while True:
            w = self._invented()
            w = w.capitalize() if rng.random() < 0.3 else w
            if is_heldout(w):
                return w

    def _fresh(self, make: Callable[[], str]) -> str:
        """A generated word that is not reserved for evaluation (in training mode)."""
        while True:
            w = make()
            if self._heldout or not is_heldout(w):
                return w

    def _accented(self) -> str:
        """A word with Latin-1 / Latin Extended-A letters: a real one or an invented one."""
        rng = self._rng
        if rng.random() < 0.3:
            return rng.choice(ACCENTED_WORDS)
        word = "".join(
            rng.choice(LATIN_LETTERS) if rng.random() < 0.35 else ch for ch in self._invented()
        )
        return word.capitalize() if rng.random() < 0.3 else word

    def _invented(self) -> str:
        rng = self._rng
        return "".join(
            rng.choice(_ONSETS) * (rng.random() < 0.85) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
            for _ in range(rng.choices((1, 2, 3), weights=(45, 40, 15))[0])
        )

    def _number(self) -> str:
        rng = self._rng
        kind = rng.randrange(9)
        if kind == 0:
            return str(rng.randint(0, 9))
        if kind == 1:
            return str(rng.randint(10, 99999))
        if kind == 2:
            return f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}"
        if kind == 3:
            return f"{rng.randint(1, 999)},{rng.randint(0, 999):03d}"
        if kind == 4:
            return f"{rng.randint(0, 23)}:{rng.randint(0, 59):02d}"
        if kind == 5:
            return f"{rng.randint(1, 100)}%"
        if kind == 6:
            return f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if kind == 7:
            return rng.choice("$#+-~") + str(rng.randint(1, 9999))
        return f"{rng.randint(1, 99)}{rng.choice(('th', 'st', 'nd', 'rd', 'x', 'km', 'kg'))}"


def with_placeholders(sentence: str, rng: random.Random) -> str:
    """``sentence`` with placeholder tokens wrapped around words or standing alone.

    Teaches the model to copy ``⟦n⟧`` through in place, as the fidelity layer
    sends inline tags and protected spans.
    """
    words = sentence.split(" ")
    index = rng.randint(0, 8)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(words))
        kind = rng.random()
        if kind < 0.5:  # an inline element around one to three words
            j = min(len(words), i + rng.randint(1, 3)) - 1
            words[i] = token(index) + words[i]
            words[j] = words[j] + token(index + 1)
            index += 2
        elif kind < 0.8:  # a standalone placeholder between words
            words.insert(i, token(index))
            index += 1
        else:  # glued to a word, as in "⟦3⟧%" or "(⟦3⟧)"
            words[i] = words[i] + token(index) if rng.random() < 0.5 else token(index) + words[i]
            index += 1
    return " ".join(words)


def heldout_sentences(n: int = 500, seed: int = 20240601) -> list[str]:
    """The fixed evaluation set: ``n`` held-out sentences of 3-40 words."""
    gen = SentenceGenerator(seed, heldout=True, min_words=3, max_words=40)
    return [gen.sentence() for _ in range(n)]


def heldout_with_placeholders(n: int = 200, seed: int = 20240602) -> list[str]:
    """Held-out sentences with placeholder tokens, for the copy-through check."""
    rng = random.Random(seed)
    gen = SentenceGenerator(seed, heldout=True, min_words=3, max_words=30)
    return [with_placeholders(gen.sentence(), rng) for _ in range(n)]
