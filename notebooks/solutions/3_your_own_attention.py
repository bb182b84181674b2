"""Solutions to the exercises of notebooks/3_your_own_attention (tests/test_exercises.py checks them)."""

import torch
from torch import nn

import lookback


class ConcatScore(lookback.Score):
    """Luong et al. (2015), eq. 8, concat: e_{t,i} = v . tanh(W [s_t; h_i])."""

    @classmethod
    def build(cls, dec_size, enc_size, cfg):
        return cls(dec_size, enc_size, cfg.attention_size)

    def __init__(self, dec_size, enc_size, size):
        super().__init__()
        self.W = nn.Linear(dec_size + enc_size, size, bias=False)
        self.v = nn.Linear(size, 1, bias=False)

    def forward(self, s, keys, coverage=None):
        (B, T, _), S = s.shape, keys.size(1)
        pairs = torch.cat([s.unsqueeze(2).expand(B, T, S, -1), keys.unsqueeze(1).expand(B, T, S, -1)], -1)
        return self.v(torch.tanh(self.W(pairs))).squeeze(-1)  # (B, T, S, D + He) -> (B, T, S)


class TemperedGeneral(lookback.Score):
    """General with a learned temperature: e_{t,i} = (s_t W h_i) / tau, tau = exp(log_tau)."""

    @classmethod
    def build(cls, dec_size, enc_size, cfg):
        return cls(dec_size, enc_size)

    def __init__(self, dec_size, enc_size):
        super().__init__()
        self.W = nn.Linear(enc_size, dec_size, bias=False)
        self.log_tau = nn.Parameter(torch.zeros(()))  # tau starts at 1

    def keys(self, h):
        return self.W(h)  # (B, S, He) -> (B, S, D), once per sentence

    def forward(self, s, keys, coverage=None):
        return s @ keys.transpose(1, 2) / self.log_tau.exp()  # (B, T, S)
