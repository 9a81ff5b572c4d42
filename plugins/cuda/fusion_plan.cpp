// plugins/cuda/fusion_plan.cpp — which nodes of a segment run as one step (see fusion_plan.hpp).
#include "fusion_plan.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/launchers.h"
#include "minfer/op_contract.hpp"

namespace minfer::cuda {
namespace {

class Planner {
 public:
  Planner(const std::vector<sdk::OwnedNode> &nodes, FusionPlan &plan) : nodes_(nodes), p_(plan) {}

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
  // The most step rows (tokens) for which a and b, each filled from its start for that many
  // rows, stay apart: the host sizes tensors for the segment's largest step, so two that
  // overlap at 512 tokens may be far apart at a decode token's. 0: never; INT64_MAX: always.
  static int64_t apart_up_to(const minfer_tensor &a, const minfer_tensor &b) {
    if (!overlap(a, b)) return INT64_MAX;
    const minfer_tensor &lo = a.offset <= b.offset ? a : b, &hi = a.offset <= b.offset ? b : a;
    const int d = lo.token_dim;
    if (lo.offset == hi.offset || d != lo.rank - 1 || lo.stride_bytes[d] <= 0) return 0;  // token rows outermost only
    return int64_t((hi.offset - lo.offset) / uint64_t(lo.stride_bytes[d]));
  }
  // a and b are one tensor's bytes (same buffer, offset and row stride): a kernel that reads
  // each row whole before writing it may write one over the other.
  static bool aliased(const minfer_tensor &a, const minfer_tensor &b) {
    return same(a, b) && a.rank == b.rank && a.stride_bytes[a.rank - 1] == b.stride_bytes[b.rank - 1] && bytes_of(a) == bytes_of(b);
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

  // Also gate MATMUL, up MATMUL, SWIGLU or GEGLU of the two (same x, dtype and shape; outputs read by
  // nothing else): one step, a single kernel for a decode token.
  void run() {
    p_.fuse_add.assign(nodes_.size(), false);
    p_.fuse_glu.assign(nodes_.size(), false);
    p_.fuse_rope.assign(nodes_.size(), false);
    p_.fuse_rope_attention.assign(nodes_.size(), false);
    p_.fuse_top_k_weights.assign(nodes_.size(), false);
    p_.fuse_rope_norms.assign(nodes_.size(), false);
    p_.fuse_sum_add.assign(nodes_.size(), false);
    p_.fuse_router.assign(nodes_.size(), false);
    p_.fuse_expert_sum.assign(nodes_.size(), false);
    p_.fused_up_to.assign(nodes_.size(), INT64_MAX);
    p_.owner.resize(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) p_.owner[i] = i;
    p_.fused_away.assign(nodes_.size(), false);
    // Two ROPEs in a row at the same positions and parameters, the second not reading the
    // first's output nor writing over its input: one launch (both outputs are written).
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &a = nodes_[i].node(), &b = nodes_[i + 1].node();
      if (a.op != MINFER_OP_ROPE || b.op != MINFER_OP_ROPE || !same(*a.inputs[1], *b.inputs[1])) continue;
      if (a.n_inputs != b.n_inputs || (a.n_inputs > 2 && !same(*a.inputs[2], *b.inputs[2]))) continue;  // one set of factors
      if (a.params->struct_size != b.params->struct_size || std::memcmp(a.params, b.params, a.params->struct_size) != 0) continue;
      if (overlap(*b.inputs[0], *a.output) || overlap(*b.output, *a.inputs[0]) || overlap(*b.output, *a.output)) continue;
      p_.fuse_rope[i] = true;
      p_.fused_away[i + 1] = true, p_.owner[i + 1] = i;
      ++i;
    }
    // The two per-head RMS_NORMs right before a rope pair (Qwen3's q and k norms), each read
    // only by its rope: the rope kernel normalizes each head first (a warp holds a head), and so
    // does the one-token attention kernel where the pair is fused with its attention (below);
    // no rope output over a norm input, which other blocks of the launch still read.
    for (size_t i = 2; i + 1 < nodes_.size(); ++i) {
      if (!p_.fuse_rope[i]) continue;
      const minfer_node &na = nodes_[i - 2].node(), &nb = nodes_[i - 1].node(), &a = nodes_[i].node(), &b = nodes_[i + 1].node();
      if (na.op != MINFER_OP_RMS_NORM || nb.op != MINFER_OP_RMS_NORM || p_.fused_away[i - 2] || p_.fused_away[i - 1]) continue;
      if (!same(*a.inputs[0], *na.output) || !same(*b.inputs[0], *nb.output)) continue;
      const int32_t hd = sdk::params_of<minfer_rope_params>(a).head_dim;
      if (sdk::rms_norm_group(na) != hd || sdk::rms_norm_group(nb) != hd ||
          sdk::params_of<minfer_rms_norm_params>(na).eps != sdk::params_of<minfer_rms_norm_params>(nb).eps)
        continue;
      if (!(na.output->flags & nb.output->flags & MINFER_TENSOR_SEGMENT_LOCAL) || read_after(i + 1, *na.output) || read_after(i + 1, *nb.output))
        continue;
      if (overlap(*nb.inputs[0], *na.output) || overlap(*nb.inputs[1], *na.output)) continue;  // k's norm never reads q's
      // A rope output may take its own norm's input bytes exactly (the host reuses them, as
      // the norm's input dies there): a warp reads its head whole before writing it.
      bool clear = true;
      for (const minfer_tensor *o : {a.output, b.output})
        for (const minfer_tensor *in : {na.inputs[0], na.inputs[1], nb.inputs[0], nb.inputs[1]})
          clear = clear && (!overlap(*o, *in) || (o == a.output && in == na.inputs[0] && aliased(*o, *in)) ||
                            (o == b.output && in == nb.inputs[0] && aliased(*o, *in)));
      if (!clear) continue;
      p_.fuse_rope_norms[i] = true;
      p_.fused_away[i - 2] = p_.fused_away[i - 1] = true, p_.owner[i - 2] = p_.owner[i - 1] = i;
    }
    // Such a pair and the ATTENTION after it reading both outputs (as q and k, either order),
    // which nothing later reads and whose output does not overlap the pair's inputs (the
    // fused kernel writes it while other blocks may still read them).
    for (size_t i = 0; i + 2 < nodes_.size(); ++i) {
      if (!p_.fuse_rope[i]) continue;
      const minfer_node &a = nodes_[i].node(), &b = nodes_[i + 1].node(), &at = nodes_[i + 2].node();
      if (at.op != MINFER_OP_ATTENTION) continue;
      const bool qk = same(*at.inputs[0], *a.output) && same(*at.inputs[1], *b.output);
      const bool kq = same(*at.inputs[0], *b.output) && same(*at.inputs[1], *a.output);
      if (!qk && !kq) continue;
      if (sdk::params_of<minfer_rope_params>(a).head_dim != sdk::params_of<minfer_attention_params>(at).head_dim) continue;
      if (!(a.output->flags & b.output->flags & MINFER_TENSOR_SEGMENT_LOCAL) || read_after(i + 2, *a.output) || read_after(i + 2, *b.output))
        continue;
      // What the fused kernel reads as unrotated q and k: the rope inputs, or the norms' inputs.
      // The output may take q's bytes exactly (the host reuses them: q dies at its rope or
      // norm): each block reads its query rows first, and only the last block of those rows
      // writes them, after every block of theirs has read them.
      const minfer_tensor &qa = p_.fuse_rope_norms[i] ? *nodes_[i - 2].node().inputs[0] : *a.inputs[0];
      const minfer_tensor &qb = p_.fuse_rope_norms[i] ? *nodes_[i - 1].node().inputs[0] : *b.inputs[0];
      const minfer_tensor &q_src = qk ? qa : qb, &k_src = qk ? qb : qa;
      if ((overlap(*at.output, q_src) && !aliased(*at.output, q_src)) || overlap(*at.output, k_src)) continue;
      p_.fuse_rope_attention[i] = true;
      p_.fused_away[i + 2] = true, p_.owner[i + 2] = i;
    }
    // A router's TOP_K and the MOE_WEIGHTS of the same logits and its ids: the top-k kernel
    // ranks the row and writes the weights too (rows of at most 1024 experts).
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &tk = nodes_[i].node(), &mw = nodes_[i + 1].node();
      if (tk.op != MINFER_OP_TOP_K || mw.op != MINFER_OP_MOE_WEIGHTS || !same(*mw.inputs[0], *tk.inputs[0]) || !same(*mw.inputs[1], *tk.output))
        continue;
      if (!minfer_cuda_top_k_weights_supported(tk.inputs[0]->shape[0], tk.output->shape[0])) continue;
      if (overlap(*mw.output, *tk.inputs[0]) || overlap(*mw.output, *tk.output)) continue;
      p_.fuse_top_k_weights[i] = true;
      p_.fused_away[i + 1] = true, p_.owner[i + 1] = i;
      ++i;
    }
    // An RMS_NORM of whole rows, the router MATMUL of its output by plain weights, and that
    // router's fused TOP_K/MOE_WEIGHTS: one launch for a decode token (moe.cu). Its blocks read
    // x, the norm and router weights while others write the norm's output, the logits, the
    // ids and the weights, so those four must overlap none of the three nor each other.
    for (size_t i = 0; i + 3 < nodes_.size(); ++i) {
      const minfer_node &norm = nodes_[i].node(), &mm = nodes_[i + 1].node(), &tk = nodes_[i + 2].node(), &mw = nodes_[i + 3].node();
      if (norm.op != MINFER_OP_RMS_NORM || mm.op != MINFER_OP_MATMUL || !p_.fuse_top_k_weights[i + 2] || p_.fused_away[i]) continue;
      if (sdk::rms_norm_group(norm) != norm.inputs[0]->shape[0] || !same(*mm.inputs[1], *norm.output) || !same(*tk.inputs[0], *mm.output))
        continue;
      const minfer_tensor &w = *mm.inputs[0];
      if (!minfer_cuda_moe_router_decode_supported(w.dtype, w.shape[0], w.shape[1], tk.output->shape[0])) continue;
      const minfer_tensor *outs[] = {norm.output, mm.output, tk.output, mw.output};
      const minfer_tensor *ins[] = {norm.inputs[0], norm.inputs[1], &w};
      bool clear = true;
      for (size_t a = 0; a < 4; ++a) {
        for (const minfer_tensor *in : ins) clear = clear && !overlap(*outs[a], *in);
        for (size_t b = a + 1; b < 4; ++b) clear = clear && !overlap(*outs[a], *outs[b]);
      }
      if (!clear) continue;
      p_.fuse_router[i] = true;
      for (size_t j = i + 1; j <= i + 3; ++j) p_.fused_away[j] = true, p_.owner[j] = i;
      i += 3;
    }
    // The experts' weighted sum and the residual ADD of it (as for a matmul's add: the sum's
    // output read by nothing else, and the add's output not over the sum's inputs, which other
    // threads still read).
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &sum = nodes_[i].node(), &add = nodes_[i + 1].node();
      if (sum.op != MINFER_OP_MOE_SUM || add.op != MINFER_OP_ADD || !(sum.output->flags & MINFER_TENSOR_SEGMENT_LOCAL)) continue;
      if (same(*add.inputs[0], *sum.output) == same(*add.inputs[1], *sum.output) || read_after(i + 1, *sum.output)) continue;
      // Apart for the step's rows: a decode step's few rows sit far below where the add's
      // output begins even when a 512-token step's expert outputs reach it.
      const int64_t apart = std::min(apart_up_to(*add.output, *sum.inputs[0]), apart_up_to(*add.output, *sum.inputs[1]));
      if (apart < 1) continue;
      p_.fuse_sum_add[i] = true;
      p_.fused_up_to[i] = apart;
      p_.fused_away[i + 1] = true, p_.owner[i + 1] = i;
      ++i;
    }
    plan_expert_sums();
    for (size_t i = 0; i + 2 < nodes_.size(); ++i) {
      const minfer_node &g = nodes_[i].node(), &u = nodes_[i + 1].node(), &sw = nodes_[i + 2].node();
      // Dense (MATMUL) or experts (MATMUL_ID of the same ids).
      const bool dense = g.op == MINFER_OP_MATMUL && u.op == MINFER_OP_MATMUL;
      const bool experts = g.op == MINFER_OP_MATMUL_ID && u.op == MINFER_OP_MATMUL_ID && same(*g.inputs[2], *u.inputs[2]);
      if (!(dense || experts) || (sw.op != MINFER_OP_SWIGLU && sw.op != MINFER_OP_GEGLU) || p_.fused_away[i]) continue;
      const minfer_tensor &wg = *g.inputs[0], &wu = *u.inputs[0];
      if (!same(*g.inputs[1], *u.inputs[1]) || wg.dtype != wu.dtype || wg.shape[0] != wu.shape[0] || wg.shape[1] != wu.shape[1] ||
          wg.shape[2] != wu.shape[2])
        continue;
      if (!same(*sw.inputs[0], *g.output) || !same(*sw.inputs[1], *u.output)) continue;
      if (!(g.output->flags & u.output->flags & MINFER_TENSOR_SEGMENT_LOCAL) || read_after(i + 2, *g.output) || read_after(i + 2, *u.output))
        continue;
      if (overlap(*sw.output, *g.inputs[1]) || overlap(*sw.output, wg) || overlap(*sw.output, wu)) continue;
      p_.fuse_glu[i] = true;
      p_.fused_away[i + 1] = p_.fused_away[i + 2] = true, p_.owner[i + 1] = p_.owner[i + 2] = i;
      i += 2;
    }
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &mm = nodes_[i].node(), &add = nodes_[i + 1].node();
      if (mm.op != MINFER_OP_MATMUL || !(mm.output->flags & MINFER_TENSOR_SEGMENT_LOCAL) || p_.fused_away[i] || p_.fuse_glu[i]) continue;
      const bool bias = add.op == MINFER_OP_ADD_ROW_BROADCAST && same(*add.inputs[0], *mm.output);
      const bool residual = add.op == MINFER_OP_ADD && (same(*add.inputs[0], *mm.output) != same(*add.inputs[1], *mm.output));
      if (!bias && !residual) continue;
      if (read_after(i + 1, *mm.output) || overlap(*add.output, *mm.inputs[0]) || overlap(*add.output, *mm.inputs[1])) continue;
      p_.fuse_add[i] = true;
      p_.fused_away[i + 1] = true, p_.owner[i + 1] = i;
    }
    plan_matmul_groups();
    plan_norm_folds();
    plan_moe_ffns();
    plan_dense_ffns();
    plan_attn_out_ffns();
  }

  // The attention's output projection with its residual add (a fuse_add MATMUL at i) whose sum
  // is the x that the FFN right after it normalizes: a routed FFN's fused router at i + 2, or a
  // dense FFN's norm at i + 2 folded into its gate step at i + 3. Its stage writes x while other
  // blocks read the projection's input and the residual, which fuse_add keeps apart from x (or
  // x over the residual exactly: a lane reads its row, then writes it); a grid barrier then
  // parts it from every later stage.
  void plan_attn_out_ffns() {
    p_.o_ffn.assign(nodes_.size(), 0);
    for (size_t i = 0; i + 3 < nodes_.size(); ++i) {
      const minfer_node &mm = nodes_[i].node();
      if (mm.op != MINFER_OP_MATMUL || !p_.fuse_add[i] || p_.fused_away[i] || !p_.group[i].empty() || p_.norm_of[i]) continue;
      if (nodes_[i + 1].node().op != MINFER_OP_ADD) continue;  // a residual, not a bias
      const minfer_tensor &x = *nodes_[i + 1].node().output;
      const size_t head = p_.moe_ffn_last[i + 2] ? i + 2 : p_.ffn_last[i + 3] && p_.norm_of[i + 3] == &nodes_[i + 2].node() ? i + 3 : 0;
      if (head == 0 || !same(*nodes_[i + 2].node().inputs[0], x)) continue;
      if (overlap(x, *mm.inputs[0])) continue;
      p_.o_ffn[i] = head;
    }
  }

  // A dense gated FFN: the gate/up/glu step at i with its RMS norm folded in (the norm right
  // before it, so no other step reads it), and the down MATMUL of the activations at i + 3
  // with its residual add where fused: one launch for a decode token, the two stages apart by
  // a grid barrier. Its blocks write the activations while others still normalize x (the norm
  // fold cleared that) and, past the barrier, out while others read the activations.
  void plan_dense_ffns() {
    p_.ffn_last.assign(nodes_.size(), 0);
    for (size_t i = 1; i + 3 < nodes_.size(); ++i) {
      if (!p_.fuse_glu[i] || p_.norm_of[i] != &nodes_[i - 1].node()) continue;
      const minfer_node &gate = nodes_[i].node(), &glu = nodes_[i + 2].node(), &down = nodes_[i + 3].node();
      if (gate.op != MINFER_OP_MATMUL || down.op != MINFER_OP_MATMUL || p_.fused_away[i + 3] || !p_.group[i + 3].empty() || p_.norm_of[i + 3])
        continue;
      if (!same(*down.inputs[1], *glu.output)) continue;
      const minfer_tensor &out = p_.fuse_add[i + 3] ? *nodes_[i + 4].node().output : *down.output;
      if (overlap(out, *glu.output) || overlap(out, *down.inputs[0])) continue;
      p_.ffn_last[i] = p_.fuse_add[i + 3] ? i + 4 : i + 3;
    }
  }

  // A fused router at i, the gated experts of its norm's output and ids at i + 4, and the down
  // experts of their activations with the sum by the router's weights at i + 7: one launch
  // for a decode token, its stages apart by grid barriers. Within a stage the blocks write the
  // activations while others read the logits (the router step keeps ids and weights apart from
  // those), so the activations must overlap none of the three; the rest the steps' own plans
  // cleared.
  void plan_moe_ffns() {
    p_.moe_ffn_last.assign(nodes_.size(), 0);
    for (size_t i = 0; i + 8 < nodes_.size(); ++i) {
      if (!p_.fuse_router[i] || !p_.fuse_glu[i + 4] || !p_.fuse_expert_sum[i + 7]) continue;
      const minfer_node &norm = nodes_[i].node(), &tk = nodes_[i + 2].node(), &mw = nodes_[i + 3].node(), &gate = nodes_[i + 4].node(),
                        &glu = nodes_[i + 6].node(), &down = nodes_[i + 7].node(), &sum = nodes_[i + 8].node();
      if (gate.op != MINFER_OP_MATMUL_ID || gate.inputs[1]->rank != 2 || !same(*gate.inputs[1], *norm.output) || !same(*gate.inputs[2], *tk.output) ||
          !same(*down.inputs[1], *glu.output) || !same(*down.inputs[2], *tk.output) || !same(*sum.inputs[1], *mw.output))
        continue;
      if (overlap(*glu.output, *nodes_[i + 1].node().output) || overlap(*glu.output, *tk.output) || overlap(*glu.output, *mw.output)) continue;
      p_.moe_ffn_last[i] = p_.fuse_sum_add[i + 8] ? i + 9 : i + 8;
    }
  }

  MatmulStep step_at(size_t i) const { return p_.step_at(nodes_, i); }

  // An expert MATMUL_ID (the down projection: not a gate or up) whose output only the MOE_SUM
  // right after it reads, with that sum's residual ADD where fuse_sum_add took it: one launch
  // for a decode token. Its blocks read the matmul's x, ids and weights, the sum's expert
  // weights and the add's other input while others write the final output, so at one row the
  // output lies apart from the first four and over the add's input only exactly (a row is read
  // and then written by the same lane).
  void plan_expert_sums() {
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &mm = nodes_[i].node(), &sum = nodes_[i + 1].node();
      if (mm.op != MINFER_OP_MATMUL_ID || sum.op != MINFER_OP_MOE_SUM || p_.fused_away[i] || !same(*sum.inputs[0], *mm.output)) continue;
      if (mm.inputs[1]->rank != 3 || !(mm.output->flags & MINFER_TENSOR_SEGMENT_LOCAL) || read_after(i + 1, *mm.output)) continue;
      const minfer_node *add = p_.fuse_sum_add[i + 1] ? &nodes_[i + 2].node() : nullptr;
      const minfer_tensor &out = add ? *add->output : *sum.output;
      bool clear = true;
      for (const minfer_tensor *in : {mm.inputs[0], mm.inputs[1], mm.inputs[2], sum.inputs[1]}) clear = clear && apart_up_to(out, *in) >= 1;
      if (add) {
        const minfer_tensor &residual = same(*add->inputs[0], *sum.output) ? *add->inputs[1] : *add->inputs[0];
        clear = clear && (aliased(out, residual) || apart_up_to(out, residual) >= 1);
      }
      if (!clear) continue;
      p_.fuse_expert_sum[i] = true;
      p_.fused_away[i + 1] = true, p_.owner[i + 1] = i;
      if (add) p_.owner[i + 2] = i;
    }
  }

  // An RMS_NORM whose output only the steps right after it read — a group, a gate/up/SwiGLU,
  // or one matmul with or without its add; several when a layer's V has another weight type
  // than its Q and K — runs inside them: folded into each one-token GEMV (which quantizes
  // x * w and scales the products by the norm's 1/rms: each step sums x^2 itself, which costs
  // less than a launch), else just before the first. Inside the steps only matmuls read the
  // norm's output, as x, and no output overlaps the norm's inputs, which the GEMV's blocks
  // read while others write.
  void plan_norm_folds() {
    p_.norm_of.assign(nodes_.size(), nullptr);
    const auto last_of = [&](size_t first) {  // a step's last node
      size_t last = first;
      for (size_t j = first; j < nodes_.size(); ++j)
        if (p_.owner[j] == first) last = j;
      return last;
    };
    for (size_t i = 0; i + 1 < nodes_.size(); ++i) {
      const minfer_node &norm = nodes_[i].node();
      if (norm.op != MINFER_OP_RMS_NORM || p_.fused_away[i] || !(norm.output->flags & MINFER_TENSOR_SEGMENT_LOCAL)) continue;
      if (sdk::rms_norm_group(norm) != norm.inputs[0]->shape[0]) continue;  // a per-head norm folds into no GEMV
      std::vector<size_t> steps;  // first nodes of the steps reading the norm
      size_t last = i;
      for (size_t s = i + 1; s < nodes_.size(); s = last + 1) {
        const minfer_node &c = nodes_[s].node();
        if (c.op != MINFER_OP_MATMUL || p_.fused_away[s] || !same(*c.inputs[1], *norm.output)) break;
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
      for (size_t s : steps) p_.norm_of[s] = &norm;
      p_.fused_away[i] = true, p_.owner[i] = steps[0];
    }
  }

  // Consecutive matmul steps (a MATMUL, or one fused with its add) of the same input and k and
  // of one weight dtype — a layer's Q, K and V — run as one group (one launch for a decode
  // token), at most kMinferCudaGemvMaxParts. A second dtype may follow the first where the
  // one-token GEMV mixes the two (an _M file's V after its Q and K); a prompt then runs the
  // steps one by one. All of a group's outputs are written at its first node,
  // so no step may read another's output or write over another's inputs.
  void plan_matmul_groups() {
    p_.group.assign(nodes_.size(), {});
    const auto is_step = [&](size_t i) {
      return i < nodes_.size() && nodes_[i].node().op == MINFER_OP_MATMUL && !p_.fused_away[i] && !p_.fuse_glu[i];
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
      size_t next = i + (p_.fuse_add[i] ? 2 : 1);
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
        next += p_.fuse_add[next] ? 2 : 1;
      }
      if (group.size() > 1) {
        p_.group[i] = group;
        for (size_t j = 1; j < starts.size(); ++j) {
          p_.fused_away[starts[j]] = true, p_.owner[starts[j]] = i;
          if (p_.fuse_add[starts[j]]) p_.fused_away[starts[j] + 1] = true, p_.owner[starts[j] + 1] = i;
        }
      }
      i = next;
    }
  }

  const std::vector<sdk::OwnedNode> &nodes_;
  FusionPlan &p_;
};

}  // namespace

