/* Shared by the fuzz targets (tests/fuzz/README.md): the libFuzzer entry point every target
 * defines, and FUZZ_CHECK, the only way a target stops: a broken invariant, never bad input. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);        \
            abort();                                                                            \
        }                                                                                       \
    } while (0)
