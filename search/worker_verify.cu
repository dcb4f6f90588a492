/* ktune-worker: verification on the GPU (outputs against the fp64 reference, bitwise race
 * check, seed copies). */
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
#define KT_NONE 0x7fffffffffffffffLL
struct kt_part {
    double num, den, worst;
    long long worst_at, bad, first_bad, n_cmp;
};
__device__ float kt_f16_to_f32(u16 h)
{
    u32 sign = (u32)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000u | man << 13;
    } else if (exp == 0) {
        if (!man) {
            x = sign;
        } else {
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            x = sign | (u32)(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
        }
    } else {
        x = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    return __uint_as_float(x);
}
/* Is want (finite) still finite once stored in the dtype? (ops_dtype_store's rounding) */
template <int DT> __device__ bool kt_repr(double want)
{
    if (DT == 4)
        return true;
    float f = (float)want;
    if (isinf(f))
        return false;
    u32 x = __float_as_uint(f);
    if (DT == 1)
        return true;
    if (DT == 3) {
        x += 0x7fffu + ((x >> 16) & 1);
        return ((x >> 16) & 0x7f80u) != 0x7f80u;
    }
    u32 exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return false;
    if (e <= 0)
        return true;
    u32 half = (u32)e << 10 | man >> 13, rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))
        half++;
    return (half & 0x7c00u) != 0x7c00u;
}
template <int DT> __device__ double kt_load(const void *p, long long k)
{
    if (DT == 1)
        return ((const float *)p)[k];
    if (DT == 2)
        return kt_f16_to_f32(((const u16 *)p)[k]);
    if (DT == 3)
        return __uint_as_float((u32)((const u16 *)p)[k] << 16);
    return ((const double *)p)[k];
}
__device__ void kt_merge(kt_part *a, const kt_part *b)
{
    a->num += b->num;
    a->den += b->den;
    if (b->worst > a->worst || (b->worst == a->worst && b->worst_at < a->worst_at)) {
        a->worst = b->worst;
        a->worst_at = b->worst_at;
    }
    a->bad += b->bad;
    if (b->first_bad < a->first_bad)
        a->first_bad = b->first_bad;
    a->n_cmp += b->n_cmp;
}
__device__ void kt_block_reduce(kt_part p, kt_part *out)
{
    __shared__ kt_part s[256];
    s[threadIdx.x] = p;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h)
            kt_merge(&s[threadIdx.x], &s[threadIdx.x + h]);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = s[0];
}
/* The comparison of compare_output, per element (worker_verify.c's header comment): a NaN
 * reference wants NaN; an infinite one, or one that overflows the dtype, the infinity of its
 * sign; a finite representable one a finite value, which enters the sums and n_cmp. */
template <int DT>
__device__ void kt_cmp(const void *out, const double *ref, long long n, double atol,
                       double rtol, kt_part *part)
{
    kt_part p = {0, 0, 0, KT_NONE, 0, KT_NONE, 0};
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        double want = ref[k], got = kt_load<DT>(out, k);
        bool same;
        if (isnan(want)) {
            same = isnan(got);
        } else if (isinf(want) || !kt_repr<DT>(want)) {
            same = isinf(got) && (got > 0) == (want > 0);
        } else if (isfinite(got)) {
            double diff = fabs(got - want);
            p.num += diff * diff;
            p.den += want * want;
            p.n_cmp++;
            double r = diff / (atol + rtol * fabs(want));
            if (r > p.worst) {
                p.worst = r;
                p.worst_at = k;
            }
            continue;
        } else {
            same = false;
        }
        if (!same && p.bad++ == 0)
            p.first_bad = k;
    }
    kt_block_reduce(p, part);
}
extern "C" __global__ void kt_cmp_f32(const void *o, const double *r, long long n,
                                       double atol, double rtol, kt_part *part)
{
    kt_cmp<1>(o, r, n, atol, rtol, part);
}
extern "C" __global__ void kt_cmp_f16(const void *o, const double *r, long long n,
                                       double atol, double rtol, kt_part *part)
{
    kt_cmp<2>(o, r, n, atol, rtol, part);
}
extern "C" __global__ void kt_cmp_bf16(const void *o, const double *r, long long n,
                                        double atol, double rtol, kt_part *part)
{
    kt_cmp<3>(o, r, n, atol, rtol, part);
}
extern "C" __global__ void kt_cmp_f64(const void *o, const double *r, long long n,
                                       double atol, double rtol, kt_part *part)
{
    kt_cmp<4>(o, r, n, atol, rtol, part);
}
/* Sum of squares (num) and count (n_cmp) of the reference values that are finite and
 * representable in the output dtype: the ones kt_cmp compares by value. */
