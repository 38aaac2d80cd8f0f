def build_batches(items, block_size):
    return None
