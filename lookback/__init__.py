"""lookback: RNN encoder-decoder neural machine translation with attention."""

from .config import Config, load_config
from .model.attention import Score, register_score
from .model.seq2seq import Seq2Seq, build_model
from .translator import Translation, Translator

__version__ = "0.1.0"
__all__ = [
    "Config",
    "Score",
    "Seq2Seq",
    "Translation",
    "Translator",
    "build_model",
    "load_config",
    "register_score",
]
