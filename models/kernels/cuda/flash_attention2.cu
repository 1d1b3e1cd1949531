#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstring>

#include "models/kernels/cuda/flash_attention2.hpp"
#include "models/kernels/cuda/launch.cuh"

// FlashAttention-2's layout with mma.sync.m16n8k16 (bf16 in, f32 accumulation). In the m16n8
// accumulator a thread of quad t (lane / 4 = g, lane % 4 = t) holds rows g and g + 8, columns
// 2t and 2t + 1 of each 8-column tile, so a row's max and sum need only the quad's two shuffles,
// and two adjacent accumulator tiles, rounded to bf16 pairs, are exactly the A fragment of the
// next product: probabilities go from scores to P V without touching shared memory.
//
// Forward: one block of 8 warps per (128-query tile, head, sample), each warp 16 query rows.
// 8 x 16 rather than 4 x 32: a warp's scores, output and Q fragments are 32 + 32 + 16 registers
// instead of twice that, leaving room below 255 without spills, and a warp's rows are one
// contiguous strip, so its causal bounds are two comparisons. The price is that each K and V
// fragment is read from shared memory by 8 warps instead of 4. Key tiles of 64 rows are
// double-buffered with cp.async: tile kt + 1 is in flight while tile kt is multiplied. Tiles past
// the diagonal are never loaded; a warp skips a tile wholly after its rows, and only tiles that
// cross a warp's diagonal are masked.
//
// Backward: one block of 4 warps per (64-key tile, head, sample), each warp 16 keys, walking the
// 64-query tiles from the diagonal on (Q, dO and the rows' lse and rowsum(dO * O) double-buffered
// with cp.async). dK and dV stay in registers over all query tiles; S^T and dP^T of the warp's
// keys are recomputed in registers, turned into P^T and dS^T there, and multiplied by dO and Q
// from registers. dQ needs every warp's dS, so dS^T goes to shared memory once and each warp
// adds its 16 query rows of dS K into an f32 buffer with atomicAdd; a last kernel writes that
// buffer into dqkv. 64 keys per block rather than 128: dK, dV, S^T and dP^T are already 128 f32
// registers per thread.
//
// Shared-memory rows are 64 bf16 plus 8 of padding (144 bytes), so the 8 row addresses of an
// ldmatrix fall into distinct banks.
namespace tandem::models::cuda {
namespace {

using bf16 = __nv_bfloat16;
using detail::as_stream;
using detail::check_launch;
using detail::warp_sum;

constexpr int kDh = 64;       // head size
constexpr int kLd = kDh + 8;  // shared row stride, in bf16
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int kFwdRows = 128;  // queries per forward block
constexpr int kFwdKeys = 64;   // keys per forward tile
constexpr int kFwdThreads = 32 * (kFwdRows / 16);
// q, then two stages of (k, v).
constexpr std::size_t kFwdSmem = sizeof(bf16) * kLd * (kFwdRows + 2 * 2 * kFwdKeys);

constexpr int kBwdKeys = 64;  // keys per backward block
constexpr int kBwdRows = 64;  // queries per backward tile
constexpr int kBwdThreads = 32 * (kBwdKeys / 16);
// k, v, dS^T, two stages of (q, dO); then two stages of (lse, rowsum(dO * O)).
constexpr std::size_t kBwdSmem =
    sizeof(bf16) * kLd * (3 * kBwdKeys + 2 * 2 * kBwdRows) + sizeof(float) * 2 * 2 * kBwdRows;

// ---- PTX wrappers -------------------------------------------------------------------------

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zeros instead when !valid (src is not read then,
// but stays a mapped address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
               "l"(__cvta_generic_to_global(src)), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)),
               "l"(__cvta_generic_to_global(src)), "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Four 8x8 bf16 matrices; lanes 8m..8m+7 give the row addresses of matrix m, and register m of
// lane l holds matrix m's row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const bf16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
}

// The same with each matrix transposed: register m of lane l holds rows 2 (l % 4) and
// 2 (l % 4) + 1 of column l / 4.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const bf16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
}

// d (16x8, f32) += a (16x16, bf16, row-major fragment) * b (16x8, bf16, column fragment b0 b1).
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                    unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x; 0 for -inf.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// lo in the low half, as a fragment register holds columns 2t (low) and 2t + 1.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  unsigned u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

