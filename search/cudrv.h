/* The CUDA driver API, loaded at run time (dlopen of libcuda.so.1) so that nothing ktune builds
 * links the driver: the daemon and the CLI run on machines without one, and only the processes
 * that touch a GPU (the worker, the deploy-time runtime, GPU tests) load it.
 *
 * One srch_cuda per process; after srch_cuda_open it owns the primary context of one device.
 * Opening and closing are not thread-safe; the loaded function table is read-only, so any
 * thread may call through it. */
#pragma once

#include "ops/tmap.h"
#include "ops/util.h"

#include <cuda.h>

/* Each driver entry point we use, declared with the type cuda.h gives it. The X-macro keeps
 * the symbol list in one place; names map through cuda.h's versioned #defines (cuMemAlloc is
 * cuMemAlloc_v2, ...), so the looked-up symbol is the one the header describes. */
#define SRCH_CUDA_FUNCS(X)                                                                         \
    X(cuInit)                                                                                      \
    X(cuDriverGetVersion)                                                                          \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetName)                                                                             \
    X(cuDeviceGetAttribute)                                                                        \
    X(cuDeviceTotalMem)                                                                            \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuDevicePrimaryCtxRelease)                                                                   \
    X(cuCtxSetCurrent)                                                                             \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxGetDevice)                                                                              \
    X(cuCtxPushCurrent)                                                                            \
    X(cuCtxPopCurrent)                                                                             \
    X(cuCtxSynchronize)                                                                            \
    X(cuGetErrorName)                                                                              \
    X(cuGetErrorString)                                                                            \
    X(cuMemAlloc)                                                                                  \
    X(cuMemFree)                                                                                   \
    X(cuMemcpyHtoD)                                                                                \
    X(cuMemcpyDtoH)                                                                                \
    X(cuMemsetD8)                                                                                  \
    X(cuMemsetD8Async)                                                                             \
    X(cuModuleLoadData)                                                                            \
    X(cuModuleUnload)                                                                              \
    X(cuModuleGetFunction)                                                                         \
    X(cuFuncSetAttribute)                                                                          \
    X(cuFuncGetAttribute)                                                                          \
    X(cuFuncGetParamInfo)                                                                          \
    X(cuLaunchKernel)                                                                              \
    X(cuTensorMapEncodeTiled)                                                                      \
    X(cuStreamCreate)                                                                              \
    X(cuStreamDestroy)                                                                             \
    X(cuStreamSynchronize)                                                                         \
    X(cuEventCreate)                                                                               \
    X(cuEventDestroy)                                                                              \
    X(cuEventRecord)                                                                               \
    X(cuEventSynchronize)                                                                          \
    X(cuEventElapsedTime)

typedef struct srch_cuda {
    void *lib;
#define SRCH_CUDA_MEMBER(name) __typeof__(name) *p_##name;
    SRCH_CUDA_FUNCS(SRCH_CUDA_MEMBER)
#undef SRCH_CUDA_MEMBER
    CUdevice device;
    CUcontext ctx;
    int driver_version;
} srch_cuda;

/* Loads the driver and makes device `ordinal`'s primary context current. -ENODEV when there is
 * no driver or no device (the caller usually skips GPU work then), other negative errnos on
 * failure; detail in err. */
int srch_cuda_open(srch_cuda *cu, int ordinal, kt_err *err);
/* Only loads the driver: the symbols, cuInit and the driver version; device and ctx stay 0 and
 * no context is touched (the deploy-time runtime works in its callers' contexts). Same errors
 * as srch_cuda_open. */
int srch_cuda_load(srch_cuda *cu, kt_err *err);
/* Releases what srch_cuda_open or srch_cuda_load took; a zeroed cu is a no-op. */
void srch_cuda_close(srch_cuda *cu);

/* The one translation of CUresult into our errors: 0 for CUDA_SUCCESS, otherwise a negative
 * errno with "what: CUDA_ERROR_NAME: description" in err. Sticky errors (illegal address,
 * launch failure, ...) poison the context: the caller's process must not use it again. */
int srch_cuda_check(const srch_cuda *cu, CUresult rc, const char *what, kt_err *err);
/* True for errors after which the context is unusable. */
bool srch_cuda_sticky(CUresult rc);

/* Encodes the tensor map m over device address base into *out (ops_tensor_map_encode_args, then
 * cuTensorMapEncodeTiled): what the worker and the deploy-time runtime pass, by value, for a
 * tensor-map parameter. Host-only: no context or stream needed. 0, or a negative errno with one
 * line in err naming the kernel `entry`, parameter `param` and the rule or driver message. */
int srch_cuda_encode_tmap(const srch_cuda *cu, const ops_tensor_map *m, uint64_t base,
                          CUtensorMap *out, const char *entry, int param, kt_err *err);
