"""Train the demo model: a character-level Marian Transformer in PyTorch.

Imported only by :mod:`pipeline.demo_model.build` under ``.venv-train``
(PyTorch and transformers come from the ``train`` extra); the serving path
never imports this module.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import string
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
import torch
from tqdm import tqdm
from transformers import MarianConfig, MarianMTModel, MarianTokenizer

from pipeline.demo_model import LANG_TOKENS, SPM_FILE
from pipeline.fidelity.tokens import CLOSE, OPEN
from pipeline.pseudo_locale import char_map, from_pseudo, to_pseudo
from pipeline.sample_sentences import (
    EXTRA_SYMBOLS,
    LATIN_LETTERS,
    SentenceGenerator,
    with_placeholders,
)

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"


@dataclass(frozen=True)
class TrainConfig:
    """Model shape and optimisation schedule (defaults: the measured recipe)."""

    steps: int = 2000
    batch_size: int = 48
    d_model: int = 128
    layers: int = 2
    heads: int = 4
    ffn_dim: int = 512
    max_positions: int = 1024
    lr: float = 1e-3
    warmup: int = 200
    seed: int = 1234
    threads: int = 2
    checkpoint_every: int = 250
    max_words: int = 45
    # share of words with Latin-1 / Latin Extended-A letters (more when fine-tuning for them)
    accented_share: float = 0.08
    # with init_from: train only the embeddings of tokens the earlier model did not have,
    # everything it learned stays as it was
    new_tokens_only: bool = False


def train_tokenizer(work_dir: Path) -> Path:
    """A SentencePiece *character* model.

    One piece each for printable ASCII, the en-XA letters, Latin-1 and Latin
    Extended-A letters, common typographic symbols and the placeholder
    brackets. Every other character is encoded as UTF-8 byte pieces
    (``byte_fallback``), so CJK, emoji and other scripts survive a round trip
    instead of becoming ``<unk>``.
    """
    alphabet = "".join(
        dict.fromkeys(
            string.ascii_letters
            + string.digits
            + string.punctuation
            + "".join(char_map().values())
            + LATIN_LETTERS
            + EXTRA_SYMBOLS
            + OPEN
            + CLOSE
        )
    )
    lines = [alphabet, alphabet[::-1], "a b c"]
    path = work_dir / SPM_FILE
    with path.open("wb") as out:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=out,
            model_type="char",
            vocab_size=len(set(alphabet)) + 3 + 256,
            hard_vocab_limit=False,
            character_coverage=1.0,
            byte_fallback=True,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            split_digits=True,
            bos_id=-1,
            eos_id=0,
            unk_id=1,
            pad_id=-1,
            minloglevel=2,
        )
    return path


def vocabulary(sp: spm.SentencePieceProcessor) -> list[str]:
    """Model vocabulary: SentencePiece pieces (same ids), language tokens, ``<pad>`` last."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())] + [
        *LANG_TOKENS.values(),
        PAD,
    ]


class _Batches:
    """Length-bucketed training batches of both directions."""

    def __init__(
        self, sp: spm.SentencePieceProcessor, vocab: list[str], cfg: TrainConfig, start: int = 0
    ) -> None:
        self._sp = sp
        self._ids = {tok: i for i, tok in enumerate(vocab)}
        self._cfg = cfg
        # a resumed run continues with sentences it has not seen yet
        self._rng = random.Random(cfg.seed + start)
        self._gen = SentenceGenerator(
            cfg.seed + start, max_words=cfg.max_words, accented_share=cfg.accented_share
        )
        self._queue: list[list[tuple[list[int], list[int]]]] = []

    def _example(self) -> tuple[list[int], list[int]]:
        en = self._gen.sentence()
        if self._rng.random() < 0.06:
            en = en.replace(" ", " " + _random_script(self._rng) + " ", 1)
        if self._rng.random() < 0.2:
            en = with_placeholders(en, self._rng)
        xa = to_pseudo(en)
        # each direction's target is the map's: en-XA -> en maps the en-XA letters
        # back, so an English "é" (kept by en -> en-XA) comes back as "e".
        if self._rng.random() < 0.5:
            src, tgt, lang = en, xa, "en-XA"
        else:
            src, tgt, lang = xa, from_pseudo(xa), "en"
        eos = self._ids[EOS]
        src_ids = [*self._sp.encode(src), eos]
        labels = [self._ids[LANG_TOKENS[lang]], *self._sp.encode(tgt), eos]
        return src_ids, labels

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not self._queue:
            pool = sorted(
                (self._example() for _ in range(self._cfg.batch_size * 16)),
                key=lambda ex: len(ex[0]),
            )
            bs = self._cfg.batch_size
            self._queue = [pool[i : i + bs] for i in range(0, len(pool), bs)]
            self._rng.shuffle(self._queue)
        batch = self._queue.pop()
        pad = self._ids[PAD]
        src_len = max(len(s) for s, _ in batch)
        tgt_len = max(len(t) for _, t in batch)
        src = torch.full((len(batch), src_len), pad, dtype=torch.long)
        labels = torch.full((len(batch), tgt_len), -100, dtype=torch.long)
        for i, (s, t) in enumerate(batch):
            src[i, : len(s)] = torch.tensor(s)
            labels[i, : len(t)] = torch.tensor(t)
        return src, (src != pad).long(), labels


