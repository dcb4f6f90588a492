"""Graph.reference: the fp64 CPU reference (ktune_graph_reference) from Python.

Tensors are matched to the graph's inputs by declared order or by name; a captured graph
(ktune.capture) fills in the module's parameters and buffers it remembers. Inputs are converted
to dense float64 on the CPU, symbolic dimensions are bound from their sizes, and the outputs come
back as float64 torch tensors (numpy arrays where torch is not installed)."""

import ctypes
import json

from . import _lib
from ._lib import lib
from .graph import shapes_array, shapes_items


def declared(graph):
    """(inputs, outputs) as the graph's document declares them: [(name, shape list)] with symbols
    as str, and the output names, in declared order."""
    doc = getattr(graph, "_doc", None)
    if doc is None:
        text = getattr(graph, "_text", None)
        if text is None:
            with open(graph.path, "rb") as f:
                text = f.read()
        doc = graph._doc = json.loads(text)  # libktune parsed it already: valid JSON
    ins = [(name, list(spec.get("shape", []))) for name, spec in doc["inputs"].items()]
    return ins, list(doc["outputs"])


def _as_f64(name, t):
    """t (torch tensor, numpy array, nested list or number) -> a dense float64 CPU buffer object
    with .shape, and a pointer to its data."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        if not isinstance(t, torch.Tensor):
            try:
                t = torch.as_tensor(t)
            except (TypeError, ValueError, RuntimeError) as e:
                raise TypeError(f"Graph.reference: input '{name}': not a tensor ({e})") from None
        if t.is_complex():
            raise TypeError(f"Graph.reference: input '{name}' is complex")
        t = t.detach().to(device="cpu", dtype=torch.float64).contiguous()
        return t, tuple(t.shape), t.data_ptr()
    import numpy as np
    a = np.ascontiguousarray(np.asarray(t, dtype=np.float64))
    return a, tuple(a.shape), a.ctypes.data


def _empty(shape, use_torch):
    if use_torch:
        import torch
        t = torch.empty(shape, dtype=torch.float64)
        return t, t.data_ptr()
    import numpy as np
    a = np.empty(shape, dtype=np.float64)
    return a, a.ctypes.data


def _have_torch():
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def reference(graph, tensors, named, shapes=None):
    ins, out_names = declared(graph)
    in_names = [n for n, _ in ins]
    user = list(getattr(graph, "user_inputs", None) or in_names)
    params = getattr(graph, "params", None) or {}
    # Positional tensors fill the user's inputs first, then the other inputs in declared order.
    order = user + [n for n in in_names if n not in user]
    if len(tensors) > len(order):
        raise TypeError(f"Graph.reference: takes at most {len(order)} tensors "
                        f"({', '.join(order)}), got {len(tensors)}")
    given = dict(zip(order, tensors))
    for k, v in named.items():
        if k not in in_names:
            raise TypeError(f"Graph.reference: unexpected keyword '{k}' (the graph's inputs: "
                            f"{', '.join(in_names)})")
        if k in given:
            raise TypeError(f"Graph.reference: input '{k}' given twice (by position and by "
                            f"keyword)")
        given[k] = v
    missing = [n for n in in_names if n not in given and n not in params]
    if missing:
        raise TypeError(f"Graph.reference: missing input{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(repr(m) for m in missing)}")

    # Bind symbols from the inputs' sizes; explicit shapes must agree with them.
    bound = dict(shapes_items(shapes))
    explicit = dict(bound)
    bufs = []
    for name, decl in ins:
        buf, shape, ptr = _as_f64(name, given[name] if name in given else params[name])
        if len(shape) != len(decl):
            raise ValueError(f"Graph.reference: input '{name}' has shape {list(shape)}; the "
                             f"graph declares {decl} (rank {len(decl)})")
        for axis, (d, n) in enumerate(zip(decl, shape)):
            if isinstance(d, str):
                if bound.setdefault(d, n) != n:
                    src = "shapes" if d in explicit else "an earlier input"
                    raise ValueError(f"Graph.reference: input '{name}' axis {axis} is {n}, but "
                                     f"{d} = {bound[d]} from {src}")
            elif d != n:
                raise ValueError(f"Graph.reference: input '{name}' axis {axis} is {n}; the "
                                 f"graph declares {d}")
        bufs.append((buf, ptr))

    items = tuple(sorted(bound.items()))
    ins_desc, outs = graph.describe(items)
    # libktune reads each input at its own bound shape: hold the buffers to it (the document read
    # above could differ from the graph loaded, e.g. a file changed since)
    in_shape = {d.name: d.shape for d in ins_desc}
    for (name, _), (buf, _) in zip(ins, bufs):
        if in_shape.get(name) != tuple(buf.shape):
            raise ValueError(f"Graph.reference: input '{name}' has shape {list(buf.shape)}; the "
                             f"graph takes {list(in_shape.get(name) or ())} there")
    out_shape = {d.name: d.shape for d in outs}
    use_torch = _have_torch()
    results = [_empty(out_shape[n], use_torch) for n in out_names]

    arr, n = shapes_array(items)
    in_ptrs = (ctypes.c_void_p * max(len(bufs), 1))(*[p for _, p in bufs])
    out_ptrs = (ctypes.c_void_p * max(len(results), 1))(*[p for _, p in results])
    err = _lib.ktune_error()
    rc = lib.ktune_graph_reference(graph.handle, arr, n, in_ptrs, out_ptrs, ctypes.byref(err))
    _lib.check(rc, err, "ktune_graph_reference")
    vals = tuple(r for r, _ in results)
    return vals[0] if len(vals) == 1 else vals