template <int DT> __device__ void kt_refstats(const double *ref, long long n, kt_part *part)
{
    kt_part p = {0, 0, 0, KT_NONE, 0, KT_NONE, 0};
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        if (isfinite(ref[k]) && kt_repr<DT>(ref[k])) {
            p.num += ref[k] * ref[k];
            p.n_cmp++;
        }
    kt_block_reduce(p, part);
}
extern "C" __global__ void kt_refstats_f32(const double *r, long long n, kt_part *part)
{
    kt_refstats<1>(r, n, part);
}
extern "C" __global__ void kt_refstats_f16(const double *r, long long n, kt_part *part)
{
    kt_refstats<2>(r, n, part);
}
extern "C" __global__ void kt_refstats_bf16(const double *r, long long n, kt_part *part)
{
    kt_refstats<3>(r, n, part);
}
extern "C" __global__ void kt_refstats_f64(const double *r, long long n, kt_part *part)
{
    kt_refstats<4>(r, n, part);
}
/* Bitwise difference of two buffers of n words: res[0] += count, res[1] = min index. */
template <typename T> __device__ void kt_diff(const T *a, const T *b, long long n, u64 *res)
{
    u64 cnt = 0, first = ~0ull;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        if (a[k] != b[k]) {
            if (cnt++ == 0)
                first = (u64)k;
        }
    if (cnt) {
        atomicAdd(&res[0], cnt);
        atomicMin(&res[1], first);
    }
}
extern "C" __global__ void kt_diff_1(const unsigned char *a, const unsigned char *b,
                                      long long n, u64 *res)
{
    kt_diff(a, b, n, res);
}
extern "C" __global__ void kt_diff_2(const u16 *a, const u16 *b, long long n, u64 *res)
{
    kt_diff(a, b, n, res);
}
extern "C" __global__ void kt_diff_4(const u32 *a, const u32 *b, long long n, u64 *res)
{
    kt_diff(a, b, n, res);
}
extern "C" __global__ void kt_diff_8(const u64 *a, const u64 *b, long long n, u64 *res)
{
    kt_diff(a, b, n, res);
}
/* out = the n values of in widened to double (ops_dtype_load): the reference's inputs. */
template <int DT> __device__ void kt_widen(const void *in, double *out, long long n)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        out[k] = kt_load<DT>(in, k);
}
extern "C" __global__ void kt_widen_f32(const void *in, double *out, long long n)
{
    kt_widen<1>(in, out, n);
}
extern "C" __global__ void kt_widen_f16(const void *in, double *out, long long n)
{
    kt_widen<2>(in, out, n);
}
extern "C" __global__ void kt_widen_bf16(const void *in, double *out, long long n)
{
    kt_widen<3>(in, out, n);
}
/* dst = src, n bytes (both 256-byte aligned allocations). */
extern "C" __global__ void kt_copy(const unsigned char *src, unsigned char *dst, long long n)
{
    long long words = n / 16, stride = (long long)gridDim.x * blockDim.x;
    long long k0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long k = k0; k < words; k += stride)
        ((uint4 *)dst)[k] = ((const uint4 *)src)[k];
    for (long long k = words * 16 + k0; k < n; k += stride)
        dst[k] = src[k];
}
