"""LSH attention (Kitaev et al. 2020, section 2): both fast paths equal the paper's dense
definition (own bucket only, chunk window, each key once across rounds, the self rule) in
outputs and gradients; the reference itself equals a hand-sorted loop; causal LSH is causal
as a function of the input; never L x L."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tfamily.build import build
from tfamily.members import reformer
from tfamily.nn.kernels import KERNELS, ReferenceKernel
from tfamily.nn.kernels.lsh import LSHKernel, dense_shared_qk, lsh_buckets, lsh_reference, lsh_windows
from tfamily.nn.patterns import Causal, Full, SlidingWindow
from tfamily.nn.patterns.combine import PerHead
from tfamily.spec import Spec

DT = torch.float64


def _inputs(b=2, h=3, n=37, e=8, pad=True):
    q = torch.randn(b, h, n, e, dtype=DT, requires_grad=True)
    v = torch.randn(b, h, n, e, dtype=DT, requires_grad=True)
    padding = torch.ones(b, n, dtype=torch.bool)
    if pad:
        padding[1, -5:] = False
    return q, v, padding


def _run(fn, q, v, seed=None):
    """Output and gradients of <out, fixed weights> w.r.t. q and v; shared QK (k = q / |q|)."""
    if seed is not None:
        torch.manual_seed(seed)
    out = fn(q, F.normalize(q, dim=-1), v)
    w = torch.sin(torch.arange(out.numel(), dtype=DT)).view_as(out)
    return (out, *torch.autograd.grad((out * w).sum(), (q, v)))


def _close(a, b):
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("pattern", [Causal(), Full(), SlidingWindow(window=9)], ids=lambda p: p.name)
@pytest.mark.parametrize("memory_efficient", [True, False])
@pytest.mark.parametrize("same_bucket_only", [True, False], ids=["paper", "peers"])
@pytest.mark.parametrize("n_hashes", [1, 3])
def test_fast_paths_equal_the_papers_dense_definition(pattern, memory_efficient, same_bucket_only, n_hashes):
    # Small chunks, several buckets, padding, lengths on and off a chunk multiple, fresh
    # inputs and rotations per seed: the same rotations (same seed) through kernel and reference.
    for seed, n in ((0, 37), (1, 40), (2, 23)):
        torch.manual_seed(seed)
        q, v, pad = _inputs(n=n)
        kernel = LSHKernel(n_hashes=n_hashes, bucket_size=4, chunk_len=5, memory_efficient=memory_efficient,
                           same_bucket_only=same_bucket_only)
        got = _run(lambda q, k, v: kernel(q, k, v, pattern=pattern, key_padding=pad)[0], q, v, seed=seed + 10)
        want = _run(lambda q, k, v: lsh_reference(
            q, k, v, pattern=pattern, n_buckets=kernel.buckets_for(n), n_hashes=n_hashes, chunk_len=5,
            same_bucket_only=same_bucket_only, key_padding=pad), q, v, seed=seed + 10)
        _close(got, want)


@pytest.mark.parametrize("memory_efficient", [True, False])
def test_head_dependent_patterns_are_masked_per_head(memory_efficient):
    # Each (batch, head) row of a group gets its own head index in mask_mod.
    pattern = PerHead([Causal(), SlidingWindow(window=4), Causal()])
    q, v, pad = _inputs(n=29)
    kernel = LSHKernel(n_hashes=2, bucket_size=4, chunk_len=5, memory_efficient=memory_efficient)
    got = _run(lambda q, k, v: kernel(q, k, v, pattern=pattern, key_padding=pad)[0], q, v, seed=1)
    want = _run(lambda q, k, v: lsh_reference(q, k, v, pattern=pattern, n_buckets=kernel.buckets_for(29),
                                              n_hashes=2, chunk_len=5, key_padding=pad), q, v, seed=1)
    _close(got, want)


def _loop_windows(buckets, c, causal, same_bucket_only):
    """The window rule by hand: sort one round's positions by (bucket, position), cut chunks."""
    n = len(buckets)
    order = sorted(range(n), key=lambda i: (buckets[i], i))
    slot = {p: s for s, p in enumerate(order)}
    rank = {p: sum(1 for j in range(p) if buckets[j] == buckets[p]) for p in range(n)}
    out = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            near = slot[j] // c in (slot[i] // c, slot[i] // c - 1)
            if not same_bucket_only:
                out[i, j] = near
            elif buckets[i] == buckets[j]:
                out[i, j] = 0 <= rank[i] - rank[j] <= c if causal else near
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("same_bucket_only", [True, False])
def test_reference_windows_equal_a_hand_sorted_loop(causal, same_bucket_only):
    torch.manual_seed(0)
    buckets = torch.randint(0, 4, (1, 2, 2, 19))
    got = lsh_windows(buckets, 3, causal=causal, same_bucket_only=same_bucket_only)
    for h in range(2):
        for r in range(2):
            want = _loop_windows(buckets[0, h, r].tolist(), 3, causal, same_bucket_only)
            assert torch.equal(got[0, h, r], want)


