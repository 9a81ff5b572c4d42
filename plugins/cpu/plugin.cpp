// plugins/cpu/plugin.cpp — the CPU backend's entry: device, buffers, supports, compile, execute.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <chrono>
#include <climits>
#include <vector>

#include <sys/mman.h>

#include "cpu_backend.hpp"
#include "panels.hpp"
#include "qdot.hpp"
#include "thread_pool.hpp"
#include "minfer/op_table.hpp"

namespace minfer::cpu {

CpuBuffer::CpuBuffer(uint64_t bytes) : Buffer(bytes) {
  // Big buffers (the packed weights) on 2 MiB pages: decode streams them every token, and
  // with 4 KiB pages the page walks cost (see wrap_host). Smaller ones (activations, caches)
  // keep 4 KiB pages, so only what a step touches is resident.
  constexpr uint64_t kHuge = uint64_t(2) << 20, kHugeFrom = uint64_t(64) << 20;
  const uint64_t align = bytes >= kHugeFrom ? kHuge : 64;
  const uint64_t rounded = (bytes + align - 1) / align * align;
  data_ = static_cast<uint8_t *>(std::aligned_alloc(align, rounded ? rounded : 64));
  if (data_ && align == kHuge) madvise(data_, rounded, MADV_HUGEPAGE);
  if (!data_)
    throw sdk::Error(MINFER_ERR_OUT_OF_MEMORY,
                     "cannot allocate " + std::to_string(bytes) + " bytes of host memory");
}

CpuBuffer::~CpuBuffer() {
  if (owned_) std::free(data_);
}

void CpuBuffer::write(uint64_t offset, const void *src, uint64_t bytes) {
  if (!owned_) throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "write to a buffer of host memory the cpu backend only reads");
  check_range(offset, bytes, "write");
  to_rows(offset, bytes);  // the bytes around a partial write stay what the host wrote
  std::memcpy(data_ + offset, src, bytes);
}

void CpuBuffer::read(uint64_t offset, void *dst, uint64_t bytes) {
  check_range(offset, bytes, "read");
  to_rows(offset, bytes);
  std::memcpy(dst, data_ + offset, bytes);
}

void CpuBuffer::copy_from(sdk::Buffer &src, uint64_t src_offset, uint64_t offset, uint64_t bytes) {
  if (!owned_) throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "copy into a buffer of host memory the cpu backend only reads");
  check_range(offset, bytes, "copy");
  to_rows(offset, bytes);
  src.read(src_offset, data_ + offset, bytes);  // execute ran to completion: nothing is pending
}

void CpuBuffer::to_rows(uint64_t offset, uint64_t bytes) {
  if (panel_ranges_.empty()) return;
  auto it = panel_ranges_.upper_bound(offset);
  if (it != panel_ranges_.begin()) --it;
  for (; it != panel_ranges_.end() && it->first < offset + bytes; ++it)
    if (it->second.in_panels && it->first + it->second.bytes > offset) {
      repack_panels(it->second.dtype, data_ + it->first, it->second.k, it->second.m, false, nullptr);
      it->second.in_panels = false;
    }
}

void CpuBuffer::offer_panels(uint64_t offset, int32_t dtype, int64_t k, int64_t m, ThreadPool &pool) {
  if (!owned_ || !panels_fit(dtype, k, m)) return;
  const uint64_t bytes = uint64_t(m) * uint64_t(sdk::row_bytes(dtype, k));
  check_range(offset, bytes, "a matmul weight");
  auto it = panel_ranges_.find(offset);
  if (it != panel_ranges_.end() && (it->second.pinned || (it->second.bytes == bytes && it->second.k == k && it->second.dtype == dtype))) {
    panels(offset, pool);
    return;
  }
  // Another weight of this offset before (a test's buffer used again), or one overlapping it.
  to_rows(offset, bytes);
  for (auto o = panel_ranges_.begin(); o != panel_ranges_.end();)
    o = o->first < offset + bytes && o->first + o->second.bytes > offset && !o->second.pinned ? panel_ranges_.erase(o) : std::next(o);
  for (const auto &[at, r] : panel_ranges_)
    if (at < offset + bytes && at + r.bytes > offset) return;  // pinned bytes inside it
  panel_ranges_[offset] = {bytes, dtype, k, m, false, false};
  panels(offset, pool);
}

