"""The course's pictures. Each function draws one figure from data that a chapter has just computed with the
engine (a batch, a trace of steps, a pool's state), shows it, and returns nothing: one line in a chapter.

Colours are fixed per request index, so request 0 has the same colour in every figure of a chapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import FancyBboxPatch, Rectangle

DPI = 80  # inline PNGs: sharp enough on GitHub, small enough to commit
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan",
          "tab:red", "tab:gray"]


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _figure(width: float, height: float, ncols: int = 1, **kwargs):
    return plt.subplots(1, ncols, figsize=(width, height), dpi=DPI, **kwargs)


def as_list(x) -> list:
    """A tensor, array or sequence of ints as a list (a learner's build_batch may return lists or tensors)."""
    return x.tolist() if hasattr(x, "tolist") else list(x)


def _show(fig) -> None:
    fig.tight_layout()
    plt.show()


# ---------------------------------------------------------------------------------------------------------------
# Chapter 0: what each step computes, and the map of the course


def tokens_per_step(parts: Mapping[str, Sequence[int]], token_budget: int, title: str) -> None:
    """Stacked bars, one per engine step: the tokens of each kind (e.g. prefill / decode) in its forward pass."""
    fig, ax = _figure(11, 3.4)
    steps = np.arange(1, len(next(iter(parts.values()))) + 1)
    bottom = np.zeros(len(steps))
    for (label, values), c in zip(parts.items(), ["tab:blue", "tab:orange", "tab:green", "tab:purple"]):
        ax.bar(steps, values, bottom=bottom, width=0.9, color=c, label=label)
        bottom += np.asarray(values)
    ax.axhline(token_budget, color="black", ls="--", lw=1, label=f"token_budget = {token_budget}")
    ax.set_ylim(0, 1.15 * max(token_budget, bottom.max()))
    ax.set_xlabel("engine step")
    ax.set_ylabel("tokens in the forward pass")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    _show(fig)


def request_timeline(trace: Sequence[Sequence[tuple[int, int, str]]], labels: Sequence[str], title: str,
                     events: Sequence[tuple[int, int, str]] = ()) -> None:
    """One row per request, one column per engine step. `trace[step]` lists (request index, tokens computed,
    kind) with kind "prefill" (a prompt or a chunk of it), "recompute" (after a preemption) or "decode";
    `events` are (step, request index, text) markers such as "finished" or "preempted". Kind "skipped" marks a
    request that was scheduled but not computed."""
    styles = {"prefill": ("tab:blue", 0.85), "recompute": ("tab:red", 0.6), "decode": ("tab:orange", 0.85),
              "skipped": ("lightgray", 1.0)}
    n_steps = len(trace)
    fig, ax = _figure(min(max(6.5, 2 + 0.32 * n_steps), 13), 0.9 + 0.42 * len(labels))
    for step, items in enumerate(trace):
        for req, tokens, kind in items:
            c, alpha = styles[kind]
            ax.add_patch(Rectangle((step, req - 0.4), 0.95, 0.8, color=c, alpha=alpha, lw=0))
            if kind in ("prefill", "recompute"):
                ax.text(step + 0.47, req, str(tokens), ha="center", va="center", fontsize=7, color="white")
    for step, req, text in events:  # a finish after the step's cell, a preemption in it (nothing computed)
        marker = {"finished": ("|", "black"), "preempted": ("x", "tab:red")}.get(text, ("*", "black"))
        ax.plot(step + (1.0 if text == "finished" else 0.47), req, marker=marker[0], color=marker[1], markersize=11,
                mew=2)
    for kind, (c, alpha) in styles.items():
        if any(k == kind for items in trace for _, _, k in items):
            ax.add_patch(Rectangle((0, 0), 0, 0, color=c, alpha=alpha,
                                   label="scheduled, not computed" if kind == "skipped" else kind))
    if any(text == "finished" for *_, text in events):
        ax.plot([], [], "|", color="black", markersize=11, mew=2, label="finished")
    if any(text == "preempted" for *_, text in events):
        ax.plot([], [], "x", color="tab:red", markersize=9, mew=2, label="preempted")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlim(0, n_steps + 0.2)
    ax.set_xticks(np.arange(n_steps) + 0.47, [str(s + 1) if (s + 1) % max(1, n_steps // 20) == 0 or s == 0 else ""
                                              for s in range(n_steps)])
    ax.set_xlabel("engine step (numbers in cells: prompt tokens computed in that step)")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    _show(fig)


# The course map: boxes on a grid, arrows routed along the gaps between them so that none crosses a box.
_MAP = {  # name: (column, row, chapter, exercise)
    "mini_llm model +\ncontiguous KV cache": (0, 0, 1, ""),
    "block pool": (0, 1, 2, "125"),
    "paged KV cache\n(slot_mapping)": (0, 2, 3, "126"),
    "paged attention\n(block_tables)": (0, 3, 3, "127"),
    "prefix cache": (0, 4, 8, "132"),
    "scheduler\n(token budget)": (2, 1, 5, "129"),
    "batch layout\n(query_start_loc)": (1, 2, 4, "128"),
    "model runner": (1, 3, 4, ""),
    "engine loop +\nsampling": (2, 3, 6, "130"),
    "preemption": (2, 2, 7, "131"),
    "tensor parallel\n(sharded layers)": (1, 4, 12, "135"),
    "speculative\ndecoding": (2, 4, 11, "134"),
    "online loop +\nserver": (3, 3, 10, "133"),
}
_MAP_EDGES = [  # (from, to, route): "h" straight across, "v" straight down, "hv" down, across, down
    ("mini_llm model +\ncontiguous KV cache", "model runner", "gap"),
    ("block pool", "paged KV cache\n(slot_mapping)", "v"),
    ("paged KV cache\n(slot_mapping)", "paged attention\n(block_tables)", "v"),
    ("paged attention\n(block_tables)", "model runner", "h"),
    ("block pool", "scheduler\n(token budget)", "h"),
    ("scheduler\n(token budget)", "preemption", "v"),
    ("scheduler\n(token budget)", "batch layout\n(query_start_loc)", "hv"),
    ("batch layout\n(query_start_loc)", "model runner", "v"),
    ("model runner", "engine loop +\nsampling", "h"),
    ("block pool", "prefix cache", "side"),
    ("model runner", "tensor parallel\n(sharded layers)", "v"),
    ("engine loop +\nsampling", "speculative\ndecoding", "v"),
    ("engine loop +\nsampling", "online loop +\nserver", "h"),
]


def course_map() -> list[tuple[str, str]]:
    """The parts the course builds, by chapter and graded exercise, and which part feeds which; returns the
    arrows drawn, (from, to) with one-line names."""
    w, h, dx, dy = 2.6, 0.8, 3.6, 1.25
    fig, ax = _figure(12.5, 6.2)
    centre = {}
    for name, (col, row, chapter, ex) in _MAP.items():
        x, y = col * dx, -row * dy
        centre[name] = (x + w / 2, y + h / 2)
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04", fc="#e8f0fe", ec="#3367d6"))
        ax.text(x + w / 2, y + h * 0.6, name, ha="center", va="center", fontsize=9)
        ax.text(x + w / 2, y + 0.1, f"ch. {chapter}" + (f" · ex. {ex}" if ex else ""), ha="center", fontsize=8,
                color="#3367d6")
    arrow = dict(arrowstyle="->", color="gray", lw=1.2)
    for a, b, route in _MAP_EDGES:
        (xa, ya), (xb, yb) = centre[a], centre[b]
        if route == "v":
            ax.annotate("", xy=(xb, yb + h / 2 + 0.02), xytext=(xa, ya - h / 2 - 0.02), arrowprops=arrow)
        elif route == "h":
            ax.annotate("", xy=(xb - w / 2 - 0.02, yb), xytext=(xa + w / 2 + 0.02, ya), arrowprops=arrow)
        elif route == "gap":  # right, down the gap between the first two columns, into the target's left side
            x_gap, y_in = xa + w / 2 + (dx - w) / 2, yb + h / 4
            ax.plot([xa + w / 2 + 0.02, x_gap, x_gap], [ya, ya, y_in], color="gray", lw=1.2)
            ax.annotate("", xy=(xb - w / 2 - 0.02, y_in), xytext=(x_gap, y_in), arrowprops=arrow)
        elif route == "hv":  # leave from below, run along the gap between the rows, enter the target from above
            x0, gap_y = xa - w / 4, ya - h / 2 - (dy - h) / 2
            ax.plot([x0, x0, xb], [ya - h / 2 - 0.02, gap_y, gap_y], color="gray", lw=1.2)
            ax.annotate("", xy=(xb, yb + h / 2 + 0.02), xytext=(xb, gap_y), arrowprops=arrow)
        else:  # "side": up the left margin, into the target from the left
            x_side = xa - w / 2 - 0.25
            ax.plot([xa - w / 2 - 0.02, x_side, x_side], [ya, ya, yb], color="gray", lw=1.2)
            ax.annotate("", xy=(xb - w / 2 - 0.02, yb), xytext=(x_side, yb), arrowprops=arrow)
    ax.text(w / 2, -4 * dy - 0.45, "memory", ha="center", fontsize=11, weight="bold")
    ax.text(2 * dx + w / 2, -4 * dy - 0.45, "compute", ha="center", fontsize=11, weight="bold")
    ax.set_xlim(-0.6, 3 * dx + w + 0.2)
    ax.set_ylim(-4 * dy - 0.7, h + 0.25)
    ax.axis("off")
    ax.set_title("What the course builds (chapter · graded exercise); an arrow from A to B: B is built on A")
    _show(fig)
    return [(a.replace("\n", " "), b.replace("\n", " ")) for a, b, _ in _MAP_EDGES]


# ---------------------------------------------------------------------------------------------------------------
# Chapter 1: prefill against decode, and what reserving max_len wastes


def prefill_vs_decode(tokens: Sequence[int], seconds: Sequence[float], decode_steps: int,
                      decode_seconds: float) -> None:
    """Left: the time of one forward pass against the number of tokens in it. Right: the time per token, with
    `decode_steps` single-token steps of a KV-cache decode (total `decode_seconds`) for comparison."""
    tokens, seconds = np.asarray(tokens), np.asarray(seconds)
    fig, (ax1, ax2) = _figure(11, 3.4, ncols=2)
    ax1.plot(tokens, seconds * 1e3, "o-")
    ax1.set_xscale("log", base=2)
    ax1.set_xticks(tokens, [str(t) for t in tokens])
    ax1.set_ylim(0, None)
    ax1.set_xlabel("tokens in one forward pass (no cache)")
    ax1.set_ylabel("ms per pass")
    ax1.set_title("Time of one forward pass")
    ax2.plot(tokens, seconds / tokens * 1e3, "o-", label="prefill of n tokens, per token")
    ax2.axhline(decode_seconds / decode_steps * 1e3, color="tab:red", ls="--",
                label=f"decode with KV cache, per token ({decode_steps} steps)")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(tokens, [str(t) for t in tokens])
    ax2.set_yscale("log")
    ax2.set_xlabel("prompt tokens n")
    ax2.set_ylabel("ms per token")
    ax2.set_title("Time per token")
    ax2.legend(fontsize=8, loc="lower left")
    _show(fig)


def kv_waste(lengths: np.ndarray, max_len: int) -> None:
    """Histogram of request lengths against a contiguous `max_len` reservation, and the reserved area unused."""
    fig, ax = _figure(11, 3.5, ncols=2)
    ax[0].hist(lengths, bins=60, color="tab:blue")
    ax[0].axvline(max_len, color="tab:red", ls="--", label=f"reserved per request ({max_len})")
    ax[0].axvline(lengths.mean(), color="black", ls=":", label=f"mean used ({lengths.mean():.0f})")
    ax[0].set_xlabel("tokens per request (prompt + output)")
    ax[0].set_ylabel("requests")
    ax[0].legend()
    ax[0].set_title("Workload")
    order = np.sort(lengths)[::-1]
    ax[1].fill_between(range(len(order)), max_len, color="tab:red", alpha=0.25, label="reserved, never used")
    ax[1].fill_between(range(len(order)), order, color="tab:blue", label="used")
    ax[1].set_xlabel("requests, longest first")
    ax[1].set_ylabel("KV slots")
    ax[1].legend()
    ax[1].set_title(f"{100 * (1 - lengths.sum() / (max_len * len(lengths))):.0f}% of the contiguous reservation "
                    "is waste")
    _show(fig)


def causal_mask(mask, num_cached: int) -> None:
    """A step's attention mask `[new queries, cached + new keys]` (True: may attend), cached keys left of the line."""
    mask = np.asarray(mask, dtype=int)
    num_new, total = mask.shape
    fig, ax = _figure(1.5 + 0.45 * total, 1.3 + 0.45 * num_new)
    ax.imshow(mask, cmap=ListedColormap(["white", "tab:blue"]), vmin=0, vmax=1, aspect="equal")
    ax.set_xticks(np.arange(total + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(num_new + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="gray", lw=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks(range(total), [str(p) for p in range(total)], fontsize=7)
    ax.set_yticks(range(num_new), [str(num_cached + i) for i in range(num_new)], fontsize=7)
    ax.axvline(num_cached - 0.5, color="tab:red", lw=1.5)
    ax.set_xlabel(f"key position (left of the red line: {num_cached} cached)")
    ax.set_ylabel("query position")
    ax.set_title(f"tril(diagonal={num_cached}): {num_new} new queries", fontsize=10)
    _show(fig)


# ---------------------------------------------------------------------------------------------------------------
# Chapters 2 and 3: the pool, block tables, where each token lives


def block_pool_state(tables: Mapping[str, Sequence[int]], lengths: Mapping[str, int], num_blocks: int,
                     block_size: int, title: str) -> None:
    """The pool as a strip of blocks; each request's blocks in its colour, slots past its length pale."""
    fig, ax = _figure(10, 1.9)
    for i, (req, table) in enumerate(tables.items()):
        for j, b in enumerate(table):
            filled = min(block_size, lengths[req] - j * block_size)
            for s in range(block_size):
                ax.add_patch(Rectangle((b + s / block_size, 0), 1 / block_size, 1, fc=color(i),
                                       alpha=1.0 if s < filled else 0.25, ec="white", lw=0.5))
            ax.text(b + 0.5, 1.15, f"{req}[{j}]", ha="center", fontsize=8)
    for b in range(num_blocks):
        ax.add_patch(Rectangle((b, 0), 1, 1, fill=False, ec="black", lw=1))
        ax.text(b + 0.5, -0.35, str(b), ha="center", fontsize=8)
    ax.set_xlim(-0.2, num_blocks + 0.2)
    ax.set_ylim(-0.6, 1.5)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    _show(fig)


def waste_vs_block_size(block_sizes: Sequence[int], paged_waste: Sequence[float], table_len: Sequence[float],
                        contiguous_waste: float, max_len: int) -> None:
    """The share of held KV slots left unused, per block size, against a contiguous reservation."""
    fig, ax = _figure(8, 3.8)
    ax.plot(block_sizes, [100 * w for w in paged_waste], "o-", label="paged: unused tail of the last block")
    ax.axhline(100 * contiguous_waste, color="tab:red", ls="--", label=f"contiguous, max_len {max_len}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(block_sizes, [str(b) for b in block_sizes])
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("% of held KV slots unused")
    ax2 = ax.twinx()
    ax2.plot(block_sizes, table_len, "s:", color="tab:gray", label="mean block-table length")
    ax2.set_yscale("log")
    ax2.set_ylabel("blocks per request")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [line.get_label() for line in lines], loc="center right", fontsize=8)
    ax.set_title("KV-cache waste on the chapter-1 workload")
    _show(fig)


def block_tables(tables: Mapping[str, Sequence[int]], slots: Mapping[str, Sequence[int]], num_blocks: int,
                 block_size: int) -> None:
    """Each request's logical blocks (outlined, above and below) and the physical blocks of the pool they map to
    (middle row). `slots[name][p]` is the slot of the request's position p; the pool shows the positions there."""
    fig, ax = _figure(13, 3.6)
    owner = {slot: (name, p) for name, request_slots in slots.items() for p, slot in enumerate(request_slots)}
    index = {name: i for i, name in enumerate(tables)}
    for b in range(num_blocks):
        for r in range(block_size):
            name, p = owner.get(b * block_size + r, (None, None))
            ax.add_patch(Rectangle((b * (block_size + 1) + r, 0), 1, 1, ec="gray",
                                   fc=color(index[name]) if name else "white", alpha=0.6 if name else 1))
            if name:
                ax.text(b * (block_size + 1) + r + 0.5, 0.5, str(p), ha="center", va="center", fontsize=7)
        ax.text(b * (block_size + 1) + block_size / 2, -0.5, f"block {b}", ha="center", fontsize=8)
    for (name, table), y in zip(tables.items(), [3.2, -3.2]):
        c = color(index[name])
        for j, b in enumerate(table):
            x = j * (block_size + 1) + 2
            ax.add_patch(Rectangle((x, y), block_size, 1, ec=c, fc="none", lw=2))
            ax.text(x + block_size / 2, y + 0.5, f"{name}[{j}]", ha="center", va="center", fontsize=8)
            ax.annotate("", xy=(b * (block_size + 1) + block_size / 2, 1 if y > 0 else 0),
                        xytext=(x + block_size / 2, y if y > 0 else y + 1),
                        arrowprops=dict(arrowstyle="->", color=c, lw=1.2))
        ax.text(0, y + 0.5, f"request {name}\ntable {list(table)}", ha="right", va="center", fontsize=9)
    ax.set_xlim(-9, num_blocks * (block_size + 1))
    ax.set_ylim(-4, 5)
    ax.axis("off")
    ax.set_title("Logical blocks (outlined) map to physical blocks of the pool (middle row); "
                 "numbers are token positions")
    _show(fig)


def pool_contents(tables: Sequence[Sequence[int]], lengths: Sequence[int], num_blocks: int, block_size: int,
                  title: str) -> None:
    """Every block of the pool as a column of rows, coloured by its owner, labelled with its logical index."""
    fig, ax = _figure(13, 2.8)
    for b in range(num_blocks):
        for r in range(block_size):
            ax.add_patch(Rectangle((b, r), 0.9, 0.9, ec="gray", fc="white"))
    for i, (table, n) in enumerate(zip(tables, lengths)):
        for p in range(n):
            ax.add_patch(Rectangle((table[p // block_size], p % block_size), 0.9, 0.9, ec="gray", fc=color(i),
                                   alpha=0.7))
        for j, b in enumerate(table):
            ax.text(b + 0.45, block_size + 0.2, f"{j}", ha="center", fontsize=7, color=color(i))
        ax.plot([], [], "s", color=color(i), label=f"prompt {i}: table {list(table)}")
    ax.set_xlim(-0.5, num_blocks + 0.5)
    ax.set_ylim(-0.3, block_size + 1)
    ax.set_xlabel("physical block id")
    ax.set_ylabel("row in block")
    ax.set_yticks([r + 0.45 for r in range(block_size)], range(block_size))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, fontsize=8, frameon=False)
    ax.set_title(title)
    _show(fig)


# ---------------------------------------------------------------------------------------------------------------
# Chapter 4: the flat batch


def _spans(batch) -> list[tuple[int, int]]:
    qsl = as_list(batch.query_start_loc)
    return [(qsl[i], qsl[i + 1]) for i in range(len(qsl) - 1)]


def flat_batch(batch, names: Sequence[str], title: str) -> None:
    """The flat batch column by column: input_ids, positions and slot_mapping of every row, the request
    boundaries (query_start_loc) and the rows whose logits are computed (logits_indices, red marks)."""
    qsl = as_list(batch.query_start_loc)
    rows = [("input_ids", as_list(batch.input_ids)), ("positions", as_list(batch.positions)),
            ("slot_mapping", as_list(batch.slot_mapping))]
    seq_lens = as_list(batch.seq_lens)
    n = qsl[-1]
    fig, ax = _figure(max(6.0, 2.5 + 0.55 * n), 4)
    for i, (start, end) in enumerate(_spans(batch)):
        for t in range(start, end):
            for y, (_, values) in enumerate(rows):
                ax.add_patch(Rectangle((t, -y), 0.95, 0.9, fc=color(i), alpha=0.55, ec="black", lw=0.5))
                ax.text(t + 0.47, -y + 0.45, str(values[t]), ha="center", va="center", fontsize=9)
        ax.text((start + end) / 2, 1.5 + 1.1 * (i % 2),
                f"{names[i]}\nseq_len {seq_lens[i]}, table {list(batch.block_tables[i])}",
                ha="center", fontsize=9, color=color(i))  # alternate heights: narrow requests' labels do not collide
    for i, q in enumerate(qsl):
        ax.plot([q - 0.025, q - 0.025], [-2.2, 1.2], color="black", lw=1.5)
        ax.text(q, -2.6 - 0.35 * (i % 2), f"qsl[{i}]={q}", ha="center", fontsize=8)
    for row in as_list(batch.logits_indices):
        ax.plot(row + 0.47, 1.15, marker="v", color="red", markersize=10)
    for y, (label, _) in enumerate(rows):
        ax.text(-0.3, -y + 0.45, label, ha="right", va="center", fontsize=10)
    ax.set_xlim(-2.8, n + 0.5)
    ax.set_ylim(-3.3, 3.7)
    ax.axis("off")
    ax.set_title(title)
    _show(fig)


def flat_batch_mask(batch) -> np.ndarray:
    """Which keys each query row of a flat batch may see: rows are the batch's rows, columns every request's
    context laid end to end (request i's keys 0 .. seq_lens[i]-1). Block-diagonal; each block offset-causal."""
    seq_lens = as_list(batch.seq_lens)
    spans = _spans(batch)
    key_start = np.concatenate([[0], np.cumsum(seq_lens)])
    mask = np.zeros((spans[-1][1] if spans else 0, int(key_start[-1])), dtype=bool)
    for i, (start, end) in enumerate(spans):
        cached = seq_lens[i] - (end - start)
        for j in range(end - start):  # query j of request i is at position cached + j
            mask[start + j, key_start[i]: key_start[i] + cached + j + 1] = True
    return mask


def attention_mask(batch, names: Sequence[str]) -> None:
    """The attention mask of a flat batch: one block per request on the diagonal (no request sees another's
    keys), each block a lower triangle shifted right by the request's cached tokens."""
    mask = flat_batch_mask(batch)
    seq_lens = as_list(batch.seq_lens)
    spans = _spans(batch)
    key_start = np.concatenate([[0], np.cumsum(seq_lens)])
    rgb = np.ones(mask.shape + (3,))
    for i, (start, end) in enumerate(spans):
        block = mask[start:end, key_start[i]:key_start[i + 1]]
        view = rgb[start:end, key_start[i]:key_start[i + 1]]
        view[block] = plt.matplotlib.colors.to_rgb(color(i))
        view[~block] = 0.9
    fig, ax = _figure(min(2.5 + 0.26 * mask.shape[1], 13), 1.0 + 0.26 * mask.shape[0])
    ax.imshow(rgb, aspect="equal", interpolation="nearest")
    for i, (start, end) in enumerate(spans):
        ax.add_patch(Rectangle((key_start[i] - 0.5, start - 0.5), seq_lens[i], end - start, fill=False, ec="black",
                               lw=1))
    ax.set_xticks(key_start[:-1] - 0.5, [str(k) for k in key_start[:-1]], fontsize=7)
    ax.set_yticks([(s + e - 1) / 2 for s, e in spans],
                  [f"{names[i]}\n{seq_lens[i] - (e - s)} cached + {e - s} new" for i, (s, e) in enumerate(spans)],
                  fontsize=8)
    for label, i in zip(ax.get_yticklabels(), range(len(spans))):
        label.set_color(color(i))
    ax.set_xlabel("keys: each request's context, end to end (grey: its own keys it may not see yet)")
    ax.set_title("Attention mask of one flat batch: block-diagonal, each block causal with an offset")
    _show(fig)


def rows_to_slots(batch, names: Sequence[str], block_size: int, num_blocks: int) -> None:
    """Each row of the flat batch (top) goes to one slot of the KV pool (bottom, block after block): the slot is
    slot_mapping[row], in block slot // block_size. The blocks of one request need not be adjacent."""
    slots = as_list(batch.slot_mapping)
    n_rows, n_slots = len(slots), num_blocks * block_size
    width = n_slots + num_blocks * 0.5  # a small gap after every block
    fig, ax = _figure(13, 3.4)
    row_w = width / max(n_rows, 1)
    slot_x = lambda slot: slot + (slot // block_size) * 0.5  # noqa: E731
    request_of = np.repeat(np.arange(len(_spans(batch))), [e - s for s, e in _spans(batch)])
    for t in range(n_rows):
        ax.add_patch(Rectangle((t * row_w, 3), row_w * 0.92, 0.8, fc=color(request_of[t]), alpha=0.6, ec="black",
                               lw=0.5))
        ax.text(t * row_w + row_w * 0.46, 3.4, str(t), ha="center", va="center", fontsize=7)
    owner = {b: i for i, table in enumerate(batch.block_tables) for b in table}
    written = {slot: request_of[t] for t, slot in enumerate(slots)}
    for slot in range(n_slots):
        b = slot // block_size
        fc = color(written[slot]) if slot in written else (color(owner[b]) if b in owner else "white")
        ax.add_patch(Rectangle((slot_x(slot), 0), 0.92, 0.8, fc=fc, alpha=0.9 if slot in written else 0.25,
                               ec="gray", lw=0.5))
    for b in range(num_blocks):
        ax.text(slot_x(b * block_size) + block_size / 2, -0.35, f"block {b}", ha="center", fontsize=7)
    for t, slot in enumerate(slots):
        ax.plot([t * row_w + row_w * 0.46, slot_x(slot) + 0.46], [3, 0.8], color=color(request_of[t]), lw=0.7)
        ax.text(slot_x(slot) + 0.46, 0.4, str(slot), ha="center", va="center", fontsize=5.5, color="white")
    for i, name in enumerate(names):
        ax.plot([], [], "s", color=color(i), label=f"{name}: table {list(batch.block_tables[i])}")
    ax.text(-0.5, 3.4, "flat batch rows", ha="right", va="center", fontsize=9)
    ax.text(-0.5, 0.4, "KV pool slots", ha="right", va="center", fontsize=9)
    ax.set_xlim(-9, width + 0.5)
    ax.set_ylim(-0.7, 4.1)
    ax.axis("off")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(names), fontsize=8, frameon=False)
    ax.set_title("slot_mapping: where each row's K and V are written (pale: a request's block, not written now)")
    _show(fig)


def padding_waste(query_lens: Sequence[int]) -> None:
    """A padded [B, max] batch against the flat batch: one bar per request, grey the padding."""
    lens = np.asarray(query_lens)
    fig, ax = _figure(9, 3.2)
    x = np.arange(len(lens))
    ax.bar(x, np.full(len(lens), lens.max()), color="lightgray", label="padding in a [B, max] tensor")
    ax.bar(x, lens, color="tab:blue", label="real tokens (the flat batch)")
    for i, n in enumerate(lens):
        ax.text(i, n, str(n), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"req {i}" for i in x])
    ax.set_ylabel("tokens this step")
    padded, real = len(lens) * lens.max(), lens.sum()
    ax.set_title(f"query_lens {list(map(int, lens))}: {padded:,} padded vs {real:,} real "
                 f"({100 * (1 - real / padded):.0f}% waste)", fontsize=10)
    ax.legend(fontsize=8)
    _show(fig)


def padded_vs_flat(new_tokens: np.ndarray, contexts: np.ndarray, xlabel: str) -> None:
    """Per request, the padded length against its real new tokens; and the totals of new tokens and KV rows."""
    B = len(new_tokens)
    padded_tokens, flat_tokens = B * new_tokens.max(), new_tokens.sum()
    padded_kv, flat_kv = B * contexts.max(), contexts.sum()
    fig, (ax1, ax2) = _figure(13, 3.8, ncols=2, gridspec_kw={"width_ratios": [2.2, 1]})
    order = np.argsort(-new_tokens, kind="stable")
    ax1.bar(range(B), np.full(B, new_tokens.max()), color="lightgray", label="padding in a [B, T] batch")
    ax1.bar(range(B), new_tokens[order], color="tab:blue", label="real new tokens")
    ax1.set_xlabel(xlabel)
    ax1.set_ylabel("tokens in this step")
    ax1.legend()
    labels = ["new tokens", "KV rows read"]
    ax2.bar(labels, [padded_tokens, padded_kv], color="lightgray", label="padded")
    ax2.bar(labels, [flat_tokens, flat_kv], color="tab:blue", width=0.5, label="flat")
    for x, (p, f) in enumerate([(padded_tokens, flat_tokens), (padded_kv, flat_kv)]):
        ax2.text(x, p, f"{p:,}", ha="center", va="bottom", fontsize=9)
        ax2.text(x, f, f"{f:,}", ha="center", va="bottom", fontsize=9, color="tab:blue")
    ax2.set_title("totals for the step")
    ax2.legend()
    _show(fig)


# ---------------------------------------------------------------------------------------------------------------
# Chapters 5 to 7: scheduling over time


def static_vs_iteration(static_spans: Sequence[tuple[int, int, int]], orca_spans: Sequence[tuple[int, int]],
                        batch_size: int) -> list[tuple[float, float]]:
    """Per request, the steps it holds a seat: static batches (grey: seat held after it finished) against
    iteration-level scheduling, on one step axis; returns the two panels' x-ranges."""
    fig, axes = _figure(13, 4.2, ncols=2, sharey=True, sharex=True)
    for ax, title, spans in [(axes[0], f"static batching ({batch_size} per batch)", static_spans),
                             (axes[1], f"iteration-level scheduling (max {batch_size} running)", orca_spans)]:
        for i, span in enumerate(spans):
            ax.barh(i, span[1] - span[0], left=span[0], color="tab:blue")
            if len(span) == 3:
                ax.barh(i, span[2] - span[1], left=span[1], color="lightgray")
        ax.set_title(title)
        ax.set_xlabel("step (forward pass)")
    axes[0].set_ylabel("request")
    axes[0].barh([0], [0], color="lightgray", label="seat held, request already finished")
    axes[0].barh([0], [0], color="tab:blue", label="generating")
    axes[0].legend(loc="lower right", fontsize=8)
    ranges = [ax.get_xlim() for ax in axes]
    _show(fig)
    return ranges


def forward_passes(counts: Sequence[tuple[int, int, int]]) -> None:
    """(requests, passes one at a time, passes batched) as paired bars."""
    fig, ax = _figure(7, 3.5)
    xs = [c[0] for c in counts]
    ax.bar([x - 0.2 for x in xs], [c[1] for c in counts], width=0.4, label="one request at a time")
    ax.bar([x + 0.2 for x in xs], [c[2] for c in counts], width=0.4, label="continuous batching")
    ax.set_xlabel("requests")
    ax.set_ylabel("forward passes")
    ax.legend()
    _show(fig)


def free_blocks(free: Sequence[int], running: Sequence[int], events: Sequence[tuple[int, str]], num_blocks: int,
                title: str) -> None:
    """Free blocks and running requests after every step, with a red line at each preemption."""
    fig, ax = _figure(10, 3.6)
    steps = np.arange(1, len(free) + 1)
    ax.step(steps, free, where="post", label="free blocks after the step")
    ax.step(steps, running, where="post", color="tab:green", alpha=0.7, label="running requests")
    for k, (t, who) in enumerate(events):  # t: the step's index, from 0
        ax.axvline(t + 1, color="tab:red", ls="--", lw=1, label="preemption" if k == 0 else None)
        ax.text(t + 1.3, num_blocks - 1 - 2 * (k % 3), who, color="tab:red", fontsize=8)
    ax.set_xlabel("engine step")
    ax.set_ylim(0, num_blocks)
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    _show(fig)


def blocks_over_time(held: Sequence[Sequence[int]], labels: Sequence[str], num_blocks: int,
                     events: Sequence[tuple[int, int, str]], title: str) -> None:
    """Blocks held by each request after every step, stacked, up to the pool size; markers where a request is
    admitted, preempted or finishes. `held[step][i]` is request i's block-table length after that step; steps
    are indexed from 0 and drawn from 1, like every step axis of the course."""
    held = np.asarray(held)
    steps = np.arange(1, len(held) + 1)
    fig, ax = _figure(11, 3.8)
    ax.stackplot(steps, held.T, colors=[color(i) for i in range(len(labels))], labels=labels, alpha=0.75,
                 step="post")
    ax.axhline(num_blocks, color="black", ls="--", lw=1, label=f"pool ({num_blocks} blocks)")
    marks = {"admitted": ("^", "black"), "preempted": ("x", "tab:red"), "finished": ("o", "black")}
    for step, req, kind in events:  # at the middle of the request's band (its bottom once it holds nothing)
        m, c = marks[kind]
        ax.plot(step + 1, held[step, :req].sum() + held[step, req] / 2, marker=m, color=c, markersize=7, mew=1.5,
                ls="none")
    for kind, (m, c) in marks.items():
        if any(k == kind for *_, k in events):
            ax.plot([], [], marker=m, color=c, ls="none", label=kind)
    ax.set_xlabel("engine step")
    ax.set_ylabel("KV blocks held")
    ax.set_ylim(0, num_blocks * 1.08)
    ax.set_xlim(0.5, len(held) + 1)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    _show(fig)


# ---------------------------------------------------------------------------------------------------------------
# Chapter 8: prefix caching


def block_sharing(requests, labels: Sequence[str], ref_cnt: Sequence[int], num_blocks: int,
                  block_size: int) -> None:
    """Two requests' logical blocks (token ids) linked to the pool; shared blocks purple, with reference counts."""
    fig, ax = _figure(10, 3.6)
    for blk in range(num_blocks):
        holders = [i for i, r in enumerate(requests) if blk in r.block_table]
        fc = "tab:purple" if len(holders) > 1 else (color(holders[0]) if holders else "white")
        ax.add_patch(Rectangle((blk * 1.2, 0), 1, 1, ec="k", fc=fc, alpha=0.5))
        ax.text(blk * 1.2 + 0.5, 0.5, f"{blk}", ha="center", va="center")
        ax.text(blk * 1.2 + 0.5, -0.35, f"ref {ref_cnt[blk]}", ha="center", fontsize=8)
    for i, (r, y) in enumerate(zip(requests, (2.6, -2.6))):
        for j, blk in enumerate(r.block_table):
            toks = r.all_token_ids[j * block_size:(j + 1) * block_size]
            ax.add_patch(Rectangle((j * 2.6, y), 2.4, 1, ec=color(i), fc="white", lw=2))
            ax.text(j * 2.6 + 1.2, y + 0.5, " ".join(map(str, toks)), ha="center", va="center", fontsize=7)
            ax.annotate("", xy=(blk * 1.2 + 0.5, 1 if y > 0 else 0), xytext=(j * 2.6 + 1.2, y if y > 0 else y + 1),
                        arrowprops=dict(arrowstyle="->", color=color(i)))
        ax.text(-0.3, y + 0.5, labels[i], ha="right", va="center", color=color(i))
    ax.set_xlim(-4, num_blocks * 1.2 + 0.5)
    ax.set_ylim(-3, 4)
    ax.axis("off")
    ax.set_title("Logical blocks (token ids) above and below; the pool in the middle (purple: shared)")
    _show(fig)


def hash_chain(token_lists: Sequence[Sequence[int]], hashes: Sequence[Sequence[int]], labels: Sequence[str],
               block_size: int) -> None:
    """Each prompt as a chain of full blocks: a block's name is the hash of (its parent's name, its tokens).
    Blocks whose name also appears in the other prompt's chain are shared (filled); the first differing block
    and every block after it get new names, even where the tokens are equal again."""
    n_max = max(len(h) for h in hashes)
    fig, ax = _figure(min(2.0 + 1.9 * (n_max + 1), 13), 0.9 + 1.1 * len(hashes))
    all_names = [set(h) for h in hashes]
    for i, (tokens, chain) in enumerate(zip(token_lists, hashes)):
        y = -1.6 * i
        others = set().union(*(all_names[:i] + all_names[i + 1:]))
        for j, h in enumerate(chain):
            x = 2.3 * j
            shared = h in others
            ax.add_patch(FancyBboxPatch((x, y), 1.9, 0.9, boxstyle="round,pad=0.03", ec=color(i), lw=1.5,
                                        fc=color(i) if shared else "white", alpha=0.35 if shared else 1))
            block = tokens[j * block_size:(j + 1) * block_size]
            ax.text(x + 0.95, y + 0.62, " ".join(map(str, block)), ha="center", va="center", fontsize=7)
            ax.text(x + 0.95, y + 0.25, f"#{h & 0xffff:04x}", ha="center", va="center", fontsize=8, family="monospace")
            if j:
                ax.annotate("", xy=(x - 0.02, y + 0.45), xytext=(x - 0.38, y + 0.45),
                            arrowprops=dict(arrowstyle="->", color="gray"))
        tail = tokens[len(chain) * block_size:]
        if tail:
            x = 2.3 * len(chain)
            ax.add_patch(Rectangle((x, y + 0.1), 1.9, 0.7, ec="gray", fc="none", ls=":"))
            ax.text(x + 0.95, y + 0.45, " ".join(map(str, tail)) + "\n(partial: no name)", ha="center", va="center",
                    fontsize=6, color="gray")
        ax.text(-0.2, y + 0.45, labels[i], ha="right", va="center", fontsize=9, color=color(i))
    ax.set_xlim(-3.2, 2.3 * (n_max + 1))
    ax.set_ylim(-1.6 * (len(hashes) - 1) - 0.4, 1.3)
    ax.axis("off")
    ax.set_title("Each full block is named hash(parent's name, its tokens) (last 4 hex digits shown);\n"
                 "filled: a name that another prompt shares", fontsize=10)
    _show(fig)


def caching_savings(off: Mapping[str, float], on: Mapping[str, float]) -> None:
    """Tokens computed and first-step time, prefix caching off against on."""
    fig, axes = _figure(9, 2.6, ncols=2)
    for ax, key, label in zip(axes, ("computed", "prefill_s"), ("tokens computed", "first (prefill) step, s")):
        ax.barh(["off", "on"], [off[key], on[key]], color=["tab:gray", "tab:green"])
        ax.set_xlabel(label)
    axes[0].set_ylabel("prefix caching")
    _show(fig)


def knee(rows: Sequence[Mapping], factor: float = 10.0) -> float | None:
    """The lowest request rate at which a system's p99 TTFT exceeds `factor` times its p99 TTFT at the lowest
    rate measured (its unloaded value); None if it never does. `rows`: one system's, as benchmarks/serving.py
    writes them."""
    rows = sorted(rows, key=lambda r: r["rate"])
    unloaded = rows[0]["metrics"]["p99_ttft_ms"]
    return next((r["rate"] for r in rows if r["metrics"]["p99_ttft_ms"] > factor * unloaded), None)


def serving_curves(rows: Sequence[Mapping], title: str) -> None:
    """TTFT (p50 solid, p99 dashed) and TPOT p50 against the request rate, one colour per system, its knee
    dotted. `rows`: benchmarks/serving.py's rows ({"system", "rate", "metrics"})."""
    fig, axes = _figure(10, 3.2, ncols=2)
    systems = list(dict.fromkeys(r["system"] for r in rows))
    for i, system in enumerate(systems):
        mine = sorted((r for r in rows if r["system"] == system), key=lambda r: r["rate"])
        rates = [r["rate"] if r["rate"] != float("inf") else 2 * max(x["rate"] for x in mine if x["rate"] !=
                                                                           float("inf")) for r in mine]
        m = [r["metrics"] for r in mine]
        axes[0].plot(rates, [x["p50_ttft_ms"] for x in m], "-o", color=color(i), label=f"{system} p50")
        axes[0].plot(rates, [x["p99_ttft_ms"] for x in m], "--", color=color(i), label=f"{system} p99")
        axes[1].plot(rates, [x["p50_tpot_ms"] for x in m], "-o", color=color(i), label=system)
        at = knee(mine)
        if at is not None:
            for ax in axes:
                ax.axvline(at, color=color(i), ls=":", lw=1)
    for ax, label in zip(axes, ("TTFT, ms", "TPOT p50, ms")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("request rate, requests/s (Poisson)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.suptitle(title + " (dotted: the knee, p99 TTFT above 10x its value at the lowest rate)", fontsize=10)
    _show(fig)


# ---------------------------------------------------------------------------------------------------------------
# Chapter 12: tensor parallelism


def tensor_parallel_layout(bars: Sequence[tuple[str, str, Sequence[tuple[int, int, int | None]]]],
                           world_size: int, title: str) -> None:
    """One bar per tensor, `(label, what is split, [(start, stop, rank)])` with `rank` None for a part every rank
    holds whole: which rank holds which heads, columns and KV heads."""
    fig, ax = _figure(10, 0.42 * len(bars) + 1.1)
    for y, (label, unit, parts) in enumerate(bars):
        total = max(stop for _, stop, _ in parts)
        for start, stop, rank in parts:
            left, width = start / total, (stop - start) / total
            if rank is None:
                ax.barh(y, width, left=left, color="lightgray", hatch="//", edgecolor="gray")
                ax.text(left + width / 2, y, "every rank (replicated)", ha="center", va="center", fontsize=8)
            else:
                ax.barh(y, width, left=left, color=color(rank), edgecolor="white")
                held = f"{unit.removesuffix('s')} {start}" if stop - start == 1 else f"{unit} {start}-{stop - 1}"
                ax.text(left + width / 2, y, f"rank {rank}: {held}", ha="center", va="center", fontsize=8,
                        color="white")
    ax.set_yticks(range(len(bars)), [label for label, _, _ in bars], fontsize=9)
    ax.invert_yaxis()
    ax.set_xticks([])
    ax.set_xlim(0, 1)
    ax.set_title(title, fontsize=10)
    for rank in range(world_size):
        ax.barh(0, 0, color=color(rank), label=f"rank {rank}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=world_size + 1, fontsize=8, frameon=False)
    _show(fig)


def accepted_per_step(emitted: Sequence[Sequence[int]], labels: Sequence[str], max_drafts: int) -> None:
    """Chapter 11: the tokens each request emitted at each step it decoded (1 = no draft accepted)."""
    fig, ax = _figure(9, 2.8)
    for i, (counts, label) in enumerate(zip(emitted, labels)):
        ax.plot(range(1, len(counts) + 1), counts, marker="o", ms=3, lw=1, color=color(i), label=label)
    ax.set_ylim(0.5, max_drafts + 1.5)
    ax.set_xlabel("decode step of the request")
    ax.set_ylabel("tokens emitted")
    ax.set_title(f"Accepted length per step: 1 to {max_drafts + 1} tokens (drafts accepted + one)", fontsize=10)
    ax.legend(fontsize=7, ncol=4, loc="upper right")
    _show(fig)


def speedup_vs_k(ks: Sequence[int], passes_ratio: Sequence[float], time_ratio: Sequence[float]) -> None:
    """Chapter 11: forward passes and CPU time saved, against the number of drafts per step."""
    fig, ax = _figure(6, 2.8)
    ax.plot(ks, passes_ratio, marker="o", label="forward passes: without / with")
    ax.plot(ks, time_ratio, marker="s", label="CPU time: without / with")
    ax.axhline(1, color="gray", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ks), [str(k) for k in ks])
    ax.set_xlabel("k, drafts per step (num_speculative_tokens)")
    ax.set_ylabel("speed-up")
    ax.legend(fontsize=8)
    _show(fig)


# ---------------------------------------------------------------------------------------------------------------
# Chapters 5 to 8 and 11: a step trace (framework/trace.py), and two traces up to their first difference

_KINDS = {"prefill": "tab:blue", "decode": "tab:orange", "draft": "tab:green"}


def _step_of(times: Sequence[float], t: float | None) -> int | None:
    """The index of the first step whose time in `times` is at or after `t` (a request's times are its steps')."""
    return None if t is None else int(np.searchsorted(np.asarray(times), t - 1e-9))


def _draw_steps(ax_rows, ax_requests, steps, requests, label: str = "") -> None:
    """Rows by kind per step, KV blocks used, preemption and prefix-hit markers on `ax_rows`; each request's
    lifetime (queued, the steps it ran in by kind, first token, finish) on `ax_requests`. Step i is drawn at i + 1."""
    _draw_rows(ax_rows, steps, label)
    _draw_lifetimes(ax_requests, steps, requests)


def _draw_rows(ax_rows, steps, label: str) -> None:
    x = np.array([s.index + 1 for s in steps])
    bottom = np.zeros(len(steps))
    for kind, c in _KINDS.items():
        values = np.array([s.rows[kind] for s in steps])
        if values.any():
            ax_rows.bar(x, values, bottom=bottom, width=0.85, color=c, label=f"{kind} rows")
            bottom += values
    top = max(bottom.max(initial=1), 1)
    budget = steps[0].token_budget if steps else 0
    if budget <= 2 * top:
        ax_rows.axhline(budget, color="black", ls="--", lw=0.8, label="token budget")
        top = max(top, budget)
    elif budget:  # a budget far above every step would flatten the bars
        ax_rows.plot([], [], ls="none", label=f"token budget {budget}\n(above the scale)")
    for s, height in zip(steps, bottom):
        if s.preempted:
            ax_rows.plot(s.index + 1, height + 0.06 * top, "x", color="tab:red", mew=2, ms=7)
        if s.prefix_hit_tokens:
            ax_rows.plot(s.index + 1, height + 0.06 * top, "v", color="tab:purple", ms=7)
    if any(s.preempted for s in steps):
        ax_rows.plot([], [], "x", color="tab:red", mew=2, label="preemption")
    if any(s.prefix_hit_tokens for s in steps):
        ax_rows.plot([], [], "v", color="tab:purple", label="prefix hit")
    ax_rows.set_ylim(0, 1.2 * top)
    ax_rows.set_ylabel(f"{label}\nrows (tokens)" if label else "rows (tokens)")
    kv = ax_rows.twinx()
    used = [s.kv_blocks_used for s in steps]
    pool = steps[0].kv_blocks_used + steps[0].kv_blocks_free if steps else 0
    kv.step(x, used, where="mid", color="black", lw=1.2, label=f"KV blocks used (pool {pool})")
    kv.set_ylim(0, 1.2 * max(used + [1]))
    kv.set_ylabel("KV blocks used")
    handles = [h for ax in (ax_rows, kv) for h in ax.get_legend_handles_labels()[0]]
    ax_rows.legend(handles, [h.get_label() for h in handles], loc="upper left", bbox_to_anchor=(1.12, 1.0),
                   fontsize=7, frameon=False)


def _draw_lifetimes(ax_requests, steps, requests) -> None:
    starts, ends = [s.start for s in steps], [s.end for s in steps]
    where = {r.request_id: i for i, r in enumerate(requests)}
    for s in steps:
        for row in s.scheduled:
            i = where.get(row["request_id"])
            if i is not None:
                ax_requests.add_patch(Rectangle((s.index + 0.575, i - 0.35), 0.85, 0.7, lw=0,
                                                color=_KINDS[row["kind"]], alpha=0.85))
        for rid in s.preempted:
            if rid in where:
                ax_requests.plot(s.index + 1, where[rid], "x", color="tab:red", mew=2, ms=7)
    queued = False
    for i, r in enumerate(requests):
        first = steps[r.steps[0]].index if r.steps and r.steps[0] < len(steps) else None
        arrival = _step_of(starts, r.arrival)
        if arrival is not None and first is not None and first > arrival:
            ax_requests.plot([arrival + 0.575, first + 0.575], [i, i], color="gray", lw=2, alpha=0.6)
            queued = True
        for t, marker in ((r.first_token, "o"), (r.finish, "|")):
            at = _step_of(ends, t)
            if at is not None and at < len(steps):
                ax_requests.plot(at + 1, i, marker, color="black", ms=5 if marker == "o" else 11, mew=2)
    if queued:
        ax_requests.plot([], [], color="gray", lw=2, alpha=0.6, label="queued")
    ax_requests.plot([], [], "o", color="black", ms=5, label="first token")
    ax_requests.plot([], [], "|", color="black", ms=11, mew=2, label="finished")
    ax_requests.set_yticks(range(len(requests)), [f"#{i}" for i in range(len(requests))], fontsize=7)
    ax_requests.set_ylim(len(requests) - 0.5, -0.5)
    ax_requests.set_ylabel("request")
    ax_requests.legend(loc="upper left", bbox_to_anchor=(1.12, 1.0), fontsize=7, frameon=False)


def _trace_figure(panels: int, num_requests: int, num_steps: int):
    heights = [2.2, max(1.0, 0.22 * num_requests)] * panels
    fig, axes = plt.subplots(len(heights), 1, figsize=(min(max(7.0, 3.5 + 0.12 * num_steps), 13), sum(heights) + 0.8),
                             dpi=DPI, sharex=True, gridspec_kw={"height_ratios": heights})
    return fig, axes


def step_timeline(steps: Sequence, requests: Sequence, title: str) -> None:
    """A step trace (`framework.trace`'s StepRecords and RequestRecords): above, each step's rows by kind (prefill,
    decode, draft) against the token budget, the KV blocks used, and markers where a request was preempted or
    prompt tokens were found in the prefix cache; below, each request's lifetime: queued from its arrival, the steps
    it ran in (coloured by kind), its first token and its finish."""
    fig, (ax_rows, ax_requests) = _trace_figure(1, len(requests), len(steps))
    _draw_steps(ax_rows, ax_requests, steps, requests)
    ax_requests.set_xlabel("engine step")
    ax_requests.set_xlim(0.3, len(steps) + 0.7)
    ax_rows.set_title(title, fontsize=10)
    _show(fig)


def trace_comparison(diff, title: str, context: int = 40) -> None:
    """Two traces of one workload (a `framework.trace_compare.Divergence`) one above the other, up to and including
    the first step where their plans differ (shaded), at most `context` steps before it."""
    # the requests that had arrived by the end of the differing step, in the trace that has the most of them
    arrived = [[r for r in requests if r.arrival is None or not steps or r.arrival <= steps[-1].end]
               for steps, requests in zip(diff.steps, diff.requests)]
    num_requests = max(len(r) for r in arrived)
    first = max(0, diff.step - context)
    fig, axes = _trace_figure(2, num_requests, diff.step + 1 - first)
    for k, (steps, requests, label) in enumerate(zip(diff.steps, arrived, diff.labels)):
        _draw_steps(axes[2 * k], axes[2 * k + 1], steps, requests, label)
        axes[2 * k + 1].set_ylim(num_requests - 0.5, -0.5)
    for ax in axes:
        ax.axvspan(diff.step + 0.5, diff.step + 1.5, color="tab:red", alpha=0.15, lw=0)
    axes[-1].set_xlim(first + 0.3, diff.step + 1.7)
    axes[-1].set_xlabel("engine step (shaded: the first that differs)")
    axes[0].set_title(f"{title}\nfirst difference at step {diff.step + 1}: {', '.join(diff.what)}", fontsize=10)
    _show(fig)