def _random_script(rng: random.Random) -> str:
    """A short run of characters from a non-Latin script (kept as-is by en-XA)."""
    lo, hi = rng.choice(
        (
            (0x4E00, 0x9FFF),
            (0x0410, 0x044F),
            (0x03B1, 0x03C9),
            (0xAC00, 0xD7A3),
            (0x1F600, 0x1F64F),
            (0x0627, 0x064A),
            (0x3041, 0x3096),
        )
    )
    return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 4)))


def read_ctranslate2(model_dir: Path) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Float weights and vocabulary of a CTranslate2 Transformer (``model.bin`` v6, int8 or float).

    int8 weights are dequantized with their per-row scales; aliases resolved.
    """
    data = (model_dir / "model.bin").read_bytes()
    pos = 0

    def take(fmt: str) -> int:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return int(value)

    def text() -> str:
        nonlocal pos
        n = take("H")
        value = data[pos : pos + n - 1].decode("utf-8")
        pos += n
        return value

    take("I")  # binary version
    text()  # spec name
    take("I")  # spec revision
    dtypes = {0: torch.float32, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.float16}
    raw: dict[str, torch.Tensor] = {}
    for _ in range(take("I")):
        name = text()
        shape = [take("I") for _ in range(take("B"))]
        dtype = dtypes[take("B")]
        size = take("I")
        raw[name] = torch.frombuffer(bytearray(data[pos : pos + size]), dtype=dtype).reshape(shape)
        pos += size
    for _ in range(take("I")):
        alias, target = text(), text()
        raw[alias] = raw[target]
    weights: dict[str, torch.Tensor] = {}
    for name, value in raw.items():
        if name.endswith("_scale"):
            continue
        scale = raw.get(name + "_scale")
        weights[name] = value.float() / scale.unsqueeze(1) if scale is not None else value.float()
    vocab = json.loads((model_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
    return weights, vocab


def init_from_ctranslate2(model: MarianMTModel, vocab: list[str], model_dir: Path) -> int:
    """Start ``model`` from an earlier demo model's weights; returns how many tokens it knew.

    Embedding rows are matched by token string, so a grown vocabulary keeps
    what the earlier model learned and only the new tokens start untrained.
    """
    w, old_vocab = read_ctranslate2(model_dir)
    state = model.state_dict()
    old_index = {tok: i for i, tok in enumerate(old_vocab)}
    emb = state["model.shared.weight"].clone()
    known = 0
    for i, tok in enumerate(vocab):
        if tok in old_index:
            emb[i] = w["decoder/embeddings/weight"][old_index[tok]]
            known += 1
    new = {"model.shared.weight": emb}

    def linear(dst: str, src: str, rows: slice = slice(None)) -> None:
        new[f"{dst}.weight"] = w[f"{src}/weight"][rows]
        new[f"{dst}.bias"] = w[f"{src}/bias"][rows]

    def norm(dst: str, src: str) -> None:
        new[f"{dst}.weight"] = w[f"{src}/gamma"]
        new[f"{dst}.bias"] = w[f"{src}/beta"]

    d = model.config.d_model
    thirds = [slice(0, d), slice(d, 2 * d), slice(2 * d, 3 * d)]
    for side in ("encoder", "decoder"):
        for layer in range(model.config.encoder_layers):
            hf, ct = f"model.{side}.layers.{layer}", f"{side}/layer_{layer}"
            for proj, rows in zip(("q_proj", "k_proj", "v_proj"), thirds, strict=True):
                linear(f"{hf}.self_attn.{proj}", f"{ct}/self_attention/linear_0", rows)
            linear(f"{hf}.self_attn.out_proj", f"{ct}/self_attention/linear_1")
            norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
            linear(f"{hf}.fc1", f"{ct}/ffn/linear_0")
            linear(f"{hf}.fc2", f"{ct}/ffn/linear_1")
            norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")
            if side == "decoder":
                linear(f"{hf}.encoder_attn.q_proj", f"{ct}/attention/linear_0")
                linear(f"{hf}.encoder_attn.k_proj", f"{ct}/attention/linear_1", thirds[0])
                linear(f"{hf}.encoder_attn.v_proj", f"{ct}/attention/linear_1", thirds[1])
                linear(f"{hf}.encoder_attn.out_proj", f"{ct}/attention/linear_2")
                norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
    missing = sorted(set(new) - set(state))
    if missing:
        raise ValueError(f"no such parameters in the model: {missing[:3]}")
    model.load_state_dict(new, strict=False)
    return known


def _train_new_rows_only(
    model: MarianMTModel, vocab: list[str], model_dir: Path
) -> torch.nn.Parameter:
    """Freeze ``model`` but the embedding rows of tokens ``model_dir``'s vocabulary lacks."""
    old = set(json.loads((model_dir / "shared_vocabulary.json").read_text(encoding="utf-8")))
    mask = torch.tensor([[0.0] if tok in old else [1.0] for tok in vocab])
    for param in model.parameters():
        param.requires_grad_(False)
    embeddings = model.get_input_embeddings().weight  # tied to the output projection
    embeddings.requires_grad_(True)
    embeddings.register_hook(lambda grad: grad * mask)
    return embeddings


