// plugins/cuda/plugin.cpp — the CUDA backend's entry: devices, options, supports, compile,
// execute. Dispatch: op handler (ops/) -> CudaDevice method -> C launcher -> kernel.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <memory>
#include <regex>
#include <vector>

#include "cuda_buffer.hpp"
#include "device.hpp"
#include "nccl_group.hpp"
#include "fusion_plan.hpp"
#include "kernels/launchers.h"
#include "minfer/op_table.hpp"
#include "ops/op_table.hpp"

namespace minfer::cuda {

namespace {

const sdk::OpTable<CudaOp> &op_table() {
  static const sdk::OpTable<CudaOp> table("cuda", {elementwise_ops(), quant_ops(), model_ops(), moe_ops()});
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
    plan_ = plan_fusions(nodes_);
    if (const std::string summary = plan_.summary(); !summary.empty()) dev_.host().log(MINFER_LOG_INFO, summary);
    mark_skipped();
  }

  ~CudaSegment() override {
    drop_graphs();
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
    for (size_t g = i >= 13 ? i - 13 : 0; g <= i; ++g) {  // an output projection run as the first stage of its FFN's launch
      if (!attn_out_ffn_fused(g, tokens) || ffn_end(plan_.o_ffn[g]) < i) continue;
      if (g != i) return "inside the kernel of " + nodes_[g].name();
      return "ffn_decode_kernel: the output projection (" + std::string(minfer_dtype_name(n.inputs[0]->dtype)) + ") with the residual add " +
             nodes_[g + 1].name() + ", then " + ffn_text(plan_.o_ffn[g]) + ", grid barriers between the stages)";
    }
    for (size_t h = i >= 9 ? i - 9 : 0; h <= i + 1 && h < nodes_.size(); ++h) {  // a routed or dense FFN run as one launch (h = i + 1: i is a dense one's norm)
      const bool routed = plan_.moe_ffn_last[h] && moe_ffn_fused(h, tokens), dense = plan_.ffn_last[h] && dense_ffn_fused(h, tokens);
      if ((!routed && !dense) || ffn_end(h) < i || (h == i + 1 && !dense)) continue;
      if (h != i) return "inside the kernel of " + nodes_[h].name();
      return "ffn_decode_kernel: " + ffn_text(h) + (routed ? ", grid barriers between the stages)" : ", a grid barrier between the stages)");
    }
    size_t o = plan_.owner[i];
    // A prompt runs a fused router's nodes one by one (the top-k still with its weights).
    if (o != i && plan_.fuse_router[o] && tokens != 1) o = n.op == MINFER_OP_MOE_WEIGHTS ? i - 1 : i;
    // So does a step where an expert matmul and its sum do not run as one (the sum with its add still).
    if (o != i && plan_.fuse_expert_sum[o] && !expert_sum_fused(o, tokens)) o = n.op == MINFER_OP_MOE_SUM ? i : i - 1;
    if (o != i && plan_.fuse_expert_sum[o]) return "inside the kernel of " + nodes_[o].name();
    if (n.op == MINFER_OP_ATTENTION)
      return explain_attention(n, tokens, o != i && dev_.attention_rotates(tokens, tokens == 1, sdk::params_of<minfer_attention_params>(n), n.inputs[3]->dtype),
                               o != i && plan_.fuse_rope_norms[o]);
    if (o != i) {  // run by the step of node o: inside its kernel, or as a kernel of that step
      if (plan_.fuse_router[o]) return "inside the kernel of " + nodes_[o].name();
      const minfer_node &head = nodes_[o].node();
      // A rope pair fused with its attention, in the attention's kernel at this step size.
      if (head.op == MINFER_OP_ROPE && plan_.fuse_rope_attention[o] &&
          dev_.attention_rotates(tokens, tokens == 1, sdk::params_of<minfer_attention_params>(nodes_[o + 2].node()),
                                 nodes_[o + 2].node().inputs[3]->dtype))
        return "inside the kernel of " + nodes_[o + 2].name();
      bool inside = false;
      if (head.op == MINFER_OP_MATMUL) {
        const auto path = dev_.matmul_path(head.inputs[0]->dtype, head.inputs[0]->shape[0], tokens);
        const bool is_add = n.op == MINFER_OP_ADD || n.op == MINFER_OP_ADD_ROW_BROADCAST;
        inside = path == CudaDevice::MatmulPath::Gemv || (is_add && path == CudaDevice::MatmulPath::Mmq && plan_.fuse_add[o]);
      } else if (head.op == MINFER_OP_MOE_SUM && tokens > plan_.fused_up_to[o]) {
        return "add_f32_kernel (a step this large would overlap the expert sum's inputs)";
      } else if (head.op == MINFER_OP_TOP_K || head.op == MINFER_OP_MOE_SUM || (head.op == MINFER_OP_ROPE && plan_.fuse_rope_norms[o])) {
        inside = true;
      } else if (head.op == MINFER_OP_MATMUL_ID) {
        inside = CudaDevice::int8_experts({head.inputs[0]->dtype, nullptr, nullptr, 0, head.inputs[0]->shape[0], 0, 0, 0, 0, false});
      }
      return std::string(inside ? "inside the kernel of " : "a kernel of the step at ") + nodes_[o].name();
    }
    if (n.op == MINFER_OP_RMS_NORM && plan_.fuse_router[i])
      return tokens == 1 ? "moe_router_decode_kernel: the RMS norm, the router " + nodes_[i + 1].name() + " (f32 math on " +
                               minfer_dtype_name(nodes_[i + 1].node().inputs[0]->dtype) + "), its top-k and the expert weights in one launch"
                         : "rms_norm_f32_kernel (the router's matmul and top-k follow, each its own kernel)";
    if (n.op == MINFER_OP_MATMUL) return explain_matmul(i, tokens);
    if (n.op == MINFER_OP_MATMUL_ID) {
      const bool int8 = CudaDevice::int8_experts({n.inputs[0]->dtype, nullptr, nullptr, 0, n.inputs[0]->shape[0], 0, 0, 0, 0, false});
      const int64_t choices = n.inputs[2]->shape[0];
      const bool decode = int8 && minfer_cuda_mmvq_id_decode_supported(choices * tokens, choices, n.inputs[0]->shape[0]);
      if (expert_sum_fused(i, tokens))
        return std::string("mmvq_id_sum_decode_kernel (dp4a; reads the ids, quantizes its activations itself, and sums the ") +
               std::to_string(choices) + " experts' rows by their weights" + (plan_.fuse_sum_add[i + 1] ? ", the residual add too)" : ")");
      if (decode && plan_.fuse_glu[i] &&
          dev_.experts_staged(n.inputs[0]->dtype, n.inputs[0]->shape[0], n.inputs[0]->shape[1], choices, tokens, true, n.inputs[1]->rank == 3))
        return "gemv_staged_experts_kernel (dp4a; the chosen experts' gate and up rows through the staged GEMV's rings once it has read "
               "the ids), gate, up and the activation in one launch";
      return std::string(decode ? "mmvq_id_decode_kernel (dp4a; reads the ids and quantizes its activations itself)"
                         : int8 ? "mmvq_id_kernel (dp4a on 8-bit activations; each chosen expert's rows read once for its tokens)"
                                : "matmul_id_kernel (f32 math, rows decoded per token)") +
             (plan_.fuse_glu[i] ? (int8 ? ", gate, up and the activation in one launch" : ", then the up matmul and the activation") : "");
    }
    if (n.op == MINFER_OP_TOP_K)
      return minfer_cuda_top_k_weights_supported(n.inputs[0]->shape[0], n.output->shape[0])
                 ? std::string("top_k_rank_kernel (a thread an expert)") + (plan_.fuse_top_k_weights[i] ? ", the expert weights in the same launch" : "")
                 : "top_k_kernel";
    if (n.op == MINFER_OP_ROPE && plan_.fuse_rope[i]) {
      const minfer_node &at = nodes_[i + 2].node();
      if (plan_.fuse_rope_attention[i] && dev_.attention_rotates(tokens, tokens == 1, sdk::params_of<minfer_attention_params>(at), at.inputs[3]->dtype))
        return "inside the kernel of " + nodes_[i + 2].name() + " (with the other RoPE of the pair)";
      return plan_.fuse_rope_norms[i] ? "rope_f32_kernel (the pair in one launch, each head RMS-normalized first)"
                                      : "rope_f32_kernel (the pair in one launch)";
    }
    return "";
  }