def test_a_query_attends_only_its_own_bucket_and_each_key_once():
    # Paper mode: the union of the rounds' same-bucket windows, with weights of one softmax
    # over distinct keys. One chunk holds the sequence, so the windows are the buckets.
    q, v, _ = _inputs(b=1, h=1, n=12, pad=False)
    k = F.normalize(q, dim=-1)
    kernel = LSHKernel(n_hashes=3, n_buckets=4, chunk_len=12)
    torch.manual_seed(4)
    got = kernel(q, k, v, pattern=Full())[0]
    torch.manual_seed(4)
    buckets = lsh_buckets(k, 4, 3)[0, 0]
    share = (buckets[:, :, None] == buckets[:, None, :]).any(0) & ~torch.eye(12, dtype=torch.bool)
    s = (q[0, 0] @ k[0, 0].T / 8 ** 0.5).masked_fill(~share, -torch.inf)
    want = torch.where(share.any(-1, keepdim=True), torch.softmax(s, -1).nan_to_num() @ v[0, 0], v[0, 0])
    torch.testing.assert_close(got[0, 0], want)


@pytest.mark.parametrize("same_bucket_only", [True, False])
def test_additive_bias_is_added_at_the_original_positions(same_bucket_only):
    q, v, pad = _inputs()
    bias = torch.randn(1, 3, 37, 37, dtype=DT, requires_grad=True)
    kernel = LSHKernel(n_hashes=2, bucket_size=4, chunk_len=6, same_bucket_only=same_bucket_only)

    def grads(fn):
        torch.manual_seed(3)
        out = fn(q, F.normalize(q, dim=-1), v)
        return (out, *torch.autograd.grad((out * torch.cos(out.detach())).sum(), (q, v, bias)))

    got = grads(lambda q, k, v: kernel(q, k, v, pattern=Causal(), key_padding=pad, bias=bias)[0])
    want = grads(lambda q, k, v: lsh_reference(q, k, v, pattern=Causal(), n_buckets=kernel.buckets_for(37),
                                               n_hashes=2, chunk_len=6, same_bucket_only=same_bucket_only,
                                               key_padding=pad, bias=bias))
    _close(got, want)


@pytest.mark.parametrize("n_hashes", [1, 3])
def test_peers_mode_in_one_chunk_equals_dense_shared_qk(n_hashes):
    # One chunk and every bucket: every query sees every position in every round, once.
    q, v, pad = _inputs()
    kernel = LSHKernel(n_hashes=n_hashes, n_buckets=4, chunk_len=64, same_bucket_only=False)
    got = _run(lambda q, k, v: kernel(q, k, v, pattern=Causal(), key_padding=pad)[0], q, v)
    want = _run(lambda q, k, v: dense_shared_qk(q, k, v, pattern=Causal(), key_padding=pad), q, v)
    _close(got, want)


