#include <cublasLt.h>
#include <cuda_runtime.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "models/kernels/cuda/gemm_epilogue.hpp"
#include "models/kernels/cuda/launch.cuh"

namespace tandem::models::cuda {
namespace {

// The descriptors of this many shapes stay cached per stream; a model has a few dozen linear
// shapes at most, so reaching the bound means shapes vary without end and the cache restarts.
constexpr std::size_t kMaxPlans = 256;
// cuBLASLt's largest alignment class: pointers aligned to it (every allocator block) are treated
// alike.
constexpr std::uintptr_t kMaxAlign = 256;
// cuBLASLt's constraint on the leading dimension of GELU's auxiliary matrix.
constexpr std::int64_t kGeluAuxMultiple = 8;

// Which public call a product serves, for the messages.
struct Site {
  const char* op;
  LinearDims dims;
  const char* precision;
};

std::string describe(const Site& site) {
  return std::string(site.op) + " rows=" + std::to_string(site.dims.rows) +
         " in=" + std::to_string(site.dims.in) + " out=" + std::to_string(site.dims.out) +
         " precision=" + site.precision;
}

[[noreturn]] void fail(const Site& site, const std::string& what) {
  throw std::runtime_error("cuda gemm_epilogue: " + describe(site) + ": " + what);
}

void check_lt(cublasStatus_t status, const char* what, const Site& site) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail(site, std::string(what) + " failed: " + cublasGetStatusString(status) + " (" +
                   std::to_string(static_cast<int>(status)) + ")");
  }
}

void check_cuda(cudaError_t status, const char* what, const Site& site) {
  if (status != cudaSuccess)
    fail(site, std::string(what) + " failed: " + cudaGetErrorString(status));
}

[[noreturn]] void invalid(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string("cuda gemm_epilogue: ") + op + ": " + what);
}

// One product in cuBLAS's column-major terms: D [m, n] = op(A) op(B) (+ beta D), then the
// epilogue. A row-major [r, c] matrix is the column-major [c, r] one with the same leading
// dimension, which is how the public calls map onto this.
struct Product {
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  cudaDataType ab_type = CUDA_R_32F;
  cudaDataType d_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  bool trans_a = false;
  bool trans_b = false;
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0;
  void* d = nullptr;
  std::int64_t ldd = 0;
  float beta = 0.0f;
  const void* bias = nullptr;  // the bias, or where the bias gradient goes
  const void* aux = nullptr;   // GELU's input: written forward, read backward
  std::int64_t aux_ld = 0;
};

// The alignment class of a pointer: the largest power of two up to kMaxAlign dividing it.
int alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address == 0) return 0;
  std::uintptr_t align = 1;
  while (align < kMaxAlign && address % (align * 2) == 0) align *= 2;
  return static_cast<int>(align);
}

// Everything cuBLASLt's heuristic sees: the shape and types, and the pointers only through their
// alignment (the bias and aux pointers sit in the descriptor, where the heuristic reads them).
struct PlanKey {
  int epilogue;
  int ab_type;
  int d_type;
  int compute;
  bool trans_a;
  bool trans_b;
  std::int64_t m, n, k, lda, ldb, ldd, aux_ld;
  int align_a, align_b, align_d, align_bias, align_aux;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey key_of(const Product& p) {
  return {static_cast<int>(p.epilogue),
          static_cast<int>(p.ab_type),
          static_cast<int>(p.d_type),
          static_cast<int>(p.compute),
          p.trans_a,
          p.trans_b,
          p.m,
          p.n,
          p.k,
          p.lda,
          p.ldb,
          p.ldd,
          p.aux_ld,
          alignment(p.a),
          alignment(p.b),
          alignment(p.d),
          alignment(p.bias),
          alignment(p.aux)};
}

struct DescDestroy {
  void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDestroy {
  void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PreferenceDestroy {
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using DescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, DescDestroy>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LayoutDestroy>;
using PreferencePtr =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PreferenceDestroy>;

// A cached product: its descriptor (whose bias and aux pointers each call sets), the layouts of
// A, B and D (C is D) and the algorithm the heuristic chose for them.
struct Plan {
  DescPtr desc;
  LayoutPtr a, b, d;
  cublasLtMatmulAlgo_t algo{};
};

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value,
              const char* what, const Site& site) {
  check_lt(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), what, site);
}

bool has_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD ||
         e == CUBLASLT_EPILOGUE_BGRADB;
}

bool has_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

// The pointers of this call, into the (cached) descriptor.
void set_pointers(cublasLtMatmulDesc_t desc, const Product& p, const Site& site) {
  if (has_bias(p.epilogue)) {
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, "set BIAS_POINTER", site);
  }
  if (has_aux(p.epilogue)) {
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, "set EPILOGUE_AUX_POINTER",
             site);
  }
}

