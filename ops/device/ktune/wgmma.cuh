/* wgmma (sm_90a): warpgroup MMA. Four warps (128 threads, a warpgroup) issue one m64nNk* product
 * together; its B operand (and optionally A) is read from shared memory through a matrix
 * descriptor, asynchronously: fence before, commit the group after, wait before reading the
 * sums (and pin register operands until then, kt_reg_pin; hold the sums after, kt_reg_hold).
 * Shared memory written through the generic proxy (st.shared, cp.async) must be fenced into the
 * async proxy (kt_fence_proxy_async) before a wgmma reads it. Compiled only where KT_SM90A. */
#pragma once

#include "ktune/arch.cuh"
#include "ktune/regs.cuh"

/* Layout type of a matrix descriptor (bits 62-63). */
enum kt_wgmma_layout {
    KT_WGMMA_INTERLEAVE = 0,
    KT_WGMMA_SW128 = 1,
    KT_WGMMA_SW64 = 2,
    KT_WGMMA_SW32 = 3
};

#if KT_SM90A

/* Matrix descriptor of a shared-memory operand at p: start address (bits 0-13, 16-byte units),
 * leading-dimension byte offset (bits 16-29), stride byte offset between 8-row groups (bits
 * 32-45), layout (bits 62-63). Adding 2 to a descriptor advances its start by 32 bytes (one k8
 * step of tf32 inside a 128-byte swizzled row). */
__device__ __forceinline__ unsigned long long
kt_wgmma_desc(const void *p, unsigned lead_bytes, unsigned stride_bytes, kt_wgmma_layout layout)
{
    return (unsigned long long)((kt_smem_u32(p) & 0x3FFFF) >> 4) |
           (unsigned long long)(lead_bytes >> 4) << 16 |
           (unsigned long long)(stride_bytes >> 4) << 32 | (unsigned long long)layout << 62;
}

