// plugins/cuda/plugin.cpp — the CUDA backend's entry: devices, options, supports, compile,
// execute. Dispatch: op handler (ops/) -> CudaDevice method -> C launcher -> kernel.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_buffer.hpp"
#include "device.hpp"
#include "kernels/launchers.h"
#include "minfer/op_table.hpp"
#include "ops/op_table.hpp"

namespace minfer::cuda {

namespace {

const sdk::OpTable<CudaOp> &op_table() {
  static const sdk::OpTable<CudaOp> table("cuda", {elementwise_ops(), quant_ops(), model_ops()});
  return table;
}

class CudaSegment : public sdk::Segment {
 public:
  CudaSegment(CudaDevice &dev, std::vector<sdk::OwnedNode> nodes) : dev_(dev), nodes_(std::move(nodes)) {
    std::vector<CudaDevice::WeightRef> weights;
    for (const auto &on : nodes_) {
      const minfer_node &n = on.node();
      const std::string why = op_table().why_not(n);
      if (!why.empty())
        throw sdk::Error(MINFER_ERR_UNSUPPORTED,
                         "node '" + on.name() + "' (" + minfer_op_name(n.op) + "): " + why);
      max_tokens_ = std::min(max_tokens_, sdk::check_compiled_node(n));
      if (n.op == MINFER_OP_MATMUL && minfer_dtype_info(n.inputs[0]->dtype).is_quantized)
        weights.push_back({n.inputs[0]->dtype, dptr(*n.inputs[0]), n.inputs[0]->shape[1], n.inputs[0]->shape[0]});
      run_.push_back(op_table().find(n.op)->run);
      tags_.push_back(dev_.register_node(on.name()));
    }
    dev_.add_matmul_weights(weights);
    plan_fusions();
  }

  ~CudaSegment() override {
    if (graph_) cudaGraphExecDestroy(graph_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  // Elapsed device time between the events recorded around each node.
  std::vector<double> node_times() override {
    if (!timed_) throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "no timed execution yet");
    DeviceScope scope(dev_.id());
    check_cuda(cudaEventSynchronize(events_.back()), "waiting for the timed nodes");
    std::vector<double> ms(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) {
      float t = 0;
      check_cuda(cudaEventElapsedTime(&t, events_[i], events_[i + 1]), "reading a node's time");
      ms[i] = t;
    }
    return ms;
  }

  // --explain: the kernels a node runs as, from the same choices execute makes.
  std::string explain(size_t i, int64_t tokens) const override {
    if (i >= nodes_.size()) throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "explain: no node " + std::to_string(i) + " in this segment");
    const minfer_node &n = nodes_[i].node();
    const size_t o = owner_[i];
    if (n.op == MINFER_OP_ATTENTION)
      return explain_attention(n, tokens, o != i && dev_.attention_rotates(tokens, sdk::params_of<minfer_attention_params>(n)));
    if (o != i) {  // run by the step of node o: inside its kernel, or as a kernel of that step
      const minfer_node &head = nodes_[o].node();
      bool inside = false;
      if (head.op == MINFER_OP_MATMUL) {
        const auto path = dev_.matmul_path(head.inputs[0]->dtype, head.inputs[0]->shape[0], tokens);
        const bool is_add = n.op == MINFER_OP_ADD || n.op == MINFER_OP_ADD_ROW_BROADCAST;
        inside = path == CudaDevice::MatmulPath::Gemv || (is_add && path == CudaDevice::MatmulPath::Mmq && fuse_add_[o]);
      } else if (head.op == MINFER_OP_ROPE && fuse_rope_attention_[o] &&
                 dev_.attention_rotates(tokens, sdk::params_of<minfer_attention_params>(nodes_[o + 2].node()))) {
        return "inside the kernel of " + nodes_[o + 2].name();
      }
      return std::string(inside ? "inside the kernel of " : "a kernel of the step at ") + nodes_[o].name();
    }
    if (n.op == MINFER_OP_MATMUL) return explain_matmul(i, tokens);
    if (n.op == MINFER_OP_ROPE && fuse_rope_[i]) {
      const minfer_node &at = nodes_[i + 2].node();
      if (fuse_rope_attention_[i] && dev_.attention_rotates(tokens, sdk::params_of<minfer_attention_params>(at)))
        return "inside the kernel of " + nodes_[i + 2].name() + " (with the other RoPE of the pair)";
      return "rope_f32_kernel (the pair in one launch)";
    }
    return "";
  }

