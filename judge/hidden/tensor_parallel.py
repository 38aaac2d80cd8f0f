"""Hidden tests of exercise 135 (shard the layer).

The expected shards are taken here by explicit head and column indices (index_select on lists of rows), the
expected output is the dense layer computed in float64 by mini_llm's `DecoderLayer` on the whole weights: both
independent of solutions/tensor_parallel.py. The learner's `layer_forward` runs in the worker, one thread per
rank, through the public driver judge/drivers/tensor_parallel.py, whose `all_reduce` sums the ranks' tensors. Each
rank's tensors are checked as well as their sums, against its own share computed here from the dense layer's inputs
to o_proj and down_proj: a rank's thread could read another's shard, and what it passes says whether it did.
Tolerance (float32 against float64): |got - expected| <= ATOL + RTOL * |expected|.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from judge.drivers.tensor_parallel import describe
from judge.harness import CaseFailure, Cases, whole
from judge.hidden.end_to_end import load_model
from judge.remote import Driver, learner_failure
from mini_llm import Qwen3Config, causal_attention, rope_cos_sin
from mini_llm.model import DecoderLayer

CASES = Cases()
ATOL = RTOL = 1e-4

NAMES = ("input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
         "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
         "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
NORMS = ("input_layernorm.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
         "post_attention_layernorm.weight")


QWEN3_EPS = 1e-6  # Qwen3-0.6B's rms_norm_eps, mini_llm's default


@dataclass(frozen=True)
class Shape:
    heads: int
    kv_heads: int
    head_dim: int = 8
    hidden: int = 32
    intermediate: int = 48
    seed: int = 0
    eps: float = QWEN3_EPS  # rms_norm_eps: one other than Qwen3's is read from cfg, not written in the code

    def config(self) -> Qwen3Config:
        return Qwen3Config(vocab_size=16, hidden_size=self.hidden, intermediate_size=self.intermediate,
                           num_hidden_layers=1, num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
                           head_dim=self.head_dim, rope_theta=10000.0, rms_norm_eps=self.eps)

    def text(self, world_size: int) -> str:
        return (f"{self.heads} query heads, {self.kv_heads} KV heads of head_dim {self.head_dim}, hidden "
                f"{self.hidden}, intermediate {self.intermediate}, rms_norm_eps {self.eps:g}, world_size {world_size}")


def random_layer(s: Shape) -> dict[str, torch.Tensor]:
    """Random weights (norm weights too, so that a sliced or missing norm weight changes the result)."""
    g = torch.Generator().manual_seed(1000 + s.seed)
    h, hd = s.hidden, s.head_dim
    shapes = {"self_attn.q_proj.weight": (s.heads * hd, h), "self_attn.k_proj.weight": (s.kv_heads * hd, h),
              "self_attn.v_proj.weight": (s.kv_heads * hd, h), "self_attn.o_proj.weight": (h, s.heads * hd),
              "mlp.gate_proj.weight": (s.intermediate, h), "mlp.up_proj.weight": (s.intermediate, h),
              "mlp.down_proj.weight": (h, s.intermediate)}
    weights = {n: torch.randn(shape, generator=g) / shape[1] ** 0.5 for n, shape in shapes.items()}
    for n in NORMS:
        size = hd if "q_norm" in n or "k_norm" in n else h
        weights[n] = 1 + 0.3 * torch.randn(size, generator=g)
    return {n: weights[n] for n in NAMES}


def rows(units: range, width: int) -> torch.Tensor:
    return torch.tensor([u * width + i for u in units for i in range(width)])


def indices(w: dict[str, torch.Tensor], rank: int, ws: int, heads: int, kv_heads: int) -> tuple[torch.Tensor, ...]:
    """Rank `rank`'s query-head rows, KV-head rows and intermediate columns, as the statement's table names them."""
    hd = w["self_attn.q_proj.weight"].shape[0] // heads
    inter = w["mlp.gate_proj.weight"].shape[0]
    return (rows(range(rank * heads // ws, (rank + 1) * heads // ws), hd),
            rows(range(rank * kv_heads // ws, (rank + 1) * kv_heads // ws), hd),
            torch.arange(rank * inter // ws, (rank + 1) * inter // ws))


def expected_shard(w: dict[str, torch.Tensor], rank: int, ws: int, heads: int, kv_heads: int) -> dict:
    q, kv, cols = indices(w, rank, ws, heads, kv_heads)
    pick = {"self_attn.q_proj.weight": (0, q), "self_attn.k_proj.weight": (0, kv), "self_attn.v_proj.weight": (0, kv),
            "self_attn.o_proj.weight": (1, q), "mlp.gate_proj.weight": (0, cols), "mlp.up_proj.weight": (0, cols),
            "mlp.down_proj.weight": (1, cols)}
    return {n: t.index_select(*pick[n]) if n in pick else t for n, t in w.items()}


@dataclass
class Dense:
    attention: torch.Tensor  # o_proj's output, before the residual
    mlp: torch.Tensor  # down_proj's output, before the residual
    output: torch.Tensor
    into: tuple[torch.Tensor, torch.Tensor]  # o_proj's and down_proj's inputs (every head's, every column's)

    def partials(self, w: dict[str, torch.Tensor], rank: int, ws: int, heads: int, kv_heads: int) -> list:
        """Rank `rank`'s o_proj and down_proj outputs: its heads' and its columns' share of the dense ones."""
        q, _, cols = indices(w, rank, ws, heads, kv_heads)
        return [x[:, i] @ w[name].double()[:, i].T
                for x, i, name in zip(self.into, (q, cols), ("self_attn.o_proj.weight", "mlp.down_proj.weight"))]


