import pytest
import torch

from tfamily.data.synthetic import TASKS, make_task

SMALL = {
    "copy": dict(n_symbols=5, min_len=2, max_len=9),
    "reverse": dict(n_symbols=5, min_len=2, max_len=9),
    "duplicate": dict(n_symbols=10, length=12),
    "addition": dict(n_digits=4),
    "parity": dict(min_len=3, max_len=20),
    "associative_recall": dict(n_keys=10, n_values=7, n_pairs=6),
    "listops": dict(max_depth=4, max_args=4, min_length=5, max_length=60),
}


def test_registry_is_complete():
    assert set(TASKS) == set(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_deterministic_given_seed(name):
    task = make_task(name, **SMALL[name])
    a = task.sample(16, torch.Generator().manual_seed(3))
    b = task.sample(16, 3)  # an int seed is the same as a generator seeded with it
    c = task.sample(16, 4)
    for f in ("input", "target", "loss_mask", "valid"):
        assert torch.equal(getattr(a, f), getattr(b, f)), f
    assert not torch.equal(a.input, c.input)
    # One generator advances: consecutive batches differ.
    g = torch.Generator().manual_seed(3)
    assert not torch.equal(task.sample(16, g).input, task.sample(16, g).input)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_shapes_ranges_and_conventions(name):
    task = make_task(name, **SMALL[name])
    b = task.sample(32, 0)
    assert task.kind in ("lm", "classification")
    assert b.input.shape == (32, task.seq_len) and b.input.dtype == torch.long
    assert b.valid.shape == b.input.shape and b.valid.dtype == torch.bool
    assert b.input.min() >= 0 and b.input.max() < task.vocab_size
    assert b.loss_mask.dtype == torch.bool and b.loss_mask.shape == b.target.shape
    if task.kind == "lm":
        assert b.target.shape == b.input.shape
        assert b.target.max() < task.vocab_size
        # Already shifted: target t is input t + 1 wherever both are real tokens.
        both = b.valid[:, 1:]
        assert torch.equal(b.target[:, :-1][both], b.input[:, 1:][both])
        assert not (b.loss_mask & ~b.valid).any()
        assert b.loss_mask.any(dim=1).all()
    else:
        assert b.target.shape == (32,)
        assert 0 <= b.target.min() and b.target.max() < task.n_classes
        assert b.loss_mask.all()


def _copy_rows(task, batch):
    for inp, tgt, mask in zip(batch.input, batch.target, batch.loss_mask):
        sep = (inp == task.SEP).nonzero()
        assert len(sep) == 1
        n = int(sep[0])
        yield inp[:n], tgt[mask]


def test_copy_targets_repeat_the_string_within_bounds():
    task = make_task("copy", **SMALL["copy"])
    lengths = set()
    for w, answer in _copy_rows(task, task.sample(64, 1)):
        lengths.add(len(w))
        assert task.min_len <= len(w) <= task.max_len
        assert torch.equal(answer, w)
        assert (w >= task.SYMBOL0).all()
    assert len(lengths) > 3  # lengths vary


def test_reverse_targets_reverse_the_string():
    task = make_task("reverse", **SMALL["reverse"])
    for w, answer in _copy_rows(task, task.sample(64, 2)):
        assert torch.equal(answer, w.flip(0))


def test_duplicate_is_0w0w_with_loss_on_second_w():
    task = make_task("duplicate", n_symbols=10, length=12)
    b = task.sample(16, 0)
    L = 12
    full = torch.cat([b.input, b.target[:, -1:]], dim=1)  # the whole 0 w 0 w sequence
    assert full.shape[1] == 2 * L + 2
    assert (full[:, 0] == 0).all() and (full[:, L + 1] == 0).all()
    first, second = full[:, 1 : L + 1], full[:, L + 2 :]
    assert torch.equal(first, second)
    assert (first >= 1).all() and (first <= 10).all()
    assert torch.equal(b.target[b.loss_mask].view(16, L), second)
    assert make_task("duplicate").seq_len + 1 == 1024  # Reformer's sequence length


def _number(digits):
    return int("".join(str(int(d)) for d in digits))


@pytest.mark.parametrize("reverse_sum", [False, True])
def test_addition_is_arithmetically_right(reverse_sum):
    n = 25  # past int64: the carries must be exact
    task = make_task("addition", n_digits=n, reverse_sum=reverse_sum)
    b = task.sample(64, 5)
    full = torch.cat([b.input, b.target[:, -1:]], dim=1)
    assert (full[:, n] == task.PLUS).all() and (full[:, 2 * n + 1] == task.EQ).all()
    for row, tgt, mask in zip(full, b.target, b.loss_mask):
        a, c = _number(row[:n]), _number(row[n + 1 : 2 * n + 1])
        s = tgt[mask]
        assert len(s) == n + 1
        assert _number(s.flip(0) if reverse_sum else s) == a + c


def test_parity_target_is_parity_of_ones():
    task = make_task("parity", **SMALL["parity"])
    b = task.sample(128, 0)
    lengths = b.valid.sum(dim=1)
    assert lengths.min() >= 3 and lengths.max() <= 20
    assert torch.equal(b.target, (b.input == task.ONE).sum(dim=1) % 2)
    assert ((b.input == task.PAD) == ~b.valid).all()
    assert set(b.target.tolist()) == {0, 1}


def test_associative_recall_answer_is_the_paired_value():
    task = make_task("associative_recall", **SMALL["associative_recall"])
    b = task.sample(64, 0)
    n = task.n_pairs
    for inp, tgt, mask in zip(b.input, b.target, b.loss_mask):
        keys, values = inp[: 2 * n : 2], inp[1 : 2 * n : 2]
        assert len(set(keys.tolist())) == n  # distinct keys
        assert (keys >= 1).all() and (keys <= task.n_keys).all() and (values > task.n_keys).all()
        assert inp[2 * n] == task.QUERY
        q = int(inp[2 * n + 1])
        assert mask.sum() == 1 and mask[-1]
        assert tgt[-1] == values[keys.tolist().index(q)]


# ---- validation ----------------------------------------------------------------------------


def test_make_task_unknown_name_and_param():
    with pytest.raises(ValueError, match="unknown task 'copyy'.*'copy'.*'listops'"):
        make_task("copyy")
    with pytest.raises(ValueError, match="unknown parameter.*'length'.*valid parameters are.*max_len"):
        make_task("copy", length=3)


@pytest.mark.parametrize(
    "name, params, exc, pattern",
    [
        ("copy", dict(min_len=0), ValueError, "min_len must be an integer >= 1, got 0"),
        ("copy", dict(min_len=9, max_len=4), ValueError, "min_len=9 is larger than max_len=4"),
        ("reverse", dict(n_symbols=2.5), TypeError, "n_symbols must be an integer >= 1, got 2.5"),
        ("duplicate", dict(length=-1), ValueError, "length must be an integer >= 1, got -1"),
        ("addition", dict(n_digits=0), ValueError, "n_digits must be an integer >= 1, got 0"),
        ("addition", dict(reverse_sum="yes"), TypeError, "reverse_sum must be true or false, got 'yes'"),
        ("parity", dict(max_len=True), TypeError, "max_len must be an integer >= 1, got True"),
        ("associative_recall", dict(n_keys=4, n_pairs=5), ValueError, "n_pairs=5.*n_keys=4"),
        ("listops", dict(max_args=1), ValueError, "max_args must be an integer >= 2, got 1"),
        ("listops", dict(op_prob=1.5), ValueError, "op_prob must be a finite number in \\[0.0, 1.0\\], got 1.5"),
        ("listops", dict(max_depth=2, max_args=3, min_length=50, max_length=60), ValueError, "trees have 1..5 tokens"),
    ],
)
def test_bad_params_name_the_value(name, params, exc, pattern):
    with pytest.raises(exc, match=pattern):
        make_task(name, **params)


def test_bad_sample_arguments():
    task = make_task("copy")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        task.sample(0, 0)
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, "seed")
