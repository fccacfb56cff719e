from .classifier import Classifier, ClassHead, FirstToken, LastToken, MeanPool
from .dual_encoder import DualEncoder, PairHead
from .encdec import EncoderDecoder
from .lm import LanguageModel, MLMHead

__all__ = ["Classifier", "ClassHead", "DualEncoder", "EncoderDecoder", "FirstToken", "LastToken", "LanguageModel",
           "MLMHead", "MeanPool", "PairHead"]
