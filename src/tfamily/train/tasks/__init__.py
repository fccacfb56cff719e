"""The kinds of work the training loop drives (see ``train/task.py`` for the protocol)."""
