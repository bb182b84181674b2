"""Solutions to the exercises of notebooks/1_the_journey_of_the_notes (tests/test_exercises.py
checks them)."""

import torch


def weights(e, mask):
    """Step (2): softmax over the real source tokens; -inf scores get exactly 0 weight."""
    return torch.softmax(e.masked_fill(~mask.unsqueeze(1), float("-inf")), dim=-1)  # (B, T, S)


def context(alpha, h):
    """Step (3): c_t = sum_i alpha_{t,i} h_i."""
    return alpha @ h  # (B, T, S) x (B, S, He) -> (B, T, He)


# The notes' first example ("The cat sat", s = (0.5, -0.2, 0.8)): the scores e_i = s . h_i are
# 0.05 - 0.04 + 0.08 = 0.09, 0.40 - 0.02 + 0.56 = 0.94 and 0.10 - 0.06 + 0.16 = 0.20; their
# exponentials 1.0942, 2.5600 and 1.2214 sum to 4.8756 (the notes print 4.02).
LECTURE_WEIGHTS = [1.0942 / 4.8756, 2.5600 / 4.8756, 1.2214 / 4.8756]  # 0.224, 0.525, 0.251
