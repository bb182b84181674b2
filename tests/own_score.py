"""A score written outside the package, as a reader writes their own: the negative squared
distance between W s and h. Importing this file registers it as `model.attention: distance`; a
command imports it with `lookback --plugin tests/own_score.py ...` (tests/test_own_score.py)."""

import math

from torch import nn

from lookback import Score, register_score


class DistanceScore(Score):
    """e_{t,i} = -|W s_t - h_i|^2 / sqrt(He): the nearer h_i to W s_t, the higher its score."""

    @classmethod
    def build(cls, dec_size, enc_size, cfg):
        return cls(dec_size, enc_size)

    def __init__(self, dec_size, enc_size):
        super().__init__()
        self.W = nn.Linear(dec_size, enc_size, bias=False)

    def forward(self, s, keys, coverage=None):
        q = self.W(s)  # (B, T, D) -> (B, T, He)
        d2 = (q * q).sum(-1, keepdim=True) - 2 * q @ keys.transpose(1, 2) + (keys * keys).sum(-1).unsqueeze(1)
        return -d2 / math.sqrt(keys.size(-1))  # (B, T, S)


register_score("distance", DistanceScore)
