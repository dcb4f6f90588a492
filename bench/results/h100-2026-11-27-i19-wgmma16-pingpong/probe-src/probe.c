/* Scratch probe for the wgmma16 illegal-instruction hunt (not part of the product).
 * probe copy SW L2 BOXROWS            (copy.cubin)
 * probe gemm SW L2 CUBIN ENTRY M N K BM BN STAGES THREADS TILES  (A [M][K], B [K][N], bias, relu) */
#include <cuda.h>
#include <cupti.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CD(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char *s; cuGetErrorString(e_, &s); printf("FAIL %s: %s\n", #x, s); exit(1);} } while (0)

static CUtensorMap mk(CUdeviceptr base, uint64_t inner, uint64_t outer, uint32_t b0, uint32_t b1, int sw, int l2)
{
    CUtensorMap m;
    cuuint64_t dims[2] = {inner, outer}, strides[1] = {inner * 2};
    cuuint32_t box[2] = {b0, b1}, es[2] = {1, 1};
    CD(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, es,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, (CUtensorMapSwizzle)sw,
                              (CUtensorMapL2promotion)l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return m;
}
static float bf(unsigned short h) { unsigned u = (unsigned)h << 16; float f; memcpy(&f, &u, 4); return f; }
static unsigned short tobf(float f) { unsigned u; memcpy(&u, &f, 4); return (unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }

static void CUPTIAPI breq(uint8_t **b, size_t *sz, size_t *mx) { *b = aligned_alloc(8, 1 << 20); *sz = 1 << 20; *mx = 0; }
static void CUPTIAPI bdone(CUcontext c, uint32_t s, uint8_t *b, size_t sz, size_t v) { free(b); }
int main(int argc, char **argv)
{
    if (getenv("PROBE_CUPTI")) {
        cuptiActivityRegisterCallbacks(breq, bdone);
        if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) { printf("cupti enable failed\n"); return 1; }
        printf("cupti on\n");
    }
    const char *mode = argv[1];
    int sw = atoi(argv[2]), l2 = atoi(argv[3]);
    CD(cuInit(0)); CUdevice dev; CD(cuDeviceGet(&dev, 0)); CUcontext ctx;
    CD(cuDevicePrimaryCtxRetain(&ctx, dev)); CD(cuCtxSetCurrent(ctx));
    CUmodule mod; CUfunction f;
    if (!strcmp(mode, "copy")) {
        int b1 = atoi(argv[4]), b0 = 64;
        int R = 256, C = 256;
        unsigned short *h = malloc(R * C * 2), *r = malloc(64 * b1 * 2);
        for (int i = 0; i < R * C; i++) h[i] = (unsigned short)i;
        CUdeviceptr d, o;
        CD(cuMemAlloc(&d, R * C * 2)); CD(cuMemAlloc(&o, 64 * b1 * 2));
        CD(cuMemcpyHtoD(d, h, R * C * 2));
        CUtensorMap m = mk(d, C, R, 64, b1, sw, l2);
        CD(cuModuleLoad(&mod, "dist-device/probe/copy.cubin")); CD(cuModuleGetFunction(&f, mod, "copyk"));
        int smem = 64 * b1 * 2 + 1024;
        CD(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
        void *params[] = {&m, &o, &b0, &b1};
        CD(cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, smem, NULL, params, NULL));
        CD(cuCtxSynchronize());
        CD(cuMemcpyDtoH(r, o, 64 * b1 * 2));
        int bad = 0;
        for (int rr = 0; rr < b1; rr++)
            for (int c = 0; c < 64; c++) {
                int q = c / 8, pos = sw == 3 ? ((q ^ (rr % 8)) * 8 + c % 8) : c;
                if (r[rr * 64 + pos] != (unsigned short)(rr * C + c)) bad++;
            }
        printf("copy sw=%d l2=%d box=64x%d: OK, %d misplaced\n", sw, l2, b1, bad);
        return 0;
    }
    const char *cubin = argv[4], *entry = argv[5];
    int M = atoi(argv[6]), N = atoi(argv[7]), K = atoi(argv[8]), BM = atoi(argv[9]), BN = atoi(argv[10]);
    int STAGES = atoi(argv[11]), THREADS = atoi(argv[12]), TILES = atoi(argv[13]);
    unsigned short *A = malloc((size_t)M * K * 2), *B = malloc((size_t)K * N * 2), *bias = malloc(N * 2), *Y = malloc((size_t)M * N * 2);
    srand(1);
    for (int i = 0; i < M * K; i++) A[i] = tobf(rand() / (float)RAND_MAX - 0.5f);
    for (int i = 0; i < K * N; i++) B[i] = tobf(rand() / (float)RAND_MAX - 0.5f);
    for (int i = 0; i < N; i++) bias[i] = tobf(rand() / (float)RAND_MAX - 0.5f);
    CUdeviceptr dA, dB, db, dY;
    CD(cuMemAlloc(&dA, (size_t)M * K * 2)); CD(cuMemAlloc(&dB, (size_t)K * N * 2));
    CD(cuMemAlloc(&db, N * 2)); CD(cuMemAlloc(&dY, (size_t)M * N * 2));
    CD(cuMemcpyHtoD(dA, A, (size_t)M * K * 2)); CD(cuMemcpyHtoD(dB, B, (size_t)K * N * 2));
    CD(cuMemcpyHtoD(db, bias, N * 2)); CD(cuMemsetD8(dY, 0xff, (size_t)M * N * 2));
    /* PROBE_BT=rows: B stored [N][K] (K-major), box {64, rows}; else [K][N], box {64, 64} */
    const char *bt = getenv("PROBE_BT");
    CUtensorMap ma = mk(dA, K, M, 64, BM, sw, l2),
                mb = bt ? mk(dB, K, N, 64, atoi(bt), sw, l2) : mk(dB, N, K, 64, 64, sw, l2);
    CD(cuModuleLoad(&mod, cubin)); CD(cuModuleGetFunction(&f, mod, entry));
    int smem = STAGES * (BM + BN) * 128 + 1024 + 16 * STAGES;
    CD(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
    void *params4[] = {&ma, &mb, &db, &dY}, *params3[] = {&ma, &mb, &dY};
    int nobias = argc > 14 && !strcmp(argv[14], "nobias");
    void **params = nobias ? params3 : params4;
    CD(cuLaunchKernel(f, TILES, 1, 1, THREADS, 1, 1, smem, NULL, params, NULL));
    CD(cuCtxSynchronize());
    if (getenv("PROBE_NOREF")) { /* timing only: 20 hot launches */
        CUevent e0, e1; CD(cuEventCreate(&e0, 0)); CD(cuEventCreate(&e1, 0));
        CD(cuEventRecord(e0, NULL));
        for (int r = 0; r < 20; r++)
            CD(cuLaunchKernel(f, TILES, 1, 1, THREADS, 1, 1, smem, NULL, params, NULL));
        CD(cuEventRecord(e1, NULL)); CD(cuEventSynchronize(e1));
        float ms; CD(cuEventElapsedTime(&ms, e0, e1));
        printf("gemm %s: %.1f us a launch (hot, 20), %.0f TFLOP/s\n", entry, ms * 1e3 / 20, 2.0 * M * N * K / (ms * 1e-3 / 20) / 1e12);
        return 0;
    }
    CD(cuMemcpyDtoH(Y, dY, (size_t)M * N * 2));
    double num = 0, den = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = nobias ? 0 : bf(bias[n]);
            for (int k = 0; k < K; k++) s += (double)bf(A[(size_t)m * K + k]) * bf(B[(size_t)k * N + n]);
            if (!nobias) s = s > 0 ? s : 0;
            double y = bf(Y[(size_t)m * N + n]);
            num += (y - s) * (y - s); den += s * s;
        }
    printf("gemm %s sw=%d l2=%d: ran, rel err %.3e\n", entry, sw, l2, sqrt(num / den));
    return 0;
}
