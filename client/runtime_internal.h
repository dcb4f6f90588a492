/* Private to libktune and its tests, benchmark and CLI: the deploy-time runtime's entry points
 * below ktune_lookup. They resolve a key to a cached record exactly as ktune_lookup does (the
 * exact fingerprint first, then a compatible GPU's record), optionally for a fingerprint given
 * by the caller instead of one read off a GPU, and without loading anything: so the lookup
 * logic runs, and is tested and measured, on machines without a GPU.
 *
 * Linked statically (libktune_dep); none of this is exported from libktune.so. */
#pragma once

#include "cache/cache.h"
#include "ktune.h"
#include "ops/family.h"

/* ktune_rt_resolve flags */
enum {
    KTUNE_RT_NO_MEMO = 1u << 0, /* read the cache every time; the caller frees the result with
                                   ktune_rt_kernel_free. Without it the result is memoised in rt
                                   (key: no context, encoded key) and owned by rt. */
};

/* Resolves (g, shapes, precision, tolerance) for the GPU fingerprint fp (NULL: the fingerprint
 * of CUDA device `device`, which loads the driver; -1 means device 0 here) without loading a
 * module: the returned kernel has its record, match and info, but ktune_launch refuses it
 * (-ENODEV). precision NULL: "exact"; tolerance 0: the default. Errors as ktune_lookup's.
 * Thread-safe. */
int ktune_rt_resolve(ktune_runtime *rt, const ktune_graph *g, const ktune_shape *shapes,
                     int n_shapes, const char *precision, double tolerance, const cache_gpu *fp,
                     int device, unsigned flags, ktune_kernel **out, ktune_match *match,
                     ktune_error *err);
/* Frees a kernel resolved with KTUNE_RT_NO_MEMO; NULL is a no-op. Never for memoised ones. */
void ktune_rt_kernel_free(ktune_kernel *k);
/* The record behind a kernel; valid while the kernel is. */
const cache_record *ktune_rt_kernel_record(const ktune_kernel *k);

/* The fingerprint of CUDA device `device` (-1: device 0) as ktune-worker computes it, so keys
 * written by a tuner on this GPU match: name, compute capability, SM count, total memory, the
 * driver's version, and cuda_version = the version libnvrtc.so.13 reports (what the worker's
 * NVRTC says), else the toolkit libktune was built with. -ENODEV without a driver or device. */
int ktune_rt_fingerprint(ktune_runtime *rt, int device, cache_gpu *out, ktune_error *err);

/* The cache the runtime reads; valid until ktune_runtime_close. */
cache_env *ktune_rt_cache(ktune_runtime *rt);

/* True when a record tuned on `tuned` may serve `here` as KTUNE_MATCH_COMPATIBLE: same name,
 * compute capability, SM count and memory (driver and toolkit may differ). */
bool ktune_rt_gpu_compatible(const cache_gpu *here, const cache_gpu *tuned);

/* True when the record's key is want's (signature, problem, precision, tolerance) — whatever its
 * GPU. For listing every GPU's record of one bound problem. */
bool ktune_rt_key_matches(const cache_key *rec_key, const cache_key *want);
/* Fills in what a key needs from the bound graph: its problem digest, and the tolerance
 * normalised (the default asked by its value counts as the default). 0 or -EINVAL. */
int ktune_rt_complete_key(cache_key *k, const ops_graph *bound, ktune_error *err);

/* Parses a schedule as ops_schedule_format prints it ("library heuristic=3"). 0 or -EINVAL
 * with the reason in err. */
int ktune_rt_schedule_parse(const char *text, ops_schedule *out, kt_err *err);

/* ---- checks of what a record asks the driver to trust (no GPU needed) ---- */

/* Whether bytes [off, off + len) lie inside [0, size), without overflow. */
bool ktune_rt_range_fits(uint64_t off, uint64_t len, uint64_t size);

/* Checks a cubin before cuModuleLoadData, which takes no length: an ELF64 little-endian image
 * for EM_CUDA whose header, section and program header tables and every section's and
 * segment's file bytes lie inside the len bytes stored. 0 or -EBADMSG with the first fault in
 * why. */
int ktune_rt_check_cubin(const uint8_t *img, size_t len, kt_err *why);

/* Checks a launch of the record against its kernel's parameters as the driver reports them
 * (cuFuncGetParamInfo): n_params parameters of sizes[i] bytes. Pointer arguments are 8 bytes,
 * scalars their C type's size. 0 or -EBADMSG naming the kernel and the parameter. */
int ktune_rt_check_params(const cache_kernel *k, const size_t *sizes, int n_params, kt_err *why);

/* ---- the caller's order and the record's ---- */

/* A caller passes inputs and outputs in the graph's declared order (inputs: the tensors without a
 * producer, in tensor order; outputs as listed); a record's arguments name them by canonical rank
 * (docs/formats.md, "The problem digest"), which depends on the bound sizes. From the caller's
 * bound graph: in_of_rank[r] is the declared index of the input of rank r, out_of_rank[r] that
 * of the output of rank r (arrays of as many entries as the graph has inputs, outputs). 0,
 * -EINVAL (no permutation: a tensor listed twice) or -ENOMEM. Computed once per kernel, at
 * lookup. */
int ktune_rt_io_map(const ops_graph *bound, int *in_of_rank, int *out_of_rank, kt_err *why);

/* One kernel argument as cuLaunchKernel reads it (a pointer to each). */
typedef union ktune_rt_param {
    uint64_t ptr;
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
} ktune_rt_param;
/* The arguments of launch `launch` of k (val[rec.kernels[launch].n_args]) for buffers in declared
 * order, mapped through k's ranks: exactly what ktune_launch passes. No check, no GPU: the
 * caller checked the pointers (ktune_launch does). */
void ktune_rt_launch_params(const ktune_kernel *k, int launch, void *const *inputs,
                            void *const *outputs, void *workspace, ktune_rt_param *val);

/* Refuses a launch whose written buffers alias: an output overlapping any input or another
 * output, or the workspace (ws_bytes at ws, 0: none) overlapping any input or output. Kernels
 * declare their pointers __restrict__ and some re-read an input after writing an output, so no
 * overlap is safe, not even an identical pointer (in place); inputs may overlap each other (they
 * are only read). in[i] holds in_bytes[i] bytes, out[j] out_bytes[j]. 0 or -EINVAL naming both
 * slots (by index, and by name when names, n_in + n_out of them, inputs first, is given). */
int ktune_rt_check_aliasing(void *const *in, const uint64_t *in_bytes, int n_in, void *const *out,
                            const uint64_t *out_bytes, int n_out, const void *ws, uint64_t ws_bytes,
                            const char *const *names, kt_err *why);