  // Single-token steps (decode) replay one captured CUDA Graph: the same kernels on the same
  // buffers every time, with n_past read from device memory. The first such step runs
  // directly (so scratch buffers reach their size), the second is captured.
  void execute(const minfer_step_args &args) override {
    if (args.n_tokens < 0 || args.n_tokens > max_tokens_)
      throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "step of " + std::to_string(args.n_tokens) +
                                                        " tokens; this segment was compiled for at most " + std::to_string(max_tokens_));
    DeviceScope scope(dev_.id());
    dev_.set_step(args.n_past);
    timed_ = sdk::wants_node_times(args);
    if (timed_) return run_nodes(args);  // events between nodes: no graph
    const bool graphable = dev_.options().cuda_graphs && !dev_.options().debug_sync && args.n_tokens == 1;
    if (!graphable) return run_nodes(args);
    if (graph_ && graph_generation_ != dev_.layout_generation()) {  // a buffer moved: recapture
      cudaGraphExecDestroy(graph_);
      graph_ = nullptr;
      decode_runs_ = 0;
    }
    if (graph_) return dev_.launch_graph(graph_);
    if (decode_runs_++ == 0) return run_nodes(args);
    dev_.begin_capture();
    try {
      run_nodes(args);
    } catch (...) {
      try {
        cudaGraphExecDestroy(dev_.end_capture());
      } catch (...) {
      }
      throw;
    }
    graph_ = dev_.end_capture();
    graph_generation_ = dev_.layout_generation();
    dev_.launch_graph(graph_);
  }

 private:
  void run_nodes(const minfer_step_args &args) {
    if (timed_ && events_.empty()) {
      events_.resize(nodes_.size() + 1);
      for (auto &e : events_) check_cuda(cudaEventCreate(&e), "creating a timing event");
    }
    norm_ran_ = nullptr;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (timed_) check_cuda(cudaEventRecord(events_[i], dev_.stream()), "recording a timing event");
      if (fused_away_[i]) continue;  // its matmul wrote its output
      try {
        const StepNorm norm{norm_of_[i], &norm_ran_};
        if (!group_[i].empty()) run_matmul_group(dev_, group_[i], args, norm);
        else if (fuse_swiglu_[i]) run_matmul_swiglu(dev_, nodes_[i].node(), nodes_[i + 1].node(), nodes_[i + 2].node(), args, norm);
        else if (norm_of_[i]) run_matmul_group(dev_, std::vector<MatmulStep>{step_at(i)}, args, norm);
        else if (fuse_add_[i]) run_matmul_add(dev_, nodes_[i].node(), nodes_[i + 1].node(), args);
        else if (fuse_rope_attention_[i]) run_rope_attention(dev_, nodes_[i].node(), nodes_[i + 1].node(), nodes_[i + 2].node(), args);
        else if (fuse_rope_[i]) run_rope_pair(dev_, nodes_[i].node(), nodes_[i + 1].node(), args);
        else run_[i](dev_, nodes_[i].node(), args, tags_[i]);
      } catch (const sdk::Error &e) {
        throw sdk::Error(e.code(), "node '" + nodes_[i].name() + "' (" +
                                       minfer_op_name(nodes_[i].node().op) + "): " + e.what());
      }
    }
    if (timed_) check_cuda(cudaEventRecord(events_.back(), dev_.stream()), "recording a timing event");
  }