void CpuBuffer::pin_rows(uint64_t offset, uint64_t bytes) {
  to_rows(offset, bytes);
  bool covered = false;
  for (auto &[at, r] : panel_ranges_)
    if (at < offset + bytes && at + r.bytes > offset) r.pinned = true, covered = covered || (at <= offset && at + r.bytes >= offset + bytes);
  if (!covered) panel_ranges_.emplace(offset, PanelRange{bytes, 0, 0, 0, true, false});
}

const uint8_t *CpuBuffer::panels(uint64_t offset, ThreadPool &pool) {
  auto it = panel_ranges_.find(offset);
  if (it == panel_ranges_.end() || it->second.pinned) return nullptr;
  if (!it->second.in_panels) {
    repack_panels(it->second.dtype, data_ + offset, it->second.k, it->second.m, true, &pool);
    it->second.in_panels = true;
  }
  return data_ + offset;
}

bool CpuBuffer::holds_panels(uint64_t offset) const {
  auto it = panel_ranges_.find(offset);
  return it != panel_ranges_.end() && !it->second.pinned;
}

namespace {

// The CPUs this process may run on (its affinity mask: taskset, a container's cpuset), which
// may be fewer than the machine has online.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? int(online) : 1;
}

const sdk::OpTable<CpuOp> &op_table() {
  static const sdk::OpTable<CpuOp> table(
      "cpu", {elementwise_ops(), quant_ops(), norm_rope_ops(), matmul_ops(), moe_ops(), attention_ops()});
  return table;
}

class CpuSegment : public sdk::Segment {
 public:
  CpuSegment(std::vector<sdk::OwnedNode> nodes, ThreadPool &pool, Isa isa) : nodes_(std::move(nodes)), pool_(pool), isa_(isa) {
    for (const auto &on : nodes_) {
      const minfer_node &n = on.node();
      const std::string why = op_table().why_not(n);
      if (!why.empty())
        throw sdk::Error(MINFER_ERR_UNSUPPORTED, "node '" + on.name() + "' (" +
                                                     minfer_op_name(n.op) + "): " + why);
      max_tokens_ = std::min(max_tokens_, sdk::check_compiled_node(n));
      run_.push_back(op_table().find(n.op)->run);
    }
    plan_panels();
  }

