"""The bad-input catalogue, API half (issue 13): each row calls the library with one kind of
bad input and expects ValueError/TypeError (or the named subclass) whose message holds every
listed word: the bad value and the fix. The CLI half is tests/test_catalogue.py."""
from __future__ import annotations

import gzip
import math

import pytest
import torch

from tfamily import build, members
from tfamily.base import textload
from tfamily.data import load_corpus
from tfamily.data.paths import find_file, resolve_data_dir
from tfamily.models.generate import beam_search, generate, greedy_decode
from tfamily.spec.sizes import check_fits
from tfamily.spec import Spec
from tfamily.train import checkpoint, config

V = 11


class Ctx:
    """Small models, built once per module and on first use."""

    def __init__(self, tmp):
        self.tmp = tmp
        self._gpt = self._s2s = None

    @property
    def gpt(self):
        if self._gpt is None:
            self._gpt = build(members.gpt(d_model=16, vocab_size=V, heads=dict(n_heads=2), depth=dict(n_layers=1)))
        return self._gpt

    @property
    def s2s(self):
        if self._s2s is None:
            self._s2s = build(members.vanilla(d_model=16, vocab_size=V, heads=dict(n_heads=2),
                                              depth=dict(n_layers=1, n_enc_layers=1)))
        return self._s2s

    def file(self, name: str, data: bytes):
        p = self.tmp / name
        p.write_bytes(data)
        return p


def x(b=2, n=5):
    return torch.randint(0, V, (b, n))


def gpt_spec(**kw):
    return members.gpt(d_model=16, vocab_size=V, heads=dict(n_heads=2), depth=dict(n_layers=1)).replace(**kw)


