def build_batch(items, block_size)
    return None
