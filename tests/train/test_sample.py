"""Writing text from a trained model: a batch of prompts equals each prompt alone (also past
the context cap, where rows restart), stop strings end rows independently, text streams step
by step with a stop string's start held back, and `tfamily generate` streams, batches, stops
and refuses members that cannot generate in one line."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

import tfamily
from tfamily import cli, members
from tfamily.data.vocab import CharVocab
from tfamily.train.sample import Trained, sample_text, stream_text

CHARS = "\n abcdefghilmnorstuw"
SEQ = 16  # the context cap: 40 tokens make every row restart from its newest half
PROMPTS = ["a", "hello wor", "to be or not"]
SAMPLED = dict(temperature=1.0, seed=3)  # an untrained model's greedy text repeats one character


def _trained(member: str = "gpt", vocab=CharVocab(CHARS), **kw) -> Trained:
    torch.manual_seed(0)
    spec = getattr(members, member)(d_model=32, dropout=0.0, vocab_size=len(CHARS), depth__n_layers=2,
                                    heads__n_heads=4, ff__d_ff=64, **kw)
    model = tfamily.build(spec).eval().double()  # fp64: no argmax or draw flips between batch shapes
    meta = {"source": {"seq_len": SEQ}, "config": {"member": member}}
    return Trained(model, spec, meta, vocab, Path("runs/x"))


@pytest.fixture(scope="module")
def gpt() -> Trained:
    return _trained(position__max_len=SEQ)


@pytest.mark.parametrize("kw", [dict(greedy=True), dict(temperature=1.3, top_k=8, seed=5)])
def test_a_batch_writes_what_each_prompt_writes_alone(gpt, kw):
    batch = sample_text(gpt, PROMPTS, 40, **kw)
    seed = kw.pop("seed", 0)
    assert batch == [sample_text(gpt, p, 40, seed=seed + r, **kw) for r, p in enumerate(PROMPTS)]
    assert all(len(t) == 40 for t in batch)


def test_stop_strings_end_each_row_at_its_first_stop(gpt):
    full = sample_text(gpt, PROMPTS, 30, **SAMPLED)
    stops = [full[0][5:7], full[2][20:23]]  # each occurs in (at least) one row
    first = [min((i for i in (t.find(s) for s in stops) if i >= 0), default=len(t)) for t in full]
    assert sample_text(gpt, PROMPTS, 30, stop=stops, **SAMPLED) == [t[:i] for t, i in zip(full, first)]
    assert first[0] <= 5 and first[2] <= 20


def test_text_streams_step_by_step_and_holds_back_a_stop_strings_start(gpt):
    full = sample_text(gpt, PROMPTS[1], 30, **SAMPLED)
    stop = full[12:16]
    steps = list(stream_text(gpt, PROMPTS[1], 30, stop=[stop], **SAMPLED))
    pieces = [s[0] for s in steps]
    assert "".join(pieces) == full[:full.find(stop)]
    assert sum(bool(p) for p in pieces) > 3  # text arrives as it is produced, not at the end
    shown = ""
    for p in pieces:  # what was shown never ends inside the stop string's occurrence
        shown += p
        assert len(shown) <= full.find(stop)


def test_members_that_cannot_write_text_are_refused_naming_the_member():
    with pytest.raises(ValueError, match=r"member 'bert' is an encoder .*tfamily eval"):
        sample_text(_trained("bert"), "ab", 3)
    with pytest.raises(ValueError, match=r"member 'gpt' .*synthetic task.*tfamily eval"):
        sample_text(_trained(vocab=None), "ab", 3)


def test_a_memory_member_takes_a_batch_of_equal_lengths_only():
    xl = _trained("transformer_xl")
    with pytest.raises(ValueError, match=r"member 'transformer_xl': .*one at a time"):
        sample_text(xl, ["ab", "abc"], 3)
    assert [len(t) for t in sample_text(xl, ["ab", "cd"], 3)] == [3, 3]


@pytest.mark.parametrize("kw, match", [(dict(stop=[""]), "stop string must be non-empty"),
                                       (dict(n_tokens=-1), "--tokens must be >= 0")])
def test_bad_arguments_name_the_value(gpt, kw, match):
    with pytest.raises(ValueError, match=match):
        sample_text(gpt, "ab", **{"n_tokens": 3, **kw})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "run"
    argv = ["train", "member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
            "model.position.max_len=32", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
            "train.progress=false", "train.tensorboard=false", "--steps", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    return out


class _Writes(io.StringIO):
    """stdout that records every write and flush."""

    def __init__(self):
        super().__init__()
        self.events: list[str] = []

    def write(self, s: str) -> int:
        self.events.append("w")
        return super().write(s)

    def flush(self) -> None:
        self.events.append("f")


def test_cli_streams_one_prompt(run_dir, monkeypatch, capsys):
    out = _Writes()
    monkeypatch.setattr("sys.stdout", out)
    assert cli.main(["generate", str(run_dir), "--prompt", "ROMEO:", "--tokens", "40"]) == 0
    text = out.getvalue()
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 40 + 1
    assert out.events.count("f") > 10  # flushed as it goes


def test_cli_batch_and_stop(run_dir, capsys):
    argv = ["generate", str(run_dir), "--tokens", "30", "--seed", "2"]
    assert cli.main([*argv, "--prompt", "ROMEO:"]) == 0
    alone = capsys.readouterr().out[len("ROMEO:"):-1]
    stop = alone[10:12]
    assert cli.main([*argv, "--prompt", "ROMEO:", "--prompt", "A", "--stop", stop]) == 0
    rows = capsys.readouterr().out[:-1].split("\n\n")
    assert rows[0] == "ROMEO:" + alone[:alone.find(stop)]
    assert rows[1].startswith("A")


def test_cli_refuses_an_encoder_in_one_line_before_printing(tmp_path, capsys):
    out = tmp_path / "bert"
    argv = ["train", "member=bert", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
            "model.position.max_len=32", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
            "train.progress=false", "train.tensorboard=false", "--steps", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    capsys.readouterr()
    assert cli.main(["generate", str(out), "--prompt", "ROMEO:"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "member 'bert' is an encoder" in captured.err and f"tfamily eval {out}" in captured.err


def test_generate_and_eval_run_at_the_runs_thread_count_or_threads_n(run_dir, monkeypatch, capsys):
    import json

    from tfamily.train import checkpoint, sample
    ran = checkpoint.load(run_dir).meta["threads"]
    seen, write = [], sample.stream_tokens

    def spy(*a, **k):  # the thread count while the model writes
        seen.append(torch.get_num_threads())
        return write(*a, **k)
    monkeypatch.setattr(sample, "stream_tokens", spy)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(ran + 1)
        for extra, want in (([], ran), (["--threads", "3"], 3)):
            seen.clear()
            assert cli.main(["generate", str(run_dir), "--tokens", "5", *extra]) == 0
            assert set(seen) == {want} and torch.get_num_threads() == ran + 1  # restored after
            assert cli.main(["eval", str(run_dir), "--max-tokens", "64", "--json", *extra]) == 0
            assert json.loads(capsys.readouterr().out.splitlines()[-1])["threads"] == want
        for command in ("generate", "eval"):
            assert cli.main([command, str(run_dir), "--threads", "0"]) == 2
            assert "--threads must be an integer >= 1, got 0" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