  std::string explain_matmul(size_t i, int64_t tokens) const {
    const minfer_node &n = nodes_[i].node();
    const minfer_tensor &w = *n.inputs[0];
    const std::string type = minfer_dtype_name(w.dtype);
    using P = CudaDevice::MatmulPath;
    const P path = dev_.matmul_path(w.dtype, w.shape[0], tokens);
    std::string norm;  // the RMS norm folded into this step's one-token GEMV
    if (norm_of_[i] && path == P::Gemv)
      for (size_t j = 0; j < i; ++j)
        if (&nodes_[j].node() == norm_of_[i]) norm = ", the RMS norm " + nodes_[j].name() + " folded in";
    if (fuse_swiglu_[i] && path == P::Gemv)
      return "gemv_quantizing_kernel: gate, up and SwiGLU in one launch (dp4a on the " + type + " blocks)" + norm;
    if (fuse_swiglu_[i] && path == P::Mmq && minfer_cuda_mmq_swiglu_supported(w.dtype))
      return "mmq_kernel: gate, up and SwiGLU in one launch (int8 tensor cores on the " + type + " blocks)";
    // A group of two weight dtypes: one mixed GEMV launch for a token, the steps one by one for a prompt.
    const bool mixed = std::any_of(group_[i].begin(), group_[i].end(), [&](const MatmulStep &st) { return st.matmul->inputs[0]->dtype != w.dtype; });
    std::string t;
    switch (path) {
      case P::Mmq: t = "mmq_kernel: int8 tensor cores (mma.m16n8k32) on the " + type + " blocks"; break;
      case P::Gemv:
        t = mixed ? "gemv_mixed_kernel: dp4a on the " + type + " and " + minfer_dtype_name(group_[i].back().matmul->inputs[0]->dtype) +
                        " blocks, x quantized in the kernel"
                  : "gemv_quantizing_kernel: dp4a on the " + type + " blocks, x quantized in the kernel";
        break;
      case P::F16Gemm:
        t = std::string(dev_.f16_copy(dptr(w)) ? "its cached f16 copy" : "dequantized to f16 per call") + " + f16 tensor-core GEMM";
        break;
      case P::Mmvq: t = "quantize_q8_act_kernel + mmvq_kernel: dp4a on the " + type + " blocks"; break;
      case P::Generic: t = "matmul_kernel (f32 math on " + type + ")"; break;
    }
    if (fuse_add_[i]) t += path == P::Mmq || path == P::Gemv ? ", the add in its epilogue" : ", then an add kernel";
    if (fuse_swiglu_[i]) t += path == P::Mmq ? "; up in the same launch, then swiglu_f32_kernel" : "; the same for up, then swiglu_f32_kernel";
    t += norm;
    if (!group_[i].empty() && (path == P::Gemv || (path == P::Mmq && !mixed))) {
      t += "; one launch with";
      for (size_t j = 1; j < group_[i].size(); ++j) t += " " + std::string(j > 1 ? "and " : "") + name_of(group_[i][j].matmul);
    }
    return t;
  }

  std::string explain_attention(const minfer_node &at, int64_t tokens, bool rotating) const {
    const auto &p = sdk::params_of<minfer_attention_params>(at);
    const char *k = minfer_cuda_flash_attention_kernel(tokens, p.n_head, p.n_kv_head, p.head_dim, at.inputs[3]->dtype);
    std::string t = k ? k : "kv_write_kernel + attention_kernel (scores in shared memory)";
    if (k && std::string(k) == "flash_decode_kernel") t += rotating ? " (writes the KV row, rotates q and k)" : " (writes the KV row)";
    else if (k) t = "kv_write_kernel + " + t;
    return t;
  }

  std::string name_of(const minfer_node *n) const {
    for (const auto &on : nodes_)
      if (&on.node() == n) return on.name();
    return "?";
  }

  static bool same(const minfer_tensor &a, const minfer_tensor &b) { return a.buffer == b.buffer && a.offset == b.offset; }
  static uint64_t bytes_of(const minfer_tensor &t) {
    const minfer_dtype_traits tr = minfer_dtype_info(t.dtype);
    uint64_t b = uint64_t(t.shape[0] / tr.block_values) * tr.block_bytes;
    for (int d = 1; d < t.rank; ++d) b *= uint64_t(t.shape[d]);
    return b;
  }
  static bool overlap(const minfer_tensor &a, const minfer_tensor &b) {
    return a.buffer == b.buffer && a.offset < b.offset + bytes_of(b) && b.offset < a.offset + bytes_of(a);
  }

