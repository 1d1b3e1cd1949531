#include <cuda_bf16.h>
#include <mma.h>

#include <climits>
#include <cmath>

#include "models/kernels/cuda/flash_attention.hpp"
#include "models/kernels/cuda/launch.cuh"

// One block of 4 warps per (64-row tile, head, sample); each warp owns 16 rows of the tile, so
// the softmax bookkeeping of a row never leaves its warp. Tiles live in shared memory as bf16
// (rows padded by 16 bytes against bank conflicts; every fragment pointer stays 32-byte
// aligned, as wmma requires); scores, probabilities' f32 copies and the output accumulator as
// f32. wmma's accumulator layout is opaque, so whatever is rescaled or masked element by element
// goes through shared memory; dK and dV, which are only ever added to, stay in fragments.
namespace tandem::models::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using detail::as_stream;
using detail::check_launch;
using detail::warp_sum;

constexpr int kTile = 64;  // query rows and key rows per tile
constexpr int kDh = 64;    // head size (a tile's width)
constexpr int kWarps = kTile / 16;
constexpr int kThreads = 32 * kWarps;
constexpr int kLdh = kDh + 8;    // bf16 row stride
constexpr int kLdf = kTile + 4;  // f32 row stride (kTile == kDh: scores and outputs alike)
constexpr std::size_t kHalfTile = sizeof(bf16) * kTile * kLdh;
constexpr std::size_t kFloatTile = sizeof(float) * kTile * kLdf;
// Forward: q, k, v, p (bf16); scores, output (f32); row max and sum.
constexpr std::size_t kForwardSmem = 4 * kHalfTile + 2 * kFloatTile + 2 * kTile * sizeof(float);
// Backward: k, v, q, dO, P^T, dS^T (bf16); P^T, dP^T, dQ (f32); lse and rowsum(dO * O).
constexpr std::size_t kBackwardSmem = 6 * kHalfTile + 3 * kFloatTile + 2 * kTile * sizeof(float);

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAt = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Rows [0, 64) x columns [0, 64) of a row-major f32 matrix (row stride ld) into a bf16 tile;
// rows from `valid` on are zeros.
__device__ void load_tile(bf16* dst, const float* src, std::int64_t ld, int valid) {
  constexpr int kQuads = kDh / 4;
  for (int i = static_cast<int>(threadIdx.x); i < kTile * kQuads; i += kThreads) {
    const int r = i / kQuads;
    const int c = (i % kQuads) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < valid) v = *reinterpret_cast<const float4*>(src + r * ld + c);
    auto* d = reinterpret_cast<__nv_bfloat162*>(dst + r * kLdh + c);
    d[0] = __floats2bfloat162_rn(v.x, v.y);
    d[1] = __floats2bfloat162_rn(v.z, v.w);
  }
}

// C (16 x 64, f32, row stride kLdf) = A (16 x 64) * B (64 x 64), A row-major at `a`, B given as
// B^T row-major at `bt` (a tile whose rows are B's columns): the products of scores.
__device__ void rows_times_tile_t(const bf16* a, const bf16* bt, float* c) {
  for (int n = 0; n < kTile / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < kDh / 16; ++kk) {
      FragA fa;
      FragBt fb;
      wmma::load_matrix_sync(fa, a + kk * 16, kLdh);
      wmma::load_matrix_sync(fb, bt + n * 16 * kLdh + kk * 16, kLdh);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, kLdf, wmma::mem_row_major);
  }
}