API_CASES = [
    # -- model forward and loss -------------------------------------------------------
    ("forward on an empty sequence", lambda c: c.gpt(x(2, 0)), ValueError, ["(2, 0)", "empty", "at least one"]),
    ("forward on a batch of 0", lambda c: c.gpt(x(0, 4)), ValueError, ["(0, 4)", "empty"]),
    ("forward on float tokens", lambda c: c.gpt(x().float()), TypeError, ["integer tensor", "float32"]),
    ("forward on 1-d tokens", lambda c: c.gpt(x()[0]), ValueError, ["(batch, seq_len)", "(5,)"]),
    ("forward on a list", lambda c: c.gpt([[1, 2]]), TypeError, ["integer tensor", "list"]),
    ("forward on an id past the vocabulary", lambda c: c.gpt(torch.tensor([[1, V]])), ValueError,
     [f"token id {V}", f"[0, {V - 1}]", "vocab_size"]),
    ("forward on a negative id", lambda c: c.gpt(torch.tensor([[-1, 2]])), ValueError, ["token id -1"]),
    ("loss on an empty sequence", lambda c: c.gpt.loss({"x": x(2, 0), "y": x(2, 0)}), ValueError, ["empty"]),
    ("loss on a batch of 0", lambda c: c.gpt.loss({"x": x(0, 3), "y": x(0, 3)}), ValueError, ["(0, 3)"]),
    ("loss given a tuple", lambda c: c.gpt.loss((x(), x())), TypeError, ["dict batch", "'x'", "'y'", "tuple"]),
    ("loss given a tensor", lambda c: c.gpt.loss(x()), TypeError, ["dict batch", "Tensor"]),
    ("loss without targets", lambda c: c.gpt.loss({"x": x()}), ValueError, ["lacks ['y']", "'x'"]),
    ("loss on float targets", lambda c: c.gpt.loss({"x": x(), "y": x().float()}), TypeError,
     ["targets", "integer", "float32", ".long()"]),
    ("loss on targets of another shape", lambda c: c.gpt.loss({"x": x(2, 5), "y": x(2, 4)}), ValueError,
     ["(2, 4)", "(2, 5)", "one target id per input position"]),
    ("loss on targets past the vocabulary", lambda c: c.gpt.loss({"x": x(), "y": x() + V}), ValueError,
     ["target id", f"[0, {V - 1}]"]),
    ("loss on negative targets", lambda c: c.gpt.loss({"x": x(), "y": -x() - 1}), ValueError, ["target id -"]),
    ("loss_mask with NaN", lambda c: c.gpt.loss({"x": x(), "y": x(), "loss_mask": torch.full((2, 5), math.nan)}),
     ValueError, ["loss_mask", "NaN", "bool mask"]),
    ("loss_mask negative", lambda c: c.gpt.loss({"x": x(), "y": x(), "loss_mask": -torch.ones(2, 5)}),
     ValueError, ["loss_mask", "negative"]),
    ("loss_mask of another shape", lambda c: c.gpt.loss({"x": x(), "y": x(), "loss_mask": torch.ones(2, 4)}),
     ValueError, ["loss_mask", "(2, 5)", "(2, 4)"]),
    ("seq2seq loss without tgt_out", lambda c: c.s2s.loss({"src": x(), "tgt_in": x()}), ValueError, ["tgt_out"]),
    ("seq2seq rows differ", lambda c: c.s2s(x(2, 4), x(3, 4)), ValueError, ["2", "3", "equal"]),
    # -- decoding ----------------------------------------------------------------------
    ("generate a float token count", lambda c: generate(c.gpt, x(1, 2), 2.5), TypeError,
     ["max_new_tokens", "integer", "2.5"]),
    ("generate a negative count", lambda c: generate(c.gpt, x(1, 2), -1), ValueError, ["max_new_tokens", "-1"]),
    ("generate from an empty prompt", lambda c: generate(c.gpt, x(1, 0), 2), ValueError, ["prompt", "n >= 1"]),
    ("generate temperature 0", lambda c: generate(c.gpt, x(1, 2), 2, temperature=0), ValueError,
     ["temperature", "greedy=True"]),
    ("generate top_k float", lambda c: generate(c.gpt, x(1, 2), 2, top_k=2.5), ValueError, ["top_k", "2.5"]),
    ("generate top_p 0", lambda c: generate(c.gpt, x(1, 2), 2, top_p=0.0), ValueError, ["top_p", "(0, 1]"]),
    ("beam eos past the vocabulary", lambda c: beam_search(c.s2s, x(), bos=1, eos=V + 3, max_len=3), ValueError,
     [f"eos={V + 3}", f"[0, {V - 1}]"]),
    ("beam bos negative", lambda c: beam_search(c.s2s, x(), bos=-1, eos=2, max_len=3), ValueError, ["bos=-1"]),
    ("beam width 0", lambda c: beam_search(c.s2s, x(), bos=1, eos=2, max_len=3, beam=0), ValueError,
     ["beam", ">= 1"]),
    ("beam max_len float", lambda c: beam_search(c.s2s, x(), bos=1, eos=2, max_len=2.0), TypeError,
     ["max_len", "integer"]),
    ("greedy eos past the vocabulary", lambda c: greedy_decode(c.s2s, x(), bos=1, eos=V, max_len=3), ValueError,
     [f"eos={V}"]),
    # -- specs and sizes ---------------------------------------------------------------
    ("spec d_model 0", lambda c: gpt_spec(d_model=0), ValueError, ["d_model", ">= 1"]),
    ("spec vocab 1", lambda c: gpt_spec(vocab_size=1), ValueError, ["vocab_size", ">= 2"]),
    ("spec unknown key", lambda c: gpt_spec(dmodel=3), ValueError, ["dmodel", "d_model"]),
    ("spec axis not a dict", lambda c: Spec(member="x", heads=3), TypeError, ["heads", "HeadsSpec or dict"]),
    ("spec per_layer a string", lambda c: gpt_spec(pattern=dict(per_layer="causal")), TypeError,
     ["per_layer", "list", "'causal'"]),
    ("build a number", lambda c: build(3), TypeError, ["build()", "Spec or a member name", "int"]),
    ("build an unknown member", lambda c: build("gtp"), ValueError, ["gtp", "gpt"]),
    ("build 1e8 layers", lambda c: build(gpt_spec(depth=dict(n_layers=10**8))), ValueError,
     ["cannot fit", "n_layers=100000000", "RAM"]),
    ("build d_model 1e9", lambda c: build(gpt_spec(d_model=10**9)), ValueError, ["cannot fit", "d_model=10"]),
    ("build vocab 1e10", lambda c: build(gpt_spec(vocab_size=10**10)), ValueError, ["vocab_size=10000000000"]),
    ("train batch 1e8 (size check)", lambda c: check_fits(gpt_spec(), batch=10**8, seq_len=64, training=True),
     ValueError, ["cannot fit", "activations", "batch_size=100000000"]),
    # -- data --------------------------------------------------------------------------
    ("corpus gzip corrupt", lambda c: load_corpus(c.file("x.gz", b"not gzip")), ValueError,
     ["x.gz", "corrupt or truncated"]),
    ("corpus gzip truncated", lambda c: load_corpus(c.file("t.gz", gzip.compress(bytes(range(256)) * 400)[:300])),
     ValueError, ["t.gz", "ended before"]),
    ("corpus empty", lambda c: load_corpus(c.file("e.txt", b"")), ValueError, ["e.txt", "empty"]),
    ("corpus empty gzip", lambda c: load_corpus(c.file("e.gz", gzip.compress(b""))), ValueError, ["e.gz", "empty"]),
    ("corpus too short to split", lambda c: load_corpus(c.file("s.txt", b"abc")), ValueError,
     ["s.txt", "too small to split"]),
    ("corpus not a path", lambda c: load_corpus(3), TypeError, ["corpus name or a path", "int"]),
    ("corpus vocab unknown", lambda c: load_corpus(c.file("v.txt", b"hello " * 100), vocab="word"), ValueError,
     ["vocab='word'", "'byte', 'char'"]),
    ("data_dir is a file", lambda c: load_corpus("kjv", c.file("f.txt", b"x")), NotADirectoryError,
     ["f.txt", "not a directory", "--data-dir"]),
    ("find_file with a path", lambda c: find_file("dir/kjv.txt"), ValueError, ["bare file name"]),
    ("data_dir a number", lambda c: resolve_data_dir(3), TypeError, ["data_dir", "int"]),
    ("data_dir empty", lambda c: resolve_data_dir(""), ValueError, ["empty", "directory"]),
    # -- configs and checkpoints ------------------------------------------------------
    ("config not a mapping", lambda c: config.from_dict([1]), TypeError, ["mapping", "list"]),
    ("config duration nan", lambda c: config.parse_duration(math.nan), ValueError, ["nan", "finite"]),
    ("config duration inf", lambda c: config.parse_duration(math.inf), ValueError, ["inf", "finite"]),
    ("config grad_clip 0 (API)", lambda c: config.load(overrides={"train.grad_clip": 0}), ValueError,
     ["grad_clip=0", "null"]),
    ("config run name ../ (API)", lambda c: config.load(overrides={"name": "../x"}), ValueError, ["'../x'"]),
    ("resume check: seed", lambda c: config.check_resume(_META, {"train.seed": 3}), ValueError,
     ["seed 0", "3"]),
    ("resume check: max_steps", lambda c: config.check_resume(_META, {"train.max_steps": 5}), ValueError,
     ["step 10", "N > 10"]),
    ("resume check: time budget spent", lambda c: config.check_resume(
        {**_META, "config": {"train": {"seed": 0, "max_steps": None, "time_budget": "10s"}}}, {}),
     ValueError, ["12 s", "10s", "--time"]),
    ("checkpoint a file", lambda c: checkpoint.load(c.file("ck", b"x")), checkpoint.CheckpointError,
     ["is a file", "run directory"]),
    ("yaml alias bomb (API)", lambda c: textload.load_yaml(_BOMB, "x.yaml"), ValueError, ["x.yaml", "expands"]),
    ("json nested 1e5 deep (API)", lambda c: textload.load_json("[" * 10**5 + "]" * 10**5, "m.json"), ValueError,
     ["m.json", "nests too deeply"]),
    ("recurrent spec with a window (API)", lambda c: members.lstm_lm().replace(
        pattern=dict(name="sliding_window", params={"window": 4})), ValueError,
     ["model.pattern 'sliding_window'", "would do nothing"]),
    ("size check: an L x L mask", lambda c: check_fits(gpt_spec(pattern=dict(name="sliding_window",
                                                                             params={"window": 8})),
                                                        batch=1, seq_len=10**6, training=True), ValueError,
     ["cannot fit", "1000000 x 1000000", "blocksparse"]),
    ("rl config ckpt_every 0 (API)", lambda c: _rl_config(ckpt_every=0), ValueError, ["--ckpt-every", "got 0"]),
    ("rl config ent_coef nan (API)", lambda c: _rl_config(settings={"ent_coef": math.nan}), ValueError,
     ["ent_coef", "nan"]),
]
_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def _rl_config(**kw):
    from tfamily.rl.toy import ID
    from tfamily.rl.train import rl_config
    return rl_config(ID, "lstm", 4096, **kw)
_META = {"step": 10, "elapsed": 12.0, "config": {"train": {"seed": 0, "max_steps": 10, "time_budget": None}}}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return Ctx(tmp_path_factory.mktemp("api"))


@pytest.mark.parametrize("case", API_CASES, ids=[c[0] for c in API_CASES])
def test_api_bad_input_names_the_value_and_the_fix(case, ctx):
    _, call, exc, words = case
    with pytest.raises(exc) as info:
        call(ctx)
    msg = str(info.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, (w, msg)
