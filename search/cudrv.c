#include "cudrv.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define SRCH_STR(x)  #x
#define SRCH_XSTR(x) SRCH_STR(x)

bool srch_cuda_sticky(CUresult rc)
{
    switch (rc) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
        return true;
    default:
        return false;
    }
}

int srch_cuda_check(const srch_cuda *cu, CUresult rc, const char *what, kt_err *err)
{
    if (rc == CUDA_SUCCESS)
        return 0;
    const char *name = "CUDA_ERROR_UNKNOWN", *desc = "";
    if (cu && cu->p_cuGetErrorName)
        cu->p_cuGetErrorName(rc, &name);
    if (cu && cu->p_cuGetErrorString)
        cu->p_cuGetErrorString(rc, &desc);
    int code;
    switch (rc) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        code = -ENOMEM;
        break;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
        code = -ENODEV;
        break;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_NOT_FOUND:
        code = -EINVAL;
        break;
    case CUDA_ERROR_LAUNCH_TIMEOUT:
        code = -ETIMEDOUT;
        break;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
        code = -E2BIG;
        break;
    default:
        code = srch_cuda_sticky(rc) ? -EFAULT : -EIO;
    }
    kt_log_debug("cuda", "%s: %s: %s", what, name, desc);
    return kt_err_set(err, code, "%s: %s: %s", what, name, desc);
}

int srch_cuda_load(srch_cuda *cu, kt_err *err)
{
    memset(cu, 0, sizeof(*cu));
    cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu->lib)
        return kt_err_set(err, -ENODEV, "no CUDA driver (libcuda.so.1): %s", dlerror());
#define SRCH_CUDA_LOAD(name)                                                                       \
    *(void **)&cu->p_##name = dlsym(cu->lib, SRCH_XSTR(name));                                     \
    if (!cu->p_##name) {                                                                           \
        dlclose(cu->lib);                                                                          \
        cu->lib = NULL;                                                                            \
        return kt_err_set(err, -ENODEV, "CUDA driver lacks %s (driver too old?)",                  \
                          SRCH_XSTR(name));                                                        \
    }
    SRCH_CUDA_FUNCS(SRCH_CUDA_LOAD)
#undef SRCH_CUDA_LOAD
    int rc;
    if ((rc = srch_cuda_check(cu, cu->p_cuInit(0), "cuInit", err)) < 0 ||
        (rc = srch_cuda_check(cu, cu->p_cuDriverGetVersion(&cu->driver_version),
                              "cuDriverGetVersion", err)) < 0) {
        dlclose(cu->lib);
        cu->lib = NULL;
        return rc;
    }
    return 0;
}

int srch_cuda_open(srch_cuda *cu, int ordinal, kt_err *err)
{
    int rc = srch_cuda_load(cu, err), count = 0;
    if (rc < 0)
        return rc;
    if ((rc = srch_cuda_check(cu, cu->p_cuDeviceGetCount(&count), "cuDeviceGetCount", err)) < 0)
        goto fail;
    if (ordinal >= count) {
        rc = kt_err_set(err, -ENODEV, "no GPU %d (the driver sees %d)", ordinal, count);
        goto fail;
    }
    if ((rc = srch_cuda_check(cu, cu->p_cuDeviceGet(&cu->device, ordinal), "cuDeviceGet", err)) <
            0 ||
        (rc = srch_cuda_check(cu, cu->p_cuDevicePrimaryCtxRetain(&cu->ctx, cu->device),
                              "cuDevicePrimaryCtxRetain", err)) < 0)
        goto fail;
    if ((rc = srch_cuda_check(cu, cu->p_cuCtxSetCurrent(cu->ctx), "cuCtxSetCurrent", err)) < 0) {
        cu->p_cuDevicePrimaryCtxRelease(cu->device);
        goto fail;
    }
    return 0;
fail:
    dlclose(cu->lib);
    cu->lib = NULL;
    return rc;
}

void srch_cuda_close(srch_cuda *cu)
{
    if (!cu->lib)
        return;
    if (cu->ctx)
        cu->p_cuDevicePrimaryCtxRelease(cu->device);
    dlclose(cu->lib);
    memset(cu, 0, sizeof(*cu));
}

/* ops/tmap.h spells the driver's enums as integers (ops/ includes no CUDA header). */
_Static_assert(OPS_TMAP_DT_FLOAT16 == CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "tensor map dtype");
_Static_assert(OPS_TMAP_DT_FLOAT32 == CU_TENSOR_MAP_DATA_TYPE_FLOAT32, "tensor map dtype");
_Static_assert(OPS_TMAP_DT_FLOAT64 == CU_TENSOR_MAP_DATA_TYPE_FLOAT64, "tensor map dtype");
_Static_assert(OPS_TMAP_DT_BFLOAT16 == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, "tensor map dtype");
_Static_assert(CU_TENSOR_MAP_SWIZZLE_128B == 3 && CU_TENSOR_MAP_L2_PROMOTION_L2_256B == 3 &&
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA == 1 &&
                   CU_TENSOR_MAP_INTERLEAVE_NONE == 0,
               "tensor map enums");
_Static_assert(sizeof(CUtensorMap) == OPS_TMAP_BYTES && _Alignof(CUtensorMap) >= OPS_TMAP_ALIGN,
               "CUtensorMap size");

int srch_cuda_encode_tmap(const srch_cuda *cu, const ops_tensor_map *m, uint64_t base,
                          CUtensorMap *out, const char *entry, int param, kt_err *err)
{
    ops_tmap_encode e;
    ops_diag d = {0};
    if (ops_tensor_map_encode_args(m, base, &e, &d) < 0)
        return kt_err_set(err, -EINVAL, "kernel %.64s parameter %d: %s", entry, param, d.msg);
    CUresult r = cu->p_cuTensorMapEncodeTiled(
        out, (CUtensorMapDataType)e.data_type, e.rank, (void *)(uintptr_t)e.global_address,
        e.global_dim, e.global_strides, e.box_dim, e.element_strides,
        (CUtensorMapInterleave)e.interleave, (CUtensorMapSwizzle)e.swizzle,
        (CUtensorMapL2promotion)e.l2_promotion, (CUtensorMapFloatOOBfill)e.oob_fill);
    if (r == CUDA_SUCCESS)
        return 0;
    char what[128];
    snprintf(what, sizeof(what), "kernel %.64s parameter %d: cuTensorMapEncodeTiled", entry, param);
    return srch_cuda_check(cu, r, what, err);
}