def test_dense_shared_qk_is_attention_without_self_unless_alone():
    """The oracle itself: rows with other keys are ordinary attention with the diagonal
    masked; a causal first position (nothing else allowed) returns its own value."""
    q, v, _ = _inputs(pad=False)
    k = F.normalize(q, dim=-1)

    class NotSelf:
        name, causal = "not_self", False

        def mask_mod(self, b, h, qi, kj):
            return qi != kj

    want, _ = ReferenceKernel()(q, k, v, pattern=NotSelf())
    torch.testing.assert_close(dense_shared_qk(q, k, v, pattern=Full()), want)
    causal = dense_shared_qk(q, k, v, pattern=Causal())
    torch.testing.assert_close(causal[:, :, 0], v[:, :, 0])


def test_memory_efficient_gradients_with_dropout():
    # Dropout masks are regenerated from a seed in the backward pass: gradcheck proves the
    # replayed masks are the forward's.
    q = torch.randn(1, 1, 9, 3, dtype=DT, requires_grad=True)
    v = torch.randn(1, 1, 9, 3, dtype=DT, requires_grad=True)
    kernel = LSHKernel(n_hashes=2, n_buckets=2, chunk_len=3)

    def f(q, v):
        torch.manual_seed(3)
        return kernel(q, F.normalize(q, dim=-1), v, pattern=Causal(), dropout_p=0.3)[0]

    assert torch.autograd.gradcheck(f, (q, v))
    torch.manual_seed(3)
    assert not torch.equal(f(q, v), kernel(q, F.normalize(q, dim=-1), v, pattern=Causal())[0])


