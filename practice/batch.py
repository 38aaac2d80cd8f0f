"""Exercise 128 — the batch layout of one mixed forward pass.

Statement: practice/exercises/128-batch-layout.md. Grade: `python practice/judge.py 128`.
"""

from __future__ import annotations


def build_batch(items, block_size: int):
    """Lay out the new tokens of several requests as one flat batch, with the metadata attention needs.

    Args:
        items: a list of `(token_ids, num_computed, block_table, need_logits)`, one per request, in order:
            token_ids (list[int]): the new tokens this request computes in this step (a whole prompt, a chunk
                of one, or the single token of a decode);
            num_computed (int): how many of the request's tokens are already in the KV cache;
            block_table (list[int]): the request's KV-cache blocks, in order;
            need_logits (bool): whether the request's last new token needs logits.
        block_size: tokens per KV-cache block.

    Returns:
        Any object with these attributes (a dataclass, a SimpleNamespace, ... as you like). N is the total
        number of new tokens and B the number of requests:
        - input_ids: 1-D integer tensor [N], all new tokens, request after request;
        - positions: 1-D integer tensor [N], each token's position in its request (num_computed, num_computed+1, ...);
        - slot_mapping: 1-D integer tensor [N]; position p of a request goes to slot
          block_table[p // block_size] * block_size + p % block_size;
        - query_start_loc: B+1 integers (list or tensor), request i's tokens are [qsl[i], qsl[i+1]);
        - seq_lens: B integers (list or tensor), the request's context length after this step;
        - block_tables: B lists, each request's block table;
        - logits_indices: 1-D integer tensor, the flat index of the last token of each request whose
          need_logits is true, in request order (empty when none).
    """
    raise NotImplementedError("exercise 128: build_batch is not implemented yet (practice/batch.py)")
