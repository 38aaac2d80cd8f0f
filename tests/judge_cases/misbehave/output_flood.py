def build_batch(items, block_size):
    while True:
        print("spam " * 200)
