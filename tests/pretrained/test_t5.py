"""T5 from Hugging Face directories equals the peer: relative-position buckets shared across
layers (bidirectional encoder, causal decoder), unscaled attention, RMSNorm, ReLU and gated-GELU
feed-forwards, the tied head's d^-0.5 scale; logits in fp32 and bf16, with source padding, and
greedy KV-cached decoding in fp64. Lengths pass max_distance, so the logarithmic buckets and the
shared last bucket are used."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily.models.generate import greedy_decode
from tfamily.pretrained import PretrainedError

from .conftest import save_hf

T5 = dict(vocab_size=61, d_model=32, d_kv=8, d_ff=40, num_layers=2, num_decoder_layers=3, num_heads=4,
          relative_attention_num_buckets=8, relative_attention_max_distance=12, decoder_start_token_id=0)
# initializer_factor: HF's test init (1.0) gives logits near 30 through v1.1's N(0, 1) head, where one
# bf16 step is 0.125 and the peer's own bf16 logits are 0.25 off its fp32 ones; these keep logits
# of a trained model's order (max 1.7 and 4), the peer's own bf16 error 0.008 and 0.018.
VARIANTS = {"t5": {"initializer_factor": 0.5},
            "t5_v1_1": {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False, "initializer_factor": 0.3}}


def _save(path, variant: str, **extra):
    return save_hf(path, "T5ForConditionalGeneration", "T5Config", **{**T5, **VARIANTS[variant], **extra})


def _ids(n: int) -> torch.Tensor:
    return torch.randint(2, 61, (2, n))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_equal_in_fp32_and_bf16(tmp_path, variant):
    hf = _save(tmp_path, variant)
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.position.name == "t5_relative" and spec.heads.scale == 1.0 and spec.norm.name == "rms_norm"
    assert spec.ff.name == ("glu" if variant == "t5_v1_1" else "mlp")
    assert spec.logit_scale == (variant == "t5")
    enc = model.encoder.blocks
    assert enc[0].attn.position is enc[1].attn.position and not enc[0].attn.position.causal
    assert model.decoder.blocks[2].attn.position.causal
    src, tgt = _ids(30), _ids(20)  # distances up to 29 > max_distance 12
    with torch.no_grad():
        want = hf(input_ids=src, decoder_input_ids=tgt).logits
        assert (model(src, tgt) - want).abs().max().item() <= 1e-4
        model16, _ = tfamily.from_pretrained(tmp_path, dtype=torch.bfloat16)
        assert (model16(src, tgt).float() - want).abs().max().item() <= 3e-2


def test_source_padding_is_masked_like_the_peers_attention_mask(tmp_path):
    hf = _save(tmp_path, "t5_v1_1")
    model, _ = tfamily.from_pretrained(tmp_path)
    src, tgt, real = _ids(16), _ids(9), torch.ones(2, 16, dtype=torch.bool)
    real[1, 11:] = False
    src[1, 11:] = 0
    with torch.no_grad():
        want = hf(input_ids=src, attention_mask=real.long(), decoder_input_ids=tgt).logits
        assert (model(src, tgt, src_padding=real) - want).abs().max().item() <= 1e-4


def _hf_greedy(hf, src: torch.Tensor, n: int) -> torch.Tensor:
    """The peer's greedy decoding with its KV cache, one token at a time from the start token."""
    with torch.no_grad():
        memory = hf.get_encoder()(input_ids=src)
        out = torch.zeros(src.shape[0], 1, dtype=torch.long)
        step, cache = out, None
        for _ in range(n):
            r = hf(encoder_outputs=memory, decoder_input_ids=step, cache=cache, use_cache=True)
            cache, step = r.cache, r.logits[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, step], dim=1)
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_greedy_decoding_with_kv_cache_is_token_identical(tmp_path, variant):
    hf = _save(tmp_path, variant).double()
    model, _ = tfamily.from_pretrained(tmp_path, dtype=torch.float64)
    src = _ids(14)
    got = greedy_decode(model, src, bos=0, eos=1, max_len=20)  # 20 steps: past max_distance
    want = _hf_greedy(hf, src, 20)
    for row, ours in zip(want, got):  # tfamily pads a row with eos once it has ended
        ends = (row == 1).nonzero()
        n = int(ends[0]) + 1 if len(ends) else len(row)
        assert torch.equal(ours[:n], row[:n])


def test_unmapped_feed_forward_is_refused(tmp_path):
    _save(tmp_path, "t5", feed_forward_proj="gated-relu6")
    with pytest.raises(PretrainedError, match="dense_act_fn='relu6' has no tfamily mapping"):
        tfamily.from_pretrained(tmp_path)
