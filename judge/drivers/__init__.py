"""Public drivers: code the worker runs for exercises whose learner code needs objects built beside it (a
scheduler with its KV-cache manager and requests, an engine with its model). Each function takes the learner's
module first, then plain arguments from the grader, and returns plain data (what the learner's objects did).
They hold no expected value: the grader computes those with the references. Shipped to students."""