LayoutPtr layout(cudaDataType type, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                 const Site& site) {
  cublasLtMatrixLayout_t raw = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&raw, type, static_cast<std::uint64_t>(rows),
                                      static_cast<std::uint64_t>(cols), ld),
           "cublasLtMatrixLayoutCreate", site);
  return LayoutPtr(raw);
}

DescPtr make_desc(const Product& p, const Site& site) {
  cublasLtMatmulDesc_t raw = nullptr;
  check_lt(cublasLtMatmulDescCreate(&raw, p.compute, CUDA_R_32F), "cublasLtMatmulDescCreate", site);
  DescPtr desc(raw);
  const std::int32_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::int32_t tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, ta, "set TRANSA", site);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, tb, "set TRANSB", site);
  const auto epilogue = static_cast<std::uint32_t>(p.epilogue);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "set EPILOGUE", site);
  if (has_aux(p.epilogue)) {
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld, "set EPILOGUE_AUX_LD",
             site);
  }
  set_pointers(desc.get(), p, site);
  return desc;
}

// The stored shape of an operand: op(X) is [rows, cols] in column-major terms, so X itself is
// [cols, rows] when transposed.
Plan make_plan(cublasLtHandle_t handle, const Product& p, std::size_t workspace, const Site& site) {
  Plan plan;
  plan.desc = make_desc(p, site);
  plan.a = p.trans_a ? layout(p.ab_type, p.k, p.m, p.lda, site)
                     : layout(p.ab_type, p.m, p.k, p.lda, site);
  plan.b = p.trans_b ? layout(p.ab_type, p.n, p.k, p.ldb, site)
                     : layout(p.ab_type, p.k, p.n, p.ldb, site);
  plan.d = layout(p.d_type, p.m, p.n, p.ldd, site);

  cublasLtMatmulPreference_t raw = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&raw), "cublasLtMatmulPreferenceCreate", site);
  PreferencePtr pref(raw);
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value, const char* what) {
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref.get(), attr, &value, sizeof(value)), what,
             site);
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(workspace),
           "set MAX_WORKSPACE_BYTES");
  // The heuristic otherwise assumes 256-byte aligned A, B, C and D.
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<std::uint32_t>(alignment(p.a)),
           "set MIN_ALIGNMENT_A_BYTES");
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<std::uint32_t>(alignment(p.b)),
           "set MIN_ALIGNMENT_B_BYTES");
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<std::uint32_t>(alignment(p.d)),
           "set MIN_ALIGNMENT_C_BYTES");
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<std::uint32_t>(alignment(p.d)),
           "set MIN_ALIGNMENT_D_BYTES");

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan.desc.get(), plan.a.get(), plan.b.get(),
                                     plan.d.get(), plan.d.get(), pref.get(), 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    fail(site, "cuBLASLt has no algorithm for this epilogue, shape and precision");
  }
  check_lt(status, "cublasLtMatmulAlgoGetHeuristic", site);
  check_lt(result.state, "cublasLtMatmulAlgoGetHeuristic (algorithm state)", site);
  plan.algo = result.algo;
  return plan;
}

// A cuBLASLt handle and the plans of one (device, stream). The mutex serialises the calls that
// share it: each call writes its pointers into a cached descriptor before enqueueing.
struct LtContext {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  std::map<PlanKey, Plan> plans;
};

// Never destroyed, like gemm.cu's cuBLAS handles: cublasLtDestroy after the CUDA runtime has
// begun tearing down at exit is undefined.
struct LtContexts {
  std::mutex mu;
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<LtContext>> by_stream;
};

LtContext& lt_context(int device, cudaStream_t stream, const Site& site) {
  static auto* all = new LtContexts;
  std::lock_guard<std::mutex> lock(all->mu);
  std::unique_ptr<LtContext>& slot = all->by_stream[{device, stream}];
  if (slot) return *slot;
  auto ctx = std::make_unique<LtContext>();
  check_lt(cublasLtCreate(&ctx->handle), "cublasLtCreate", site);
  slot = std::move(ctx);
  return *slot;
}

void run(const Product& p, const Site& site, void* stream) {
  cudaStream_t s = detail::as_stream(stream);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice", site);
  const detail::GemmWorkspace workspace = detail::gemm_workspace(stream);
  LtContext& ctx = lt_context(device, s, site);
  std::lock_guard<std::mutex> lock(ctx.mu);
  const PlanKey key = key_of(p);
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) {
    Plan plan = make_plan(ctx.handle, p, workspace.bytes, site);
    if (ctx.plans.size() >= kMaxPlans) ctx.plans.clear();
    it = ctx.plans.emplace(key, std::move(plan)).first;
  } else {
    set_pointers(it->second.desc.get(), p, site);
  }
  const Plan& plan = it->second;
  const float alpha = 1.0f;
  check_lt(cublasLtMatmul(ctx.handle, plan.desc.get(), &alpha, p.a, plan.a.get(), p.b, plan.b.get(),
                          &p.beta, p.d, plan.d.get(), p.d, plan.d.get(), &plan.algo, workspace.data,
                          workspace.bytes, s),
           "cublasLtMatmul", site);
}

// --- argument checks (before any CUDA call) ---

void require_dims(const char* op, LinearDims dims) {
  if (dims.rows < 1 || dims.in < 1 || dims.out < 1) {
    invalid(op, "dimensions must be >= 1, got rows=" + std::to_string(dims.rows) +
                    " in=" + std::to_string(dims.in) + " out=" + std::to_string(dims.out));
  }
}

void require(const char* op, const void* p, const char* name) {
  if (p == nullptr) invalid(op, std::string(name) + " is null");
}

void require_float_precision(const char* op, GemmPrecision precision) {
  if (precision != GemmPrecision::f32 && precision != GemmPrecision::tf32) {
    invalid(op, std::string("float operands take precision f32 or tf32, got ") +
                    gemm_precision_name(precision) + " (bf16 takes BFloat16 operands)");
  }
}

void require_gelu_features(const char* op, std::int64_t features, const char* name) {
  if (!gelu_epilogue_supported(features)) {
    invalid(op, std::string("the GELU epilogue needs ") + name + " a multiple of " +
                    std::to_string(kGeluAuxMultiple) + ", got " + std::to_string(features));
  }
}

cublasComputeType_t float_compute(GemmPrecision precision) {
  // CUBLAS_COMPUTE_32F: cuBLASLt has no math mode, so nothing turns it into TF32.
  return precision == GemmPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cublasLtEpilogue_t forward_epilogue(Activation act, bool bias) {
  switch (act) {
    case Activation::relu:
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Activation::gelu:
      return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Activation::none:
    case Activation::sigmoid:  // refused by check_forward: cuBLASLt has no such epilogue
    case Activation::tanh:
      break;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// y [rows, out] is column-major D [out, rows]; W [out, in] is column-major [in, out], so op(A) =
// W^T is [out, in]; x [rows, in] is column-major B [in, rows].
Product forward_product(const void* x, const void* w, const void* b, void* y, void* pre,
                        LinearDims dims, Activation act) {
  Product p;
  p.epilogue = forward_epilogue(act, b != nullptr);
  p.trans_a = true;
  p.m = dims.out;
  p.n = dims.rows;
  p.k = dims.in;
  p.a = w;
  p.lda = dims.in;
  p.b = x;
  p.ldb = dims.in;
  p.d = y;
  p.ldd = dims.out;
  p.bias = b;
  if (act == Activation::gelu) {
    p.aux = pre;
    p.aux_ld = dims.out;
  }
  return p;
}

void check_forward(const char* op, const void* x, const void* w, const void* y, const void* pre,
                   LinearDims dims, Activation act) {
  require_dims(op, dims);
  require(op, x, "x");
  require(op, w, "w");
  require(op, y, "y");
  if (act == Activation::sigmoid || act == Activation::tanh) {
    invalid(op, std::string("cuBLASLt has no ") + cpu::activation_name(act) +
                    " epilogue (none, relu, gelu)");
  }
  if (act == Activation::gelu) {
    require(op, pre, "pre (gelu keeps its input)");
    require_gelu_features(op, dims.out, "out");
  }
}

// dz [rows, in] = dy [rows, out] W [out, in]: column-major D [in, rows] = A B with A = W as
// column-major [in, out] and B = dy as column-major [out, rows]. pre [rows, in] has D's layout.
Product dgelu_product(const void* dy, const void* w, const void* pre, void* dz, void* db,
                      LinearDims dims) {
  Product p;
  p.epilogue = db != nullptr ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
  p.m = dims.in;
  p.n = dims.rows;
  p.k = dims.out;
  p.a = w;
  p.lda = dims.in;
  p.b = dy;
  p.ldb = dims.out;
  p.d = dz;
  p.ldd = dims.in;
  p.bias = db;
  p.aux = pre;
  p.aux_ld = dims.in;
  return p;
}

void check_dgelu(const char* op, const void* dy, const void* w, const void* pre, const void* dz,
                 LinearDims dims) {
  require_dims(op, dims);
  require(op, dy, "dy");
  require(op, w, "w");
  require(op, pre, "pre");
  require(op, dz, "dz");
  require_gelu_features(op, dims.in, "in");
}

// dW [out, in] = dz^T x: column-major D [in, out] = A op(B) with A = x as column-major
// [in, rows] and B = dz as column-major [out, rows], transposed to [rows, out]. BGRADB reduces
// B over the product's k (the rows), one sum per column of D: db [out].
Product bgrad_product(const void* dz, const void* x, float* dw, float* db, float beta,
                      LinearDims dims) {
  Product p;
  p.epilogue = db != nullptr ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
  p.trans_b = true;
  p.m = dims.in;
  p.n = dims.out;
  p.k = dims.rows;
  p.a = x;
  p.lda = dims.in;
  p.b = dz;
  p.ldb = dims.out;
  p.d = dw;
  p.ldd = dims.in;
  p.beta = beta;
  p.bias = db;
  return p;
}

void check_bgrad(const char* op, const void* dz, const void* x, const void* dw, LinearDims dims) {
  require_dims(op, dims);
  require(op, dz, "dz");
  require(op, x, "x");
  require(op, dw, "dw");
}

constexpr const char* kForward = "linear_forward_epilogue";
constexpr const char* kDgelu = "linear_backward_input_dgelu";
constexpr const char* kBgrad = "linear_backward_weight_bgrad";

void with_float_types(Product& p, GemmPrecision precision) {
  p.compute = float_compute(precision);
}

void with_bf16_types(Product& p, cudaDataType d_type) {
  p.ab_type = CUDA_R_16BF;
  p.d_type = d_type;
  p.compute = CUBLAS_COMPUTE_32F;
}

}  // namespace

bool gelu_epilogue_supported(std::int64_t features) {
  return features >= 1 && features % kGeluAuxMultiple == 0;
}

void linear_forward_epilogue(const float* x, const float* w, const float* b, float* y, float* pre,
                             LinearDims dims, Activation act, GemmPrecision precision,
                             void* stream) {
  require_float_precision(kForward, precision);
  check_forward(kForward, x, w, y, pre, dims, act);
  Product p = forward_product(x, w, b, y, pre, dims, act);
  with_float_types(p, precision);
  run(p, Site{kForward, dims, gemm_precision_name(precision)}, stream);
}

void linear_forward_epilogue(const BFloat16* x, const BFloat16* w, const BFloat16* b, BFloat16* y,
                             BFloat16* pre, LinearDims dims, Activation act, void* stream) {
  check_forward(kForward, x, w, y, pre, dims, act);
  Product p = forward_product(x, w, b, y, pre, dims, act);
  with_bf16_types(p, CUDA_R_16BF);
  run(p, Site{kForward, dims, "bf16"}, stream);
}

void linear_backward_input_dgelu(const float* dy, const float* w, const float* pre, float* dz,
                                 float* db, LinearDims dims, GemmPrecision precision,
                                 void* stream) {
  require_float_precision(kDgelu, precision);
  check_dgelu(kDgelu, dy, w, pre, dz, dims);
  Product p = dgelu_product(dy, w, pre, dz, db, dims);
  with_float_types(p, precision);
  run(p, Site{kDgelu, dims, gemm_precision_name(precision)}, stream);
}

void linear_backward_input_dgelu(const BFloat16* dy, const BFloat16* w, const BFloat16* pre,
                                 BFloat16* dz, BFloat16* db, LinearDims dims, void* stream) {
  check_dgelu(kDgelu, dy, w, pre, dz, dims);
  Product p = dgelu_product(dy, w, pre, dz, db, dims);
  with_bf16_types(p, CUDA_R_16BF);
  run(p, Site{kDgelu, dims, "bf16"}, stream);
}

void linear_backward_weight_bgrad(const float* dz, const float* x, float* dw, float* db, float beta,
                                  LinearDims dims, GemmPrecision precision, void* stream) {
  require_float_precision(kBgrad, precision);
  check_bgrad(kBgrad, dz, x, dw, dims);
  Product p = bgrad_product(dz, x, dw, db, beta, dims);
  with_float_types(p, precision);
  run(p, Site{kBgrad, dims, gemm_precision_name(precision)}, stream);
}

void linear_backward_weight_bgrad(const BFloat16* dz, const BFloat16* x, float* dw, float* db,
                                  float beta, LinearDims dims, void* stream) {
  check_bgrad(kBgrad, dz, x, dw, dims);
  Product p = bgrad_product(dz, x, dw, db, beta, dims);
  with_bf16_types(p, CUDA_R_32F);
  run(p, Site{kBgrad, dims, "bf16"}, stream);
}

}  // namespace tandem::models::cuda
