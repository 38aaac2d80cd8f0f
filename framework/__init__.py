"""The engine's plumbing, shared by the reference (solutions/) and your code (practice/).

Requests, sampling, configs, the KV-cache manager, the cache tensors, and the shells of the scheduler, the model
runner and the engine live here. None of it is the answer to an exercise: each shell leaves its exercise's part
(`schedule`, `step`/`generate`, ...) to a subclass, and takes the pieces it is built from (block pool, prefix
cache, batch layout, attention, preemption) as class attributes that solutions/ and practice/ fill in.
"""