  // Decode steps (one token of each of n_seqs sequences) replay a CUDA Graph captured for their
  // shape (tokens, output rows, the bucket of positions attention plans for): the same kernels on the same buffers every time, positions,
  // slots and page tables read from device memory. A shape's first step runs directly (so
  // scratch buffers reach their size), its second is captured.
  void execute(const minfer_step_args &args) override {
    if (args.n_tokens < 0 || args.n_tokens > max_tokens_)
      throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "step of " + std::to_string(args.n_tokens) +
                                                        " tokens; this segment was compiled for at most " + std::to_string(max_tokens_));
    DeviceScope scope(dev_.id());
    timed_ = sdk::wants_node_times(args);
    if (timed_) return run_nodes(args);  // events between nodes: no graph
    const bool graphable = dev_.options().cuda_graphs && !dev_.options().debug_sync && args.n_tokens >= 1 &&
                           args.n_tokens <= kMaxGraphTokens && is_decode(args, args.n_tokens);
    if (!graphable) return run_nodes(args);
    if (graph_generation_ != dev_.layout_generation()) {  // a buffer moved: recapture every shape
      drop_graphs();
      graph_generation_ = dev_.layout_generation();
    }
    Captured &c = graphs_[{args.n_tokens, sdk::step_outputs(args), positions_bucket(args)}];
    if (c.exec) return dev_.launch_graph(c.exec);
    if (c.runs++ == 0) return run_nodes(args);
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
    c.exec = dev_.end_capture();
    graph_generation_ = dev_.layout_generation();
    dev_.launch_graph(c.exec);
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
      if (plan_.fused_away[i] || skip_[i]) continue;  // its matmul wrote its output, or left out (MINFER_CUDA_SKIP_NODES)
      try {
        const StepNorm norm{plan_.norm_of[i], &norm_ran_};
        if (const size_t last = run_one_launch_ffn(i, args)) {  // its nodes up to the last ran in the launch
          for (size_t j = i + 1; timed_ && j <= last; ++j) check_cuda(cudaEventRecord(events_[j], dev_.stream()), "recording a timing event");
          i = last;
          continue;
        }
        if (plan_.fuse_router[i]) run_router(i, args);
        else if (!plan_.group[i].empty()) run_matmul_group(dev_, plan_.group[i], args, norm);
        else if (plan_.fuse_glu[i] && nodes_[i].node().op == MINFER_OP_MATMUL_ID)
          run_matmul_id_glu(dev_, nodes_[i].node(), nodes_[i + 1].node(), nodes_[i + 2].node(), args, tags_[i]);
        else if (plan_.fuse_glu[i]) run_matmul_glu(dev_, nodes_[i].node(), nodes_[i + 1].node(), nodes_[i + 2].node(), args, norm);
        else if (plan_.norm_of[i]) run_matmul_group(dev_, std::vector<MatmulStep>{step_at(i)}, args, norm);
        else if (plan_.fuse_add[i]) run_matmul_add(dev_, nodes_[i].node(), nodes_[i + 1].node(), args);
        else if (plan_.fuse_rope_attention[i])
          run_rope_attention(dev_, nodes_[i].node(), nodes_[i + 1].node(), nodes_[i + 2].node(), args,
                             plan_.fuse_rope_norms[i] ? &nodes_[i - 2].node() : nullptr, plan_.fuse_rope_norms[i] ? &nodes_[i - 1].node() : nullptr);
        else if (plan_.fuse_rope_norms[i])
          run_rope_pair(dev_, nodes_[i].node(), nodes_[i + 1].node(), args, &nodes_[i - 2].node(), &nodes_[i - 1].node());
        else if (plan_.fuse_rope[i]) run_rope_pair(dev_, nodes_[i].node(), nodes_[i + 1].node(), args);
        else if (plan_.fuse_top_k_weights[i]) run_top_k_weights(dev_, nodes_[i].node(), nodes_[i + 1].node(), args);
        else if (plan_.fuse_expert_sum[i]) run_expert_sum(i, args);
        else if (plan_.fuse_sum_add[i]) run_sum_add(i, args);
        else run_[i](dev_, nodes_[i].node(), args, tags_[i]);
      } catch (const sdk::Error &e) {
        throw sdk::Error(e.code(), "node '" + nodes_[i].name() + "' (" +
                                       minfer_op_name(nodes_[i].node().op) + "): " + e.what());
      }
    }
    if (timed_) check_cuda(cudaEventRecord(events_.back(), dev_.stream()), "recording a timing event");
  }

  // fuse_sum_add[i]: the expert sum and its residual add in one launch, unless the step has
  // too many rows for that: then its two nodes in turn.
  void run_sum_add(size_t i, const minfer_step_args &args) {
    if (sdk::run_rows(*nodes_[i].node().output, args) <= plan_.fused_up_to[i]) return run_moe_sum_add(dev_, nodes_[i].node(), nodes_[i + 1].node(), args);
    run_[i](dev_, nodes_[i].node(), args, tags_[i]);
    run_[i + 1](dev_, nodes_[i + 1].node(), args, tags_[i + 1]);
  }

  // fuse_expert_sum[i]: the expert matmul, its sum (and the sum's add) in one launch for a
  // decode token, else the matmul and then the sum's step.
  void run_expert_sum(size_t i, const minfer_step_args &args) {
    const bool with_add = plan_.fuse_sum_add[i + 1];
    if (run_matmul_id_sum(dev_, nodes_[i].node(), nodes_[i + 1].node(), with_add ? &nodes_[i + 2].node() : nullptr, args, tags_[i])) return;
    run_[i](dev_, nodes_[i].node(), args, tags_[i]);
    if (with_add) return run_sum_add(i + 1, args);
    run_[i + 1](dev_, nodes_[i + 1].node(), args, tags_[i + 1]);
  }

  // Whether the expert matmul i runs with its sum at this step size (fuse_expert_sum).
  bool expert_sum_fused(size_t i, int64_t tokens) const {
    if (!plan_.fuse_expert_sum[i]) return false;
    const minfer_node &n = nodes_[i].node();
    return CudaDevice::expert_sum_fusable(n.inputs[0]->dtype, n.inputs[0]->shape[0], n.inputs[2]->shape[0], tokens);
  }

  MoeFfnNodes moe_ffn_nodes(size_t i) const {
    const auto at = [&](size_t j) { return &nodes_[i + j].node(); };
    return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), plan_.moe_ffn_last[i] == i + 9 ? at(9) : nullptr};
  }
  // Whether node i's routed FFN (a fuse_router norm) runs as one launch at this step size.
  bool moe_ffn_fused(size_t i, int64_t tokens) const {
    if (!plan_.moe_ffn_last[i] || tokens != 1) return false;
    const MoeFfnNodes n = moe_ffn_nodes(i);
    const minfer_tensor &router = *n.router->inputs[0], &gate = *n.gate->inputs[0], &down = *n.down->inputs[0];
    return dev_.moe_ffn_fusable(router.dtype, gate.dtype, down.dtype, router.shape[0], gate.shape[1], router.shape[1], n.top_k->output->shape[0]);
  }

  // The last node of the one-launch FFN headed at h (a fused router's norm, or a dense gate step).
  size_t ffn_end(size_t h) const { return plan_.moe_ffn_last[h] ? plan_.moe_ffn_last[h] : plan_.ffn_last[h]; }
  // What the one-launch FFN headed at h computes, for --explain (its launch's shape left open).
  std::string ffn_text(size_t h) const {
    const auto type = [&](size_t j) { return std::string(minfer_dtype_name(nodes_[j].node().inputs[0]->dtype)); };
    const auto act = [&](size_t j) { return std::string(nodes_[j].node().op == MINFER_OP_GEGLU ? "GeGLU" : "SwiGLU"); };
    if (plan_.moe_ffn_last[h])
      return "the RMS norm, the router " + nodes_[h + 1].name() + ", its top-k and weights, the gate/up experts (" + type(h + 4) + ") with " +
             act(h + 6) + ", the down experts (" + type(h + 7) + ") and their weighted sum" +
             (plan_.moe_ffn_last[h] == h + 9 ? " with the residual add" : "") + " in one launch (dp4a; a block an SM";
    return "the RMS norm " + nodes_[h - 1].name() + ", gate/up (" + type(h) + ") with " + act(h + 2) + ", down (" + type(h + 3) + ")" +
           (plan_.ffn_last[h] == h + 4 ? " with the residual add" : "") + " in one launch (dp4a; a block an SM";
  }
  // Whether the output projection at i runs as the first stage of its FFN's launch at this step size.
  bool attn_out_ffn_fused(size_t i, int64_t tokens) const {
    if (!plan_.o_ffn[i] || tokens != 1) return false;
    const minfer_tensor &w = *nodes_[i].node().inputs[0];
    const size_t h = plan_.o_ffn[i];
    if (plan_.moe_ffn_last[h]) {
      const MoeFfnNodes n = moe_ffn_nodes(h);
      const minfer_tensor &router = *n.router->inputs[0], &gate = *n.gate->inputs[0], &down = *n.down->inputs[0];
      return dev_.moe_ffn_fusable(router.dtype, gate.dtype, down.dtype, router.shape[0], gate.shape[1], router.shape[1],
                                  n.top_k->output->shape[0], w.dtype, w.shape[0]);
    }
    const minfer_tensor &gate = *nodes_[h].node().inputs[0], &down = *nodes_[h + 3].node().inputs[0];
    return dev_.ffn_fusable(gate.dtype, down.dtype, gate.shape[0], gate.shape[1], w.dtype, w.shape[0]);
  }
  // The one-launch FFN that node i heads, run where the step's size, the options and the types
  // allow (o_ffn: i is the output projection that starts it): its last node, or 0 (nothing ran).
  size_t run_one_launch_ffn(size_t i, const minfer_step_args &args) {
    if (const size_t h = plan_.o_ffn[i]) {
      const minfer_node *o = &nodes_[i].node(), *o_add = &nodes_[i + 1].node();
      if (plan_.moe_ffn_last[h]) {
        MoeFfnNodes n = moe_ffn_nodes(h);
        n.o = o, n.o_add = o_add;
        if (run_moe_ffn(dev_, n, args)) return ffn_end(h);
      } else {
        DenseFfnNodes n = dense_ffn_nodes(h);
        n.o = o, n.o_add = o_add;
        if (run_dense_ffn(dev_, n, args)) return ffn_end(h);
      }
    }
    if (plan_.moe_ffn_last[i] && run_moe_ffn(dev_, moe_ffn_nodes(i), args)) return plan_.moe_ffn_last[i];
    if (plan_.ffn_last[i] && run_dense_ffn(dev_, dense_ffn_nodes(i), args)) return plan_.ffn_last[i];
    return 0;
  }

  DenseFfnNodes dense_ffn_nodes(size_t i) const {
    const auto at = [&](size_t j) { return &nodes_[i + j].node(); };
    return {&nodes_[i - 1].node(), at(0), at(1), at(2), at(3), plan_.ffn_last[i] == i + 4 ? at(4) : nullptr};
  }
  // Whether node i's dense FFN (a gate/up/glu step) runs as one launch at this step size.
  bool dense_ffn_fused(size_t i, int64_t tokens) const {
    if (!plan_.ffn_last[i] || tokens != 1) return false;
    const minfer_tensor &gate = *nodes_[i].node().inputs[0], &down = *nodes_[i + 3].node().inputs[0];
    return dev_.ffn_fusable(gate.dtype, down.dtype, gate.shape[0], gate.shape[1]);
  }

  // fuse_router[i]: the norm, router matmul and top-k/weights in one launch for a decode token,
  // else the norm's, the matmul's and the top-k's kernels in turn.
  void run_router(size_t i, const minfer_step_args &args) {
    if (run_moe_router(dev_, nodes_[i].node(), nodes_[i + 1].node(), nodes_[i + 2].node(), nodes_[i + 3].node(), args)) return;
    run_[i](dev_, nodes_[i].node(), args, tags_[i]);
    run_[i + 1](dev_, nodes_[i + 1].node(), args, tags_[i + 1]);
    run_top_k_weights(dev_, nodes_[i + 2].node(), nodes_[i + 3].node(), args);
  }

  // The one-token GEMV's kernel for rows of k values, m of them in the launch (gemv.cu).
  std::string gemv_kernel(int64_t k, int64_t m) const { return dev_.gemv_staged(k, m) ? "gemv_staged_kernel" : "gemv_quantizing_kernel"; }

  std::string explain_matmul(size_t i, int64_t tokens) const {
    const minfer_node &n = nodes_[i].node();
    const minfer_tensor &w = *n.inputs[0];
    const std::string type = minfer_dtype_name(w.dtype);
    using P = CudaDevice::MatmulPath;
    const P path = dev_.matmul_path(w.dtype, w.shape[0], tokens);
    std::string norm;  // the RMS norm folded into this step's one-token GEMV or few-token quantizing
    std::vector<int32_t> dtypes{w.dtype};
    int64_t rows = w.shape[1];  // the one-token launch's rows: all of a group's weights'
    if (!plan_.group[i].empty()) {
      dtypes.clear();
      rows = 0;
      for (const MatmulStep &st : plan_.group[i]) dtypes.push_back(st.matmul->inputs[0]->dtype), rows += st.matmul->inputs[0]->shape[1];
    }
    if (plan_.norm_of[i] && dev_.folds_norm(dtypes, w.shape[0], tokens, nullptr))  // the norm weights' alignment aside
      for (size_t j = 0; j < i; ++j)
        if (&nodes_[j].node() == plan_.norm_of[i]) norm = ", the RMS norm " + nodes_[j].name() + " folded in";
    const std::string act = plan_.fuse_glu[i] && nodes_[i + 2].node().op == MINFER_OP_GEGLU ? "GeGLU" : "SwiGLU";
    if (plan_.fuse_glu[i] && path == P::Gemv)
      return gemv_kernel(w.shape[0], rows) + ": gate, up and " + act + " in one launch (dp4a on the " + type + " blocks)" + norm;
    const bool on_f16 = path == P::Mmq && dev_.mmq_on_f16(w.dtype, w.shape[0], tokens, dptr(w));
    const std::string f16_kernels = dev_.mmq_wgmma() ? "convert_f32_f16_mma_order_kernel + mmq_f16_kernel" : "convert_f32_f16_kernel + mmq_f16_kernel";
    const std::string f16_mma = dev_.mmq_wgmma() ? "warpgroup MMA (wgmma.m64n128k16)" : "mma.m16n8k16";
    if (plan_.fuse_glu[i] && on_f16)
      return f16_kernels + ": gate, up and " + act + " in one launch (f16 tensor cores, " + f16_mma + ", the " + type +
             " blocks dequantized in registers)";
    if (plan_.fuse_glu[i] && path == P::Mmq && minfer_cuda_mmq_glu_supported(w.dtype))
      return "mmq_kernel: gate, up and " + act + " in one launch (int8 tensor cores on the " + type + " blocks)";
    if (plan_.fuse_glu[i] && path == P::Mmvq) return "quantize_q8_act_kernel + mmvq_kernel: gate, up and " + act + " in one launch (dp4a on the " + type + " blocks)";
    if (plan_.fuse_glu[i] && path == P::FewTokenMma && minfer_cuda_few_token_x_f16(w.dtype))
      return std::string(norm.empty() ? "" : "rms_norm_f32_kernel + ") + "convert_f32_f16_kernel + few_token_q6k_kernel: gate, up and " + act +
             " in one launch (f16 tensor cores on the " + type + " values)" + norm;
    if (plan_.fuse_glu[i] && path == P::FewTokenMma)
      return std::string(norm.empty() ? "quantize_q8_act_kernel" : "rms_norm_quantize_kernel") + " + few_token_mma_kernel: gate, up and " + act +
             " in one launch (int8 tensor cores on the " + type + " nibbles)" + norm;
    // A group of two weight dtypes: one mixed GEMV launch for a token, the steps one by one for a prompt.
    const bool mixed = std::any_of(plan_.group[i].begin(), plan_.group[i].end(), [&](const MatmulStep &st) { return st.matmul->inputs[0]->dtype != w.dtype; });
    std::string t;
    switch (path) {
      case P::Mmq:
        t = on_f16 ? f16_kernels + ": f16 tensor cores (" + f16_mma + "), the " + type + " blocks dequantized in registers"
                   : "mmq_kernel: int8 tensor cores (mma.m16n8k32) on the " + type + " blocks";
        break;
      case P::Gemv:
        t = mixed ? (w.shape[0] / 32 <= 32 ? "gemv_mixed_kernel" : gemv_kernel(w.shape[0], rows)) + ": dp4a on the " + type + " and " +
                        minfer_dtype_name(plan_.group[i].back().matmul->inputs[0]->dtype) + " blocks, x quantized in the kernel"
                  : gemv_kernel(w.shape[0], rows) + ": dp4a on the " + type + " blocks, x quantized in the kernel";
        break;
      case P::F16Gemm:
        t = std::string(dev_.f16_copy(dptr(w)) ? "its cached f16 copy" : "dequantized to f16 per call") + " + f16 tensor-core GEMM";
        break;
      case P::Mmvq: t = "quantize_q8_act_kernel + mmvq_kernel: dp4a on the " + type + " blocks"; break;
      case P::FewTokenMma:
        t = minfer_cuda_few_token_x_f16(w.dtype)
                ? std::string(norm.empty() ? "" : "rms_norm_f32_kernel + ") + "convert_f32_f16_kernel + few_token_q6k_kernel: f16 tensor cores (mma.m16n8k16) on the " +
                      type + " values"
                : std::string(norm.empty() ? "quantize_q8_act_kernel" : "rms_norm_quantize_kernel") +
                      " + few_token_mma_kernel: int8 tensor cores (mma.m16n8k32) on the " + type + " nibbles";
        break;
      case P::Generic:
        t = !minfer_dtype_info(w.dtype).is_quantized && w.shape[0] % 4 == 0
                ? "plain_matmul_kernel (f32 math on " + type + ", a row split over 4 warps, up to 4 tokens a pass)"
                : "matmul_kernel (f32 math on " + type + ")";
        break;
    }
    if (plan_.fuse_add[i]) t += path == P::Mmq || path == P::Gemv || path == P::Mmvq || path == P::FewTokenMma ? ", the add in its epilogue" : ", then an add kernel";
    if (plan_.fuse_glu[i]) t += path == P::Mmq ? "; up in the same launch, then glu_f32_kernel" : "; the same for up, then glu_f32_kernel";
    t += norm;
    if (!plan_.group[i].empty() && (path == P::Gemv || (path == P::Mmq && !mixed))) {
      t += "; one launch with";
      for (size_t j = 1; j < plan_.group[i].size(); ++j) t += " " + std::string(j > 1 ? "and " : "") + name_of(plan_.group[i][j].matmul);
    }
    return t;
  }

  std::string explain_attention(const minfer_node &at, int64_t tokens, bool rotating, bool normalizing) const {
    const auto &p = sdk::params_of<minfer_attention_params>(at);
    const char *k = minfer_cuda_flash_attention_kernel(tokens, tokens == 1, p.n_head, p.n_kv_head, p.head_dim, at.inputs[3]->dtype);
    std::string t = k ? k : "kv_write_kernel + attention_kernel (scores in shared memory)";
    if (k && std::string(k) == "flash_decode_kernel")
      t += !rotating ? " (writes the KV row)" : normalizing ? " (writes the KV row, rotates q and k, each head RMS-normalized first)"
                                                           : " (writes the KV row, rotates q and k)";
    else if (k) t = "kv_write_kernel + " + t;
    return t;
  }

  std::string name_of(const minfer_node *n) const {
    for (const auto &on : nodes_)
      if (&on.node() == n) return on.name();
    return "?";
  }

  // One matmul step as run_matmul_group takes it: node i with its fused add, if any.
  MatmulStep step_at(size_t i) const { return plan_.step_at(nodes_, i); }

  CudaDevice &dev_;
  FusionPlan plan_;
  const minfer_node *norm_ran_ = nullptr;        // this run: the norm whose kernel ran (StepNorm)
  std::vector<cudaEvent_t> events_;  // around each node, for node_times
  bool timed_ = false;
  static constexpr int64_t kMaxGraphTokens = 256;  // decode steps of up to this many sequences are captured
  struct Captured {
    cudaGraphExec_t exec = nullptr;
    int64_t runs = 0;  // steps of this shape so far
  };
  void drop_graphs() {
    for (auto &[shape, c] : graphs_)
      if (c.exec) cudaGraphExecDestroy(c.exec);
    graphs_.clear();
  }
  std::map<std::tuple<int64_t, int64_t, int64_t>, Captured> graphs_;  // by (tokens, output rows, positions_bucket)
  uint64_t graph_generation_ = 0;
  std::vector<sdk::OwnedNode> nodes_;
  std::vector<void (*)(CudaDevice &, const minfer_node &, const minfer_step_args &, int32_t)> run_;
  std::vector<int32_t> tags_;
  std::vector<bool> skip_;  // MINFER_CUDA_SKIP_NODES: not run (diagnostics only)

  // MINFER_CUDA_SKIP_NODES=REGEX leaves out every node (or fused group, by its first node) whose
  // name matches: its outputs keep whatever they held, so results are wrong. It exists to time
  // a stage inside the real decode step (CUDA graph, PDL overlap) by the step's change without
  // it — what ncu's one-kernel-at-a-time times cannot show (scripts/gpu-stage-costs.sh).
  void mark_skipped() {
    skip_.assign(nodes_.size(), false);
    const char *env = std::getenv("MINFER_CUDA_SKIP_NODES");
    if (!env || !*env) return;
    std::regex re;
    try {
      re = std::regex(env);
    } catch (const std::regex_error &e) {
      throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, std::string("MINFER_CUDA_SKIP_NODES: '") + env + "' is not a regular expression (" + e.what() +
                                                        "); unset it to run every node");
    }
    int64_t n = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) n += skip_[i] = std::regex_search(nodes_[i].name(), re);
    dev_.host().log(MINFER_LOG_WARN, "MINFER_CUDA_SKIP_NODES='" + std::string(env) + "': " + std::to_string(n) +
                                         " nodes of this segment are not run; its results are wrong (a diagnostic for timing stages)");
  }
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
  // Page-locked: the copy engines move it directly (a decode step's 600 KB of logits in ~25
  // instead of ~95 us through the driver's staging of ordinary memory).
  void *host_alloc(uint64_t bytes) override {
    DeviceScope scope(dev_.id());
    void *p = nullptr;
    check_cuda(cudaHostAlloc(&p, std::max<uint64_t>(bytes, 1), cudaHostAllocPortable), "page-locked host memory (" + std::to_string(bytes) + " bytes)");
    return p;
  }
  void host_free(void *host) override { cudaFreeHost(host); }
  std::unique_ptr<sdk::Group> open_group(const std::vector<sdk::Backend *> &ranks) override {
    std::vector<CudaDevice *> devices;
    for (sdk::Backend *b : ranks) devices.push_back(&static_cast<CudaBackend *>(b)->dev_);  // one plugin's: the host checks
    return open_nccl_group(devices);
  }

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
    o.pdl = opts.take_bool("pdl", true);
    o.mmq = opts.take_bool("mmq", true);
    o.mmq_f16 = opts.take_bool("mmq_f16", true);
    o.mmq_wgmma = opts.take_bool("mmq_wgmma", false);
    o.mmq_min_tokens = opts.take_int("mmq_min_tokens", 0, 0, 4096);  // 0: by measurement (token count, k)
    o.few_token_mma = opts.take_bool("few_token_mma", true);
    o.moe_ffn_fused = opts.take_bool("moe_ffn_fused", false);
    o.dense_ffn_fused = opts.take_bool("dense_ffn_fused", false);
    o.attn_out_fused = opts.take_bool("attn_out_fused", false);
    o.staged_row_groups = opts.take_bool("staged_row_groups", true);
    o.staged_twin_blocks = opts.take_bool("staged_twin_blocks", false);
    o.staged_short_rows_from = opts.take_int("staged_short_rows_from", 32768, 1, int64_t(1) << 40);
    o.staged_expert_pairs = opts.take_bool("staged_expert_pairs", false);
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
