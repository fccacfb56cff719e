"""A finished run exported: as a graph for another runtime (``graphs.py``: ONNX, TorchScript, torch.export)
or as a Hugging Face checkpoint directory (``hf.py``); ``tfamily export`` (``cli.py``) imports neither
until it runs, so its ``--help`` needs no torch."""
