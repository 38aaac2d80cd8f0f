"""Attack: reach the reference through the course's own module switch, or inherit from whatever it returns."""

import course


def build_batch(items, block_size):
    course.IMPL = "solutions"
    ref = course.use("batch")
    return ref.build_batch(items, block_size)