@pytest.mark.parametrize("keep", [True, False], ids=["kept_probs", "recomputed"])
@pytest.mark.parametrize("rows_per_group", [None, 1], ids=["one_group", "row_groups"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_backward_paths_and_row_groups_give_the_same_gradients(monkeypatch, keep, rows_per_group, dropout_p):
    # The memory-efficient backward keeps the forward's probabilities or recomputes them
    # (chosen by size in keeps_probs), over all (batch, head) rows at once or a few at a time
    # (strided windows and the fold cross rows of a group): every combination equals plain
    # autograd without dropout, and the kept path with the same dropout seed, on fresh inputs
    # of several lengths and chunk counts (one chunk included).
    from tfamily.nn.kernels.lsh import chunks

    for seed, n, c, n_hashes in ((0, 37, 5, 3), (1, 40, 4, 1), (2, 23, 5, 2), (3, 9, 16, 2)):
        torch.manual_seed(seed)
        q, v, pad = _inputs(n=n)
        args = dict(n_hashes=n_hashes, bucket_size=4, chunk_len=c)
        fast = LSHKernel(**args)
        plain = LSHKernel(**args, memory_efficient=False)
        call = lambda kern: lambda q, k, v: kern(q, k, v, pattern=Causal(), key_padding=pad,  # noqa: E731
                                                 dropout_p=dropout_p if kern is fast else 0.0)[0]
        want = _run(call(fast), q, v, seed=seed + 10) if dropout_p else _run(call(plain), q, v, seed=seed + 10)
        with monkeypatch.context() as m:
            m.setattr(chunks, "KEEP_PROBS", chunks.KEEP_PROBS if keep else 0)
            if rows_per_group:
                m.setattr(chunks, "SLICE_SCORES", rows_per_group * (-(-n // c) * c) * 2 * c)
            lay_n = -(-n // c) * c
            lay = chunks.Layout(*(torch.zeros(2, 3, n_hashes, lay_n),) * 4, pad, c)
            assert chunks.keeps_probs(lay, 6) is keep
            assert len(chunks._groups(2, 3, lay_n, c)) == (6 if rows_per_group else 1)
            got = _run(call(fast), q, v, seed=seed + 10)
        _close(got, want)


def test_kept_and_recomputed_probabilities_pass_gradcheck_with_dropout(monkeypatch):
    from tfamily.nn.kernels.lsh import chunks

    q = torch.randn(1, 2, 11, 3, dtype=DT, requires_grad=True)
    v = torch.randn(1, 2, 11, 3, dtype=DT, requires_grad=True)
    kernel = LSHKernel(n_hashes=2, n_buckets=2, chunk_len=3)

    def f(q, v):
        torch.manual_seed(4)
        return kernel(q, F.normalize(q, dim=-1), v, pattern=Causal(), dropout_p=0.3)[0]

    for limit in (chunks.KEEP_PROBS, 0):
        monkeypatch.setattr(chunks, "KEEP_PROBS", limit)
        assert torch.autograd.gradcheck(f, (q, v))


@pytest.mark.parametrize("memory_efficient", [True, False])
@pytest.mark.parametrize("n_hashes", [1, 2, 4])
def test_causal_lsh_is_causal_as_a_function_of_the_input(memory_efficient, n_hashes):
    # Random edits of every position after i, fresh each seed: outputs at <= i do not move.
    # Lengths on and off a multiple of the chunk; few buckets so buckets hold several chunks.
    kernel = LSHKernel(n_hashes=n_hashes, bucket_size=3, chunk_len=3, memory_efficient=memory_efficient)
    for seed in range(12):
        gen = torch.Generator().manual_seed(seed)
        n = int(torch.randint(5, 40, (), generator=gen))
        q, v = torch.randn(2, 2, n, 6, generator=gen, dtype=DT), torch.randn(2, 2, n, 6, generator=gen, dtype=DT)
        i = int(torch.randint(0, n - 1, (), generator=gen))
        q2, v2 = q.clone(), v.clone()
        q2[:, :, i + 1:] = torch.randn(2, 2, n - i - 1, 6, generator=gen, dtype=DT)
        v2[:, :, i + 1:] = torch.randn(2, 2, n - i - 1, 6, generator=gen, dtype=DT)
        outs = []
        for qq, vv in ((q, v), (q2, v2)):
            torch.manual_seed(100 + seed)
            outs.append(kernel(qq, F.normalize(qq, dim=-1), vv, pattern=Causal())[0])
        torch.testing.assert_close(outs[0][:, :, : i + 1], outs[1][:, :, : i + 1], atol=1e-12, rtol=0)
        assert not torch.allclose(outs[0][:, :, i + 1:], outs[1][:, :, i + 1:])


@pytest.mark.parametrize("memory_efficient", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_causal_lsh_never_sees_a_later_position(memory_efficient, seed):
    # d out_i / d (q_j, v_j) = 0 for every j > i, whatever buckets the rotations produce.
    torch.manual_seed(seed)
    n = 20
    q = torch.randn(1, 2, n, 4, dtype=DT)
    v = torch.randn(1, 2, n, 4, dtype=DT)
    kernel = LSHKernel(n_hashes=2, bucket_size=2, chunk_len=3, memory_efficient=memory_efficient)

    def f(q, v):
        torch.manual_seed(100 + seed)
        return kernel(q, F.normalize(q, dim=-1), v, pattern=Causal())[0]

    jq, jv = torch.autograd.functional.jacobian(f, (q, v))  # (1,2,n,4, 1,2,n,4)
    later = torch.arange(n)[:, None] < torch.arange(n)[None, :]  # [i, j]: j after i
    for jac in (jq, jv):
        per_pos = jac.abs().sum(dim=(0, 1, 3, 4, 5, 7))  # [i, j]
        assert per_pos[later].max() == 0 and per_pos[~later].max() > 0


def test_padded_keys_are_never_attended():
    q, v, pad = _inputs()
    kernel = LSHKernel(n_hashes=2, bucket_size=4, chunk_len=4, same_bucket_only=False)
    torch.manual_seed(1)
    out = kernel(q, F.normalize(q, dim=-1), v, pattern=Full(), key_padding=pad)[0]
    (gv,) = torch.autograd.grad(out[1][:, pad[1]].sum(), (v,))
    assert gv[1][:, ~pad[1]].abs().max() == 0


class _LargestTensor(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("memory_efficient", [True, False])
def test_never_materialises_an_l_by_l_tensor(memory_efficient):
    n, c = 2048, 32
    q = torch.randn(1, 1, n, 16, requires_grad=True)
    v = torch.randn(1, 1, n, 16, requires_grad=True)
    kernel = LSHKernel(n_hashes=2, bucket_size=c, memory_efficient=memory_efficient)
    with _LargestTensor() as mode:
        out = kernel(q, F.normalize(q, dim=-1), v, pattern=Causal())[0]
        out.sum().backward()
    # scores of one round's chunks: n x 2c (x 2 rounds for the stacked window slots); L x L is 4.2M
    assert mode.largest <= 2 * n * 2 * c < n * n // 8


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_buckets=7), "got 7"),
    (dict(n_hashes=0), "got 0"),
    (dict(chunk_len=0), "got 0"),
    (dict(bucket_size=-4), "got -4"),
])
def test_invalid_settings_name_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LSHKernel(**kwargs)


def test_non_integer_or_non_bool_settings_are_type_errors():
    with pytest.raises(TypeError, match="2.5"):
        LSHKernel(n_hashes=2.5)
    with pytest.raises(TypeError, match="same_bucket_only.*'yes'"):
        LSHKernel(same_bucket_only="yes")


def test_weights_and_queries_beyond_the_keys_are_refused():
    q = torch.randn(1, 1, 8, 4)
    with pytest.raises(ValueError, match="reference"):
        LSHKernel()(q, q, q, pattern=Causal(), need_weights=True)
    with pytest.raises(ValueError, match="6..7 need keys.*got 4"):
        LSHKernel()(q[:, :, :2], q[:, :, :4], q[:, :, :4], pattern=Causal(), q_offset=6)


def test_spec_refuses_lsh_without_shared_qk_and_bad_params():
    base = Spec(member="t", d_model=32, heads={"n_heads": 2})
    with pytest.raises(ValueError, match="lsh.*shared_qk"):
        base.replace(kernel={"name": "lsh"})
    with pytest.raises(ValueError, match="got 3"):
        base.replace(kernel={"name": "lsh", "params": {"n_buckets": 3}}, heads__shared_qk=True)
    with pytest.raises(ValueError, match="unknown kernel.params.*'rounds'"):
        base.replace(kernel={"name": "lsh", "params": {"rounds": 2}}, heads__shared_qk=True)
    ok = base.replace(kernel={"name": "lsh", "params": {"same_bucket_only": False}}, heads__shared_qk=True)
    assert ok.kernel.params["same_bucket_only"] is False
    with pytest.raises(ValueError, match="lsh.*encoder_decoder"):
        Spec(member="t", model="encoder_decoder", objective={"name": "seq2seq"}, heads={"shared_qk": True},
             kernel={"name": "lsh"})


@pytest.mark.parametrize("variant", [{}, {"residual": {"name": "post_norm"}, "depth": {"name": "stack"}}],
                         ids=["reformer", "lsh_post_norm_stack"])
def test_registered_and_the_reformer_member_trains_a_step(variant):
    assert KERNELS["lsh"] is LSHKernel
    spec = reformer(d_model=32, heads__n_heads=2, depth__n_layers=2, vocab_size=20,
                    kernel__params={"n_hashes": 2, "bucket_size": 4}, **variant)
    model = build(spec)
    x = torch.randint(0, 20, (2, 21))
    loss, _ = model.loss({"x": x, "y": x.roll(-1, 1)})
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert torch.isfinite(loss) and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_spec_serves_head_dependent_patterns_with_lsh_and_their_cache_equals_the_forward():
    # check_lsh no longer refuses them: the model trains a step, and token-by-token decoding
    # (rows.py, per-head masks) reproduces the forward pass's logits.
    pattern = {"name": "per_head", "params": {"patterns": [{"name": "causal"},
                                                           {"name": "sliding_window", "params": {"window": 3}}]}}
    spec = reformer(d_model=32, heads__n_heads=2, depth__n_layers=1, vocab_size=20, pattern=pattern,
                    kernel__params={"n_hashes": 2, "bucket_size": 4, "n_buckets": 4})
    model = build(spec)
    x = torch.randint(0, 20, (2, 13))
    loss, _ = model.loss({"x": x, "y": x.roll(-1, 1)})
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters())
    model.eval()
    with torch.no_grad():
        torch.manual_seed(1)
        full = model(x)
        state = model.new_state()
        for t in range(13):
            torch.manual_seed(1)
            step = model(x[:, t:t + 1], state=state)[:, -1]
            torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5, msg=lambda s: f"step {t}: {s}")
