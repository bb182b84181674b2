"""Solutions to the exercises of notebooks/4_does_attention_explain (tests/test_exercises.py checks them)."""


def uniform(alpha, mask):
    """1/S on the S real tokens of each row, 0 on padding: (B, Q, S) -> (B, Q, S)."""
    real = mask.unsqueeze(1).expand_as(alpha).to(alpha.dtype)  # (B, S) -> (B, Q, S)
    return real / real.sum(-1, keepdim=True)


def same_top(alpha, attributions):
    """The share of rows whose largest weight and largest |attribution| are on the same token."""
    return float((alpha.argmax(-1) == attributions.abs().argmax(-1)).float().mean())