// Two adjacent elements (4- or 8-byte aligned: an even column of an even-strided row).
__device__ __forceinline__ void store_pair(float* dst, float a, float b) {
  *reinterpret_cast<float2*>(dst) = make_float2(a, b);
}

__device__ __forceinline__ void store_pair(bf16* dst, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
}

// ---- Tiles ----------------------------------------------------------------------------------

// Rows [0, kRows) of one head (64 bf16 at `src`, row stride ld) into shared rows of stride kLd,
// asynchronously; rows from `valid` on are zeros. Row 0 of src is always a real row.
template <int kRows, int kThreads>
__device__ void load_rows_async(bf16* dst, const bf16* src, std::int64_t ld, int valid) {
  constexpr int kChunks = kRows * (kDh / 8);  // 16-byte chunks
  for (int i = static_cast<int>(threadIdx.x); i < kChunks; i += kThreads) {
    const int r = i / (kDh / 8);
    const int c = (i % (kDh / 8)) * 8;
    const bool ok = r < valid;
    cp_async16(dst + r * kLd + c, ok ? src + r * ld + c : src, ok);
  }
}

// 16 rows x 64 columns at `rows` (shared, stride kLd) as the A fragments of four k-steps.
__device__ __forceinline__ void load_a_rows(unsigned (&a)[4][4], const bf16* rows, int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    ldmatrix_x4(a[kk], rows + (lane & 15) * kLd + kk * 16 + (lane >> 4) * 8);
  }
}

// acc (16 x 64) = A (16 x 64, fragments) * B^T, B given as 64 rows of 64 at `b_rows`: row j of
// B is column j of the product (scores: q . k_j).
__device__ __forceinline__ void rows_times_rows_t(float (&acc)[8][4], const unsigned (&a)[4][4],
                                                  const bf16* b_rows, int lane) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kk2 = 0; kk2 < 2; ++kk2) {
      // Rows 8j..8j+7, columns 32 kk2 + 8m for matrix m: B fragments of k-steps 2 kk2, 2 kk2 + 1.
      unsigned b[4];
      ldmatrix_x4(b, b_rows + (8 * j + (lane & 7)) * kLd + kk2 * 32 + (lane >> 3) * 8);
      mma(acc[j], a[2 * kk2], b[0], b[1]);
      mma(acc[j], a[2 * kk2 + 1], b[2], b[3]);
    }
  }
}

// acc (16 x 64) += P (16 x 64, the accumulator of rows_times_rows_t) * B (64 x 64 row-major at
// `b_rows`), P rounded to bf16.
__device__ __forceinline__ void accumulate_p_times_rows(float (&acc)[8][4], const float (&p)[8][4],
                                                        const bf16* b_rows, int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const unsigned a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]),
                           pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                           pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      // Rows 16 kk + (0..15), columns 16 np + (0 | 8), transposed: B fragments of column tiles
      // 2 np (registers 0, 1) and 2 np + 1 (registers 2, 3).
      unsigned b[4];
      ldmatrix_x4_trans(b, b_rows + (16 * kk + (lane & 15)) * kLd + 16 * np + (lane >> 4) * 8);
      mma(acc[2 * np], a, b[0], b[1]);
      mma(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// ---- Forward --------------------------------------------------------------------------------

// s (this warp's 16 rows from `row0`, keys from `key0`) to -inf where the key is after the row.
__device__ __forceinline__ void mask_causal(float (&s)[8][4], int row0, int key0, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + g + (e >= 2 ? 8 : 0);
      const int key = key0 + 8 * j + 2 * t + (e & 1);
      if (key > row) s[j][e] = -INFINITY;
    }
  }
}

// One key tile of the online softmax for the thread's rows g (r = 0) and g + 8 (r = 1): s holds
// scores in log2 units on entry and the unnormalised probabilities on return; o is rescaled to
// the new maximum; l keeps this thread's part of each row's sum (the quad's parts are joined at
// the end, since every rescaling is the same across a quad).
__device__ __forceinline__ void online_softmax(float (&s)[8][4], float (&o)[8][4], float (&m)[2],
                                               float (&l)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[r], mx);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing unmasked yet
    const float alpha = exp2_approx(m[r] - base);          // 0 while m[r] is -inf
    m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 2 * r; e < 2 * r + 2; ++e) {
        s[j][e] = exp2_approx(s[j][e] - base);
        sum += s[j][e];
        o[j][e] *= alpha;
      }
    }
    l[r] = l[r] * alpha + sum;
  }
}

