/* examples/deploy: using a tuned kernel from a C program at deploy time, with no daemon.
 *
 *   deploy [--cache DIR] [--graph FILE.json] [--shape M=1024[,N=..]] [--precision P] [--reps N]
 *          [--io DIR]
 *
 * Opens the kernel cache read-only, loads the graph, looks the kernel up for these shapes on the
 * current GPU, fills the inputs with random values, launches it, copies the output back and
 * (for examples/gemm_bias_relu.json, the default) compares it with Y = relu(A W + bias)
 * computed on the CPU. Prints the match type, the kernel's time and the largest error.
 * With --io DIR the inputs come from DIR/in<i>.bin and the outputs go to DIR/out<i>.bin (raw
 * elements of the graph's dtypes, row-major, i in the graph's declared order, the order
 * ktune_graph_describe lists and ktune_launch takes them in): bench/deploy_check.py --deploy
 * writes PyTorch's inputs there and compares the outputs with PyTorch.
 * The program's own buffers come from the CUDA runtime (libcudart); libktune needs none: it loads
 * the driver itself and launches into the context the CUDA runtime made current. */
#include "ktune.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IO 16

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "deploy: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

/* ---- f16 / bf16 <-> float (round to nearest even) ---- */

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    if (abs >= 0x477ff000u) /* rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* subnormal half */
        float a;
        memcpy(&a, &abs, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f)); /* a / 2^-24 */
    }
    uint32_t mant = abs + 0xfffu + ((abs >> 13) & 1u); /* round to nearest even */
    return (uint16_t)(sign | ((mant - 0x38000000u) >> 13));
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    }
    uint32_t x = exp == 31 ? sign | 0x7f800000u | (mant << 13)
                           : sign | ((exp + 112) << 23) | (mant << 13);
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static size_t dtype_size(const char *dt)
{
    return strcmp(dt, "f32") == 0 ? 4 : 2;
}

/* Stores v as dtype dt at element i of buf; returns the value as stored (rounded). */
static float store(void *buf, const char *dt, size_t i, float v)
{
    if (strcmp(dt, "f32") == 0) {
        ((float *)buf)[i] = v;
        return v;
    }
    uint16_t h = strcmp(dt, "f16") == 0 ? f32_to_f16(v) : f32_to_bf16(v);
    ((uint16_t *)buf)[i] = h;
    return strcmp(dt, "f16") == 0 ? f16_to_f32(h) : bf16_to_f32(h);
}

static float load(const void *buf, const char *dt, size_t i)
{
    if (strcmp(dt, "f32") == 0)
        return ((const float *)buf)[i];
    uint16_t h = ((const uint16_t *)buf)[i];
    return strcmp(dt, "f16") == 0 ? f16_to_f32(h) : bf16_to_f32(h);
}

static size_t numel(const ktune_tensor_desc *d)
{
    size_t n = 1;
    for (int i = 0; i < d->rank; i++)
        n *= (size_t)d->shape[i];
    return n;
}

/* Reads (write false) or writes DIR/<what><i>.bin of exactly bytes bytes. */
static bool io_file(const char *dir, const char *what, int i, void *buf, size_t bytes, bool write)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s%d.bin", dir, what, i);
    FILE *f = fopen(path, write ? "wb" : "rb");
    size_t done = f ? (write ? fwrite(buf, 1, bytes, f) : fread(buf, 1, bytes, f)) : 0;
    bool ok = f && done == bytes && (write ? fclose(f) == 0 : (fclose(f), true));
    if (!ok)
        fprintf(stderr, "deploy: %s: cannot %s %zu bytes\n", path, write ? "write" : "read",
                bytes);
    return ok;
}

static int find(const ktune_tensor_desc *d, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(d[i].name, name) == 0)
            return i;
    return -1;
}

