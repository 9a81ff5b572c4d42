// plugins/cpu/cpu_backend.hpp — the CPU backend: host buffers and the op table.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <span>
#include <string>

#include "minfer/plugin.hpp"
#include "minfer/tensor.hpp"

namespace minfer::cpu {

class ThreadPool;

// Host memory, 64-byte aligned for any vector width.
class CpuBuffer : public sdk::Buffer {
 public:
  explicit CpuBuffer(uint64_t bytes);
  // Host memory the host keeps alive (ABI 1.1 buffer_wrap_host): read in place, never written.
  CpuBuffer(const void *host, uint64_t bytes) : Buffer(bytes), data_(static_cast<uint8_t *>(const_cast<void *>(host))), owned_(false) {}
  ~CpuBuffer() override;
  void write(uint64_t offset, const void *src, uint64_t bytes) override;
  void read(uint64_t offset, void *dst, uint64_t bytes) override;
  // Another cpu backend's buffer into this one: one memcpy instead of the host's two.
  void copy_from(sdk::Buffer &src, uint64_t src_offset, uint64_t offset, uint64_t bytes) override;
  uint8_t *data() { return data_; }

  // Q4_0, Q5_0 and K-quant matmul weights held as 16-row panels (panels.hpp), in buffers the plugin owns.
  // Compile offers a matmul's [k, m] weight at offset (and repacks it), or pins a range that
  // another op reads in GGUF order (back to rows, never repacked). panels() is the weight's
  // data in panels, repacked again after a host write, or nullptr where it is not held so.
  void offer_panels(uint64_t offset, int32_t dtype, int64_t k, int64_t m, ThreadPool &pool);
  void pin_rows(uint64_t offset, uint64_t bytes);
  const uint8_t *panels(uint64_t offset, ThreadPool &pool);
  bool holds_panels(uint64_t offset) const;

 private:
  struct PanelRange {
    uint64_t bytes;
    int32_t dtype;
    int64_t k, m;
    bool pinned, in_panels;
  };
  // Ranges overlapping [offset, offset + bytes) back in GGUF order.
  void to_rows(uint64_t offset, uint64_t bytes);
  uint8_t *data_ = nullptr;
  bool owned_ = true;
  std::map<uint64_t, PanelRange> panel_ranges_;  // by offset
};

// Where a tensor's element 0 lives.
template <class T = uint8_t>
T *ptr(const minfer_tensor &t) {
  return reinterpret_cast<T *>(sdk::buffer_of<CpuBuffer>(t).data() + t.offset);
}

enum class Isa;
struct ActBlock;

// What a kernel gets besides its node: the step's counts, the threads, the instruction set.
struct RunCtx {
  const minfer_step_args &args;
  ThreadPool &pool;
  Isa isa;
};

// One entry of the op table: both supports() and dispatch read it.
struct CpuOp {
  int32_t op;
  // Backend-specific limits beyond the SDK's op contract; "" = supported.
  std::string (*check)(const minfer_node &n);
  void (*run)(const minfer_node &n, const RunCtx &ctx);
};

// The op families, one file each.
std::span<const CpuOp> elementwise_ops();
std::span<const CpuOp> quant_ops();
std::span<const CpuOp> norm_rope_ops();
std::span<const CpuOp> matmul_ops();
// y[t] = W x[t] for t < tokens, W [k, m] of dtype at wb: the kernel choice of every matmul
// (MATMUL, and MATMUL_ID per expert); threads split W's rows.
void matmul_rows(int32_t dtype, const uint8_t *wb, int64_t k, int64_t m, const float *x, int64_t tokens, float *y, const RunCtx &ctx);
// One weight of several run in one pass (MATMUL_ID's experts): y [tokens, m] = W x for its
// tokens, the x rows of the segments one after another.
struct MatmulSegment {
  const uint8_t *w;
  int64_t tokens;
  float *y;
};
// The segments in one pass of the thread pool where the integer kernels take them all (false:
// nothing ran; run each with matmul_rows). x: every segment's rows, in order.
bool matmul_segments(int32_t dtype, int64_t k, int64_t m, const float *x, std::span<const MatmulSegment> segs, const RunCtx &ctx);
// The tokens' activations quantized to 8-bit blocks (quantize_activations), in the calling
// thread's buffer, valid until its next call.
const ActBlock *quantize_tokens(const float *x, int64_t tokens, int64_t k, ThreadPool &pool, Isa isa);
// Whether a matmul of these tokens runs on AMX tiles (matmul_path's first rule).
bool takes_amx(int32_t dtype, Isa isa, int64_t tokens);
// A MATMUL or MATMUL_ID weight's data in 16-row panels where compile put it so (panels.hpp),
// else nullptr.
const uint8_t *weight_panels(const minfer_tensor &w, const RunCtx &ctx);
// MATMUL's check: "" when the weight's dtype has a decoder here.
std::string weight_known(const minfer_node &n);
std::span<const CpuOp> moe_ops();
// How run_matmul runs node n for a step of `tokens` (--explain, ABI 1.3).
std::string explain_matmul(const minfer_node &n, Isa isa, int64_t tokens);
std::span<const CpuOp> attention_ops();

}  // namespace minfer::cpu