def train(
    work_dir: Path, cfg: TrainConfig, *, resume: bool = True, init_from: Path | None = None
) -> Path:
    """Train (or resume) the model; returns a directory with the HF model + tokenizer."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    sp = spm.SentencePieceProcessor(model_file=str(work_dir / SPM_FILE))
    vocab = vocabulary(sp)
    pad_id = len(vocab) - 1
    config = MarianConfig(
        vocab_size=len(vocab),
        d_model=cfg.d_model,
        encoder_layers=cfg.layers,
        decoder_layers=cfg.layers,
        encoder_attention_heads=cfg.heads,
        decoder_attention_heads=cfg.heads,
        encoder_ffn_dim=cfg.ffn_dim,
        decoder_ffn_dim=cfg.ffn_dim,
        max_position_embeddings=cfg.max_positions,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=True,
        pad_token_id=pad_id,
        eos_token_id=0,
        forced_eos_token_id=0,
        decoder_start_token_id=pad_id,
    )
    model = MarianMTModel(config)
    if init_from is not None and not (resume and (work_dir / "checkpoint.pt").exists()):
        known = init_from_ctranslate2(model, vocab, init_from)
        tqdm.write(f"started from {init_from}: {known} of {len(vocab)} tokens known")
    trainable: list[torch.nn.Parameter] = list(model.parameters())
    if cfg.new_tokens_only:
        if init_from is None:
            raise ValueError("new_tokens_only needs a model to start from (init_from)")
        trainable = [_train_new_rows_only(model, vocab, init_from)]
    opt = torch.optim.AdamW(
        trainable, lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.0 if cfg.new_tokens_only else 0.01
    )

    def lr_at(step: int) -> float:
        if step < cfg.warmup:
            return cfg.lr * (step + 1) / cfg.warmup
        progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return cfg.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    ckpt = work_dir / "checkpoint.pt"
    start = 0
    if resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
    batches = _Batches(sp, vocab, cfg, start)
    model.train()
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="train", mininterval=5)
    ema = None
    t0 = time.monotonic()
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        src, mask, labels = batches.next()
        loss = model(input_ids=src, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        bar.set_postfix(loss=f"{ema:.4f}", lr=f"{lr_at(step):.2e}", refresh=False)
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
            torch.save(
                {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step + 1}, ckpt
            )
            tqdm.write(
                f"step {step + 1} loss {ema:.4f} elapsed {time.monotonic() - t0:.0f}s "
                f"sample: {_sample(model, sp, vocab)!r}"
            )
    return save_hf(model, sp, vocab, work_dir)


def _sample(model: MarianMTModel, sp: spm.SentencePieceProcessor, vocab: list[str]) -> str:
    """Greedy translation of one probe sentence, for the training log."""
    ids = {tok: i for i, tok in enumerate(vocab)}
    model.eval()
    with torch.no_grad():
        src = torch.tensor([[*sp.encode("Hello world, 42 times!"), ids[EOS]]])
        out = model.generate(
            input_ids=src,
            decoder_input_ids=torch.tensor([[len(vocab) - 1, ids[LANG_TOKENS["en-XA"]]]]),
            max_new_tokens=40,
            num_beams=1,
            do_sample=False,
        )
    model.train()
    return sp.decode([i for i in out[0].tolist() if i < sp.get_piece_size()])


def save_hf(
    model: MarianMTModel, sp: spm.SentencePieceProcessor, vocab: list[str], work_dir: Path
) -> Path:
    """Save model and a ``MarianTokenizer`` in the layout CTranslate2's converter reads."""
    out = work_dir / "hf"
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    vocab_file = work_dir / "vocab.json"
    vocab_file.write_text(
        json.dumps({tok: i for i, tok in enumerate(vocab)}, ensure_ascii=False), encoding="utf-8"
    )
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(work_dir / SPM_FILE, work_dir / name)
    tokenizer = MarianTokenizer(
        source_spm=str(work_dir / "source.spm"),
        target_spm=str(work_dir / "target.spm"),
        vocab=str(vocab_file),
        eos_token=EOS,
        unk_token=UNK,
        pad_token=PAD,
        model_max_length=int(model.config.max_position_embeddings),
    )
    tokenizer.save_pretrained(out)
    return out