/* Register writes (accumulators, A fragments) are complete before the next wgmmas read them. */
__device__ __forceinline__ void kt_wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
/* Closes the wgmmas issued since the last commit into one group. */
__device__ __forceinline__ void kt_wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Waits until at most N committed groups are pending. */
template <int N> __device__ __forceinline__ void kt_wgmma_wait()
{
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Shared-memory writes of the generic proxy become visible to the async proxy (wgmma, TMA). */
__device__ __forceinline__ void kt_fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* d += a x b, tf32, A from registers, B from shared memory, N columns (64 or 128). */
template <int N>
__device__ __forceinline__ void kt_wgmma_tf32_rs(float (&d)[N / 8][4], const unsigned (&a)[4],
                                                 unsigned long long db);

/* clang-format off: the register lists stay one group of 16 a line */
#define KT_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
/* d += a x b: m64n64k8, tf32 operands, fp32 sums. a is this warp's 16 x 8 fragment of the
 * warpgroup's 64 x 8 A in registers (the m16n8k8 A layout), db the descriptor of the 8 x 64
 * K-major B in shared memory; d holds the thread's 32 sums as [8][4] (m16n8 C layout per
 * 8 columns). */
template <>
__device__ __forceinline__ void kt_wgmma_tf32_rs<64>(float (&d)[8][4], const unsigned (&a)[4],
                                                     unsigned long long db)
{
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                 "{%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
                 : KT_D4(0), KT_D4(1), KT_D4(2), KT_D4(3), KT_D4(4), KT_D4(5), KT_D4(6), KT_D4(7)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* d += a x b: m64n128k8, tf32 operands, fp32 sums. a is this warp's 16 x 8 fragment of the
 * warpgroup's 64 x 8 A in registers (the m16n8k8 A layout), db the descriptor of the 8 x 128
 * K-major B in shared memory; d holds the thread's 64 sums as [16][4] (m16n8 C layout per
 * 8 columns). */
template <>
__device__ __forceinline__ void kt_wgmma_tf32_rs<128>(float (&d)[16][4], const unsigned (&a)[4],
                                                      unsigned long long db)
{
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
                 "{%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
                 : KT_D4(0), KT_D4(1), KT_D4(2), KT_D4(3), KT_D4(4), KT_D4(5), KT_D4(6), KT_D4(7),
                   KT_D4(8), KT_D4(9), KT_D4(10), KT_D4(11), KT_D4(12), KT_D4(13), KT_D4(14),
                   KT_D4(15)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
/* clang-format on */

/* f16 and bf16 products, k16 steps, fp32 sums: d = a x b + (scale_d ? d : 0), N columns (64,
 * 128 or 256), d the thread's N / 2 sums as [N / 8][4] (m16n8 C layout per 8 columns, per
 * warp). B is read from shared memory through descriptor db, K-major (TRANS_B 0) or N-major
 * (TRANS_B 1); A either from shared memory too (_ss: descriptor da, K-major, or M-major with
 * TRANS_A 1) or from registers (_rs: a is this warp's 16 x 16 fragment of the warpgroup's 64 x 16
 * A, the m16n8k16 A layout).
 *   kt_wgmma_f16_ss<N, TRANS_B[, TRANS_A]>(d, da, db, scale_d)   kt_wgmma_bf16_ss<...>(...)
 *   kt_wgmma_f16_rs<N, TRANS_B>(d, a, db, scale_d)    kt_wgmma_bf16_rs<N, TRANS_B>(...) */
/* clang-format off: the register lists stay one group of 16 a line */
#define KT_D32 KT_D4(0), KT_D4(1), KT_D4(2), KT_D4(3), KT_D4(4), KT_D4(5), KT_D4(6), KT_D4(7)
#define KT_D64 KT_D32, KT_D4(8), KT_D4(9), KT_D4(10), KT_D4(11), KT_D4(12), KT_D4(13), \
               KT_D4(14), KT_D4(15)
#define KT_D128 KT_D64, KT_D4(16), KT_D4(17), KT_D4(18), KT_D4(19), KT_D4(20), KT_D4(21), \
                KT_D4(22), KT_D4(23), KT_D4(24), KT_D4(25), KT_D4(26), KT_D4(27), KT_D4(28), \
                KT_D4(29), KT_D4(30), KT_D4(31)
#define KT_R32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"\
               "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define KT_R64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"\
               "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"\
               "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"\
               "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define KT_R128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"\
                "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"\
                "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"\
                "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"\
                "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"\
                "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"\
                "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"\
                "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
/* "p" = (scale_d != 0), scale_d being operand number SCALE_D */
#define KT_WG_PRED(SCALE_D) "{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\n"
/* The instruction, m64nNk16.f32.T.T for N = 64, 128 or 256 */
#define KT_WG_K16(N, T) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #T "." #T " "
/* Both products for one 16-bit type T (f16, bf16): written once, instantiated below. */
#define KT_WGMMA_K16(T)                                                                            \
/* d = a x b (+ d when scale_d): A K-major (TRANS_A 0) or M-major (1) and B K-major (TRANS_B 0)  \
 * or N-major (1) in shared memory. */                                                             \
template <int N, int TRANS_B, int TRANS_A = 0>                                                     \
__device__ __forceinline__ void kt_wgmma_##T##_ss(float (&d)[N / 8][4], unsigned long long da,     \
                                                  unsigned long long db, int scale_d)              \
{                                                                                                  \
    static_assert(N == 64 || N == 128 || N == 256, "m64n64, m64n128 or m64n256");                  \
    if constexpr (N == 64)                                                                         \
        asm volatile(KT_WG_PRED("%34") KT_WG_K16(64, T) KT_R32                                     \
                     ", %32, %33, p, 1, 1, %36, %35;\n}\n"                                         \
                     : KT_D32 : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B), "n"(TRANS_A));       \
    else if constexpr (N == 128)                                                                   \
        asm volatile(KT_WG_PRED("%66") KT_WG_K16(128, T) KT_R64                                    \
                     ", %64, %65, p, 1, 1, %68, %67;\n}\n"                                         \
                     : KT_D64 : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B), "n"(TRANS_A));       \
    else                                                                                           \
        asm volatile(KT_WG_PRED("%130") KT_WG_K16(256, T) KT_R128                                  \
                     ", %128, %129, p, 1, 1, %132, %131;\n}\n"                                     \
                     : KT_D128 : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B), "n"(TRANS_A));      \
}                                                                                                  \
/* d = a x b (+ d when scale_d): A from registers, B in shared memory. */                          \
template <int N, int TRANS_B>                                                                      \
__device__ __forceinline__ void kt_wgmma_##T##_rs(float (&d)[N / 8][4], const unsigned (&a)[4],    \
                                                  unsigned long long db, int scale_d)              \
{                                                                                                  \
    static_assert(N == 64 || N == 128 || N == 256, "m64n64, m64n128 or m64n256");                  \
    if constexpr (N == 64)                                                                         \
        asm volatile(KT_WG_PRED("%37") KT_WG_K16(64, T) KT_R32                                     \
                     ", {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"                                \
                     : KT_D32                                                                      \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d),          \
                       "n"(TRANS_B));                                                              \
    else if constexpr (N == 128)                                                                   \
        asm volatile(KT_WG_PRED("%69") KT_WG_K16(128, T) KT_R64                                    \
                     ", {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"                                \
                     : KT_D64                                                                      \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d),          \
                       "n"(TRANS_B));                                                              \
    else                                                                                           \
        asm volatile(KT_WG_PRED("%133") KT_WG_K16(256, T) KT_R128                                  \
                     ", {%128,%129,%130,%131}, %132, p, 1, 1, %134;\n}\n"                          \
                     : KT_D128                                                                     \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d),          \
                       "n"(TRANS_B));                                                              \
}
KT_WGMMA_K16(f16)
KT_WGMMA_K16(bf16)
#undef KT_WGMMA_K16
#undef KT_WG_K16
#undef KT_WG_PRED
#undef KT_R128
#undef KT_R64
#undef KT_R32
#undef KT_D128
#undef KT_D64
#undef KT_D32
#undef KT_D4
/* clang-format on */

#endif /* KT_SM90A */