int main(int argc, char **argv)
{
    const char *cache = NULL, *graph = "examples/gemm_bias_relu.json", *precision = NULL;
    const char *io_dir = NULL;
    char shape_arg[256] = "M=1024";
    int reps = 100;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: deploy [--cache DIR] [--graph FILE.json] [--shape M=1024] "
                            "[--precision P] [--reps N] [--io DIR]\n");
            return 2;
        }
        if (strcmp(argv[i], "--cache") == 0)
            cache = v;
        else if (strcmp(argv[i], "--graph") == 0)
            graph = v;
        else if (strcmp(argv[i], "--shape") == 0)
            snprintf(shape_arg, sizeof(shape_arg), "%s", v);
        else if (strcmp(argv[i], "--precision") == 0)
            precision = v;
        else if (strcmp(argv[i], "--io") == 0)
            io_dir = v;
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(v) > 0 ? atoi(v) : 1;
        else {
            fprintf(stderr, "deploy: unknown option %s\n", argv[i]);
            return 2;
        }
        i++;
    }
    ktune_shape shapes[8];
    int n_shapes = 0;
    for (char *save = NULL, *tok = strtok_r(shape_arg, ",", &save); tok && n_shapes < 8;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            fprintf(stderr, "deploy: --shape takes NAME=VALUE, not '%s'\n", tok);
            return 2;
        }
        *eq = '\0';
        shapes[n_shapes++] = (ktune_shape){tok, strtoll(eq + 1, NULL, 10)};
    }

    int status = 1;
    ktune_error err;
    ktune_runtime *rt = NULL;
    ktune_graph *g = NULL;
    void *dev_in[MAX_IO] = {0}, *dev_out[MAX_IO] = {0}, *host_in[MAX_IO] = {0};
    void *host_out = NULL, *ws = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (ktune_runtime_open(cache, &rt, &err) < 0 || ktune_graph_load(graph, &g, &err) < 0) {
        fprintf(stderr, "deploy: %s\n", err.msg);
        goto out;
    }
    int n_in = ktune_graph_n_inputs(g), n_out = ktune_graph_n_outputs(g);
    ktune_tensor_desc in[MAX_IO], outd[MAX_IO];
    if (n_in > MAX_IO || n_out > MAX_IO) {
        fprintf(stderr, "deploy: at most %d inputs and outputs\n", MAX_IO);
        goto out;
    }
    if (ktune_graph_describe(g, shapes, n_shapes, in, outd, &err) < 0) {
        fprintf(stderr, "deploy: %s\n", err.msg);
        goto out;
    }
    /* The CUDA runtime makes device 0's primary context current: ktune_lookup loads there. */
    if (!cuda_ok(cudaSetDevice(0), "cudaSetDevice") || !cuda_ok(cudaFree(0), "cudaFree(0)"))
        goto out;

    ktune_kernel *k = NULL;
    ktune_match match;
    if (ktune_lookup(rt, g, shapes, n_shapes, precision, -1, &k, &match, &err) < 0) {
        fprintf(stderr, "deploy: %s\n", err.msg);
        goto out;
    }
    ktune_kernel_info info;
    ktune_kernel_get_info(k, &info);
    printf("kernel: %s, %s (%d launch%s), tuned on %s, driver %d, CUDA %d\n", info.family,
           info.schedule, info.n_launches, info.n_launches == 1 ? "" : "es", info.gpu,
           info.driver_version, info.cuda_version);
    printf("match:  %s\n", match == KTUNE_MATCH_EXACT
                               ? "exact"
                               : "compatible (same GPU model, other driver or toolkit)");

    srand(12345);
    for (int i = 0; i < n_in; i++) {
        size_t n = numel(&in[i]), bytes = n * dtype_size(in[i].dtype);
        if (!(host_in[i] = malloc(bytes)))
            goto out;
        if (io_dir) {
            if (!io_file(io_dir, "in", i, host_in[i], bytes, false))
                goto out;
        } else {
            for (size_t j = 0; j < n; j++)
                store(host_in[i], in[i].dtype, j, (float)rand() / (float)RAND_MAX * 2.0f - 1.0f);
        }
        if (ktune_prepack_size(k, i) != 0) {
            fprintf(stderr, "deploy: input %s wants packing; this example does not pack\n",
                    in[i].name);
            goto out;
        }
        if (!cuda_ok(cudaMalloc(&dev_in[i], bytes), "cudaMalloc") ||
            !cuda_ok(cudaMemcpy(dev_in[i], host_in[i], bytes, cudaMemcpyHostToDevice),
                     "cudaMemcpy"))
            goto out;
    }
    for (int i = 0; i < n_out; i++)
        if (!cuda_ok(cudaMalloc(&dev_out[i], numel(&outd[i]) * dtype_size(outd[i].dtype)),
                     "cudaMalloc"))
            goto out;
    uint64_t ws_bytes = ktune_kernel_workspace_size(k);
    if (ws_bytes && !cuda_ok(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace"))
        goto out;

    if (ktune_launch(k, dev_in, dev_out, ws, NULL, &err) < 0) {
        fprintf(stderr, "deploy: %s\n", err.msg);
        goto out;
    }
    if (!cuda_ok(cudaDeviceSynchronize(), "the kernel"))
        goto out;
    /* time: reps back-to-back launches between two events (hot, launch overhead included) */
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, NULL);
    for (int r = 0; r < reps; r++)
        if (ktune_launch(k, dev_in, dev_out, ws, NULL, &err) < 0) {
            fprintf(stderr, "deploy: %s\n", err.msg);
            goto out;
        }
    cudaEventRecord(e1, NULL);
    if (!cuda_ok(cudaEventSynchronize(e1), "timing"))
        goto out;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("time:   %.2f us per launch (%d back-to-back launches, CUDA events; tuned: %.2f us)\n",
           ms * 1e3 / reps, reps, info.time_ns / 1e3);

    if (io_dir) {
        for (int i = 0; i < n_out; i++) {
            size_t bytes = numel(&outd[i]) * dtype_size(outd[i].dtype);
            void *h = malloc(bytes);
            bool ok = h && cuda_ok(cudaMemcpy(h, dev_out[i], bytes, cudaMemcpyDeviceToHost),
                                   "cudaMemcpy") &&
                      io_file(io_dir, "out", i, h, bytes, true);
            free(h);
            if (!ok)
                goto out;
        }
        printf("io:     outputs written to %s/out*.bin\n", io_dir);
        status = 0;
        goto out;
    }

    size_t n_y = numel(&outd[0]);
    if (!(host_out = malloc(n_y * dtype_size(outd[0].dtype))) ||
        !cuda_ok(cudaMemcpy(host_out, dev_out[0], n_y * dtype_size(outd[0].dtype),
                            cudaMemcpyDeviceToHost),
                 "cudaMemcpy"))
        goto out;

    /* The CPU check, for gemm_bias_relu: Y[M,N] = relu(A[M,K] W[K,N] + bias[N]). */
    int ia = find(in, n_in, "A"), iw = find(in, n_in, "W"), ib = find(in, n_in, "bias");
    if (strcmp(ktune_graph_name(g), "gemm_bias_relu") != 0 || ia < 0 || iw < 0 || ib < 0) {
        printf("check:  none (the CPU check covers examples/gemm_bias_relu.json)\n");
        status = 0;
        goto out;
    }
    int64_t M = in[ia].shape[0], K = in[ia].shape[1], N = in[iw].shape[1];
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = load(host_in[ib], in[ib].dtype, (size_t)j);
            for (int64_t kk = 0; kk < K; kk++)
                acc += (double)load(host_in[ia], in[ia].dtype, (size_t)(i * K + kk)) *
                       load(host_in[iw], in[iw].dtype, (size_t)(kk * N + j));
            double ref = acc > 0 ? acc : 0;
            double got = load(host_out, outd[0].dtype, (size_t)(i * N + j));
            max_err = fmax(max_err, fabs(got - ref));
            max_ref = fmax(max_ref, fabs(ref));
        }
    double rel = max_ref > 0 ? max_err / max_ref : max_err;
    printf("check:  max |Y - ref| = %.3g (%.3g of max |ref|) over %lld x %lld\n", max_err, rel,
           (long long)M, (long long)N);
    status = rel < 1e-2 ? 0 : 1;
    if (status)
        fprintf(stderr, "deploy: the output does not match the CPU reference\n");
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    for (int i = 0; i < MAX_IO; i++) {
        cudaFree(dev_in[i]);
        cudaFree(dev_out[i]);
        free(host_in[i]);
    }
    cudaFree(ws);
    free(host_out);
    ktune_graph_free(g);
    ktune_runtime_close(rt);
    return status;
}
