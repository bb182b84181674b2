"""Settings for every test. Shared plain helpers (tiny models, toy corpora, `require`) are in helpers.py."""

import torch

torch.set_num_threads(1)  # tiny tensors: threads cost more than they give
