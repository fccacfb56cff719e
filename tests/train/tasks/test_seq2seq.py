"""Synthetic tasks as source/target pairs for the encoder-decoder: the pair holds exactly
the prompt and the answer of every row, and an encoder-decoder learns copy through the
shared loop."""
from __future__ import annotations

import pytest
import torch

from tfamily.data import make_task
from tfamily.train import loop
from tfamily.settings.run import DataConfig
from tfamily.train.config import load
from tfamily.train.tasks.seq2seq import PairTask, pairs_batch, to_pair


def _rows(pair: dict, i: int) -> tuple[list[int], list[int], list[int]]:
    src = pair["src"][i][pair["src_padding"][i]].tolist()
    keep = pair["tgt_padding"][i]
    return src, pair["tgt_in"][i][keep].tolist(), pair["tgt_out"][i][keep].tolist()


@pytest.mark.parametrize("name, params", [("copy", {"n_symbols": 5, "max_len": 7}),
                                          ("reverse", {"n_symbols": 5, "max_len": 7}),
                                          ("addition", {"n_digits": 3})])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_pair_is_the_prompt_and_the_answer(name, params, seed):
    task = make_task(name, **params)
    b = task.sample(6, seed)
    bos, eos = task.vocab_size, task.vocab_size + 1
    pair = to_pair({"x": b.input, "y": b.target, "loss_mask": b.loss_mask}, bos, eos)
    for i in range(6):
        # Reference, row by row: the full sequence, split where the scored targets start.
        seq = torch.cat([b.input[i, :1], b.target[i]]).tolist()
        scored = b.loss_mask[i].nonzero().flatten().tolist()
        first = scored[0]
        src, tgt_in, tgt_out = _rows(pair, i)
        assert src == seq[:first + 1]
        answer = [seq[t + 1] for t in scored]
        assert tgt_in == [bos, *answer] and tgt_out == [*answer, eos]
    assert torch.equal(pair["loss_mask"], pair["tgt_padding"])


def test_rows_without_one_contiguous_answer_are_refused():
    x = torch.zeros(2, 5, dtype=torch.long)
    gap = torch.tensor([[False, True, False, True, False], [False, True, True, False, False]])
    with pytest.raises(ValueError, match="not contiguous"):
        to_pair({"x": x, "y": x, "loss_mask": gap}, 10, 11)
    with pytest.raises(ValueError, match="scores no position"):
        to_pair({"x": x, "y": x, "loss_mask": torch.zeros(2, 5, dtype=torch.bool)}, 10, 11)
    with pytest.raises(ValueError, match="data.task='parity' is a classification task"):
        PairTask(DataConfig(corpus=None, task="parity"), 4)


def test_pairs_are_resumable_and_split_over_ranks():
    cfg = DataConfig(corpus=None, task="copy", task_params={"n_symbols": 4, "max_len": 5})
    whole = PairTask(cfg, 4, seed=3)
    halves = [PairTask(cfg, 2, seed=3, rank=r, world_size=2) for r in (0, 1)]
    a = whole.next()["src"]
    b = [h.next()["src"] for h in halves]
    assert torch.equal(a[:2, :b[0].shape[1]], b[0]) and torch.equal(a[2:, :b[1].shape[1]], b[1])
    position = whole.state_dict()
    nxt = whole.next()
    whole.load_state_dict(position)
    assert torch.equal(whole.next()["tgt_out"], nxt["tgt_out"])


def test_encoder_decoder_learns_copy_through_the_shared_loop(tmp_path):
    cfg = load(None, {"member": "vanilla", "model.d_model": 32, "model.heads.n_heads": 2,
                      "model.depth.n_layers": 1, "model.ff.d_ff": 64, "model.dropout": 0.0,
                      "model.residual.name": "pre_norm", "data.corpus": None, "data.task": "copy",
                      "data.task_params": {"n_symbols": 4, "max_len": 4}, "train.batch_size": 16,
                      "train.max_steps": 50, "train.lr": 1e-2, "train.warmup": 5, "train.eval_every": None,
                      "train.eval_tokens": 1024, "train.threads": 1, "train.ckpt_every": None, "train.precision": "fp32",
                      "train.progress": False, "train.tensorboard": False, "train.out": str(tmp_path / "run")})
    trainer = loop.Trainer(cfg)
    assert isinstance(trainer.task, PairTask) and trainer.spec.vocab_size == 4 + 2 + 2  # symbols, PAD/SEP, BOS/EOS
    before = trainer.evaluate()
    r = trainer.fit()
    trainer.close()
    assert r["val_loss"] < before["loss"] / 2 and r["val_acc"] > 0.5  # chance on the answer is about 1/5


def test_pairs_batch_by_hand():
    b = pairs_batch([([1, 2, 3], [4]), ([5], [6, 7])], bos=9, eos=8)
    assert b["src"].tolist() == [[1, 2, 3], [5, 0, 0]]
    assert b["src_padding"].tolist() == [[True, True, True], [True, False, False]]
    assert b["tgt_in"].tolist() == [[9, 4, 0], [9, 6, 7]] and b["tgt_out"].tolist() == [[4, 8, 0], [6, 7, 8]]
    assert b["tgt_padding"].tolist() == [[True, True, False], [True, True, True]]
