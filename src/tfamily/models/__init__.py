from .classifier import Classifier, ClassHead, LastToken
from .encdec import EncoderDecoder
from .lm import LanguageModel, MLMHead

__all__ = ["Classifier", "ClassHead", "EncoderDecoder", "LastToken", "LanguageModel", "MLMHead"]
