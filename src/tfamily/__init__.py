"""tfamily: the Transformer family as a grid of design choices.

``tfamily.members.<name>(**overrides)`` returns a spec; ``tfamily.build(spec)`` returns an ``nn.Module``;
``tfamily.from_pretrained(dir)`` builds one from a local Hugging Face checkpoint; ``tfamily.load(run)`` reads a
trained run back (model, vocabulary, spec; ``.predict(texts)`` for a text classifier).
"""
import importlib
import sys
import types

__version__ = "0.1.0"
__all__ = ["build", "members", "Spec", "from_pretrained", "load"]

# name -> (module, attribute or None for the module itself). Resolved on first use, so that
# `import tfamily` (which every `tfamily ...` command pays) does not import torch: `tfamily --help`
# and `--version` answer in a fraction of the second torch takes.
_LAZY = {"build": ("tfamily.build", "build"), "members": ("tfamily.members", None), "Spec": ("tfamily.spec", "Spec"),
         "from_pretrained": ("tfamily.pretrained", "from_pretrained"), "load": ("tfamily.train.predict", "load")}


class _Package(types.ModuleType):
    def __getattr__(self, name: str):
        if name not in _LAZY:
            raise AttributeError(f"module 'tfamily' has no attribute {name!r}")
        module, attr = _LAZY[name]
        value = importlib.import_module(module)
        return value if attr is None else getattr(value, attr)

    def __setattr__(self, name: str, value) -> None:
        # Importing the submodule tfamily.build binds the package attribute `build` to that module;
        # the package's `build` is the function, so it stays resolved through __getattr__.
        if name == "build" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_LAZY))


sys.modules[__name__].__class__ = _Package