  void execute(const minfer_step_args &args) override {
    if (args.n_tokens < 0 || args.n_tokens > max_tokens_)
      throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "step of " + std::to_string(args.n_tokens) +
                                                        " tokens; this segment was compiled for at most " +
                                                        std::to_string(max_tokens_));
    const RunCtx ctx{args, pool_, isa_};
    const bool timed = sdk::wants_node_times(args);
    if (timed) times_.assign(nodes_.size(), 0.0);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        run_[i](nodes_[i].node(), ctx);
      } catch (const sdk::Error &e) {
        throw sdk::Error(e.code(), "node '" + nodes_[i].name() + "' (" +
                                       minfer_op_name(nodes_[i].node().op) + "): " + e.what());
      }
      if (timed) times_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
  }

  // Q4_0, Q5_0 and K-quant matmul weights (MATMUL_ID's experts too) go into panels where the
  // kernels read them that way (AVX2 and AVX-512, and AMX machines, whose tiles take them back
  // into rows a panel at a time; the scalar reference reads rows); any other reader of such a
  // tensor (GET_ROWS of a tied embedding, DEQUANTIZE) keeps it in rows.
  void plan_panels() {
    const bool isa_takes = avx2_family(isa_) || isa_ == Isa::Avx512Vnni || isa_ == Isa::Amx;
    // MATMUL's weight, or MATMUL_ID's experts where each expert's rows are whole panels.
    const auto matmul_weight = [&](const minfer_node &n, int32_t i) {
      const minfer_tensor &w = *n.inputs[i];
      if (!isa_takes || i != 0 || w.token_dim >= 0 || !sdk::is_contiguous(w)) return false;
      return (n.op == MINFER_OP_MATMUL && w.rank == 2) || (n.op == MINFER_OP_MATMUL_ID && w.rank == 3 && w.shape[1] % kPanelRows == 0);
    };
    for (const auto &on : nodes_) {
      const minfer_node &n = on.node();
      for (int32_t i = 0; i < n.n_inputs; ++i) {
        const minfer_tensor &t = *n.inputs[i];
        if (panel_dtype(t.dtype) && !matmul_weight(n, i))
          sdk::buffer_of<CpuBuffer>(t).pin_rows(t.offset, uint64_t(std::max<int64_t>(1, sdk::n_bytes(t))));
      }
    }
    for (const auto &on : nodes_) {
      const minfer_node &n = on.node();
      if (n.n_inputs > 0 && panels_take(n.inputs[0]->dtype, isa_) && matmul_weight(n, 0)) {
        const minfer_tensor &w = *n.inputs[0];
        sdk::buffer_of<CpuBuffer>(w).offer_panels(w.offset, w.dtype, w.shape[0], w.shape[1] * (w.rank == 3 ? w.shape[2] : 1), pool_);
      }
    }
  }

  std::string explain(size_t node, int64_t tokens) const override {
    if (node >= nodes_.size()) throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "explain: no node " + std::to_string(node) + " in this segment");
    const minfer_node &n = nodes_[node].node();
    return n.op == MINFER_OP_MATMUL || n.op == MINFER_OP_MATMUL_ID ? explain_matmul(n, isa_, tokens) : "";
  }

  // The CPU runs a node to completion before the next: its wall time is its device time.
  std::vector<double> node_times() override {
    if (times_.size() != nodes_.size()) throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "no timed execution yet");
    return times_;
  }

 private:
  std::vector<sdk::OwnedNode> nodes_;
  std::vector<double> times_;
  ThreadPool &pool_;
  Isa isa_;
  std::vector<void (*)(const minfer_node &, const RunCtx &)> run_;
  int64_t max_tokens_ = INT64_MAX;
};

// Ranks of split: tensor on the host's CPU: each rank's execute ran to completion before the
// host calls the collective, so the sum is taken at once, in rank order (the same bits for all).
class CpuGroup : public sdk::Group {
 public:
  using Group::Group;
  void all_reduce(int32_t dtype, uint64_t count, const std::vector<sdk::Buffer *> &send, const std::vector<uint64_t> &send_offsets,
                  const std::vector<sdk::Buffer *> &recv, const std::vector<uint64_t> &recv_offsets) override {
    if (dtype != MINFER_DTYPE_F32) throw sdk::Error(MINFER_ERR_UNSUPPORTED, std::string("all_reduce of ") + minfer_dtype_name(dtype) + "; f32 only");
    const uint64_t bytes = count * sizeof(float);
    sum_.resize(count);
    part_.resize(count);
    send[0]->read(send_offsets[0], sum_.data(), bytes);
    for (size_t r = 1; r < send.size(); ++r) {
      send[r]->read(send_offsets[r], part_.data(), bytes);
      for (uint64_t i = 0; i < count; ++i) sum_[i] += part_[i];
    }
    for (size_t r = 0; r < recv.size(); ++r) recv[r]->write(recv_offsets[r], sum_.data(), bytes);
  }

 private:
  std::vector<float> sum_, part_;
};

