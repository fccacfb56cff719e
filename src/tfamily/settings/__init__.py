"""Every command's settings, each declared once as a dataclass (``schema.py`` says how, and turns
a declaration into flags, config files, dotted overrides, defaults in help and checks).

    schema.py       the mechanism: setting(), add_flags, build, check, files and key=value overrides
    run.py          a training run: member, size, model (spec overrides), data, train
    commands.py     the flags of train, eval, generate, demo, export, convert and compare
    data.py         `tfamily data prepare`
    vocab_names.py  the data.vocab names (byte, char, bpe:N)

A command with many settings declares them beside it the same way (``arena/settings.py``,
``rl/settings.py``, a repro's or benchmark's ``Settings``). This package imports nothing above it
(no presets, fine-tuning, pretrained loading or data) and no torch.
"""
