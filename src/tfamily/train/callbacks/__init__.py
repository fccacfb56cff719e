"""The training loop's callbacks (``base.py``: the hooks, ``StepRecord``), one module each."""
from .base import STAGES, Callbacks, Clock, SeesEnd, SeesResult, SeesSaves, SeesStages, SeesSteps, StepRecord, \
    Stops, extra, installed
from .checkpointing import Checkpointing
from .evaluation import Evaluation
from .nonfinite import NonFiniteGuard
from .progress import Progress
from .result import ResultFile
from .startline import MeasuredLine
from .timebudget import TimeBudget

__all__ = ["STAGES", "Callbacks", "Checkpointing", "Clock", "Evaluation", "MeasuredLine", "NonFiniteGuard", "Progress",
           "ResultFile", "SeesEnd", "SeesResult", "SeesSaves", "SeesStages", "SeesSteps", "StepRecord", "Stops",
           "TimeBudget", "extra", "installed"]
