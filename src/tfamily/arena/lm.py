"""The arena's language-modelling task, now declared with the other tasks in ``arena/tasks/lm.py``;
this path is kept for imports."""
from .tasks.lm import CORPUS, ByteLMTask, HeldOut

__all__ = ["CORPUS", "ByteLMTask", "HeldOut"]
