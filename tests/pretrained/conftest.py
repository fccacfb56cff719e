"""Random-weight Hugging Face models from tiny configs, saved with save_pretrained, as the peers
the imported tfamily models must equal (transformers is an optional test dependency)."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the pretrained tests compare against transformers")


def save_hf(path, model_cls: str, config_cls: str, seed: int = 0, **config):
    """A ``model_cls`` with random weights from ``config_cls(**config)`` saved under ``path``;
    returns the model in fp32 eval mode (all dropouts off)."""
    torch.manual_seed(seed)
    cfg = getattr(transformers, config_cls)(**config)
    model = getattr(transformers, model_cls)(cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a wrong mapping of them shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path)
    return model


def hf_greedy(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy decoding with the peer's KV cache, one token at a time."""
    out, cache = ids, None
    step = ids
    with torch.no_grad():
        for _ in range(n):
            r = model(input_ids=step, cache=cache, use_cache=True)
            cache = r.cache
            step = r.logits[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, step], dim=1)
    return out
