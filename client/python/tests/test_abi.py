"""The ctypes structs mirror client/ktune.h exactly: a C program compiled against the header prints
sizeof and every field's offset, which must equal ctypes' layout; the enums too."""

import ctypes
import os
import subprocess

import pytest

from conftest import ROOT

import ktune
from ktune import _lib

ENUMS = ["KTUNE_JOB_QUEUED", "KTUNE_JOB_RUNNING", "KTUNE_JOB_DONE", "KTUNE_JOB_FAILED",
         "KTUNE_JOB_CANCELLED", "KTUNE_MATCH_EXACT", "KTUNE_MATCH_COMPATIBLE",
         "KTUNE_API_VERSION"]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = os.environ.get("CC", "cc")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "ktune.h"',
             'int main(void) {']
    for name, cls in _lib.STRUCTS.items():
        lines.append(f'printf("{name} sizeof %zu\\n", sizeof({name}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{name} {field} %zu\\n", offsetof({name}, {field}));')
    for e in ENUMS:
        lines.append(f'printf("enum {e} %d\\n", (int){e});')
    lines += ["return 0;", "}"]
    d = tmp_path_factory.mktemp("abi")
    src, exe = d / "abi.c", d / "abi"
    src.write_text("\n".join(lines) + "\n")
    try:
        r = subprocess.run([cc, "-std=c17", "-Wall", "-Werror", "-I", os.path.join(ROOT, "client"),
                            str(src), "-o", str(exe)], capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip(f"no C compiler ({cc})")
    assert r.returncode == 0, f"the layout program does not compile:\n{r.stderr}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    layout = {}
    for line in out.splitlines():
        a, b, v = line.split()
        layout[(a, b)] = int(v)
    return layout


@pytest.mark.parametrize("name", sorted(_lib.STRUCTS))
def test_struct_matches_header(c_layout, name):
    cls = _lib.STRUCTS[name]
    assert ctypes.sizeof(cls) == c_layout[(name, "sizeof")], f"sizeof({name})"
    for field, _ in cls._fields_:
        assert getattr(cls, field).offset == c_layout[(name, field)], f"{name}.{field}"


def test_enums_match_header(c_layout):
    assert [c_layout[("enum", e)] for e in ENUMS[:5]] == list(range(5))
    assert ktune.JOB_STATES == ("queued", "running", "done", "failed", "cancelled")
    assert [c_layout[("enum", e)] for e in ENUMS[5:7]] == [0, 1]
    assert c_layout[("enum", "KTUNE_API_VERSION")] == 2


def test_every_struct_of_the_header_is_mirrored():
    with open(os.path.join(ROOT, "client", "ktune.h")) as f:
        header = f.read()
    import re
    declared = set(re.findall(r"typedef struct (ktune_\w+) \{", header))
    assert declared == set(_lib.STRUCTS), "structs declared in ktune.h vs mirrored in _lib.py"
    exported = set(re.findall(r"KTUNE_EXPORT [^;(]*?\b(ktune_\w+)\(", header))
    assert exported == set(_lib._PROTOTYPES), "functions of ktune.h vs prototypes in _lib.py"
