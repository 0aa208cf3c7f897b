"""Identity stand-in for WeTextProcessing's English normaliser: the same class as the Chinese one."""

from tn.chinese.normalizer import Normalizer

__all__ = ["Normalizer"]
