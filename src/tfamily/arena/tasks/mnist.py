"""``mnist``: the digit of an MNIST image read as a sequence of pixels in raster order (LRA's Image task
reads CIFAR-10 the same way), the image averaged down to ``length`` x ``length`` (a divisor of 28: 28,
14, 7 or 4; the sequence has ``length ** 2`` pixels of 256 grey levels). The shipped 10,000-image set is
split in file order: 8,000 train, 1,000 validation (the next), 1,000 test (the last, as
``load_mnist_t10k`` holds out). Long-range: a stroke's pixels in neighbouring rows are ``length``
positions apart."""
from __future__ import annotations

from .base import Declared, classify, register


def make(side: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
    import torch
    import torch.nn.functional as F

    from ...data.mnist import load_mnist_t10k
    from ...train.tasks.classify import Examples
    split = load_mnist_t10k(data_dir)

    def pixels(images) -> torch.Tensor:
        x = torch.from_numpy(images).float()[:, None]
        x = F.avg_pool2d(x, 28 // side) if side < 28 else x
        return x.round().clamp(0, 255).long().flatten(1)

    x, y = pixels(split.train_images), torch.from_numpy(split.train_labels).long()
    n_train = len(y) - 1000
    x_test, y_test = pixels(split.test_images), torch.from_numpy(split.test_labels).long()
    every = torch.ones_like(x[:1], dtype=torch.bool)

    def fixed(xs, ys) -> Examples:
        xs, ys = xs[:eval_examples], ys[:eval_examples]
        return Examples(xs, ys, every.expand(len(ys), -1))

    def draw(rows: int, g: torch.Generator) -> dict:
        i = torch.randint(n_train, (rows,), generator=g)
        return {"x": x[i], "y": y[i], "key_padding": every.expand(rows, -1)}

    return classify("mnist", (draw, fixed(x[n_train:], y[n_train:]), fixed(x_test, y_test), 256, 10),
                    batch_size=batch_size, seed=seed)


def _divides_28(side: int) -> str | None:
    return None if 28 % side == 0 else "must divide 28 (the image side): 28, 14, 7 or 4"


TASK = register(Declared("mnist", 14, make, checks=(_divides_28,), image=True))
