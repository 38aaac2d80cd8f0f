def build_batch(items):
    return None