  // A MATMUL whose output only the next node reads, an ADD_ROW_BROADCAST (bias) or ADD
  // (residual), runs as one kernel with that add in its epilogue: decode then launches one
  // kernel, not two, for each bias and residual. Conditions: the host marked the output
  // segment-local, no later node of the segment reads it, and the add's output does not
  // overlap the matmul's inputs (the fused kernel writes it while they are still read).
  // Whether a node after node i reads t before another node's output takes its memory (the
  // host reuses memory once a tensor's last reader has run, and every tensor has one writer).
  bool read_after(size_t i, const minfer_tensor &t) const {
    for (size_t j = i + 1; j < nodes_.size(); ++j) {
      for (int k = 0; k < nodes_[j].node().n_inputs; ++k)
        if (overlap(*nodes_[j].node().inputs[k], t)) return true;
      if (overlap(*nodes_[j].node().output, t)) return false;
    }
    return false;
  }

  // Also gate MATMUL, up MATMUL, SWIGLU of the two (same x, dtype and shape; outputs read by
  // nothing else): one step, a single kernel for a decode token.
  void plan_fusions() {
    fuse_add_.assign(nodes_.size(), false);
    fuse_swiglu_.assign(nodes_.size(), false);
    fuse_rope_.assign(nodes_.size(), false);
    fuse_rope_attention_.assign(nodes_.size(), false);
    owner_.resize(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) owner_[i] = i;
    fused_away_.assign(nodes_.size(), false);
    // Two ROPEs in a row at the same positions and parameters, the second not reading the
    // first's output nor writing over its input: one launch (both outputs are written).
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &a = nodes_[i].node(), &b = nodes_[i + 1].node();
      if (a.op != MINFER_OP_ROPE || b.op != MINFER_OP_ROPE || !same(*a.inputs[1], *b.inputs[1])) continue;
      if (a.params->struct_size != b.params->struct_size || std::memcmp(a.params, b.params, a.params->struct_size) != 0) continue;
      if (overlap(*b.inputs[0], *a.output) || overlap(*b.output, *a.inputs[0]) || overlap(*b.output, *a.output)) continue;
      fuse_rope_[i] = true;
      fused_away_[i + 1] = true, owner_[i + 1] = i;
      ++i;
    }
    // Such a pair and the ATTENTION after it reading both outputs (as q and k, either order),
    // which nothing later reads and whose output does not overlap the pair's inputs (the
    // fused kernel writes it while other blocks may still read them).
    for (size_t i = 0; i + 2 < nodes_.size(); ++i) {
      if (!fuse_rope_[i]) continue;
      const minfer_node &a = nodes_[i].node(), &b = nodes_[i + 1].node(), &at = nodes_[i + 2].node();
      if (at.op != MINFER_OP_ATTENTION) continue;
      const bool qk = same(*at.inputs[0], *a.output) && same(*at.inputs[1], *b.output);
      const bool kq = same(*at.inputs[0], *b.output) && same(*at.inputs[1], *a.output);
      if (!qk && !kq) continue;
      if (sdk::params_of<minfer_rope_params>(a).head_dim != sdk::params_of<minfer_attention_params>(at).head_dim) continue;
      if (!(a.output->flags & b.output->flags & MINFER_TENSOR_SEGMENT_LOCAL) || read_after(i + 2, *a.output) || read_after(i + 2, *b.output))
        continue;
      if (overlap(*at.output, *a.inputs[0]) || overlap(*at.output, *b.inputs[0])) continue;
      fuse_rope_attention_[i] = true;
      fused_away_[i + 2] = true, owner_[i + 2] = i;
    }
    for (size_t i = 0; i + 2 < nodes_.size(); ++i) {
      const minfer_node &g = nodes_[i].node(), &u = nodes_[i + 1].node(), &sw = nodes_[i + 2].node();
      if (g.op != MINFER_OP_MATMUL || u.op != MINFER_OP_MATMUL || sw.op != MINFER_OP_SWIGLU || fused_away_[i]) continue;
      const minfer_tensor &wg = *g.inputs[0], &wu = *u.inputs[0];
      if (!same(*g.inputs[1], *u.inputs[1]) || wg.dtype != wu.dtype || wg.shape[0] != wu.shape[0] || wg.shape[1] != wu.shape[1]) continue;
      if (!same(*sw.inputs[0], *g.output) || !same(*sw.inputs[1], *u.output)) continue;
      if (!(g.output->flags & u.output->flags & MINFER_TENSOR_SEGMENT_LOCAL) || read_after(i + 2, *g.output) || read_after(i + 2, *u.output))
        continue;
      if (overlap(*sw.output, *g.inputs[1]) || overlap(*sw.output, wg) || overlap(*sw.output, wu)) continue;
      fuse_swiglu_[i] = true;
      fused_away_[i + 1] = fused_away_[i + 2] = true, owner_[i + 1] = owner_[i + 2] = i;
      i += 2;
    }
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &mm = nodes_[i].node(), &add = nodes_[i + 1].node();
      if (mm.op != MINFER_OP_MATMUL || !(mm.output->flags & MINFER_TENSOR_SEGMENT_LOCAL) || fused_away_[i] || fuse_swiglu_[i]) continue;
      const bool bias = add.op == MINFER_OP_ADD_ROW_BROADCAST && same(*add.inputs[0], *mm.output);
      const bool residual = add.op == MINFER_OP_ADD && (same(*add.inputs[0], *mm.output) != same(*add.inputs[1], *mm.output));
      if (!bias && !residual) continue;
      if (read_after(i + 1, *mm.output) || overlap(*add.output, *mm.inputs[0]) || overlap(*add.output, *mm.inputs[1])) continue;
      fuse_add_[i] = true;
      fused_away_[i + 1] = true, owner_[i + 1] = i;
    }
    plan_matmul_groups();
    plan_norm_folds();
    const auto count = [](const std::vector<bool> &v) { return std::count(v.begin(), v.end(), true); };
    const auto groups = std::count_if(group_.begin(), group_.end(), [](const auto &g) { return !g.empty(); });
    if (count(fused_away_) > 0)
      dev_.host().log(MINFER_LOG_INFO, "cuda segment of " + std::to_string(nodes_.size()) + " nodes: " + std::to_string(count(fuse_add_)) +
                                           " matmuls with their bias/residual add, " + std::to_string(count(fuse_swiglu_)) +
                                           " gate/up/swiglu triples, " + std::to_string(count(fuse_rope_)) + " rope pairs (" +
                                           std::to_string(count(fuse_rope_attention_)) + " with their attention) fused; " +
                                           std::to_string(groups) + " groups of matmuls sharing their input, " +
                                           std::to_string(std::count_if(norm_of_.begin(), norm_of_.end(), [](const minfer_node *n) { return n != nullptr; })) +
                                           " matmul steps with the RMS norm they read folded in");
  }

  // One matmul step as run_matmul_group takes it: node i with its fused add, if any.
  MatmulStep step_at(size_t i) const { return MatmulStep{&nodes_[i].node(), fuse_add_[i] ? &nodes_[i + 1].node() : nullptr}; }

  // An RMS_NORM whose output only the steps right after it read — a group, a gate/up/SwiGLU,
  // or one matmul with or without its add; several when a layer's V has another weight type
  // than its Q and K — runs inside them: folded into each one-token GEMV (which quantizes
  // x * w and scales the products by the norm's 1/rms: each step sums x^2 itself, which costs
  // less than a launch), else just before the first. Inside the steps only matmuls read the
  // norm's output, as x, and no output overlaps the norm's inputs, which the GEMV's blocks
  // read while others write.
  void plan_norm_folds() {
    norm_of_.assign(nodes_.size(), nullptr);
    const auto last_of = [&](size_t first) {  // a step's last node
      size_t last = first;
      for (size_t j = first; j < nodes_.size(); ++j)
        if (owner_[j] == first) last = j;
      return last;
    };
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &norm = nodes_[i].node();
      if (norm.op != MINFER_OP_RMS_NORM || fused_away_[i] || !(norm.output->flags & MINFER_TENSOR_SEGMENT_LOCAL)) continue;
      std::vector<size_t> steps;  // first nodes of the steps reading the norm
      size_t last = i;
      for (size_t s = i + 1; s < nodes_.size(); s = last + 1) {
        const minfer_node &c = nodes_[s].node();
        if (c.op != MINFER_OP_MATMUL || fused_away_[s] || !same(*c.inputs[1], *norm.output)) break;
        steps.push_back(s);
        last = last_of(s);
      }
      if (steps.empty() || read_after(last, *norm.output)) continue;
      bool ok = true;
      for (size_t j = i + 1; j <= last && ok; ++j) {
        const minfer_node &n = nodes_[j].node();
        for (int k = 0; k < n.n_inputs; ++k)  // inside the steps only matmuls read the norm's output, as x
          if (same(*n.inputs[k], *norm.output) && !(n.op == MINFER_OP_MATMUL && k == 1)) ok = false;
        if (overlap(*n.output, *norm.inputs[0]) || overlap(*n.output, *norm.inputs[1])) ok = false;
      }
      if (!ok) continue;
      for (size_t s : steps) norm_of_[s] = &norm;
      fused_away_[i] = true, owner_[i] = steps[0];
    }
  }

  // Consecutive matmul steps (a MATMUL, or one fused with its add) of the same input and k and
  // of one weight dtype — a layer's Q, K and V — run as one group (one launch for a decode
  // token), at most kMinferCudaGemvMaxParts. A second dtype may follow the first where the
  // one-token GEMV mixes the two (an _M file's V after its Q and K); a prompt then runs the
  // steps one by one. All of a group's outputs are written at its first node,
  // so no step may read another's output or write over another's inputs.
  void plan_matmul_groups() {
    group_.assign(nodes_.size(), {});
    const auto is_step = [&](size_t i) {
      return i < nodes_.size() && nodes_[i].node().op == MINFER_OP_MATMUL && !fused_away_[i] && !fuse_swiglu_[i];
    };
    const auto inputs = [](const MatmulStep &st) {
      std::vector<const minfer_tensor *> v(st.matmul->inputs, st.matmul->inputs + st.matmul->n_inputs);
      if (st.add) v.insert(v.end(), st.add->inputs, st.add->inputs + st.add->n_inputs);
      return v;
    };
    const auto outputs = [](const MatmulStep &st) {
      std::vector<const minfer_tensor *> v{st.matmul->output};
      if (st.add) v.push_back(st.add->output);
      return v;
    };
    const auto independent = [&](const std::vector<MatmulStep> &group, const MatmulStep &next) {
      for (const MatmulStep &st : group) {
        // (A fused add reading its own matmul's output is inside one step, not between two.)
        for (const minfer_tensor *o : outputs(st))
          for (const minfer_tensor *in : inputs(next))
            if (!same(*in, *next.matmul->output) && overlap(*o, *in)) return false;
        for (const minfer_tensor *o : outputs(next))
          for (const minfer_tensor *in : inputs(st))
            if (!same(*in, *st.matmul->output) && overlap(*o, *in)) return false;
      }
      return true;
    };
    for (size_t i = 0; i < nodes_.size();) {
      if (!is_step(i)) {
        ++i;
        continue;
      }
      const minfer_node &a = nodes_[i].node();
      std::vector<MatmulStep> group{step_at(i)};
      std::vector<size_t> starts{i};
      size_t next = i + (fuse_add_[i] ? 2 : 1);
      const int32_t a_dtype = a.inputs[0]->dtype;
      const int64_t k = a.inputs[0]->shape[0];
      int32_t b_dtype = -1;  // the second dtype, once one joined
      while (group.size() < size_t(kMinferCudaGemvMaxParts) && is_step(next)) {
        const minfer_node &b = nodes_[next].node();
        const int32_t dt = b.inputs[0]->dtype;
        const bool dtype_ok = b_dtype >= 0 ? dt == b_dtype : dt == a_dtype || minfer_cuda_gemv_mixable(a_dtype, dt, k);
        if (!same(*a.inputs[1], *b.inputs[1]) || !dtype_ok || b.inputs[0]->shape[0] != k || !independent(group, step_at(next))) break;
        if (dt != a_dtype) b_dtype = dt;
        group.push_back(step_at(next));
        starts.push_back(next);
        next += fuse_add_[next] ? 2 : 1;
      }
      if (group.size() > 1) {
        group_[i] = group;
        for (size_t j = 1; j < starts.size(); ++j) {
          fused_away_[starts[j]] = true, owner_[starts[j]] = i;
          if (fuse_add_[starts[j]]) fused_away_[starts[j] + 1] = true, owner_[starts[j] + 1] = i;
        }
      }
      i = next;
    }
  }

  CudaDevice &dev_;
  // Per node: runs matmul+add / gate+up+swiglu, or was done by such a step before it.
  std::vector<bool> fuse_add_, fuse_swiglu_, fuse_rope_, fuse_rope_attention_, fused_away_;
  std::vector<std::vector<MatmulStep>> group_;  // at a group's first node: its steps
  std::vector<size_t> owner_;                    // per node: the first node of the step that runs it
  std::vector<const minfer_node *> norm_of_;     // per step's first node: the RMS norm it runs, or null
  const minfer_node *norm_ran_ = nullptr;        // this run: the norm whose kernel ran (StepNorm)
  std::vector<cudaEvent_t> events_;  // around each node, for node_times
  bool timed_ = false;
  cudaGraphExec_t graph_ = nullptr;
  uint64_t graph_generation_ = 0;
  int64_t decode_runs_ = 0;
  std::vector<sdk::OwnedNode> nodes_;
  std::vector<void (*)(CudaDevice &, const minfer_node &, const minfer_step_args &, int32_t)> run_;
  std::vector<int32_t> tags_;
  int64_t max_tokens_ = INT64_MAX;
};

