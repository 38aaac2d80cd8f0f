import torch


def build_batch(items, block_size):
    return torch.ones(1 << 40, dtype=torch.uint8)
