/* scratch: how many 2-block clusters of the mcast kernel can be resident at once */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#define CD(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char *s; cuGetErrorString(e_, &s); printf("FAIL %s: %s\n", #x, s); exit(1);} } while (0)
int main(int argc, char **argv)
{
    CD(cuInit(0)); CUdevice dev; CD(cuDeviceGet(&dev, 0)); CUcontext ctx;
    CD(cuDevicePrimaryCtxRetain(&ctx, dev)); CD(cuCtxSetCurrent(ctx));
    CUmodule mod; CUfunction f;
    CD(cuModuleLoad(&mod, argv[1])); CD(cuModuleGetFunction(&f, mod, argv[2]));
    int smem = atoi(argv[3]), threads = atoi(argv[4]);
    CD(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
    int blocks = 0;
    CD(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, threads, smem));
    CUlaunchConfig cfg = {0};
    CUlaunchAttribute at[1];
    at[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    at[0].value.clusterDim.x = 2; at[0].value.clusterDim.y = 1; at[0].value.clusterDim.z = 1;
    cfg.gridDimX = 132; cfg.gridDimY = cfg.gridDimZ = 1; cfg.blockDimX = threads; cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem; cfg.attrs = at; cfg.numAttrs = argc > 5 ? 1 : 0;
    int clusters = 0;
    CUresult r = cuOccupancyMaxActiveClusters(&clusters, f, &cfg);
    printf("%s smem %d threads %d: blocks/SM %d, max active clusters %d (rc %d)\n", argv[2], smem, threads, blocks, clusters, (int)r);
    return 0;
}
