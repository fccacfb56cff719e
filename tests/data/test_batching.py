import json
import warnings

import numpy as np
import pytest
import torch

from tfamily.data.batching import RandomWindows, StreamBatches, eval_batches


def ramp(n):
    """Token i has value i, so a window's values reveal where it came from."""
    return torch.arange(n, dtype=torch.int64)


def same_buffer(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# ---- RandomWindows -------------------------------------------------------------------------


def test_random_windows_are_contiguous_and_shifted():
    data = ramp(10_000)
    x, y = next(RandomWindows(data, seq_len=32, batch_size=8, seed=1))
    assert x.shape == y.shape == (8, 32) and x.dtype == torch.long
    assert torch.equal(y, x + 1)  # y is x shifted by one token
    assert torch.equal(x, x[:, :1] + torch.arange(32))  # each row is one window of the corpus
    # x and y are two views of one gathered buffer, one token apart.
    assert same_buffer(x, y) and y.storage_offset() == x.storage_offset() + 1


def test_random_windows_do_not_copy_the_corpus():
    data = torch.randint(0, 256, (100_000,), dtype=torch.uint8)
    rw = RandomWindows(data, 64, 4, seed=0)
    assert same_buffer(rw._windows, data)  # the window table is a view of the corpus
    x, y = rw.sample(0)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert x.untyped_storage().nbytes() == 4 * 65 * 8  # only the batch was materialised


def test_random_windows_deterministic_given_seed():
    data = ramp(5_000)
    r1, r2, r3 = (RandomWindows(data, 16, 4, seed=s) for s in (7, 7, 8))
    for _ in range(5):
        x1, x2, x3 = next(r1)[0], next(r2)[0], next(r3)[0]
        assert torch.equal(x1, x2)
        assert not torch.equal(x1, x3)
    # sample(i) is pure: it equals the i-th batch of the stream and does not advance it.
    fresh = RandomWindows(data, 16, 4, seed=7)
    assert torch.equal(fresh.sample(2)[0], [next(fresh) for _ in range(3)][2][0])


def test_random_windows_resume_equals_uninterrupted():
    data = ramp(5_000)
    full = RandomWindows(data, 16, 4, seed=3)
    expected = [next(full) for _ in range(10)]
    first = RandomWindows(data, 16, 4, seed=3)
    for _ in range(4):
        next(first)
    state = json.loads(json.dumps(first.state_dict()))  # plain JSON
    resumed = RandomWindows(data, 16, 4, seed=999)  # the state carries the seed
    resumed.load_state_dict(state)
    for x, y in expected[4:]:
        rx, ry = next(resumed)
        assert torch.equal(rx, x) and torch.equal(ry, y)


def test_random_windows_shards_split_the_global_batch():
    data = ramp(5_000)
    single = RandomWindows(data, 16, 6, seed=5)
    base = RandomWindows(data, 16, 2, seed=5)
    shards = [base.shard(r, 3) for r in range(3)]
    for _ in range(3):
        gx, _ = next(single)
        parts = [next(s)[0] for s in shards]
        # Each rank owns its own rows of one global batch: together they are that batch.
        assert torch.equal(torch.cat(parts), gx)
        assert all(not torch.equal(parts[i], parts[j]) for i in range(3) for j in range(i + 1, 3))
    # Rank 0's state resumes every rank: it holds no rank.
    state = shards[0].state_dict()
    other = RandomWindows(data, 16, 2, seed=5, rank=2, world_size=3)
    other.load_state_dict(state)
    assert torch.equal(next(other)[0], next(shards[2])[0])


# ---- StreamBatches -------------------------------------------------------------------------


def test_stream_continuity_row_r_continues():
    data = ramp(10_007)
    sb = StreamBatches(data, seq_len=10, batch_size=4)
    batches = list(sb)
    assert len(batches) == len(sb) == (10_007 // 4 - 1) // 10
    for (x0, y0), (x1, _) in zip(batches, batches[1:]):
        assert torch.equal(x1[:, 0], y0[:, -1])  # x_{t+1}[r, 0] == y_t[r, -1]
        assert torch.equal(x1[:, 0], x0[:, -1] + 1)  # the very next corpus token
    for x, y in batches:
        assert torch.equal(y, x + 1)
    # Rows are disjoint stretches of the corpus.
    firsts = [b[0][:, 0] for b in batches]
    stream_len = 10_007 // 4
    assert torch.equal(firsts[0], torch.arange(4) * stream_len)


def test_stream_batches_are_views_without_cast():
    data = torch.randint(0, 256, (4_000,), dtype=torch.uint8)
    sb = StreamBatches(data, 16, 4, dtype=None)
    x, y = sb.batch(3)
    assert x.dtype == torch.uint8 and same_buffer(x, data) and same_buffer(y, data)


def test_stream_resume_equals_uninterrupted_and_epochs_rewind():
    data = ramp(2_000)
    full = StreamBatches(data, 8, 3)
    expected = list(full)
    assert full.epoch == 1 and full.position == 0
    part = StreamBatches(data, 8, 3)
    it = iter(part)
    for _ in range(5):
        next(it)
    state = json.loads(json.dumps(part.state_dict()))
    assert state["position"] == 5
    resumed = StreamBatches(data, 8, 3)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(expected) - 5
    for (x, y), (ex, ey) in zip(rest, expected[5:]):
        assert torch.equal(x, ex) and torch.equal(y, ey)
    assert resumed.epoch == 1
    assert torch.equal(next(iter(resumed))[0], expected[0][0])  # epoch 2 starts over


def test_stream_shards_are_disjoint_rows_of_the_global_batch():
    data = ramp(4_000)
    single = StreamBatches(data, 8, 4)
    shards = [StreamBatches(data, 8, 2).shard(r, 2) for r in range(2)]
    for t in range(len(single)):
        gx, _ = single.batch(t)
        parts = [s.batch(t)[0] for s in shards]
        assert torch.equal(torch.cat(parts), gx)
    rows = [set(s.streams.flatten().tolist()) for s in shards]
    assert rows[0].isdisjoint(rows[1])


# ---- eval_batches --------------------------------------------------------------------------


def test_eval_batches_cover_each_target_once_in_order():
    data = ramp(1_000)
    ev = eval_batches(data, seq_len=32, batch_size=5)
    xs, ys = zip(*ev)
    n_windows = (1_000 - 1) // 32
    assert len(ev) == -(-n_windows // 5)
    assert ys[-1].shape[0] == (n_windows % 5 or 5)
    y = torch.cat([t.flatten() for t in ys])
    assert torch.equal(y, torch.arange(1, 1 + n_windows * 32))
    assert ev.n_tokens == n_windows * 32
    for x, yy in zip(xs, ys):
        assert torch.equal(yy, x + 1)
    again = [x for x, _ in ev]  # a second pass is identical
    assert all(torch.equal(a, b) for a, b in zip(xs, again))


def test_eval_batches_max_tokens():
    ev = eval_batches(ramp(1_000), 32, 4, max_tokens=100)
    assert ev.n_tokens == 96 and sum(x.shape[0] for x, _ in ev) == 3


# ---- input validation ----------------------------------------------------------------------


def test_numpy_input_is_not_copied():
    arr = np.arange(500, dtype=np.int64)
    arr.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rw = RandomWindows(arr, 8, 2)
    assert rw.data.data_ptr() == arr.ctypes.data


@pytest.mark.parametrize(
    "kwargs, exc, pattern",
    [
        (dict(seq_len=0), ValueError, "seq_len must be an integer >= 1, got 0"),
        (dict(batch_size="4"), TypeError, "batch_size must be an integer"),
        (dict(rank=2, world_size=2), ValueError, "rank must be in 0..1"),
        (dict(seq_len=600), ValueError, "too few|seq_len \\+ 1"),
    ],
)
@pytest.mark.parametrize("cls", [RandomWindows, StreamBatches])
def test_bad_arguments_are_named(cls, kwargs, exc, pattern):
    args = dict(seq_len=8, batch_size=2) | kwargs
    rank = {k: args.pop(k) for k in ("rank", "world_size") if k in args}
    with pytest.raises(exc, match=pattern):
        cls(ramp(500), args["seq_len"], args["batch_size"], **rank)


def test_bad_data_and_state():
    with pytest.raises(ValueError, match="1-D"):
        RandomWindows(torch.zeros(4, 100, dtype=torch.long), 8, 2)
    with pytest.raises(TypeError, match="integer"):
        StreamBatches(torch.zeros(100), 8, 2)
    with pytest.raises(TypeError, match="tensor or numpy"):
        eval_batches([1, 2, 3], 1, 1)
    sb = StreamBatches(ramp(500), 8, 2)
    with pytest.raises(ValueError, match="seq_len: saved 8, here 4"):
        StreamBatches(ramp(500), 4, 2).load_state_dict(sb.state_dict())
    with pytest.raises(ValueError, match="not a RandomWindows state"):
        RandomWindows(ramp(500), 8, 2).load_state_dict(sb.state_dict())