// acc[n] += A (16 x 64, row-major at `a`) * B (64 x 64, row-major tile at `b`), columns 16 n.
__device__ void accumulate_rows_times_tile(const bf16* a, const bf16* b, FragC (&acc)[kDh / 16]) {
  for (int n = 0; n < kDh / 16; ++n) {
    for (int kk = 0; kk < kTile / 16; ++kk) {
      FragA fa;
      FragB fb;
      wmma::load_matrix_sync(fa, a + kk * 16, kLdh);
      wmma::load_matrix_sync(fb, b + kk * 16 * kLdh + n * 16, kLdh);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    flash_forward(const float* qkv, float* out, float* lse, int seq, int heads, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kTile * kLdh;
  bf16* vs = ks + kTile * kLdh;
  bf16* ps = vs + kTile * kLdh;
  float* ss = reinterpret_cast<float*>(ps + kTile * kLdh);
  float* os = ss + kTile * kLdf;
  float* row_max = os + kTile * kLdf;
  float* row_sum = row_max + kTile;

  const int tiles = (seq + kTile - 1) / kTile;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int q0 = qt * kTile;
  const std::int64_t d_model = static_cast<std::int64_t>(heads) * kDh;
  const std::int64_t ld = 3 * d_model;
  const float* sample = qkv + static_cast<std::int64_t>(b) * seq * ld;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int r0 = warp * 16;

  load_tile(qs, sample + q0 * ld + h * kDh, ld, min(kTile, seq - q0));
  for (int i = static_cast<int>(threadIdx.x); i < kTile * kLdf; i += kThreads) os[i] = 0.0f;
  if (threadIdx.x < kTile) {
    row_max[threadIdx.x] = -INFINITY;
    row_sum[threadIdx.x] = 0.0f;
  }
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the last tile's k and v are read by every warp
    load_tile(ks, sample + k0 * ld + d_model + h * kDh, ld, min(kTile, seq - k0));
    load_tile(vs, sample + k0 * ld + 2 * d_model + h * kDh, ld, min(kTile, seq - k0));
    __syncthreads();
    rows_times_tile_t(qs + r0 * kLdh, ks, ss + r0 * kLdf);
    __syncwarp();
    {
      // Two lanes per row, 32 columns each: one shuffle joins a row's halves.
      const int r = r0 + (lane >> 1);
      const int q = q0 + r;
      const int c0 = (lane & 1) * 32;
      float s[32];
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 32; j += 4) {
        const float4 v = *reinterpret_cast<const float4*>(ss + r * kLdf + c0 + j);
        const float vs4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + c0 + j + e;
          s[j + e] = (key <= q && key < seq) ? vs4[e] * scale : -INFINITY;
          mx = fmaxf(mx, s[j + e]);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = row_max[r];
      const float m_new = fmaxf(m_old, mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing unmasked yet
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 32; j += 2) {
        const float p0 = __expf(s[j] - base);
        const float p1 = __expf(s[j + 1] - base);
        sum += p0 + p1;
        *reinterpret_cast<__nv_bfloat162*>(ps + r * kLdh + c0 + j) = __floats2bfloat162_rn(p0, p1);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      const float alpha = __expf(m_old - base);  // 0 while m_old is -inf
#pragma unroll
      for (int j = 0; j < 32; j += 4) {
        auto* o = reinterpret_cast<float4*>(os + r * kLdf + c0 + j);
        float4 v = *o;
        v.x *= alpha;
        v.y *= alpha;
        v.z *= alpha;
        v.w *= alpha;
        *o = v;
      }
      __syncwarp();  // both lanes of the row have read row_max[r]
      if ((lane & 1) == 0) {
        row_max[r] = m_new;
        row_sum[r] = row_sum[r] * alpha + sum;
      }
    }
    __syncwarp();
    FragC acc[kDh / 16];
    for (int n = 0; n < kDh / 16; ++n) {
      wmma::load_matrix_sync(acc[n], os + r0 * kLdf + n * 16, kLdf, wmma::mem_row_major);
    }
    accumulate_rows_times_tile(ps + r0 * kLdh, vs, acc);
    for (int n = 0; n < kDh / 16; ++n) {
      wmma::store_matrix_sync(os + r0 * kLdf + n * 16, acc[n], kLdf, wmma::mem_row_major);
    }
    __syncwarp();
  }
  for (int rr = 0; rr < 16; ++rr) {
    const int r = r0 + rr;
    const int q = q0 + r;
    if (q >= seq) break;
    const float inv = 1.0f / row_sum[r];
    float* o = out + (static_cast<std::int64_t>(b) * seq + q) * d_model + h * kDh;
    for (int e = 0; e < 2; ++e) o[lane + 32 * e] = os[r * kLdf + lane + 32 * e] * inv;
    if (lane == 0) {
      lse[(static_cast<std::int64_t>(b) * heads + h) * seq + q] = row_max[r] + logf(row_sum[r]);
    }
  }
#else
  __trap();  // built for a GPU without bf16 tensor cores: the host never launches it there
#endif
}

// One warp per (position, head): dsum = rowsum(dO * O), and the q part of dqkv zeroed for the
// backward kernel's atomic additions.
__global__ void flash_backward_prep(const float* out, const float* dout, float* dsum, float* dqkv,
                                    std::int64_t rows, int seq, int heads) {
  const std::int64_t w = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (w >= rows * heads) return;
  const std::int64_t row = w / heads;
  const int h = static_cast<int>(w % heads);
  const std::int64_t d_model = static_cast<std::int64_t>(heads) * kDh;
  const float* o = out + row * d_model + h * kDh;
  const float* g = dout + row * d_model + h * kDh;
  const float s = warp_sum(o[lane] * g[lane] + o[lane + 32] * g[lane + 32]);
  if (lane == 0) {
    const std::int64_t b = row / seq;
    dsum[(b * heads + h) * seq + row % seq] = s;
  }
  float* dq = dqkv + row * 3 * d_model + h * kDh;
  dq[lane] = 0.0f;
  dq[lane + 32] = 0.0f;
}

// One block per (key tile, head, sample): dK and dV of the tile's keys over every query tile at
// or after it; dQ added atomically (each query tile hears from every key tile before it).
__global__ void __launch_bounds__(kThreads)
    flash_backward(const float* qkv, const float* dout, const float* lse, const float* dsum,
                   float* dqkv, int seq, int heads, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kTile * kLdh;
  bf16* qs = vs + kTile * kLdh;
  bf16* dos = qs + kTile * kLdh;
  bf16* pts = dos + kTile * kLdh;   // P^T: rows are keys
  bf16* dsts = pts + kTile * kLdh;  // dS^T
  float* sp = reinterpret_cast<float*>(dsts + kTile * kLdh);
  float* sdp = sp + kTile * kLdf;
  float* dqs = sdp + kTile * kLdf;
  float* lse_s = dqs + kTile * kLdf;
  float* dsum_s = lse_s + kTile;

  const int tiles = (seq + kTile - 1) / kTile;
  const int kt = static_cast<int>(blockIdx.x);  // the first key tiles see the most queries
  const int h = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int k0 = kt * kTile;
  const std::int64_t d_model = static_cast<std::int64_t>(heads) * kDh;
  const std::int64_t ld = 3 * d_model;
  const float* sample = qkv + static_cast<std::int64_t>(b) * seq * ld;
  float* dsample = dqkv + static_cast<std::int64_t>(b) * seq * ld;
  const std::int64_t row_stats = (static_cast<std::int64_t>(b) * heads + h) * seq;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int r0 = warp * 16;

  load_tile(ks, sample + k0 * ld + d_model + h * kDh, ld, min(kTile, seq - k0));
  load_tile(vs, sample + k0 * ld + 2 * d_model + h * kDh, ld, min(kTile, seq - k0));
  FragC dk[kDh / 16], dv[kDh / 16];
  for (int n = 0; n < kDh / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  for (int qt = kt; qt < tiles; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // the last query tile's q, dO and dS^T are read by every warp
    load_tile(qs, sample + q0 * ld + h * kDh, ld, min(kTile, seq - q0));
    load_tile(dos, dout + (static_cast<std::int64_t>(b) * seq + q0) * d_model + h * kDh, d_model,
              min(kTile, seq - q0));
    if (threadIdx.x < kTile) {
      const int q = q0 + static_cast<int>(threadIdx.x);
      lse_s[threadIdx.x] = q < seq ? lse[row_stats + q] : INFINITY;
      dsum_s[threadIdx.x] = q < seq ? dsum[row_stats + q] : 0.0f;
    }
    __syncthreads();
    // This warp's 16 keys against the tile's 64 queries: S^T = K Q^T and dP^T = V dO^T.
    rows_times_tile_t(ks + r0 * kLdh, qs, sp + r0 * kLdf);
    rows_times_tile_t(vs + r0 * kLdh, dos, sdp + r0 * kLdf);
    __syncwarp();
    {
      // Two lanes per key row, 32 query columns each.
      const int r = r0 + (lane >> 1);
      const int key = k0 + r;
      const int c0 = (lane & 1) * 32;
#pragma unroll
      for (int j = 0; j < 32; j += 4) {
        const float4 sv = *reinterpret_cast<const float4*>(sp + r * kLdf + c0 + j);
        const float4 dv4 = *reinterpret_cast<const float4*>(sdp + r * kLdf + c0 + j);
        const float s4[4] = {sv.x, sv.y, sv.z, sv.w};
        const float d4[4] = {dv4.x, dv4.y, dv4.z, dv4.w};
        float p[4], ds[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = c0 + j + e;
          const int q = q0 + c;
          p[e] = (q >= key && q < seq && key < seq) ? __expf(s4[e] * scale - lse_s[c]) : 0.0f;
          ds[e] = p[e] * (d4[e] - dsum_s[c]);
        }
        auto* pt = reinterpret_cast<__nv_bfloat162*>(pts + r * kLdh + c0 + j);
        auto* dt = reinterpret_cast<__nv_bfloat162*>(dsts + r * kLdh + c0 + j);
        pt[0] = __floats2bfloat162_rn(p[0], p[1]);
        pt[1] = __floats2bfloat162_rn(p[2], p[3]);
        dt[0] = __floats2bfloat162_rn(ds[0], ds[1]);
        dt[1] = __floats2bfloat162_rn(ds[2], ds[3]);
      }
    }
    __syncwarp();
    accumulate_rows_times_tile(pts + r0 * kLdh, dos, dv);  // dV += P^T dO
    accumulate_rows_times_tile(dsts + r0 * kLdh, qs, dk);  // dK += dS^T Q (scaled at the end)
    __syncthreads();                                       // every warp's rows of dS^T are written
    // dQ for the tile's queries r0..r0+15: dS K, dS read as the transpose of dS^T.
    for (int n = 0; n < kDh / 16; ++n) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < kTile / 16; ++kk) {
        FragAt fa;
        FragB fb;
        wmma::load_matrix_sync(fa, dsts + kk * 16 * kLdh + r0, kLdh);
        wmma::load_matrix_sync(fb, ks + kk * 16 * kLdh + n * 16, kLdh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(dqs + r0 * kLdf + n * 16, acc, kLdf, wmma::mem_row_major);
    }
    __syncwarp();
#if __CUDA_ARCH__ >= 900
    // Four floats per atomic on Hopper: a quarter of the atomic operations.
    for (int i = lane; i < 16 * (kDh / 4); i += 32) {
      const int rr = i / (kDh / 4);
      const int c = (i % (kDh / 4)) * 4;
      const int q = q0 + r0 + rr;
      if (q >= seq) continue;
      const float4 v = *reinterpret_cast<const float4*>(dqs + (r0 + rr) * kLdf + c);
      atomicAdd(reinterpret_cast<float4*>(dsample + q * ld + h * kDh + c),
                make_float4(scale * v.x, scale * v.y, scale * v.z, scale * v.w));
    }
#else
    for (int rr = 0; rr < 16; ++rr) {
      const int q = q0 + r0 + rr;
      if (q >= seq) break;
      float* dq = dsample + q * ld + h * kDh;
      for (int e = 0; e < 2; ++e) {
        atomicAdd(dq + lane + 32 * e, scale * dqs[(r0 + rr) * kLdf + lane + 32 * e]);
      }
    }
#endif
  }
  // This warp's rows of sp and sdp are its own: staging for dK and dV.
  __syncwarp();
  for (int n = 0; n < kDh / 16; ++n) {
    wmma::store_matrix_sync(sp + r0 * kLdf + n * 16, dk[n], kLdf, wmma::mem_row_major);
    wmma::store_matrix_sync(sdp + r0 * kLdf + n * 16, dv[n], kLdf, wmma::mem_row_major);
  }
  __syncwarp();
  for (int rr = 0; rr < 16; ++rr) {
    const int key = k0 + r0 + rr;
    if (key >= seq) break;
    float* row = dsample + key * ld + h * kDh;
    for (int e = 0; e < 2; ++e) {
      const int c = lane + 32 * e;
      row[d_model + c] = scale * sp[(r0 + rr) * kLdf + c];
      row[2 * d_model + c] = sdp[(r0 + rr) * kLdf + c];
    }
  }
#else
  __trap();
#endif
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("flash attention: ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

// Shapes the kernels take; throws naming what does not fit.
void check_shape(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t d_head) {
  if (!flash_attention_supported(d_head)) {
    throw std::invalid_argument("flash attention: head size " + std::to_string(d_head) + " (only " +
                                std::to_string(kDh) + ")");
  }
  if (batch > 65535 || heads > 65535 || seq > INT_MAX / 2) {
    throw std::invalid_argument("flash attention: batch " + std::to_string(batch) + ", heads " +
                                std::to_string(heads) + " or seq " + std::to_string(seq) +
                                " too large for its grid");
  }
}

// One block per 64-row tile, head and sample.
dim3 tile_grid(std::int64_t batch, std::int64_t seq, std::int64_t heads) {
  return {static_cast<unsigned>((seq + kTile - 1) / kTile), static_cast<unsigned>(heads),
          static_cast<unsigned>(batch)};
}

// Ampere or later (bf16 tensor cores); the device the stream's work runs on is current.
void require_bf16_mma() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  int major = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "cudaDeviceGetAttribute");
  if (major < 8) {
    throw std::runtime_error("flash attention: needs compute capability 8.0 or later (device " +
                             std::to_string(device) + " has " + std::to_string(major) + ".x)");
  }
}

}  // namespace

bool flash_attention_supported(std::int64_t d_head) {
  return d_head == kDh;
}

void flash_attention_forward(const float* qkv, float* out, float* lse, std::int64_t batch,
                             std::int64_t seq, std::int64_t heads, std::int64_t d_head,
                             void* stream) {
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  check_shape(batch, seq, heads, d_head);
  require_bf16_mma();
  check_cuda(cudaFuncSetAttribute(flash_forward, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kForwardSmem)),
             "cudaFuncSetAttribute(flash_forward)");
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  flash_forward<<<tile_grid(batch, seq, heads), kThreads, kForwardSmem, as_stream(stream)>>>(
      qkv, out, lse, static_cast<int>(seq), static_cast<int>(heads), scale);
  check_launch("flash_forward");
}

std::size_t flash_attention_scratch_bytes(std::int64_t batch, std::int64_t seq,
                                          std::int64_t heads) {
  return static_cast<std::size_t>(batch * heads * seq) * sizeof(float);
}

void flash_attention_backward(const float* qkv, const float* out, const float* lse,
                              const float* dout, float* dqkv, std::int64_t batch, std::int64_t seq,
                              std::int64_t heads, std::int64_t d_head, void* scratch,
                              void* stream) {
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  check_shape(batch, seq, heads, d_head);
  require_bf16_mma();
  auto* dsum = static_cast<float*>(scratch);
  const std::int64_t rows = batch * seq;
  const std::int64_t warps = rows * heads;
  constexpr int kPrepThreads = 256;
  const auto prep_blocks = static_cast<unsigned>((warps * 32 + kPrepThreads - 1) / kPrepThreads);
  flash_backward_prep<<<prep_blocks, kPrepThreads, 0, as_stream(stream)>>>(
      out, dout, dsum, dqkv, rows, static_cast<int>(seq), static_cast<int>(heads));
  check_launch("flash_backward_prep");
  check_cuda(cudaFuncSetAttribute(flash_backward, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kBackwardSmem)),
             "cudaFuncSetAttribute(flash_backward)");
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  flash_backward<<<tile_grid(batch, seq, heads), kThreads, kBackwardSmem, as_stream(stream)>>>(
      qkv, dout, lse, dsum, dqkv, static_cast<int>(seq), static_cast<int>(heads), scale);
  check_launch("flash_backward");
}

}  // namespace tandem::models::cuda