// out rows and lse of the thread's two rows, `row0` being the warp's first.
__device__ void write_forward_rows(const float (&o)[8][4], const float (&m)[2], float (&l)[2],
                                   bf16* out, float* lse, int row0, int seq, std::int64_t d_model,
                                   int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int row = row0 + g + 8 * r;
    if (row >= seq) continue;
    const float inv = 1.0f / l[r];  // l >= 1: the row's largest term is exp2(0)
    bf16* dst = out + row * d_model + 2 * t;
#pragma unroll
    for (int j = 0; j < 8; ++j) store_pair(dst + 8 * j, o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    if (t == 0) lse[row] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// K and V rows [k0, k0 + kFwdKeys) of the head into a stage.
__device__ void load_kv_tile(bf16* ks, bf16* vs, const bf16* k_head, const bf16* v_head,
                             std::int64_t ld, int k0, int seq) {
  load_rows_async<kFwdKeys, kFwdThreads>(ks, k_head + k0 * ld, ld, seq - k0);
  load_rows_async<kFwdKeys, kFwdThreads>(vs, v_head + k0 * ld, ld, seq - k0);
}

__global__ void __launch_bounds__(kFwdThreads)
    fa2_forward(const bf16* qkv, bf16* out, float* lse, int seq, int heads, float scale_log2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* stage_base = qs + kFwdRows * kLd;  // stage i: k at + 2 i kFwdKeys rows, v after it

  const int q_tiles = (seq + kFwdRows - 1) / kFwdRows;
  const int q0 = (q_tiles - 1 - static_cast<int>(blockIdx.x)) * kFwdRows;  // longest rows first
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const std::int64_t d_model = static_cast<std::int64_t>(heads) * kDh;
  const std::int64_t ld = 3 * d_model;
  const bf16* q_head = qkv + static_cast<std::int64_t>(b) * seq * ld + h * kDh;
  const bf16* k_head = q_head + d_model;
  const bf16* v_head = q_head + 2 * d_model;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row0 = q0 + warp * 16;
  // Keys at or before the tile's last row, within the sequence.
  const int key_tiles = min((q0 + kFwdRows - 1) / kFwdKeys + 1, (seq + kFwdKeys - 1) / kFwdKeys);

  load_rows_async<kFwdRows, kFwdThreads>(qs, q_head + q0 * ld, ld, seq - q0);
  load_kv_tile(stage_base, stage_base + kFwdKeys * kLd, k_head, v_head, ld, 0, seq);
  cp_async_commit();

  unsigned qf[4][4];
  float o[8][4] = {};
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  for (int kt = 0; kt < key_tiles; ++kt) {
    // Tile kt has landed, and every warp is done with tile kt - 1, whose stage is refilled next.
    cp_async_wait_all();
    __syncthreads();
    if (kt + 1 < key_tiles) {
      bf16* next = stage_base + ((kt + 1) & 1) * 2 * kFwdKeys * kLd;
      load_kv_tile(next, next + kFwdKeys * kLd, k_head, v_head, ld, (kt + 1) * kFwdKeys, seq);
      cp_async_commit();
    }
    if (kt == 0) load_a_rows(qf, qs + warp * 16 * kLd, lane);
    const int k0 = kt * kFwdKeys;
    if (k0 > row0 + 15) continue;  // every key of the tile is after every row of this warp
    const bf16* ks = stage_base + (kt & 1) * 2 * kFwdKeys * kLd;
    const bf16* vs = ks + kFwdKeys * kLd;
    float s[8][4];
    rows_times_rows_t(s, qf, ks, lane);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] *= scale_log2;
    }
    if (k0 + kFwdKeys - 1 > row0) mask_causal(s, row0, k0, lane);  // the tile crosses the diagonal
    online_softmax(s, o, m, l);
    accumulate_p_times_rows(o, s, vs, lane);
  }
  write_forward_rows(o, m, l, out + static_cast<std::int64_t>(b) * seq * d_model + h * kDh,
                     lse + (static_cast<std::int64_t>(b) * heads + h) * seq, row0, seq, d_model,
                     lane);
#else
  __trap();  // built for a GPU without bf16 mma.sync: the host never launches it there
#endif
}

