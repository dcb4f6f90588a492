#!/usr/bin/env python3
"""scripts/embed.py: the generated C, compiled with the C compiler given, holds each file's exact
bytes (binary-looking ones too), NUL-terminated, with its length, its #include name (--prefix +
base name) and its index macro, in the order given; a file holding a NUL byte, two files of one
base name and a symbol that is no C identifier are refused. No GPU.

    test_embed.py CC... (the C compiler's command)"""
import os
import subprocess
import sys
import tempfile

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
embed = os.path.join(root, "scripts", "embed.py")
cc = sys.argv[1:] or ["cc"]


def run_embed(args):
    return subprocess.run([sys.executable, embed] + args, capture_output=True, text=True)


def main():
    files = {
        "cp_async.cuh": b"#pragma once\n/* \"quotes\", \\backslashes\\ */\n__device__ int f();\n",
        "warp-reduce.cuh": bytes(range(1, 256)) * 3,  # every byte but NUL
        "empty.cuh": b"",
    }
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, data in files.items():
            p = os.path.join(tmp, name)
            with open(p, "wb") as f:
                f.write(data)
            paths.append(p)
        out_c, out_h = os.path.join(tmp, "lib.c"), os.path.join(tmp, "lib.h")
        r = run_embed(["--prefix", "kt/", out_c, out_h, "kt_lib"] + paths)
        assert r.returncode == 0, r.stderr
        main_c = os.path.join(tmp, "main.c")
        with open(main_c, "w") as f:
            f.write(
                '#include "lib.h"\n#include <stdio.h>\n#include <string.h>\n'
                "int main(void)\n{\n"
                "    printf(\"%d %d %d %d\\n\", KT_LIB_COUNT, KT_LIB_CP_ASYNC_CUH,\n"
                "           KT_LIB_WARP_REDUCE_CUH, KT_LIB_EMPTY_CUH);\n"
                "    for (int i = 0; i < KT_LIB_COUNT; i++) {\n"
                "        printf(\"%s %zu %zu\\n\", kt_lib_names[i], kt_lib_lens[i],\n"
                "               strlen(kt_lib_data[i]));\n"
                "        fwrite(kt_lib_data[i], 1, kt_lib_lens[i] + 1, stderr);\n"
                "    }\n"
                "    return 0;\n}\n")
        exe = os.path.join(tmp, "main")
        subprocess.run(cc + ["-std=c17", "-Wall", "-Werror", "-o", exe, main_c, out_c], check=True)
        r = subprocess.run([exe], capture_output=True, check=True)
        lines = r.stdout.decode().splitlines()
        assert lines[0] == "3 0 1 2", lines[0]
        want_err = b""
        for i, (name, data) in enumerate(files.items()):
            assert lines[1 + i] == f"kt/{name} {len(data)} {len(data)}", lines[1 + i]
            want_err += data + b"\0"
        assert r.stderr == want_err, "the embedded bytes differ from the files"
        # refusals
        nul = os.path.join(tmp, "nul.cu")
        with open(nul, "wb") as f:
            f.write(b"a\0b")
        r = run_embed([out_c, out_h, "x", nul])
        assert r.returncode != 0 and "NUL" in r.stderr, r.stderr
        os.mkdir(os.path.join(tmp, "d"))
        again = os.path.join(tmp, "d", "empty.cuh")
        open(again, "wb").close()
        r = run_embed([out_c, out_h, "x", paths[2], again])
        assert r.returncode != 0 and "two files" in r.stderr, r.stderr
        r = run_embed([out_c, out_h, "not-an-identifier", paths[0]])
        assert r.returncode != 0 and "C identifier" in r.stderr, r.stderr
    print("embed: ok")


if __name__ == "__main__":
    main()