MatmulStep FusionPlan::step_at(const std::vector<sdk::OwnedNode> &nodes, size_t i) const {
  return MatmulStep{&nodes[i].node(), fuse_add[i] ? &nodes[i + 1].node() : nullptr};
}

std::string FusionPlan::summary() const {
  const auto count = [](const std::vector<bool> &v) { return std::count(v.begin(), v.end(), true); };
  const auto groups = std::count_if(group.begin(), group.end(), [](const auto &g) { return !g.empty(); });
  const auto norms = std::count_if(norm_of.begin(), norm_of.end(), [](const minfer_node *n) { return n != nullptr; });
  const auto nonzero = [](size_t last) { return last != 0; };
  const auto ffns = std::count_if(moe_ffn_last.begin(), moe_ffn_last.end(), nonzero);
  const auto dense_ffns = std::count_if(ffn_last.begin(), ffn_last.end(), nonzero);
  const auto o_ffns = std::count_if(o_ffn.begin(), o_ffn.end(), nonzero);
  if (count(fused_away) == 0) return "";
  return "cuda segment of " + std::to_string(fused_away.size()) + " nodes: " + std::to_string(count(fuse_add)) +
         " matmuls with their bias/residual add, " + std::to_string(count(fuse_glu)) + " gate/up/glu triples, " +
         std::to_string(count(fuse_rope)) + " rope pairs (" + std::to_string(count(fuse_rope_attention)) + " with their attention, " +
         std::to_string(count(fuse_rope_norms)) + " with their per-head norms), " +
         std::to_string(count(fuse_top_k_weights)) + " top-k/expert-weight pairs (" + std::to_string(count(fuse_router)) +
         " with their RMS norm and router), " + std::to_string(count(fuse_sum_add)) +
         " expert sums with their residual add fused (" + std::to_string(count(fuse_expert_sum)) + " expert matmuls with their sum; " +
         std::to_string(ffns) + " routed FFNs one launch each for a decode token); " + std::to_string(dense_ffns) +
         " dense gated FFNs one launch each for a decode token where the option allows (" + std::to_string(o_ffns) +
         " of either with the attention output projection before them); " +
         std::to_string(groups) + " groups of matmuls sharing their input, " + std::to_string(norms) +
         " matmul steps with the RMS norm they read folded in";
}

FusionPlan plan_fusions(const std::vector<sdk::OwnedNode> &nodes) {
  FusionPlan plan;
  Planner(nodes, plan).run();
  return plan;
}

}  // namespace minfer::cuda