// ---- Backward -------------------------------------------------------------------------------

// One warp per (position, head): dsum = rowsum(dO * O) in f32, and the position's dQ
// accumulator zeroed for the key tiles' atomic additions.
__global__ void fa2_backward_prep(const bf16* out, const bf16* dout, float* dsum, float* dq,
                                  std::int64_t rows, int seq, int heads) {
  const std::int64_t w = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (w >= rows * heads) return;
  const std::int64_t row = w / heads;
  const int h = static_cast<int>(w % heads);
  const std::int64_t at = row * heads * kDh + h * kDh + 2 * lane;
  const float2 o = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(out + at));
  const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dout + at));
  const float s = warp_sum(o.x * g.x + o.y * g.y);
  if (lane == 0) {
    const std::int64_t b = row / seq;
    dsum[(b * heads + h) * seq + row % seq] = s;
  }
  dq[at] = 0.0f;
  dq[at + 1] = 0.0f;
}

// P^T and dS^T of this warp's keys (rows from key0) against queries from q0, in place of S^T (in
// log2 units) and dP^T. lse (natural) and dsum are the query tile's, in shared memory; masked:
// the tile crosses the diagonal or the end of the sequence.
__device__ __forceinline__ void probabilities_and_ds(float (&s)[8][4], float (&dp)[8][4],
                                                     const float* lse, const float* dsum, int key0,
                                                     int q0, int seq, bool masked, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 8 * j + 2 * t + (e & 1);
      float p = exp2_approx(s[j][e] - lse[c] * kLog2e);
      if (masked) {
        const int key = key0 + g + (e >= 2 ? 8 : 0);
        const int q = q0 + c;
        if (q < key || q >= seq) p = 0.0f;
      }
      s[j][e] = p;
      dp[j][e] = p * (dp[j][e] - dsum[c]);
    }
  }
}

// This warp's 16 key rows of dS^T (accumulator layout) into shared rows of stride kLd.
__device__ __forceinline__ void store_ds_t(bf16* rows, const float (&ds)[8][4], int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      store_pair(rows + (g + 8 * r) * kLd + 8 * j + 2 * t, ds[j][2 * r], ds[j][2 * r + 1]);
    }
  }
}

// dQ (16 query rows from column `q_col` of dS^T, 64 columns) = dS K: dS read as the transpose
// of dS^T (64 key rows in shared memory), K as 64 rows.
__device__ __forceinline__ void ds_times_k(float (&dq)[8][4], const bf16* ds_t, const bf16* ks,
                                           int q_col, int lane) {
#pragma unroll
  for (int j = 0; j < 8; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    // Matrix m: keys 16 kk + 8 (m / 2) + (0..7), queries q_col + 8 (m % 2), transposed: the A
    // fragment (queries x keys) of k-step kk.
    unsigned a[4];
    ldmatrix_x4_trans(
        a, ds_t + (16 * kk + (lane & 7) + (lane >> 4) * 8) * kLd + q_col + ((lane >> 3) & 1) * 8);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      unsigned b[4];
      ldmatrix_x4_trans(b, ks + (16 * kk + (lane & 15)) * kLd + 16 * np + (lane >> 4) * 8);
      mma(dq[2 * np], a, b[0], b[1]);
      mma(dq[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// dq_rows (f32, row stride d_model, rows from `row0`) += scale * dq for rows before seq.
__device__ __forceinline__ void add_dq(float* dq_rows, const float (&dq)[8][4], float scale,
                                       int row0, int seq, std::int64_t d_model, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + g + 8 * r;
    if (row >= seq) continue;
    float* dst = dq_rows + row * d_model + 2 * t;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#if __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float2*>(dst + 8 * j),
                make_float2(scale * dq[j][2 * r], scale * dq[j][2 * r + 1]));
#else
      atomicAdd(dst + 8 * j, scale * dq[j][2 * r]);
      atomicAdd(dst + 8 * j + 1, scale * dq[j][2 * r + 1]);
#endif
    }
  }
}

// dK (times scale) and dV of the thread's two keys, `key0` being the warp's first, into dqkv's
// rows (stride ld) at the head's k columns and v columns (d_model further).
template <typename OutT>
__device__ void write_dk_dv(OutT* dk_head, const float (&dk)[8][4], const float (&dv)[8][4],
                            float scale, int key0, int seq, std::int64_t ld, std::int64_t d_model,
                            int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + g + 8 * r;
    if (key >= seq) continue;
    OutT* row = dk_head + key * ld + 2 * t;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      store_pair(row + 8 * j, scale * dk[j][2 * r], scale * dk[j][2 * r + 1]);
      store_pair(row + d_model + 8 * j, dv[j][2 * r], dv[j][2 * r + 1]);
    }
  }
}

// Where a backward block's tiles live in shared memory. Stages are computed rather than kept in
// arrays, which a runtime stage index would put in local memory.
struct BackwardSmem {
  bf16* ks;
  bf16* vs;
  bf16* ds_t;
  bf16* stages;  // stage i: q at 2 i kBwdRows rows, dO after it
  float* stats;  // stage i: lse at 2 i kBwdRows, dsum after it

  __device__ explicit BackwardSmem(unsigned char* smem)
      : ks(reinterpret_cast<bf16*>(smem)),
        vs(ks + kBwdKeys * kLd),
        ds_t(vs + kBwdKeys * kLd),
        stages(ds_t + kBwdKeys * kLd),
        stats(reinterpret_cast<float*>(stages + 4 * kBwdRows * kLd)) {}
  __device__ bf16* qs(int i) const { return stages + 2 * i * kBwdRows * kLd; }
  __device__ bf16* dos(int i) const { return qs(i) + kBwdRows * kLd; }
  __device__ float* lse(int i) const { return stats + 2 * i * kBwdRows; }
  __device__ float* dsum(int i) const { return lse(i) + kBwdRows; }
};

// Query tile rows [q0, q0 + kBwdRows): q, dO, lse and dsum into stage `i`.
__device__ void load_query_tile(const BackwardSmem& sm, int i, const bf16* q_head,
                                const bf16* do_head, const float* lse, const float* dsum,
                                std::int64_t ld, std::int64_t d_model, int q0, int seq) {
  load_rows_async<kBwdRows, kBwdThreads>(sm.qs(i), q_head + q0 * ld, ld, seq - q0);
  load_rows_async<kBwdRows, kBwdThreads>(sm.dos(i), do_head + q0 * d_model, d_model, seq - q0);
  static_assert(kBwdThreads == 2 * kBwdRows, "one thread per lse and per dsum element");
  const int c = static_cast<int>(threadIdx.x) % kBwdRows;
  const bool ok = q0 + c < seq;
  if (threadIdx.x < kBwdRows) {
    cp_async4(sm.lse(i) + c, ok ? lse + q0 + c : lse, ok);
  } else {
    cp_async4(sm.dsum(i) + c, ok ? dsum + q0 + c : dsum, ok);
  }
}

template <typename OutT>
__global__ void __launch_bounds__(kBwdThreads)
    fa2_backward(const bf16* qkv, const bf16* dout, const float* lse, const float* dsum,
                 float* dq_accum, OutT* dqkv, int seq, int heads, float scale, float scale_log2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardSmem sm(smem);

  const int kt = static_cast<int>(blockIdx.x);  // the first key tiles see the most queries
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int k0 = kt * kBwdKeys;
  const int q_tiles = (seq + kBwdRows - 1) / kBwdRows;
  const std::int64_t d_model = static_cast<std::int64_t>(heads) * kDh;
  const std::int64_t ld = 3 * d_model;
  const std::int64_t sample_rows = static_cast<std::int64_t>(b) * seq;
  const bf16* q_head = qkv + sample_rows * ld + h * kDh;
  const bf16* do_head = dout + sample_rows * d_model + h * kDh;
  const std::int64_t stats = (static_cast<std::int64_t>(b) * heads + h) * seq;
  float* dq_head = dq_accum + sample_rows * d_model + h * kDh;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int key0 = k0 + warp * 16;
  // Query tiles are as long as key tiles: the first one at or after the keys is the diagonal.
  static_assert(kBwdRows == kBwdKeys, "the diagonal query tile is the key tile's index");
  const int qt0 = kt;

  load_rows_async<kBwdKeys, kBwdThreads>(sm.ks, q_head + d_model + k0 * ld, ld, seq - k0);
  load_rows_async<kBwdKeys, kBwdThreads>(sm.vs, q_head + 2 * d_model + k0 * ld, ld, seq - k0);
  load_query_tile(sm, 0, q_head, do_head, lse + stats, dsum + stats, ld, d_model, qt0 * kBwdRows,
                  seq);
  cp_async_commit();

  float dk[8][4] = {};
  float dv[8][4] = {};
  for (int qt = qt0; qt < q_tiles; ++qt) {
    const int i = (qt - qt0) & 1;
    // Tile qt has landed, and every warp is done with tile qt - 1 (its stage and dS^T).
    cp_async_wait_all();
    __syncthreads();
    if (qt + 1 < q_tiles) {
      load_query_tile(sm, i ^ 1, q_head, do_head, lse + stats, dsum + stats, ld, d_model,
                      (qt + 1) * kBwdRows, seq);
      cp_async_commit();
    }
    const int q0 = qt * kBwdRows;
    float s[8][4];
    float dp[8][4];
    {
      unsigned a[4][4];
      load_a_rows(a, sm.ks + warp * 16 * kLd, lane);
      rows_times_rows_t(s, a, sm.qs(i), lane);  // S^T = K Q^T
      load_a_rows(a, sm.vs + warp * 16 * kLd, lane);
      rows_times_rows_t(dp, a, sm.dos(i), lane);  // dP^T = V dO^T
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] *= scale_log2;
    }
    const bool masked = qt == qt0 || q0 + kBwdRows > seq;
    probabilities_and_ds(s, dp, sm.lse(i), sm.dsum(i), key0, q0, seq, masked, lane);
    accumulate_p_times_rows(dv, s, sm.dos(i), lane);  // dV += P^T dO
    accumulate_p_times_rows(dk, dp, sm.qs(i), lane);  // dK += dS^T Q (scaled when written)
    store_ds_t(sm.ds_t + warp * 16 * kLd, dp, lane);
    __syncthreads();  // every warp's keys of dS^T are written
    float dq[8][4];
    ds_times_k(dq, sm.ds_t, sm.ks, warp * 16, lane);
    add_dq(dq_head, dq, scale, q0 + warp * 16, seq, d_model, lane);
  }
  write_dk_dv(dqkv + sample_rows * ld + d_model + h * kDh, dk, dv, scale, key0, seq, ld, d_model,
              lane);
#else
  __trap();
#endif
}

// ---- Conversions ----------------------------------------------------------------------------

__global__ void f32_to_bf16(const float* src, bf16* dst, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}

__global__ void bf16_to_f32(const bf16* src, float* dst, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = __bfloat162float(src[i]);
  }
}

__device__ __forceinline__ void store_one(float* dst, float v) {
  *dst = v;
}
__device__ __forceinline__ void store_one(bf16* dst, float v) {
  *dst = __float2bfloat16_rn(v);
}

// dqkv's q columns from the f32 accumulator ([rows, d_model]; already scaled).
template <typename OutT>
__global__ void fa2_write_dq(const float* dq, OutT* dqkv, std::int64_t rows, std::int64_t d_model) {
  const std::int64_t n = rows * d_model;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    store_one(dqkv + (i / d_model) * 3 * d_model + i % d_model, dq[i]);
  }
}

// ---- Host side ------------------------------------------------------------------------------

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("flash attention 2: ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

// Shapes the kernels take; throws naming what does not fit.
void check_shape(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t d_head) {
  if (!flash_attention2_supported(d_head)) {
    throw std::invalid_argument("flash attention 2: head size " + std::to_string(d_head) +
                                " (only " + std::to_string(kDh) + ")");
  }
  if (batch > 65535 || heads > 65535 || seq > INT_MAX / 2) {
    throw std::invalid_argument("flash attention 2: batch " + std::to_string(batch) + ", heads " +
                                std::to_string(heads) + " or seq " + std::to_string(seq) +
                                " too large for its grid");
  }
}

// cp.async and the paired stores need `alignment`-byte aligned tensors.
void check_aligned(const void* p, std::size_t alignment, const char* what) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
    throw std::invalid_argument(std::string("flash attention 2: ") + what + " is not " +
                                std::to_string(alignment) + "-byte aligned");
  }
}

// Ampere or later (bf16 mma.sync, cp.async); the device the stream's work runs on is current.
void require_bf16_mma() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  int major = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "cudaDeviceGetAttribute");
  if (major < 8) {
    throw std::runtime_error("flash attention 2: needs compute capability 8.0 or later (device " +
                             std::to_string(device) + " has " + std::to_string(major) + ".x)");
  }
}

dim3 tile_grid(std::int64_t batch, std::int64_t seq, std::int64_t heads, int tile) {
  return {static_cast<unsigned>((seq + tile - 1) / tile), static_cast<unsigned>(heads),
          static_cast<unsigned>(batch)};
}

// Scratch regions start 256-byte aligned.
std::size_t aligned_bytes(std::size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

std::size_t bf16_bytes(std::int64_t n) {
  return aligned_bytes(static_cast<std::size_t>(n) * sizeof(bf16));
}

std::size_t f32_bytes(std::int64_t n) {
  return aligned_bytes(static_cast<std::size_t>(n) * sizeof(float));
}

void to_bf16(const float* src, bf16* dst, std::int64_t n, cudaStream_t stream) {
  f32_to_bf16<<<detail::grid_for(n), detail::kBlock, 0, stream>>>(src, dst, n);
  check_launch("f32_to_bf16");
}

void to_f32(const bf16* src, float* dst, std::int64_t n, cudaStream_t stream) {
  bf16_to_f32<<<detail::grid_for(n), detail::kBlock, 0, stream>>>(src, dst, n);
  check_launch("bf16_to_f32");
}

void launch_forward(const bf16* qkv, bf16* out, float* lse, std::int64_t batch, std::int64_t seq,
                    std::int64_t heads, cudaStream_t stream) {
  check_aligned(qkv, 16, "qkv");
  check_aligned(out, 4, "out");
  check_cuda(cudaFuncSetAttribute(fa2_forward, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kFwdSmem)),
             "cudaFuncSetAttribute(fa2_forward)");
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(kDh));
  fa2_forward<<<tile_grid(batch, seq, heads, kFwdRows), kFwdThreads, kFwdSmem, stream>>>(
      qkv, out, lse, static_cast<int>(seq), static_cast<int>(heads), scale_log2);
  check_launch("fa2_forward");
}

template <typename OutT>
void launch_backward(const bf16* qkv, const bf16* out, const float* lse, const bf16* dout,
                     OutT* dqkv, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                     void* scratch, cudaStream_t stream) {
  check_aligned(qkv, 16, "qkv");
  check_aligned(out, 4, "out");
  check_aligned(dout, 16, "dout");
  check_aligned(dqkv, 2 * sizeof(OutT), "dqkv");
  check_aligned(scratch, 16, "scratch");
  auto* dsum = static_cast<float*>(scratch);
  float* dq = reinterpret_cast<float*>(static_cast<unsigned char*>(scratch) +
                                       f32_bytes(batch * heads * seq));
  const std::int64_t rows = batch * seq;
  const std::int64_t d_model = heads * kDh;
  constexpr int kPrepThreads = 256;
  const auto prep_blocks =
      static_cast<unsigned>((rows * heads * 32 + kPrepThreads - 1) / kPrepThreads);
  fa2_backward_prep<<<prep_blocks, kPrepThreads, 0, stream>>>(
      out, dout, dsum, dq, rows, static_cast<int>(seq), static_cast<int>(heads));
  check_launch("fa2_backward_prep");
  check_cuda(cudaFuncSetAttribute(fa2_backward<OutT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kBwdSmem)),
             "cudaFuncSetAttribute(fa2_backward)");
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDh));
  fa2_backward<OutT><<<tile_grid(batch, seq, heads, kBwdKeys), kBwdThreads, kBwdSmem, stream>>>(
      qkv, dout, lse, dsum, dq, dqkv, static_cast<int>(seq), static_cast<int>(heads), scale,
      scale * kLog2e);
  check_launch("fa2_backward");
  fa2_write_dq<OutT>
      <<<detail::grid_for(rows * d_model), detail::kBlock, 0, stream>>>(dq, dqkv, rows, d_model);
  check_launch("fa2_write_dq");
}

// The region of `scratch` `offset` bytes in.
template <typename T>
T* region(void* scratch, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<unsigned char*>(scratch) + offset);
}

}  // namespace

bool flash_attention2_supported(std::int64_t d_head) {
  return d_head == kDh;
}

void flash_attention2_forward_bf16(const Bf16Bits* qkv, Bf16Bits* out, float* lse,
                                   std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                   std::int64_t d_head, void* stream) {
  check_shape(batch, seq, heads, d_head);
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  require_bf16_mma();
  launch_forward(reinterpret_cast<const bf16*>(qkv), reinterpret_cast<bf16*>(out), lse, batch, seq,
                 heads, as_stream(stream));
}

std::size_t flash_attention2_backward_bf16_scratch_bytes(std::int64_t batch, std::int64_t seq,
                                                         std::int64_t heads) {
  return f32_bytes(batch * heads * seq) + f32_bytes(batch * seq * heads * kDh);
}

void flash_attention2_backward_bf16(const Bf16Bits* qkv, const Bf16Bits* out, const float* lse,
                                    const Bf16Bits* dout, Bf16Bits* dqkv, std::int64_t batch,
                                    std::int64_t seq, std::int64_t heads, std::int64_t d_head,
                                    void* scratch, void* stream) {
  check_shape(batch, seq, heads, d_head);
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  require_bf16_mma();
  launch_backward(reinterpret_cast<const bf16*>(qkv), reinterpret_cast<const bf16*>(out), lse,
                  reinterpret_cast<const bf16*>(dout), reinterpret_cast<bf16*>(dqkv), batch, seq,
                  heads, scratch, as_stream(stream));
}

std::size_t flash_attention2_forward_scratch_bytes(std::int64_t batch, std::int64_t seq,
                                                   std::int64_t heads) {
  const std::int64_t d_model = heads * kDh;
  return bf16_bytes(batch * seq * 3 * d_model) + bf16_bytes(batch * seq * d_model);
}

void flash_attention2_forward(const float* qkv, float* out, float* lse, std::int64_t batch,
                              std::int64_t seq, std::int64_t heads, std::int64_t d_head,
                              void* scratch, void* stream) {
  check_shape(batch, seq, heads, d_head);
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  require_bf16_mma();
  check_aligned(scratch, 16, "scratch");
  const cudaStream_t s = as_stream(stream);
  const std::int64_t n_out = batch * seq * heads * kDh;
  bf16* qkv16 = region<bf16>(scratch, 0);
  bf16* out16 = region<bf16>(scratch, bf16_bytes(3 * n_out));
  to_bf16(qkv, qkv16, 3 * n_out, s);
  launch_forward(qkv16, out16, lse, batch, seq, heads, s);
  to_f32(out16, out, n_out, s);
}

std::size_t flash_attention2_backward_scratch_bytes(std::int64_t batch, std::int64_t seq,
                                                    std::int64_t heads) {
  const std::int64_t n_out = batch * seq * heads * kDh;
  return bf16_bytes(3 * n_out) + 2 * bf16_bytes(n_out) +
         flash_attention2_backward_bf16_scratch_bytes(batch, seq, heads);
}

void flash_attention2_backward(const float* qkv, const float* out, const float* lse,
                               const float* dout, float* dqkv, std::int64_t batch, std::int64_t seq,
                               std::int64_t heads, std::int64_t d_head, void* scratch,
                               void* stream) {
  check_shape(batch, seq, heads, d_head);
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  require_bf16_mma();
  check_aligned(scratch, 16, "scratch");
  const cudaStream_t s = as_stream(stream);
  const std::int64_t n_out = batch * seq * heads * kDh;
  bf16* qkv16 = region<bf16>(scratch, 0);
  bf16* out16 = region<bf16>(scratch, bf16_bytes(3 * n_out));
  bf16* dout16 = region<bf16>(scratch, bf16_bytes(3 * n_out) + bf16_bytes(n_out));
  void* rest = region<unsigned char>(scratch, bf16_bytes(3 * n_out) + 2 * bf16_bytes(n_out));
  to_bf16(qkv, qkv16, 3 * n_out, s);
  to_bf16(out, out16, n_out, s);
  to_bf16(dout, dout16, n_out, s);
  launch_backward(qkv16, out16, lse, dout16, dqkv, batch, seq, heads, rest, s);
}

}  // namespace tandem::models::cuda
