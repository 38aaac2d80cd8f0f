def helper(table, p, block_size):
    return table[p // block_size] * block_size + p % block_size + undefined_name  # noqa: F821


def build_batch(items, block_size):
    return [helper(tb, nc, block_size) for _, nc, tb, _ in items]
