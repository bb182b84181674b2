"""Solutions to the exercises of notebooks/5_the_next_lecture (tests/test_exercises.py checks them)."""

import torch


def future_mask(T):
    """(T, T), True where step t may read position j: j <= t, the lower triangle."""
    return torch.ones(T, T, dtype=torch.bool).tril()


def positions_by_hand(T, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i + 1) = cos(the same angle): (T, d)."""
    pos = torch.arange(T).unsqueeze(1).float()  # (T, 1)
    angle = pos / 10000 ** (torch.arange(0, d, 2).float() / d)  # (T, d / 2): one angle per pair
    pe = torch.zeros(T, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe
