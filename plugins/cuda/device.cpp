#include "device.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <utility>

#include "minfer/dtype.h"
#include "minfer/op_contract.hpp"

namespace minfer::cuda {

void check_cuda(cudaError_t err, const std::string &what) {
  if (err == cudaSuccess) return;
  const minfer_status_code code =
      err == cudaErrorMemoryAllocation ? MINFER_ERR_OUT_OF_MEMORY : MINFER_ERR_DEVICE;
  throw sdk::Error(code, what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

DeviceScope::DeviceScope(int device) { check_cuda(cudaSetDevice(device), "cudaSetDevice"); }

CudaDevice::CudaDevice(int device, const DeviceOptions &opts, const sdk::Host &host)
    : device_(device), opts_(opts), host_(host) {
  DeviceScope scope(device_);
  int max_grid_x = 0;
  check_cuda(cudaDeviceGetAttribute(&max_grid_x, cudaDevAttrMaxGridDimX, device_),
             "reading the device's grid limit");
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&copy_event_, cudaEventDisableTiming), "cudaEventCreate");
  cfg_.stream = stream_;
  cfg_.max_blocks = opts_.max_grid_blocks > 0 && opts_.max_grid_blocks < max_grid_x
                        ? opts_.max_grid_blocks
                        : max_grid_x;
  cfg_.kernel_dtype = -1;
  int cc_major = 0;
  check_cuda(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device_), "reading the device's compute capability");
  cfg_.pdl = opts_.pdl && cc_major >= 9 ? 1 : 0;
  cfg_.row_groups = opts_.staged_row_groups ? 1 : 0;
  cfg_.twin_blocks = opts_.staged_twin_blocks ? 1 : 0;
  cfg_.short_rows_from = opts_.staged_short_rows_from;
  wgmma_ = opts_.mmq_wgmma && cc_major == 9 && minfer_cuda_wgmma_available();
  error_flag_ = static_cast<int32_t *>(alloc(2 * sizeof(int32_t)));
  check_cuda(cudaMemset(error_flag_, 0, 2 * sizeof(int32_t)), "clearing the error flag");
  check_cuda(cudaMallocHost(&error_flag_host_, 2 * sizeof(int32_t)), "allocating the error flag's host copy");
  node_names_.push_back("");  // tag 0 means "no error"
  attention_max_positions_ = minfer_cuda_attention_max_positions(device_);
  check_cuda(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_), "reading the device's SM count");
  router_counter_ = static_cast<unsigned *>(alloc(sizeof(unsigned)));
  check_cuda(cudaMemset(router_counter_, 0, sizeof(unsigned)), "clearing the router counter");
  ffn_counters_ = static_cast<unsigned *>(alloc(2 * sizeof(unsigned)));
  check_cuda(cudaMemset(ffn_counters_, 0, 2 * sizeof(unsigned)), "clearing the one-launch FFN counters");
  const size_t counter_bytes = size_t(minfer_cuda_flash_attention_counters()) * sizeof(int);
  attention_counters_ = static_cast<int *>(alloc(counter_bytes));
  check_cuda(cudaMemset(attention_counters_, 0, counter_bytes), "clearing the attention counters");
}

CudaDevice::~CudaDevice() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (error_flag_) cudaFree(error_flag_);
  if (error_flag_host_) cudaFreeHost(error_flag_host_);
  for (void *p : scratch_)
    if (p) cudaFree(p);
  if (attention_counters_) cudaFree(attention_counters_);
  if (router_counter_) cudaFree(router_counter_);
  if (ffn_counters_) cudaFree(ffn_counters_);
  if (copy_event_) cudaEventDestroy(copy_event_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaDevice::copy_from(CudaDevice &src, void *dst, const void *src_ptr, uint64_t bytes) {
  if (bytes == 0) return;
  if (&src == this) {
    DeviceScope scope(device_);
    check_cuda(cudaMemcpyAsync(dst, src_ptr, bytes, cudaMemcpyDeviceToDevice, stream_), "device copy");
    return;
  }
  if (src.device_ != device_) {  // peer access both ways, once per pair of devices
    static std::mutex mu;
    static std::set<std::pair<int, int>> enabled;
    const std::lock_guard<std::mutex> lock(mu);
    for (auto [from, to] : {std::pair{device_, src.device_}, std::pair{src.device_, device_}}) {
      if (!enabled.insert({from, to}).second) continue;
      int can = 0;
      check_cuda(cudaDeviceCanAccessPeer(&can, from, to), "cudaDeviceCanAccessPeer");
      if (!can) continue;
      DeviceScope scope(from);
      const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
      else check_cuda(err, "enabling peer access from cuda:" + std::to_string(from) + " to cuda:" + std::to_string(to));
    }
  }
  // The copy runs on the source's stream, after this stream's work (which may still read the
  // destination's old bytes) and before this stream's next (which reads the new ones); the
  // source's later work, which may reuse its bytes, follows the copy on its own stream.
  {
    DeviceScope scope(device_);
    check_cuda(cudaEventRecord(copy_event_, stream_), "device copy: cudaEventRecord");
  }
  DeviceScope scope(src.device_);
  check_cuda(cudaStreamWaitEvent(src.stream_, copy_event_, 0), "device copy: cudaStreamWaitEvent");
  check_cuda(cudaMemcpyPeerAsync(dst, device_, src_ptr, src.device_, bytes, src.stream_),
             "device copy from cuda:" + std::to_string(src.device_) + " to cuda:" + std::to_string(device_));
  check_cuda(cudaEventRecord(src.copy_event_, src.stream_), "device copy: cudaEventRecord");
  DeviceScope back(device_);
  check_cuda(cudaStreamWaitEvent(stream_, src.copy_event_, 0), "device copy: cudaStreamWaitEvent");
}

void *CudaDevice::alloc(uint64_t bytes) {
  DeviceScope scope(device_);
  void *p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free allocation error
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw sdk::Error(MINFER_ERR_OUT_OF_MEMORY,
                     "out of device memory on cuda:" + std::to_string(device_) + ": needed " +
                         std::to_string(bytes) + " bytes, " + std::to_string(free_b) +
                         " free of " + std::to_string(total_b) +
                         "; place fewer layers on this device or use a smaller model");
  }
  check_cuda(err, "cudaMalloc(" + std::to_string(bytes) + ")");
  return p;
}

void CudaDevice::release(void *p) {
  cudaSetDevice(device_);
  cudaFree(p);
}

int32_t CudaDevice::register_node(const std::string &name) {
  node_names_.push_back(name);
  return int32_t(node_names_.size() - 1);
}

void CudaDevice::check_launch(cudaError_t err) {
  auto kernel = [&] {
    std::string k = cfg_.kernel_name ? cfg_.kernel_name : "?";
    if (cfg_.kernel_dtype >= 0) k += std::string("<") + minfer_dtype_name(cfg_.kernel_dtype) + ">";
    return k;
  };
  if (err == cudaErrorNotSupported)
    throw sdk::Error(MINFER_ERR_UNSUPPORTED, "no CUDA kernel instantiated for this dtype");
  check_cuda(err, "launching kernel " + kernel());
  if (opts_.debug_sync && !capturing_) check_cuda(cudaStreamSynchronize(stream_), "kernel " + kernel() + " failed");
}

void CudaDevice::add_f32(const float *a, const float *b, float *y, int64_t n) {
  check_launch(minfer_cuda_add_f32(&cfg_, a, b, y, n));
}

void CudaDevice::mul_f32(const float *a, const float *b, float *y, int64_t n) {
  check_launch(minfer_cuda_mul_f32(&cfg_, a, b, y, n));
}

void CudaDevice::silu_f32(const float *x, float *y, int64_t n) {
  check_launch(minfer_cuda_silu_f32(&cfg_, x, y, n));
}

void CudaDevice::add_row_broadcast_f32(const float *a, const float *bias, float *y, int64_t rows,
                                       int64_t d) {
  check_launch(minfer_cuda_add_row_broadcast_f32(&cfg_, a, bias, y, rows, d));
}

void CudaDevice::convert_f32_f16(const float *x, uint16_t *y, int64_t n) {
  check_launch(minfer_cuda_convert_f32_f16(&cfg_, x, y, n, 0));
}

void CudaDevice::get_rows(int32_t table_dtype, const void *table, int64_t table_rows, int64_t d,
                          const int32_t *ids, int64_t n_ids, float *y, int32_t node_tag) {
  check_launch(minfer_cuda_get_rows(&cfg_, table_dtype, table, table_rows, d, ids, n_ids, y,
                                    error_flag_, node_tag));
}

void CudaDevice::dequantize_f16(int32_t dtype, const void *x, uint16_t *y, int64_t n) {
  check_launch(minfer_cuda_dequantize_f16(&cfg_, dtype, x, y, n));
}

namespace {
minfer_cuda_rope cuda_rope(const minfer_rope_params &p, const float *freq_factors, const minfer_cuda_head_norms *norms) {
  return {p.n_dims, p.mode, p.theta_base, p.freq_scale, freq_factors, sdk::rope_attn_factor(p), norms ? *norms : minfer_cuda_head_norms{}};
}
}  // namespace

void CudaDevice::rms_norm_f32(const float *x, const float *w, float *y, int64_t rows, int64_t d, float eps) {
  check_launch(minfer_cuda_rms_norm_f32(&cfg_, x, w, y, rows, d, eps));
}

void CudaDevice::rope_f32(const float *x, const int32_t *pos, float *y, int64_t tokens, int64_t heads,
                          const minfer_rope_params &p, const float *freq_factors, const float *x2, float *y2, int64_t heads2,
                          const minfer_cuda_head_norms *norms) {
  check_launch(minfer_cuda_rope_f32(&cfg_, x, pos, y, tokens, heads, p.head_dim, cuda_rope(p, freq_factors, norms), x2, y2, heads2));
}

void CudaDevice::argmax_f32(const float *x, int32_t *out, int64_t d, int64_t rows) {
  check_launch(minfer_cuda_argmax_f32(&cfg_, x, out, d, rows, scratch(6, minfer_cuda_argmax_scratch_bytes(d, rows))));
}


void CudaDevice::scale_f32(const float *x, float *y, int64_t n, float scale, float softcap) {
  check_launch(minfer_cuda_scale_f32(&cfg_, x, y, n, scale, softcap));
}

void CudaDevice::glu_f32(int32_t act, const float *g, const float *u, float *y, int64_t n) {
  check_launch(minfer_cuda_glu_f32(&cfg_, act, g, u, y, n));
}

bool CudaDevice::attention_rotates(int64_t tokens, bool decode, const minfer_attention_params &p, int32_t cache_dtype) const {
  return minfer_cuda_flash_attention_writes_kv(tokens, decode, p.n_head, p.n_kv_head, p.head_dim, cache_dtype) != 0;
}

void CudaDevice::attention(const float *q, const float *k, const float *v, void *kc, void *vc, int32_t cache_dtype, float *out,
                           int64_t tokens, bool decode, const minfer_attention_params &p, const minfer_cuda_kv_pages &kv,
                           int64_t max_positions, const int32_t *rope_pos, const minfer_rope_params *rope, const float *rope_factors,
                           const minfer_cuda_head_norms *norms) {
  if (rope && !attention_rotates(tokens, decode, p, cache_dtype))
    throw sdk::Error(MINFER_ERR_INTERNAL, "attention with its RoPE fused for a step the one-token kernel does not run");
  const int64_t kvd = int64_t(p.n_kv_head) * p.head_dim;
  const minfer_cuda_attn_scores scores{p.scale, sdk::attention_softcap(p), sdk::attention_window(p)};
  if (!minfer_cuda_flash_attention_writes_kv(tokens, decode, p.n_head, p.n_kv_head, p.head_dim, cache_dtype))
    check_launch(minfer_cuda_kv_write(&cfg_, k, v, kc, vc, cache_dtype, tokens, kvd, kv));
  if (minfer_cuda_flash_attention_supports(p.head_dim)) {
    const int64_t bytes =
        minfer_cuda_flash_attention_partials_bytes(tokens, decode, p.n_head, p.n_kv_head, p.head_dim, cache_dtype, max_positions, sm_count_);
    auto *partials = bytes > 0 ? static_cast<float *>(scratch(4, size_t(bytes))) : nullptr;
    const minfer_cuda_rope r = rope ? cuda_rope(*rope, rope_factors, norms) : minfer_cuda_rope{};
    return check_launch(minfer_cuda_flash_attention(&cfg_, q, k, v, kc, vc, cache_dtype, out, partials, attention_counters_, tokens, decode,
                                                    p.n_head, p.n_kv_head, p.head_dim, kv, max_positions, scores, sm_count_, rope_pos,
                                                    rope ? &r : nullptr));
  }
  check_launch(minfer_cuda_attention(&cfg_, q, kc, vc, cache_dtype, out, tokens, p.n_head, p.n_kv_head, p.head_dim, kv, max_positions,
                                     scores));
}

void CudaDevice::begin_capture() {
  check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "starting a CUDA Graph capture");
  capturing_ = true;
}

cudaGraphExec_t CudaDevice::end_capture() {
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamEndCapture(stream_, &graph), "ending a CUDA Graph capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check_cuda(err, "instantiating a CUDA Graph");
  return exec;
}

void CudaDevice::launch_graph(cudaGraphExec_t g) {
  check_cuda(cudaGraphLaunch(g, stream_), "launching the decode step's CUDA Graph");
}

void *CudaDevice::scratch(int slot, size_t bytes) {
  if (bytes > scratch_bytes_[slot]) {
    if (capturing_) throw sdk::Error(MINFER_ERR_INTERNAL, "a scratch buffer must not grow during a graph capture");
    check_cuda(cudaStreamSynchronize(stream_), "waiting before a scratch buffer grows");
    ++layout_generation_;
    if (scratch_[slot]) cudaFree(scratch_[slot]);
    scratch_[slot] = nullptr;
    scratch_[slot] = alloc(bytes);
    scratch_bytes_[slot] = bytes;
  }
  return scratch_[slot];
}

// Matmul paths: many tokens -> the int8 block types (qblock.cuh) with mmq on: int8 tensor-core
// GEMM on the blocks; other block types (or mmq off): dequantize to f16 + tensor-core GEMM.
// Few tokens: the int8 block types -> dp4a (activations to 8 bits); others -> the generic kernel. f32/f16/bf16
// weights stay off the f16 GEMM: it would round them.
void CudaDevice::add_matmul_weights(const std::vector<WeightRef> &weights) {
  for (const WeightRef &w : weights) {
    const minfer_dtype_traits t = minfer_dtype_info(w.dtype);
    matmul_weight_bytes_ += uint64_t(w.rows * w.cols / t.block_values * t.block_bytes);
    pending_weights_.push_back(w);
  }
  if (int64_t(matmul_weight_bytes_) < opts_.w16_cache_min_bytes) return;
  // Warm the cache: an f16 copy of each weight, its rows padded to the GEMM's 128 with zeros.
  DeviceScope scope(device_);
  for (const WeightRef &w : pending_weights_) {
    if (f16_copy(w.data) || w.cols % 16 || (opts_.mmq && minfer_cuda_mmq_supported(w.dtype))) continue;  // MMQ reads the blocks
    const int64_t rows_pad = (w.rows + 127) / 128 * 128;
    const size_t bytes = size_t(rows_pad * w.cols) * 2;
    void *copy = alloc(bytes);
    w16_cache_.emplace_back(w.data, copy);
    w16_cache_bytes_ += bytes;
    check_cuda(cudaMemsetAsync(copy, 0, bytes, stream_), "clearing an f16 weight copy");
    check_launch(minfer_cuda_dequantize_f16(&cfg_, w.dtype, w.data, static_cast<uint16_t *>(copy), w.rows * w.cols));
  }
  pending_weights_.clear();
  check_cuda(cudaStreamSynchronize(stream_), "warming the f16 weight cache");
  host_.log(MINFER_LOG_INFO, "f16 weight cache: " + std::to_string(w16_cache_.size()) + " weights, " +
                                 std::to_string(w16_cache_bytes_ >> 20) + " MiB (matmul weights total " +
                                 std::to_string(matmul_weight_bytes_ >> 20) + " MiB >= w16_cache_min_bytes)");
}

// Whether the few-token dp4a GEMV (mmvq.cu) beats MMQ at this many tokens. Measured on the
// H200 (scripts/gpu-fewtoken-sweep.sh: 7B gate, down and QKV shapes; Q4_0, Q8_0, Q4_K, Q6_K;
// 1-12 tokens): MMQ costs about the same from 2 to 64 tokens (66-122 us on a gate or down
// matrix, by type), the GEMV ~4-9 us more per token while its activations leave room for two
// blocks an SM, then ~18 us more per token. So: up to 8 tokens while 96 KiB holds them (a 7B
// gate at 8 tokens: 41.8 vs 66.9 us for Q4_0), else up to 4 (a 7B down at 6 tokens: 77.7 vs 67.7).
static bool mmvq_beats_mmq(int64_t k, int64_t tokens) {
  return tokens <= 4 || (tokens <= 8 && minfer_cuda_q8_act_bytes(k, tokens) <= size_t(96) << 10);
}

// Whether the few-token tensor-core matmul (few_token_mma.cu) beats both the dp4a GEMV and
// MMQ. Measured on the H200 (Q4_0, us per call): on the 7B gate and down matrices it costs 18
// from 2 to 8 tokens, 22 at 16, 30 at 32, 54-60 at 48 and 57-64 at 64 (plus its sum kernel
// where stream-K cut row blocks, ~5), against the GEMV's 23/28/42 on gate at 2/4/8 tokens
// (down 35/42 at 2/4) and MMQ's 66-75 from 2 to 32 and 68-80 at 48-64. Only a small square
// matrix (3584x3584, O) at 48-64 tokens goes the other way, by ~1 us of ~20: not worth a
// rule. One token keeps the GEMV, which quantizes x itself and takes the RMS norm in.
static bool few_token_mma_wins(int64_t, int64_t tokens) { return tokens >= 2 && tokens <= 64; }

CudaDevice::MatmulPath CudaDevice::matmul_path(int32_t w_dtype, int64_t k, int64_t tokens) const {
  constexpr int64_t kGemmMinTokens = 16;
  if (opts_.few_token_mma && few_token_mma_wins(k, tokens) && minfer_cuda_few_token_mma_supported(w_dtype, k, tokens))
    return MatmulPath::FewTokenMma;
  const bool few = opts_.mmq_min_tokens > 0 ? tokens < opts_.mmq_min_tokens : mmvq_beats_mmq(k, tokens);
  if (tokens >= 2 && !few && opts_.mmq && minfer_cuda_mmq_supported(w_dtype) && k % 32 == 0)
    return MatmulPath::Mmq;
  if (tokens == 1 && minfer_cuda_gemv_quantizing_supported(w_dtype, k)) return MatmulPath::Gemv;
  if (tokens >= kGemmMinTokens && minfer_dtype_info(w_dtype).is_quantized && k % 16 == 0) return MatmulPath::F16Gemm;
  if (minfer_cuda_mmvq_supported(w_dtype) && k % 32 == 0) return MatmulPath::Mmvq;
  return MatmulPath::Generic;
}

const void *CudaDevice::f16_copy(const void *w) const {
  for (const auto &[key, copy] : w16_cache_)
    if (key == w) return copy;
  return nullptr;
}

void CudaDevice::matmul(int32_t w_dtype, const void *w, const float *x, float *y, int64_t k, int64_t m, int64_t tokens,
                        const float *add, bool add_broadcast, float *unfused) {
  const MatmulPath path = matmul_path(w_dtype, k, tokens);
  if (path == MatmulPath::Mmq) {
    const minfer_cuda_mmq_part part{w, y, add, m, add_broadcast ? 1 : 0};
    return mmq(w_dtype, &part, 1, x, k, tokens);
  }
  if (path == MatmulPath::Gemv)  // decode: one launch, the add in it
    return matmul_group(x, k, tokens, {{w_dtype, w, y, m, add, add_broadcast, unfused}});
  if (path == MatmulPath::Mmvq) {  // the add in the launch too
    const minfer_cuda_mmq_part part{w, y, add, m, add_broadcast ? 1 : 0};
    return mmvq(w_dtype, &part, 1, nullptr, 0, x, k, tokens);
  }
  if (path == MatmulPath::FewTokenMma) {
    const minfer_cuda_mmq_part part{w, y, add, m, add_broadcast ? 1 : 0};
    return few_token_mma(w_dtype, &part, 1, nullptr, 0, x, k, tokens);
  }
  if (add) {  // a path without an epilogue: the product, then the add
    matmul(w_dtype, w, x, unfused, k, m, tokens);
    if (add_broadcast) add_row_broadcast_f32(unfused, add, y, tokens, m);
    else add_f32(unfused, add, y, tokens * m);
    return;
  }
  if (path == MatmulPath::F16Gemm) {
    const int64_t n_pad = (tokens + 127) / 128 * 128, m_pad = (m + 127) / 128 * 128;  // the tiled GEMM's tiles
    const void *cached = f16_copy(w);
    auto *w16 = static_cast<uint8_t *>(cached ? const_cast<void *>(cached) : scratch(1, size_t(m_pad * k) * 2));
    auto *x16 = static_cast<uint8_t *>(scratch(2, size_t(n_pad * k) * 2));
    auto *c = static_cast<float *>(scratch(3, size_t(n_pad * m_pad) * 4));
    if (!cached) check_launch(minfer_cuda_dequantize_f16(&cfg_, w_dtype, w, reinterpret_cast<uint16_t *>(w16), m * k));
    check_launch(minfer_cuda_convert_f32_f16(&cfg_, x, reinterpret_cast<uint16_t *>(x16), tokens * k, 1));
    if (m_pad > m && !cached)
      check_cuda(cudaMemsetAsync(w16 + size_t(m * k) * 2, 0, size_t((m_pad - m) * k) * 2, stream_), "padding weights");
    if (n_pad > tokens)
      check_cuda(cudaMemsetAsync(x16 + size_t(tokens * k) * 2, 0, size_t((n_pad - tokens) * k) * 2, stream_), "padding activations");
    check_launch(minfer_cuda_gemm_f16(&cfg_, x16, w16, c, n_pad, m_pad, k));
    check_cuda(cudaMemcpy2DAsync(y, size_t(m) * 4, c, size_t(m_pad) * 4, size_t(m) * 4, size_t(tokens), cudaMemcpyDeviceToDevice, stream_),
               "copying the GEMM result");
    return;
  }
  check_launch(minfer_cuda_matmul(&cfg_, w_dtype, w, x, y, k, m, tokens));
}

bool CudaDevice::one_gemv_launch(std::span<const int32_t> dtypes, int64_t k, int64_t tokens) const {
  if (dtypes.empty() || dtypes.size() > size_t(kMinferCudaGemvMaxParts) || matmul_path(dtypes[0], k, tokens) != MatmulPath::Gemv) return false;
  const auto b = std::find_if(dtypes.begin(), dtypes.end(), [&](int32_t d) { return d != dtypes[0]; });
  if (b == dtypes.end()) return true;
  return std::all_of(b, dtypes.end(), [&](int32_t d) { return d == *b; }) && minfer_cuda_gemv_mixable(dtypes[0], *b, k);
}

bool CudaDevice::folds_norm(std::span<const int32_t> dtypes, int64_t k, int64_t tokens, const float *norm_w) const {
  const bool one_few_token_launch = !dtypes.empty() && dtypes.size() <= size_t(kMinferCudaMmqMaxParts) &&
                                    matmul_path(dtypes[0], k, tokens) == MatmulPath::FewTokenMma &&
                                    std::all_of(dtypes.begin(), dtypes.end(), [&](int32_t d) { return d == dtypes[0]; });
  return (one_gemv_launch(dtypes, k, tokens) || one_few_token_launch) && reinterpret_cast<uintptr_t>(norm_w) % 16 == 0;
}

void CudaDevice::matmul_group(const float *x, int64_t k, int64_t tokens, const std::vector<MatmulPart> &parts, const RmsNormIn *norm) {
  std::vector<int32_t> dtypes;
  for (const MatmulPart &p : parts) dtypes.push_back(p.dtype);
  if (norm && !folds_norm(dtypes, k, tokens, norm->w))
    throw sdk::Error(MINFER_ERR_INTERNAL, "an RMS norm folded into a matmul step that cannot take it");
  const size_t first_b = size_t(std::find_if(dtypes.begin(), dtypes.end(), [&](int32_t d) { return d != dtypes[0]; }) - dtypes.begin());
  if (one_gemv_launch(dtypes, k, tokens)) {
    minfer_cuda_gemv_part gp[kMinferCudaGemvMaxParts];
    for (size_t i = 0; i < parts.size(); ++i) gp[i] = {parts[i].w, parts[i].y, parts[i].add, parts[i].m};
    const float *nw = norm ? norm->w : nullptr;
    const float eps = norm ? norm->eps : 0.0f;
    if (first_b == parts.size())
      return check_launch(minfer_cuda_gemv_quantizing(&cfg_, dtypes[0], gp, int32_t(parts.size()), nullptr, 0, x, k, nw, eps, sm_count_));
    return check_launch(minfer_cuda_gemv_quantizing_mixed(&cfg_, dtypes[0], dtypes[first_b], gp, int32_t(parts.size()), int32_t(first_b), x, k,
                                                          nw, eps, sm_count_));
  }
  const MatmulPath path = matmul_path(dtypes[0], k, tokens);
  if (first_b == parts.size() && parts.size() <= size_t(kMinferCudaMmqMaxParts) &&
      (path == MatmulPath::Mmq || path == MatmulPath::Mmvq || path == MatmulPath::FewTokenMma)) {
    // x quantized once, the group's weights in one launch: a layer's K and V alone would not fill the GPU
    minfer_cuda_mmq_part mp[kMinferCudaMmqMaxParts];
    for (size_t i = 0; i < parts.size(); ++i) mp[i] = {parts[i].w, parts[i].y, parts[i].add, parts[i].m, parts[i].add_broadcast ? 1 : 0};
    if (path == MatmulPath::Mmvq) return mmvq(dtypes[0], mp, int32_t(parts.size()), nullptr, 0, x, k, tokens);
    if (path == MatmulPath::FewTokenMma) return few_token_mma(dtypes[0], mp, int32_t(parts.size()), nullptr, 0, x, k, tokens, norm);
    return mmq(dtypes[0], mp, int32_t(parts.size()), x, k, tokens);
  }
  for (const MatmulPart &p : parts) matmul(p.dtype, p.w, x, p.y, k, p.m, tokens, p.add, p.add_broadcast, p.unfused);
}

// Only past 64 tokens, where it was measured (pp128 and up): its 128-token tiles would run a
// batched decode step of Q8_0 or Q5_K (the types without a few-token kernel) mostly empty.
bool CudaDevice::mmq_on_f16(int32_t w_dtype, int64_t k, int64_t tokens, const void *w) const {
  return opts_.mmq_f16 && tokens > 64 && minfer_cuda_mmq_f16_supported(w_dtype, k) && (!w || minfer_cuda_mmq_f16_aligned(w_dtype, w));
}

void CudaDevice::mmq(int32_t w_dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const float *x, int64_t k, int64_t tokens) {
  if (std::all_of(parts, parts + n_parts, [&](const minfer_cuda_mmq_part &p) { return mmq_on_f16(w_dtype, k, tokens, p.w); })) {
    const size_t partial_bytes = minfer_cuda_mmq_f16_partials_bytes(w_dtype, parts, n_parts, k, tokens, sm_count_, wgmma_);
    const minfer_cuda_mmq_split split{sm_count_, partial_bytes ? static_cast<float *>(scratch(5, partial_bytes)) : nullptr};
    return check_launch(minfer_cuda_mmq_f16(&cfg_, w_dtype, parts, n_parts, nullptr, 0, x_for_mmq_f16(x, k * tokens), k, tokens, &split, wgmma_));
  }
  const void *xq = quantize_for_mmq(x, k, tokens);
  const size_t partial_bytes = minfer_cuda_mmq_partials_bytes(w_dtype, parts, n_parts, k, tokens, sm_count_);
  const minfer_cuda_mmq_split split{sm_count_, partial_bytes ? static_cast<float *>(scratch(5, partial_bytes)) : nullptr};
  check_launch(minfer_cuda_mmq(&cfg_, w_dtype, parts, n_parts, xq, k, tokens, &split));
}

void CudaDevice::mmvq(int32_t w_dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up, int32_t act, const float *x,
                      int64_t k, int64_t tokens) {
  void *q = scratch(0, minfer_cuda_q8_act_bytes(k, tokens));  // activations to 8 bits once
  check_launch(minfer_cuda_quantize_q8_act(&cfg_, x, q, k * tokens));
  check_launch(minfer_cuda_mmvq(&cfg_, w_dtype, parts, n_parts, up, act, q, k, tokens, sm_count_));
}

void CudaDevice::few_token_mma(int32_t w_dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up, int32_t act,
                               const float *x, int64_t k, int64_t tokens, const RmsNormIn *norm) {
  const void *xin = nullptr;
  if (minfer_cuda_few_token_x_f16(w_dtype)) {  // x as f16 values (after the RMS norm where one is folded in)
    if (norm) {
      auto *normed = static_cast<float *>(scratch(3, size_t(k * tokens) * sizeof(float)));
      check_launch(minfer_cuda_rms_norm_f32(&cfg_, x, norm->w, normed, tokens, k, norm->eps));
      x = normed;
    }
    xin = to_f16(x, k * tokens);
  } else if (norm) {  // activations to 8 bits once, the RMS norm folded in: its launch saved
    void *q = scratch(0, minfer_cuda_mmq_x_bytes(k, tokens));
    check_launch(minfer_cuda_rms_norm_quantize_mmq_x(&cfg_, x, norm->w, norm->eps, q, k, tokens));
    xin = q;
  } else {
    xin = quantize_for_mmq(x, k, tokens);
  }
  const size_t partial_bytes = minfer_cuda_few_token_partials_bytes(w_dtype, parts, n_parts, up, k, tokens, sm_count_);
  auto *partials = static_cast<float *>(scratch(5, partial_bytes));
  check_launch(minfer_cuda_few_token_mma(&cfg_, w_dtype, parts, n_parts, up, act, xin, k, tokens, sm_count_, partials));
}

const void *CudaDevice::to_f16(const float *x, int64_t n) {
  auto *x16 = static_cast<uint16_t *>(scratch(2, size_t(n) * 2));
  check_launch(minfer_cuda_convert_f32_f16(&cfg_, x, x16, n, 1));
  return x16;
}

const void *CudaDevice::x_for_mmq_f16(const float *x, int64_t n) {
  if (!wgmma_) return to_f16(x, n);
  auto *x16 = static_cast<uint16_t *>(scratch(2, size_t(n) * 2));
  check_launch(minfer_cuda_convert_f32_f16_mma_order(&cfg_, x, x16, n));
  return x16;
}

const void *CudaDevice::quantize_for_mmq(const float *x, int64_t k, int64_t tokens) {
  void *q = scratch(0, minfer_cuda_mmq_x_bytes(k, tokens));
  check_launch(minfer_cuda_quantize_mmq_x(&cfg_, x, q, k, tokens));
  return q;
}

void CudaDevice::top_k_f32(const float *x, int32_t *out, int64_t n, int64_t k, int64_t rows, float *weights, bool normalize, float scale) {
  check_launch(minfer_cuda_top_k_f32(&cfg_, x, out, n, k, rows, weights, normalize ? 1 : 0, scale));
}

bool CudaDevice::moe_router_decode(minfer_cuda_moe_router r) {
  const auto aligned = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!minfer_cuda_moe_router_decode_supported(r.w_dtype, r.k, r.n_expert, r.k_used) || !aligned(r.x) || !aligned(r.norm_w) ||
      !aligned(r.h) || !aligned(r.w))
    return false;
  r.counter = router_counter_;
  check_launch(minfer_cuda_moe_router_decode(&cfg_, &r));
  return true;
}

// Whether a one-launch FFN's tensors sit where its kernel reads them (x, the norm weights and
// the attention output on 16 bytes, the weights as the expert kernels read them; `more`: the
// form's own). One that the option and types allow but whose addresses the kernel cannot take
// runs as separate launches; said once, so that an option without effect is explained.
bool CudaDevice::ffn_placed(bool more, const float *x, const float *norm_w, const minfer_cuda_ffn_attn_out &o, int32_t gate_dtype,
                            const void *gate, const void *up, int32_t down_dtype, const void *down, const char *option) {
  const auto aligned = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool placed = more && aligned(x) && aligned(norm_w) && (!o.w || aligned(o.x)) &&
                      minfer_cuda_expert_weights_aligned(gate_dtype, gate, up) && minfer_cuda_expert_weights_aligned(down_dtype, down, nullptr);
  if (!placed && !ffn_refusal_logged_) {
    ffn_refusal_logged_ = true;
    host_.log(MINFER_LOG_WARN, std::string("cuda option ") + option +
                                   ": an FFN's tensors are not on the 16 bytes its one-launch kernel reads them in; those FFNs run as separate launches");
  }
  return placed;
}

// The output projection as a first stage: the option on, its weights of the gate's type.
bool CudaDevice::attn_out_fusable(int32_t gate_dtype, int32_t o_dtype, int64_t ko) const {
  return ko == 0 || (opts_.attn_out_fused && o_dtype == gate_dtype);
}

bool CudaDevice::moe_ffn_fusable(int32_t router_dtype, int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m, int64_t n_expert,
                                 int64_t k_used, int32_t o_dtype, int64_t ko) const {
  return opts_.moe_ffn_fused && attn_out_fusable(gate_dtype, o_dtype, ko) &&
         minfer_cuda_moe_ffn_decode_supported(router_dtype, gate_dtype, down_dtype, k, m, n_expert, k_used, ko);
}

// The projection's type (not in the launch struct) was checked by the caller, hence gate_dtype for it.
bool CudaDevice::moe_ffn_decode(minfer_cuda_moe_ffn f) {
  const minfer_cuda_moe_router &r = f.router;
  const int64_t ko = f.attn_out.w ? f.attn_out.k : 0;
  if (!moe_ffn_fusable(r.w_dtype, f.gate_dtype, f.down_dtype, r.k, f.m, r.n_expert, r.k_used, f.gate_dtype, ko)) return false;
  const bool router_placed = reinterpret_cast<uintptr_t>(r.h) % 16 == 0 && reinterpret_cast<uintptr_t>(r.w) % 16 == 0;
  if (!ffn_placed(router_placed, r.x, r.norm_w, f.attn_out, f.gate_dtype, f.gate, f.up, f.down_dtype, f.down, "moe_ffn_fused")) return false;
  f.counters = ffn_counters_;
  check_launch(minfer_cuda_moe_ffn_decode(&cfg_, &f, sm_count_));
  return true;
}

bool CudaDevice::ffn_fusable(int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m, int32_t o_dtype, int64_t ko) const {
  return opts_.dense_ffn_fused && attn_out_fusable(gate_dtype, o_dtype, ko) && minfer_cuda_ffn_decode_supported(gate_dtype, down_dtype, k, m, ko);
}

bool CudaDevice::ffn_decode(minfer_cuda_ffn f) {
  const int64_t ko = f.attn_out.w ? f.attn_out.k : 0;
  if (!ffn_fusable(f.gate_dtype, f.down_dtype, f.k, f.m, f.gate_dtype, ko)) return false;  // the projection's type: as above
  if (!ffn_placed(true, f.x, f.norm_w, f.attn_out, f.gate_dtype, f.gate, f.up, f.down_dtype, f.down, "dense_ffn_fused")) return false;
  f.counters = ffn_counters_;
  check_launch(minfer_cuda_ffn_decode(&cfg_, &f, sm_count_));
  return true;
}

void CudaDevice::moe_weights_f32(const float *logits, const int32_t *ids, float *out, int64_t n_expert, int64_t k, int64_t rows,
                                 bool normalize, float scale) {
  check_launch(minfer_cuda_moe_weights_f32(&cfg_, logits, ids, out, n_expert, k, rows, normalize ? 1 : 0, scale));
}

void CudaDevice::moe_sum_f32(const float *y, const float *w, float *out, int64_t d, int64_t k, int64_t rows, const float *add) {
  check_launch(minfer_cuda_moe_sum_f32(&cfg_, y, w, add, out, d, k, rows));
}

bool CudaDevice::experts_staged(int32_t dtype, int64_t k, int64_t m, int64_t choices, int64_t rows, bool gated, bool x_per_pair) const {
  return opts_.staged_expert_pairs && gated && !x_per_pair && rows == 1 && minfer_cuda_experts_staged_supported(dtype, k, m, choices);
}

void CudaDevice::matmul_id(const ExpertMatmul &e, const float *x, const int32_t *ids, float *y, int32_t node_tag, float *gate_out,
                           float *up_out) {
  const int64_t pairs = e.choices * e.rows;
  if (pairs == 0) return;
  check_expert_alignment(e);
  const bool direct = int8_experts(e) && minfer_cuda_mmvq_id_decode_supported(pairs, e.choices, e.k);  // a decode token: no route launch
  void *route = direct ? nullptr : scratch(7, minfer_cuda_moe_route_bytes(pairs, e.n_expert));
  // A bad id's rows become NaN in what this call finally writes (y; gate_out too unfused).
  if (!direct)
    check_launch(minfer_cuda_moe_route(&cfg_, ids, pairs, e.n_expert, route, e.up && !int8_experts(e) ? gate_out : y, e.m, error_flag_, node_tag));
  const int32_t per_pair = e.x_per_pair ? 1 : 0;
  if (direct && experts_staged(e.dtype, e.k, e.m, e.choices, e.rows, e.up != nullptr, e.x_per_pair))
    return check_launch(minfer_cuda_experts_staged(&cfg_, e.dtype, e.w, e.up, e.act, x, y, e.k, e.m, e.n_expert, e.choices, ids, error_flag_,
                                                   node_tag, sm_count_));
  if (direct)
    return check_launch(minfer_cuda_mmvq_id_decode(&cfg_, e.dtype, e.w, e.up, e.act, x, y, e.k, e.m, e.n_expert, pairs, e.choices, per_pair,
                                                   ids, error_flag_, node_tag, sm_count_));
  if (int8_experts(e)) {
    const int64_t x_rows = e.x_per_pair ? pairs : e.rows;
    void *q = scratch(0, minfer_cuda_q8_act_bytes(e.k, x_rows));  // activations to 8 bits once
    check_launch(minfer_cuda_quantize_q8_act(&cfg_, x, q, e.k * x_rows));
    return check_launch(minfer_cuda_mmvq_id(&cfg_, e.dtype, e.w, e.up, e.act, q, y, e.k, e.m, e.n_expert, pairs, e.choices, per_pair, route,
                                            sm_count_));
  }
  if (!e.up) return check_launch(minfer_cuda_matmul_id(&cfg_, e.dtype, e.w, x, y, e.k, e.m, e.n_expert, pairs, e.choices, per_pair, route));
  check_launch(minfer_cuda_matmul_id(&cfg_, e.dtype, e.w, x, gate_out, e.k, e.m, e.n_expert, pairs, e.choices, per_pair, route));
  check_launch(minfer_cuda_matmul_id(&cfg_, e.dtype, e.up, x, up_out, e.k, e.m, e.n_expert, pairs, e.choices, per_pair, route));
  glu_f32(e.act, gate_out, up_out, y, pairs * e.m);
}

void CudaDevice::check_expert_alignment(const ExpertMatmul &e) {
  if (int8_experts(e) && !minfer_cuda_expert_weights_aligned(e.dtype, e.w, e.up))
    throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, std::string("expert weights (") + minfer_dtype_name(e.dtype) +
                                                      ") do not start on 16 bytes: the CUDA expert kernels read them in 16-byte pieces; "
                                                      "place the tensor at a 16-byte aligned offset of its buffer");
}

bool CudaDevice::int8_experts(const ExpertMatmul &e) { return minfer_cuda_mmvq_supported(e.dtype) && e.k % 32 == 0; }

bool CudaDevice::expert_sum_fusable(int32_t dtype, int64_t k, int64_t choices, int64_t rows) {
  return rows == 1 && minfer_cuda_mmvq_id_sum_decode_supported(dtype, choices, k);
}

bool CudaDevice::matmul_id_sum(const ExpertMatmul &e, const float *x, const int32_t *ids, const float *wts, const float *add, float *out,
                               int32_t node_tag) {
  if (e.up || !e.x_per_pair || !expert_sum_fusable(e.dtype, e.k, e.choices, e.rows)) return false;
  check_expert_alignment(e);
  check_launch(minfer_cuda_mmvq_id_sum_decode(&cfg_, e.dtype, e.w, x, ids, wts, add, out, e.k, e.m, e.n_expert, e.choices, error_flag_, node_tag,
                                              sm_count_));
  return true;
}

void CudaDevice::matmul_glu(int32_t act, int32_t w_dtype, const void *gate, const void *up, const float *x, float *y, int64_t k, int64_t m,
                            int64_t tokens, float *gate_out, float *up_out, const RmsNormIn *norm) {
  if (norm && !folds_norm({&w_dtype, 1}, k, tokens, norm->w))
    throw sdk::Error(MINFER_ERR_INTERNAL, "an RMS norm folded into a matmul step that cannot take it");
  if (matmul_path(w_dtype, k, tokens) == MatmulPath::Gemv) {
    const minfer_cuda_gemv_part part{gate, y, nullptr, m};
    return check_launch(minfer_cuda_gemv_quantizing(&cfg_, w_dtype, &part, 1, up, act, x, k, norm ? norm->w : nullptr,
                                                    norm ? norm->eps : 0.0f, sm_count_));
  }
  if (matmul_path(w_dtype, k, tokens) == MatmulPath::Mmvq) {  // one launch, y written once
    const minfer_cuda_mmq_part part{gate, y, nullptr, m, 0};
    return mmvq(w_dtype, &part, 1, up, act, x, k, tokens);
  }
  if (matmul_path(w_dtype, k, tokens) == MatmulPath::FewTokenMma) {  // one launch, y written once
    const minfer_cuda_mmq_part part{gate, y, nullptr, m, 0};
    return few_token_mma(w_dtype, &part, 1, up, act, x, k, tokens, norm);
  }
  if (matmul_path(w_dtype, k, tokens) == MatmulPath::Mmq && mmq_on_f16(w_dtype, k, tokens, gate) && mmq_on_f16(w_dtype, k, tokens, up)) {  // one launch, y written once
    const minfer_cuda_mmq_part part{gate, y, nullptr, m, 0};
    return check_launch(minfer_cuda_mmq_f16(&cfg_, w_dtype, &part, 1, up, act, x_for_mmq_f16(x, k * tokens), k, tokens, nullptr, wgmma_));
  }
  if (matmul_path(w_dtype, k, tokens) == MatmulPath::Mmq && minfer_cuda_mmq_glu_supported(w_dtype))  // one launch, y written once
    return check_launch(minfer_cuda_mmq_glu(&cfg_, w_dtype, act, gate, up, quantize_for_mmq(x, k, tokens), y, k, m, tokens));
  if (matmul_path(w_dtype, k, tokens) == MatmulPath::Mmq) {  // x quantized once, both weights in one launch
    const minfer_cuda_mmq_part mp[2] = {{gate, gate_out, nullptr, m, 0}, {up, up_out, nullptr, m, 0}};
    mmq(w_dtype, mp, 2, x, k, tokens);
  } else {
    matmul(w_dtype, gate, x, gate_out, k, m, tokens);
    matmul(w_dtype, up, x, up_out, k, m, tokens);
  }
  glu_f32(act, gate_out, up_out, y, tokens * m);
}

void CudaDevice::synchronize() {
  DeviceScope scope(device_);
  // The flag comes back in the same wait as the work (pinned memory, queued behind it).
  const cudaError_t copy = cudaMemcpyAsync(error_flag_host_, error_flag_, 2 * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_);
  check_cuda(cudaStreamSynchronize(stream_), "a kernel on cuda:" + std::to_string(device_) +
                                                 " failed (rerun with the option debug_sync: "
                                                 "true to name it)");
  check_cuda(copy, "reading the error flag");
  const int32_t flag[2] = {error_flag_host_[0], error_flag_host_[1]};
  if (flag[0] != 0) {
    check_cuda(cudaMemset(error_flag_, 0, sizeof flag), "clearing the error flag");
    const std::string node =
        flag[0] > 0 && size_t(flag[0]) < node_names_.size() ? node_names_[size_t(flag[0])] : "?";
    throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT,
                     "node '" + node + "': id " + std::to_string(flag[1]) +
                         " is out of range (get_rows: outside the table's rows; matmul_id: outside its experts); what it read it "
                         "for was filled with NaN");
  }
}

}  // namespace minfer::cuda