class CpuBackend : public sdk::Backend {
 public:
  CpuBackend(int threads, Isa isa, bool weights_mapped) : pool_(threads), isa_(isa), weights_mapped_(weights_mapped) {}
  std::unique_ptr<sdk::Buffer> alloc(uint64_t bytes) override {
    return std::make_unique<CpuBuffer>(bytes);
  }
  // Weights straight from the model file's mapping: no second copy in memory.
  // weights: mapped — read the model file's mapping in place (no copy, 4 KiB pages);
  // weights: copy — the host copies them into our buffers, on 2 MiB pages (decode streams every
  // weight per token, and with 4 KiB pages the TLB walks cost: tg32 Q4_0 ~42 -> ~49 t/s here).
  std::unique_ptr<sdk::Buffer> wrap_host(const void *host, uint64_t bytes) override {
    if (!weights_mapped_) throw sdk::Error(MINFER_ERR_UNSUPPORTED, "option weights: copy");
    return std::make_unique<CpuBuffer>(host, bytes);
  }
  sdk::Support supports(const minfer_node &n) override {
    const std::string why = op_table().why_not(n);
    return why.empty() ? sdk::Support::yes() : sdk::Support::no(why);
  }
  std::unique_ptr<sdk::Segment> compile(std::vector<sdk::OwnedNode> nodes) override {
    return std::make_unique<CpuSegment>(std::move(nodes), pool_, isa_);
  }
  std::unique_ptr<sdk::Group> open_group(const std::vector<sdk::Backend *> &ranks) override {
    return std::make_unique<CpuGroup>(ranks.size());
  }

 private:
  ThreadPool pool_;
  Isa isa_;
  bool weights_mapped_;
};

}  // namespace

struct CpuPlugin {
  static constexpr const char *name = "cpu";
  static constexpr const char *version = MINFER_VERSION;

  static int32_t device_count(std::string &) { return 1; }

  static void device_info(int32_t device, minfer_device_info &info) {
    if (device != 0)
      throw sdk::Error(MINFER_ERR_NOT_FOUND, "the cpu backend has one device, 0; asked for " +
                                                 std::to_string(device));
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    std::snprintf(info.name, sizeof info.name, "host CPU (%ld cores)", cores);
    info.total_bytes = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
    info.free_bytes = uint64_t(sysconf(_SC_AVPHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
  }

  static std::unique_ptr<sdk::Backend> open(int32_t device, sdk::Options &opts, const sdk::Host &host) {
    const int cores = usable_cores();
    int threads = int(opts.take_int("threads", cores, 1, 1024));
    if (threads > cores) {
      // The pool's workers wait by spinning: more of them than cores only take turns, and
      // each step then waits on preempted threads (1000 threads on 2 cores: 0.3 tok/s).
      host.log(MINFER_LOG_WARN, "cpu backend: threads " + std::to_string(threads) + " is more than the " + std::to_string(cores) +
                                    " cores this process may run on; using " + std::to_string(cores));
      threads = cores;
    }
    const std::string isa_opt = opts.take("isa", "auto");
    Isa isa = best_isa();
    if (isa_opt != "auto") {
      bool found = false;
      for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni, Isa::Amx})
        if (isa_opt == isa_name(i)) isa = i, found = true;
      if (!found)
        throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "option 'isa' of backend 'cpu' has value '" + isa_opt +
                                                          "'; expected auto, amx, avx512vnni, avxvnni, avx2 or scalar");
      if (!isa_available(isa))
        throw sdk::Error(MINFER_ERR_UNSUPPORTED, "option 'isa': this CPU has no " + isa_opt + " (it has " + isa_name(best_isa()) + ")");
    }
    const std::string weights = opts.take("weights", "copy");
    if (weights != "copy" && weights != "mapped")
      throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "option 'weights' of backend 'cpu' has value '" + weights + "'; expected copy or mapped");
    opts.finish();
    minfer_device_info info{};
    device_info(device, info);
    host.log(MINFER_LOG_INFO, "cpu backend: " + std::to_string(threads) + " threads, kernels: " + isa_name(isa) + ", weights: " + weights);
    return std::make_unique<CpuBackend>(threads, isa, weights == "mapped");
  }
};

}  // namespace minfer::cpu

MINFER_DEFINE_PLUGIN(minfer::cpu::CpuPlugin)
