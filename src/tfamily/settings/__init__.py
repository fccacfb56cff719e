"""Every command's settings, each declared once as a dataclass (``schema.py`` says how, and turns
a declaration into flags, config files, dotted overrides, defaults in help and checks).

    run.py       a training run: member, size, model (spec overrides), data, train
    commands.py  the train, eval, generate and demo commands' own flags

This package imports nothing above it (no presets, fine-tuning or pretrained loading) and no torch.
"""
