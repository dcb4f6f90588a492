"""The work of a benchmark case, from its graph and shapes alone (no torch, no GPU): what
bench/harness.py records per case and bench/report.py turns into rates.

    case_work(graph_dict, {"M": 4096, ...}) -> {"flops", "weight_bytes", "tokens", "kind"}

  flops         2 * M * N * K (times the batch) summed over the graph's matmuls: the GEMM count
                that TFLOP/s figures use (cuBLAS's and every GEMM benchmark's), without the
                epilogue's few flops per output; None when the graph has no matmul, or a matmul
                whose operand shapes are not followed here (an operand made by an op other than
                an input, a matmul or a pointwise op)
  weight_bytes  the bytes of the const inputs (the weights a decode step streams from memory)
  tokens        for a graph whose every matmul has a const operand: the largest number of rows
                the other side brings (M times the batch for x @ W); else None
  kind          "decode" when tokens <= DECODE_MAX_TOKENS (issue 19: rated by weight bytes over
                time, against the copy bandwidth), "gemm" when flops is known, else None
"""
import math

DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
DECODE_MAX_TOKENS = 64
# Ops whose output has the broadcast shape of their tensor operands (docs/formats.md, part 1).
POINTWISE = {
    "neg", "abs", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "square", "recip",
    "silu", "mish", "softplus", "gelu", "gelu_tanh", "hardtanh", "leaky_relu", "clamp", "cast",
    "add", "sub", "mul", "div", "pow", "max", "min"}  # max, min: with two operands


def _broadcast(shapes):
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        out.append(max(dims))
    return out


def case_work(graph, shapes):
    def dim(d):
        return d if isinstance(d, int) else int(shapes[d])

    inputs = graph.get("inputs", {})
    known = {name: [dim(d) for d in spec["shape"]] for name, spec in inputs.items()}
    const = {name for name, spec in inputs.items() if spec.get("const")}
    weight_bytes = sum(math.prod(known[n]) * DTYPE_BYTES.get(inputs[n]["dtype"], 0)
                       for n in const)
    flops, matmuls, tokens = 0, 0, []
    followed = True
    for node in graph.get("nodes", []):  # graphs list their nodes in order (docs/formats.md)
        op, ins = node.get("op"), node.get("in", [])
        shp = [known.get(i) if isinstance(i, str) else [] for i in ins]
        if op == "matmul":
            matmuls += 1
            a, b = shp[0], shp[1]
            if a is None or b is None:
                followed = False
                continue
            ta, tb = node.get("transpose_a", False), node.get("transpose_b", False)
            m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
            n = b[-2] if tb else b[-1]
            batch = _broadcast([a[:-2], b[:-2]]) if len(a) > 2 or len(b) > 2 else []
            rows = math.prod(batch) if batch else 1
            flops += 2 * rows * m * n * k
            known[node["out"]] = batch + [m, n]
            if ins[1] in const:
                tokens.append(rows * m)
            elif ins[0] in const:
                tokens.append(rows * n)
            else:
                tokens.append(None)
        elif op in POINTWISE and not (op in ("max", "min") and len(ins) == 1) and \
                all(s is not None for s in shp):
            known[node["out"]] = _broadcast([s for s in shp if s is not None] or [[]])
    if not matmuls or not followed:
        flops = None
    tok = max(tokens) if tokens and None not in tokens else None
    kind = None
    if flops is not None:
        kind = "decode" if tok is not None and tok <= DECODE_MAX_TOKENS else "gemm"
    return {"flops": flops, "weight_bytes": weight_bytes, "tokens": tok, "kind": kind}
