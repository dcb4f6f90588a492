/* The device library (the .cuh files under ops/device/ktune/): CUDA headers generated kernels
 * include as "ktune/<family>.cuh", embedded into the binaries at build time (scripts/embed.py)
 * so that NVRTC gets them as in-memory headers and a record's source can be made self-contained.
 * docs/decisions.md, "device library". */
#pragma once

#include "util.h"

#include <stdint.h>

/* The embedded headers, in a fixed order: names as generated code includes them
 * ("ktune/mma.cuh") and their text. The arrays are what nvrtcCreateProgram takes. */
extern const char *const ops_devlib_names[];
extern const char *const ops_devlib_data[];
extern const int ops_devlib_count;

/* The text of the library header `name` ("ktune/mma.cuh"), or NULL. */
const char *ops_devlib_find(const char *name);

/* The SHA-256 of every header's name and text: what a compile of source that includes them
 * depends on besides the source (search/compile.c puts it into its content key). */
void ops_devlib_digest(uint8_t out[32]);

/* Writes to *out (malloc'd) src with every `#include "ktune/..."` line replaced by the header's
 * text, recursively, each header once (its `#pragma once` dropped): source that compiles with
 * no include path, as records store it. Other lines are copied as they are. -ENOENT (detail in
 * err) for a ktune/ header the library does not have; -ENOMEM. */
int ops_devlib_inline(const char *src, char **out, kt_err *err);