class CudaBackend : public sdk::Backend {
 public:
  CudaBackend(int device, const DeviceOptions &opts, const sdk::Host &host) : dev_(device, opts, host) {}

  std::unique_ptr<sdk::Buffer> alloc(uint64_t bytes) override {
    return std::make_unique<CudaBuffer>(dev_, bytes);
  }
  sdk::Support supports(const minfer_node &n) override {
    const std::string why = op_table().why_not(n);
    return why.empty() ? sdk::Support::yes() : sdk::Support::no(why);
  }
  std::unique_ptr<sdk::Segment> compile(std::vector<sdk::OwnedNode> nodes) override {
    return std::make_unique<CudaSegment>(dev_, std::move(nodes));
  }
  void synchronize() override { dev_.synchronize(); }

 private:
  CudaDevice dev_;
};

}  // namespace

struct CudaPlugin {
  static constexpr const char *name = "cuda";
  static constexpr const char *version = MINFER_VERSION;

  static int32_t device_count(std::string &why) {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();
      why = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) +
            " (no usable NVIDIA GPU or driver on this machine)";
      return 0;
    }
    if (n == 0) why = "the CUDA driver reports no devices";
    return n;
  }

  static void device_info(int32_t device, minfer_device_info &info) {
    std::string why;
    const int32_t n = device_count(why);
    if (device < 0 || device >= n)
      throw sdk::Error(MINFER_ERR_NOT_FOUND, "no CUDA device " + std::to_string(device) + " (" +
                                                 std::to_string(n) + " present" +
                                                 (why.empty() ? "" : "; " + why) + ")");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    std::snprintf(info.name, sizeof info.name, "%s (sm_%d%d, %d SMs)", prop.name, prop.major,
                  prop.minor, prop.multiProcessorCount);
    DeviceScope scope(device);
    size_t free_b = 0, total_b = 0;
    check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    info.total_bytes = total_b;
    info.free_bytes = free_b;
  }

  static std::unique_ptr<sdk::Backend> open(int32_t device, sdk::Options &opts, const sdk::Host &host) {
    DeviceOptions o;
    o.debug_sync = opts.take_bool("debug_sync", false);
    o.max_grid_blocks = opts.take_int("max_grid_blocks", 0, 0, int64_t(1) << 31);
    o.cuda_graphs = opts.take_bool("cuda_graphs", true);
    o.mmq = opts.take_bool("mmq", true);
    o.w16_cache_min_bytes = opts.take_int("w16_cache_min_bytes", int64_t(2) << 30, 0, INT64_MAX);
    opts.finish();  // reject unknown keys before touching the device
    minfer_device_info info{};
    device_info(device, info);  // a clear error for a bad device id
    host.log(MINFER_LOG_INFO, std::string("opened cuda:") + std::to_string(device) + " " + info.name);
    return std::make_unique<CudaBackend>(device, o, host);
  }
};

}  // namespace minfer::cuda

MINFER_DEFINE_PLUGIN(minfer::cuda::CudaPlugin)
