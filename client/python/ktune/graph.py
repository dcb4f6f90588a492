"""Op graphs (ktune_graph_*) and bound shapes."""

import ctypes
import json
import os
from dataclasses import dataclass

from . import _lib
from ._lib import lib


@dataclass(frozen=True)
class TensorDesc:
    """A graph input or output with its dimensions bound: what a launch takes there (dense,
    row-major). A dimension that the shapes leave unbound is None."""
    name: str
    dtype: str  # "f32", "f16", "bf16"
    shape: tuple
    is_const: bool = False


def shapes_items(shapes):
    """{"M": 1024}, "M=1024,N=512" or (name, value) pairs -> a tuple of (str, int) pairs."""
    if isinstance(shapes, tuple) and all(type(i) is tuple and len(i) == 2 and type(i[0]) is str
                                         and type(i[1]) is int for i in shapes):
        return shapes  # already normalised
    if shapes is None:
        items = []
    elif isinstance(shapes, str):
        items = []
        for part in filter(None, (p.strip() for p in shapes.replace(";", ",").split(","))):
            name, sep, value = part.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"shapes: '{part}' is not NAME=VALUE")
            try:
                items.append((name.strip(), int(value)))
            except ValueError:
                raise ValueError(f"shapes: '{part}': the value must be an integer") from None
    elif isinstance(shapes, dict):
        items = list(shapes.items())
    else:
        items = list(shapes)
    out = []
    for i, item in enumerate(items):
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError(f"shapes: item {i} ({item!r}) is not a (name, value) pair") from None
        if not isinstance(name, str) or not name:
            raise TypeError(f"shapes: item {i}: the name must be a non-empty str, not {name!r}")
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"shapes: '{name}' must be an integer, not {type(value).__name__}")
        out.append((name, int(value)))
    return tuple(out)


def shapes_array(shapes):
    """shapes (anything shapes_items takes) -> (ktune_shape array, count)."""
    items = shapes_items(shapes)
    arr = (_lib.ktune_shape * max(len(items), 1))()
    for i, (name, value) in enumerate(items):
        arr[i].name = name.encode()
        arr[i].value = value
    return arr, len(items)


class Graph:
    """An op graph (docs/formats.md), validated, with its canonical signature. inputs and
    outputs: the names in declared order (the file's "inputs" and "outputs").

    Graph(path) loads a JSON file; Graph(text) parses JSON text (a str starting with "{", or
    bytes); Graph(dict) takes the document as a Python object. Invalid graphs raise KtuneError
    (errno EINVAL) with the library's message naming the node and the rule."""

    def __init__(self, source):
        err = _lib.ktune_error()
        handle = ctypes.c_void_p()
        if isinstance(source, dict):
            source = json.dumps(source)
        if isinstance(source, str) and source.lstrip().startswith("{"):
            source = source.encode()
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            self._text = data  # the declared form, for reference()
            rc = lib.ktune_graph_parse(data, len(data), ctypes.byref(handle), ctypes.byref(err))
            self.path = None
        elif isinstance(source, (str, os.PathLike)):
            self.path = os.fspath(source)
            rc = lib.ktune_graph_load(os.fsencode(self.path), ctypes.byref(handle),
                                      ctypes.byref(err))
        else:
            raise TypeError(f"Graph: expected a path, JSON text or a dict, not "
                            f"{type(source).__name__}")
        _lib.check(rc, err, "ktune_graph_load")
        self._handle = handle
        self._described = {}  # shapes_items -> (inputs, outputs)
        h = handle.value
        self.name = _lib.text(lib.ktune_graph_name(h))
        self.signature = _lib.text(lib.ktune_graph_signature(h))
        self.inputs = tuple(_lib.text(lib.ktune_graph_input_name(h, i))
                            for i in range(lib.ktune_graph_n_inputs(h)))
        self.outputs = tuple(_lib.text(lib.ktune_graph_output_name(h, i))
                             for i in range(lib.ktune_graph_n_outputs(h)))

    @property
    def handle(self):
        """The ktune_graph pointer (an int), valid while this object lives."""
        return self._handle.value

    def describe(self, shapes=None):
        """(inputs, outputs): lists of TensorDesc in declared order (the order a Kernel takes
        its tensors in) with shapes bound. Unknown symbols raise KtuneError (EINVAL)."""
        key = shapes_items(shapes)
        hit = self._described.get(key)
        if hit is None:
            hit = self._describe(key)
            if len(self._described) < 64:  # a graph is used with a few shapes
                self._described[key] = hit
        return list(hit[0]), list(hit[1])

    def _describe(self, shapes):
        arr, n = shapes_array(shapes)
        ins = (_lib.ktune_tensor_desc * max(len(self.inputs), 1))()
        outs = (_lib.ktune_tensor_desc * max(len(self.outputs), 1))()
        err = _lib.ktune_error()
        rc = lib.ktune_graph_describe(self.handle, arr, n, ins, outs, ctypes.byref(err))
        _lib.check(rc, err, "ktune_graph_describe")

        def conv(d):
            dims = tuple(None if v < 0 else int(v) for v in d.shape[:d.rank])
            return TensorDesc(_lib.text(d.name), _lib.text(d.dtype), dims, bool(d.is_const))
        return (tuple(conv(ins[i]) for i in range(len(self.inputs))),
                tuple(conv(outs[i]) for i in range(len(self.outputs))))

    def reference(self, *tensors, shapes=None, **named):
        """The fp64 CPU reference that verification compares kernels with (ktune_graph_reference):
        tensors by declared order or by name (a captured graph fills in the parameters it
        remembers), converted to dense float64; symbolic dimensions are bound from their sizes
        (shapes= may name them too). Returns the output (a tuple for several) as float64 torch
        tensors, or numpy arrays without torch. See ktune/reference.py."""
        from .reference import reference
        return reference(self, tensors, named, shapes)

    def __del__(self, _free=lib.ktune_graph_free):
        h = getattr(self, "_handle", None)
        if h is not None and h.value:
            _free(h)
            self._handle = None

    def __repr__(self):
        return (f"<ktune.Graph {self.name!r} {self.signature[:12]} inputs={list(self.inputs)} "
                f"outputs={list(self.outputs)}>")