def dense_layer(w: dict[str, torch.Tensor], cfg: Qwen3Config, x: torch.Tensor, positions: torch.Tensor) -> Dense:
    """The whole layer in float64 (mini_llm's modules), with its two would-be all-reduce results."""
    layer = DecoderLayer(cfg, 0).double()
    layer.load_state_dict({n: t.double() for n, t in w.items()})
    into = []
    for linear in (layer.self_attn.o_proj, layer.mlp.down_proj):
        linear.register_forward_hook(lambda _, args, __: into.append(args[0]))
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)
    with torch.no_grad():
        x = x.double()
        attention = layer.self_attn(layer.input_layernorm(x), cos.double(), sin.double(),
                                    lambda _, q, k, v: causal_attention(q[None], k[None], v[None])[0])
        h = x + attention
        mlp = layer.mlp(layer.post_attention_layernorm(h))
    return Dense(attention, mlp, h + mlp, tuple(into))


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return tuple(got.shape) == tuple(want.shape) and bool(
        ((got.double() - want).abs() <= ATOL + RTOL * want.abs()).all())


def as_hidden(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A reduced tensor in the dense result's shape, when it holds as many numbers ([1, T, hidden] is fine)."""
    return t.reshape(like.shape) if t.numel() == like.numel() else t


# ----------------------------------------------------------------------------------------------------------
# shard_layer


def learner_shards(impl, w: dict, ws: int, s: Shape) -> list[dict]:
    shards = []
    for rank in range(ws):
        text = describe("shard", w, rank, ws, s.heads, s.kv_heads)
        res = Driver(impl, "tensor_parallel").shard(w, rank, ws, s.heads, s.kv_heads)
        if "raised" in res:
            raise learner_failure(res["_error"], "shard_layer", f"{text}  # {s.text(ws)}")
        if "not a dict" in res:
            raise CaseFailure(f"shard_layer returned {res['not a dict']}; it must return a dict of tensors",
                              input=text, hint="return {name: tensor} with the names of `weights`")
        if res["changed"]:
            raise CaseFailure(f"shard_layer modified its input weights {res['changed']}", input=text,
                              hint="take slices (narrow, indexing) without writing into the weights")
        want = expected_shard(w, rank, ws, s.heads, s.kv_heads)
        shards.append(check_shard(res["shard"], want, f"{text}  # {s.text(ws)}"))
    return shards


HINTS = {
    "self_attn.q_proj.weight": "q_proj: rank r holds the rows of query heads r*H/ws .. (r+1)*H/ws - 1 (dim 0)",
    "self_attn.k_proj.weight": "k_proj: rank r holds the rows of KV heads r*KV/ws .. (r+1)*KV/ws - 1, the KV heads its "
                               "query heads read (query head h reads KV head h // (H/KV)): contiguous blocks, not "
                               "every ws-th head",
    "self_attn.o_proj.weight": "o_proj is split along its input features (dim 1, the columns of rank r's query "
                               "heads), not its output features: its output is summed over the ranks",
    "mlp.gate_proj.weight": "gate_proj and up_proj: rows r*I/ws .. (r+1)*I/ws - 1 (dim 0)",
    "mlp.down_proj.weight": "down_proj is split along its input features (dim 1): columns r*I/ws .. (r+1)*I/ws - 1",
}
HINTS["self_attn.v_proj.weight"] = HINTS["self_attn.k_proj.weight"].replace("k_proj", "v_proj")
HINTS["mlp.up_proj.weight"] = HINTS["mlp.gate_proj.weight"]


NORM_HINT = ("the RMSNorm weights are replicated: every rank holds the whole tensor (q_norm and k_norm act on one "
             "head's head_dim, the others on the hidden size)")


DTYPE_HINT = ("return the output in x's dtype, what the layer after it takes: compute in float64 if you like, then "
              "convert with .to(x.dtype)")


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hint of each weight of a public case's shard, and of the outputs' dtype, recorded with its answer
    (judge/edition.py)."""
    if (driver, fn) == ("tensor_parallel", "forward"):
        return [("['dtypes']", None, DTYPE_HINT)]
    shard = value.get("shard") if (driver, fn) == ("tensor_parallel", "shard") and isinstance(value, dict) else None
    return [(f"['shard'][{name!r}]", None, NORM_HINT if name in NORMS else HINTS[name])
            for name in shard or () if name in NORMS or name in HINTS]


def check_shard(shard: dict, want: dict[str, torch.Tensor], text: str) -> dict[str, torch.Tensor]:
    if set(shard) != set(want):
        raise CaseFailure("shard_layer returned other names than the weights it was given", input=text,
                          field="keys", expected=sorted(want), got=sorted(map(str, shard)))
    for name, w in want.items():
        got = shard[name]
        hint = NORM_HINT if name in NORMS else HINTS[name]
        if not isinstance(got, torch.Tensor):
            raise CaseFailure(f"shard[{name!r}] is a {got}, not a tensor", input=text, hint=hint)
        if tuple(got.shape) != tuple(w.shape):
            raise CaseFailure(f"wrong shape of shard[{name!r}]", input=text, field=f"{name}.shape",
                              expected=list(w.shape), got=list(got.shape), hint=hint)
        if not torch.equal(got.to(w.dtype), w):
            raise CaseFailure(f"shard[{name!r}] holds the wrong slice of {name}", input=text, field=name, hint=hint)
    return shard


# ----------------------------------------------------------------------------------------------------------
# layer_forward


def run_forward(impl, shards: list[dict], w: dict, s: Shape, ws: int, tokens: int = 5, seed: int = 0,
                cfg: Qwen3Config | None = None, whose: str = "the judge's shards") -> None:
    """Every rank's layer_forward on `shards` (the judge's, or the learner's once checked equal to them): the
    all-reduces' sums, each rank's own tensors (a rank that holds only its shard can pass nothing else) and each
    rank's output."""
    cfg = cfg or s.config()
    g = torch.Generator().manual_seed(77 + seed)
    x = torch.randn(tokens, cfg.hidden_size, generator=g)
    positions = torch.arange(tokens) * 3 + seed  # not contiguous: RoPE must take these, not 0, 1, 2, ...
    want = dense_layer(w, cfg, x, positions)
    text = (f"layer_forward(shard[rank], x: random [{tokens}, {cfg.hidden_size}], positions={positions.tolist()}, "
            f"cfg, world_size={ws}, all_reduce) on {whose}  # {s.text(ws)}")
    res = Driver(impl, "tensor_parallel").forward(shards, x, positions, asdict(cfg), ws)
    for key in ("outputs", "returned", "errors", "out_of_step", "sent", "dtypes"):
        whole(res[key], ws, f"ranks' {key}")
    for rank, err in enumerate(res["errors"]):
        if err is not None:
            raise learner_failure(err["_error"], "layer_forward", f"{text}, rank {rank}")
    counts = [len(sent) for sent in res["sent"]]
    if any(res["out_of_step"]) or counts != [2] * ws:
        raise CaseFailure(f"the ranks called all_reduce {counts} times; each must call it exactly twice",
                          input=text, hint="one all-reduce after o_proj and one after down_proj: the only two "
                                           "places where a rank holds a partial sum of the whole result")
    try:
        sums = [sum(sent[i].double() for sent in res["sent"]) for i in range(2)]
    except RuntimeError:
        raise CaseFailure("the ranks passed all_reduce tensors of different shapes", input=text) from None
    for i, (what, dense) in enumerate((("o_proj", want.attention), ("down_proj", want.mlp))):
        got = as_hidden(sums[i], dense)
        if not close(got, dense):
            residual = ws * (x.double() if i == 0 else x.double() + want.attention)
            wrong_residual = got.shape == dense.shape and close(got - residual, dense)
            transposed = sums[i].dim() == 2 and sums[i].shape == dense.T.shape and close(sums[i].T, dense)
            if cfg.rms_norm_eps != QWEN3_EPS:  # RMSNorm's epsilon written in the code
                qwen3 = dense_layer(w, replace(cfg, rms_norm_eps=QWEN3_EPS), x, positions)
                if close(got, qwen3.attention if i == 0 else qwen3.mlp):
                    raise CaseFailure(f"all-reduce {i + 1}: the ranks' tensors sum to {what}'s output with RMSNorm's "
                                      f"epsilon 1e-6, not cfg.rms_norm_eps = {cfg.rms_norm_eps:g}", input=text,
                                      hint="read the epsilon from cfg.rms_norm_eps: other models use others")
            raise CaseFailure(f"all-reduce {i + 1}: the ranks' tensors do not sum to {what}'s output of the dense "
                              "layer", input=text,
                              hint="reduce before adding the residual: every rank holds the residual whole, so "
                                   "summing it counts it world_size times" if wrong_residual else
                                   f"the ranks passed {what}'s output transposed, [hidden, T]: pass it as it is, "
                                   "[T, hidden]" if transposed else
                                   f"all-reduce {i + 1} sums each rank's {what} output (its heads' / columns' "
                                   "share of the dense result); the column-parallel outputs before it (q, k, v, "
                                   "gate, up) are whole per rank and are not summed")
    check_partials(res["sent"], want, w, s, ws, text)
    for rank, out in enumerate(res["outputs"]):
        if out is None:
            raise CaseFailure(f"rank {rank}'s layer_forward returned {res['returned'][rank]}, not a tensor",
                              input=text, hint="return the layer's output [T, hidden]")
        if not close(out, want.output):
            shape_ok = tuple(out.shape) == tuple(want.output.shape)
            err = (out.double() - want.output).abs().max().item() if shape_ok else None
            raise CaseFailure(f"rank {rank}'s output differs from the dense layer"
                              + (f" (largest error {err:.3g}, tolerance {ATOL:g} + {RTOL:g}*|expected|)"
                                 if shape_ok else ""), input=text, field="shape" if not shape_ok else "out[0, :4]",
                              expected=list(want.output.shape) if not shape_ok else
                              [round(v, 5) for v in want.output[0, :4].tolist()],
                              got=list(out.shape) if not shape_ok else [round(v, 5) for v in out[0, :4].tolist()],
                              hint="the all-reduces are right: check what comes after them (the residuals, "
                                   "post_attention_layernorm on the summed hidden states)")
        if out.dtype != x.dtype:
            raise CaseFailure(f"rank {rank}'s output is {out.dtype}, not x's dtype", input=text, field="dtype",
                              expected=str(x.dtype).removeprefix("torch."),
                              got=str(out.dtype).removeprefix("torch."), hint=DTYPE_HINT)


def check_partials(sent: list, want: Dense, w: dict, s: Shape, ws: int, text: str) -> None:
    """Each rank passed all_reduce its own o_proj and down_proj outputs, computed from its heads and columns."""
    for rank in range(ws):
        for i, (what, partial) in enumerate(zip(("o_proj", "down_proj"), want.partials(w, rank, ws, s.heads,
                                                                                      s.kv_heads))):
            got = as_hidden(sent[rank][i], partial)
            if not close(got, partial):
                raise CaseFailure(f"all-reduce {i + 1}: rank {rank} passed a tensor that is not its own {what} "
                                  "output (the ranks' tensors sum right)", input=text,
                                  hint=f"each rank passes all_reduce its {what} output computed from its own shard "
                                       "(its heads, its columns) alone: nothing of another rank's")


GQA = [(Shape(4, 2), 2), (Shape(8, 4, seed=1), 2), (Shape(8, 4, seed=2), 4), (Shape(8, 2, seed=3, eps=0.05), 2),
       (Shape(4, 4, seed=4), 4), (Shape(4, 2, seed=5), 1), (Shape(8, 8, head_dim=4, seed=6, intermediate=64), 4)]


@CASES("shard_layer: 4 query heads, 2 KV heads, 2 ranks", public=True)
def _(impl):
    s = Shape(4, 2)
    learner_shards(impl, random_layer(s), 2, s)


@CASES("layer_forward on the judge's shards: 4 query heads, 2 KV heads, 2 ranks", public=True)
def _(impl):
    s = Shape(4, 2)
    w = random_layer(s)
    run_forward(impl, [expected_shard(w, r, 2, 4, 2) for r in range(2)], w, s, 2)


@CASES("shard_layer: grouped-query shapes on 1, 2 and 4 ranks", public=True)
def _(impl):
    for s, ws in GQA:
        learner_shards(impl, random_layer(s), ws, s)


def check_refused(impl, s: Shape, world_sizes: tuple[int, ...], what: str) -> None:
    """shard_layer must raise ValueError for each of `world_sizes`, which do not divide `what` of shape `s`."""
    w = random_layer(s)
    for ws in world_sizes:
        text = describe("shard", w, 0, ws, s.heads, s.kv_heads) + f"  # {s.text(ws)}"
        res = Driver(impl, "tensor_parallel").shard(w, 0, ws, s.heads, s.kv_heads)
        if res.get("raised") == "ValueError":
            continue
        if "raised" in res:
            if res["raised"] == "NotImplementedError":
                raise learner_failure(res["_error"], "shard_layer", text)
            raise CaseFailure(f"shard_layer raised {res['raised']}, not ValueError", input=text)
        raise CaseFailure(f"shard_layer accepted a world_size that does not divide {what}", input=text,
                          hint="raise ValueError saying what must divide what: world_size divides num_heads, "
                               "num_kv_heads and the intermediate size")


@CASES("shard_layer refuses a world_size that does not divide the heads", public=True)
def _(impl):
    check_refused(impl, Shape(4, 2), (3, 4), "the heads (4 query heads, 2 KV heads)")
    check_refused(impl, Shape(8, 4), (3,), "the heads (8 query heads, 4 KV heads)")  # fewer ranks than KV heads


@CASES("shard_layer refuses a world_size that does not divide the intermediate size")
def _(impl):
    check_refused(impl, Shape(4, 4, intermediate=54), (4,), "the intermediate size (54)")


@CASES("layer_forward on the judge's shards: grouped-query shapes on 1, 2 and 4 ranks, two all-reduces each",
       public=True)
def _(impl):
    for i, (s, ws) in enumerate(GQA):
        w = random_layer(s)
        run_forward(impl, [expected_shard(w, r, ws, s.heads, s.kv_heads) for r in range(ws)], w, s, ws,
                    tokens=1 + 3 * i % 7, seed=i)


@CASES("shard_layer then layer_forward: your shards, grouped-query shapes on 2 and 4 ranks")
def _(impl):
    for s, ws in GQA[1:4]:
        w = random_layer(s)
        run_forward(impl, learner_shards(impl, w, ws, s), w, s, ws, tokens=6, whose="your shards")


@CASES("shard_layer then layer_forward: the model's first layer on 2 ranks", timeout=60)
def _(impl):
    model = load_model()
    cfg = model.cfg
    w = {n: t.float() for n, t in model.model.layers[0].state_dict().items()}
    s = Shape(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size, cfg.intermediate_size)
    if cfg.num_key_value_heads % 2 or cfg.intermediate_size % 2:
        raise CaseFailure("this checkpoint cannot be split over 2 ranks", kind="error")
    run_forward(impl, learner_shards(impl, w, 2, s), w, s, 2, tokens=7, cfg=cfg, whose="your shards")
