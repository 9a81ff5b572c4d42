#include "graph/graph.hpp"

#include <cstring>
#include <limits>
#include <unordered_set>

#include "common/error.hpp"
#include "minfer/dtype.h"
#include "minfer/op_contract.hpp"

namespace minfer {

uint64_t dtype_bytes(int32_t dtype, int64_t n, const std::string &what) {
  const minfer_dtype_traits tr = minfer_dtype_info(dtype);
  if (!tr.name) throw Error(what + ": unknown dtype id " + std::to_string(dtype));
  if (n < 0) throw Error(what + ": negative element count");
  if (n % tr.block_values != 0)
    throw Error(what + ": " + std::to_string(n) + " values is not a multiple of " + tr.name +
                "'s block of " + std::to_string(tr.block_values));
  const uint64_t blocks = uint64_t(n / tr.block_values);
  if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(tr.block_bytes))
    throw Error(what + ": byte size overflows");
  return blocks * uint64_t(tr.block_bytes);
}

uint64_t Tensor::n_bytes() const {
  return dtype_bytes(dtype, shape[0], name) * uint64_t(n_rows());
}

std::string Tensor::describe() const {
  std::string s = name + " " + minfer_dtype_name(dtype) + "[";
  for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

minfer_tensor to_abi(const Tensor &t) {
  minfer_tensor d{};
  d.struct_size = sizeof d;
  d.dtype = t.dtype;
  d.rank = t.rank;
  const minfer_dtype_traits tr = minfer_dtype_info(t.dtype);
  int64_t stride = int64_t(dtype_bytes(t.dtype, t.shape[0], t.name));
  d.stride_bytes[0] = tr.block_values == 1 ? tr.block_bytes : 0;
  d.shape[0] = t.shape[0];
  for (int i = 1; i < 4; ++i) {
    d.shape[i] = t.shape[i];
    d.stride_bytes[i] = stride;
    stride *= t.shape[i];
  }
  d.name = t.name.c_str();
  d.token_dim = t.token_dim;
  if (t.token_dim >= 0 && t.output_rows) d.flags |= MINFER_TENSOR_OUTPUT_ROWS;
  return d;
}

AbiNode::AbiNode(const Graph &g, const Node &n) {
  for (TensorId id : n.inputs) tensors_.push_back(to_abi(g.tensor(id)));
  tensors_.push_back(to_abi(g.tensor(n.output)));
  for (size_t i = 0; i + 1 < tensors_.size(); ++i) inputs_.push_back(&tensors_[i]);
  node_.struct_size = sizeof node_;
  node_.op = n.op;
  node_.name = n.name.c_str();
  node_.n_inputs = int32_t(inputs_.size());
  node_.inputs = inputs_.data();
  node_.output = &tensors_.back();
  node_.params = n.params.empty() ? nullptr : reinterpret_cast<const minfer_params_header *>(n.params.data());
}

TensorId Graph::find_tensor(const std::string &name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

namespace {

std::array<int64_t, 4> to_shape(const std::string &name, const std::vector<int64_t> &dims) {
  if (dims.empty() || dims.size() > 4)
    throw Error("tensor '" + name + "': rank " + std::to_string(dims.size()) + " is not 1..4");
  std::array<int64_t, 4> s{1, 1, 1, 1};
  int64_t total = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0) throw Error("tensor '" + name + "': dimension " + std::to_string(i) + " is " +
                                  std::to_string(dims[i]) + "; dimensions must be positive");
    if (total > std::numeric_limits<int64_t>::max() / dims[i])
      throw Error("tensor '" + name + "': element count overflows 64 bits");
    total *= dims[i];
    s[i] = dims[i];
  }
  return s;
}

}  // namespace

const Tensor &GraphBuilder::t(TensorId id) const {
  if (id < 0 || size_t(id) >= g_.tensors_.size())
    throw Error("tensor id " + std::to_string(id) + " does not exist in this graph");
  return g_.tensors_[size_t(id)];
}

// A graph-level tensor (input, weight or state) as its builder call describes it.
static Tensor described(const std::string &name, int32_t dtype, const std::vector<int64_t> &shape, TensorRole role) {
  Tensor x;
  x.name = name;
  x.dtype = dtype;
  x.rank = int(shape.size());
  x.shape = to_shape(name, shape);
  x.role = role;
  return x;
}

TensorId GraphBuilder::new_tensor(Tensor tensor) {
  if (tensor.name.empty()) throw Error("every tensor needs a name");
  if (g_.find_tensor(tensor.name) >= 0)
    throw Error("tensor name '" + tensor.name + "' is used twice; names must be unique");
  (void)tensor.n_bytes();  // validates dtype and whole blocks
  const TensorId id = TensorId(g_.tensors_.size());
  g_.by_name_.emplace(tensor.name, id);
  g_.tensors_.push_back(std::move(tensor));
  return id;
}

TensorId GraphBuilder::input(const std::string &name, int32_t dtype, std::vector<int64_t> shape) {
  return new_tensor(described(name, dtype, shape, TensorRole::Input));
}

TensorId GraphBuilder::weight(const std::string &name, int32_t dtype, std::vector<int64_t> shape,
                              HostBytes bytes) {
  Tensor x = described(name, dtype, shape, TensorRole::Weight);
  x.weight = std::move(bytes);
  if (x.weight.size != x.n_bytes() || (!x.weight.data && x.weight.size))
    throw Error("weight '" + name + "': has " + std::to_string(x.weight.size) +
                " bytes of data, its shape and dtype need " + std::to_string(x.n_bytes()));
  return new_tensor(std::move(x));
}

TensorId GraphBuilder::new_node(const std::string &name, int32_t op, std::vector<TensorId> inputs,
                                int32_t out_dtype, int rank, std::array<int64_t, 4> shape,
                                std::vector<uint8_t> params, int token_dim) {
  for (const auto &n : g_.nodes_)
    if (n.name == name) throw Error("node name '" + name + "' is used twice; names must be unique");
  if (name.empty()) throw Error("every node needs a name");
  Tensor out;
  out.name = name;
  out.dtype = out_dtype;
  out.rank = rank;
  out.shape = shape;
  out.role = TensorRole::Intermediate;
  out.producer = NodeId(g_.nodes_.size());
  // By default the output follows the token count along the dim of the first input that does
  // (elementwise ops keep shapes); ops that move the token dim pass it explicitly.
  // Which count it follows (tokens or output rows): that of the first input with a token dim.
  const Tensor *follows = nullptr;
  for (TensorId id : inputs)
    if (t(id).token_dim >= 0) {
      follows = &t(id);
      break;
    }
  if (token_dim == -2) token_dim = follows ? follows->token_dim : -1;
  out.token_dim = token_dim;
  out.output_rows = token_dim >= 0 && follows && follows->output_rows;
  const std::string ctx = std::string("node '") + name + "' (" + minfer_op_name(op) + ")";
  // The op's contract is the SDK's, the same one every backend checks.
  std::vector<minfer_tensor> desc_tensors;
  for (TensorId id : inputs) desc_tensors.push_back(to_abi(t(id)));
  try {
    (void)out.n_bytes();
  } catch (const Error &e) {
    throw Error(ctx + ": " + e.what());
  }
  desc_tensors.push_back(to_abi(out));
  std::vector<const minfer_tensor *> in_ptrs;
  for (size_t i = 0; i + 1 < desc_tensors.size(); ++i) in_ptrs.push_back(&desc_tensors[i]);
  minfer_node desc{};
  desc.struct_size = sizeof desc;
  desc.op = op;
  desc.name = name.c_str();
  desc.n_inputs = int32_t(in_ptrs.size());
  desc.inputs = in_ptrs.data();
  desc.output = &desc_tensors.back();
  desc.params = params.empty() ? nullptr : reinterpret_cast<const minfer_params_header *>(params.data());
  const std::string why = sdk::check_op_contract(desc);
  if (!why.empty()) throw Error(ctx + ": " + why);

  const TensorId oid = new_tensor(std::move(out));
  Node n;
  n.name = name;
  n.op = op;
  n.inputs = std::move(inputs);
  n.output = oid;
  n.params = std::move(params);
  n.rank = rank_;
  g_.nodes_.push_back(std::move(n));
  return oid;
}

std::vector<TensorId> GraphBuilder::all_reduce(const std::string &name, const std::vector<TensorId> &parts) {
  std::vector<TensorId> sums;
  const int32_t was = rank_;
  for (size_t r = 0; r < parts.size(); ++r) {
    const Tensor &a = t(parts[r]), &first = t(parts[0]);
    if (a.shape != first.shape || a.token_dim != first.token_dim)
      throw Error("node '" + name + "' (all_reduce): rank " + std::to_string(r) + "'s " + a.describe() + " differs from rank 0's " +
                  first.describe());
    rank_ = int32_t(r);
    sums.push_back(new_node(name + "@" + std::to_string(r), MINFER_OP_ALL_REDUCE, {parts[r]}, MINFER_DTYPE_F32, a.rank, a.shape));
  }
  rank_ = was;
  return sums;
}

TensorId GraphBuilder::add(const std::string &name, TensorId a, TensorId b) {
  return new_node(name, MINFER_OP_ADD, {a, b}, MINFER_DTYPE_F32, t(a).rank, t(a).shape);
}

TensorId GraphBuilder::mul(const std::string &name, TensorId a, TensorId b) {
  return new_node(name, MINFER_OP_MUL, {a, b}, MINFER_DTYPE_F32, t(a).rank, t(a).shape);
}

TensorId GraphBuilder::silu(const std::string &name, TensorId a) {
  return new_node(name, MINFER_OP_SILU, {a}, MINFER_DTYPE_F32, t(a).rank, t(a).shape);
}

TensorId GraphBuilder::add_row_broadcast(const std::string &name, TensorId a, TensorId bias) {
  return new_node(name, MINFER_OP_ADD_ROW_BROADCAST, {a, bias}, MINFER_DTYPE_F32, t(a).rank,
                  t(a).shape);
}

TensorId GraphBuilder::convert(const std::string &name, TensorId a, int32_t dtype) {
  return new_node(name, MINFER_OP_CONVERT, {a}, dtype, t(a).rank, t(a).shape);
}

TensorId GraphBuilder::get_rows(const std::string &name, TensorId table, TensorId ids) {
  const TensorId out = new_node(name, MINFER_OP_GET_ROWS, {table, ids}, MINFER_DTYPE_F32, 2,
                                {t(table).shape[0], t(ids).shape[0], 1, 1}, {}, t(ids).token_dim >= 0 ? 1 : -1);
  g_.tensors_[size_t(out)].output_rows = t(ids).token_dim >= 0 && t(ids).output_rows;  // its rows are the ids', not the table's
  return out;
}

namespace {
template <class P>
std::vector<uint8_t> params_bytes(P p) {
  p.struct_size = sizeof p;
  std::vector<uint8_t> b(sizeof p);
  std::memcpy(b.data(), &p, sizeof p);
  return b;
}
}  // namespace

TensorId GraphBuilder::input(const std::string &name, int32_t dtype, std::vector<int64_t> shape, int token_dim) {
  const TensorId id = input(name, dtype, std::move(shape));
  if (token_dim < -1 || token_dim >= g_.tensors_[size_t(id)].rank) throw Error("input '" + name + "': token_dim out of range");
  g_.tensors_[size_t(id)].token_dim = token_dim;
  return id;
}

TensorId GraphBuilder::output_rows_input(const std::string &name, int32_t dtype, std::vector<int64_t> shape) {
  const int last = int(shape.size()) - 1;
  const TensorId id = input(name, dtype, std::move(shape), last);
  g_.tensors_[size_t(id)].output_rows = true;
  return id;
}

TensorId GraphBuilder::state(const std::string &name, int32_t dtype, std::vector<int64_t> shape) {
  return new_tensor(described(name, dtype, shape, TensorRole::State));
}

TensorId GraphBuilder::rms_norm(const std::string &name, TensorId x, TensorId weight, float eps, int32_t group) {
  minfer_rms_norm_params p{};
  p.eps = eps;
  p.group = group;
  return new_node(name, MINFER_OP_RMS_NORM, {x, weight}, MINFER_DTYPE_F32, t(x).rank, t(x).shape, params_bytes(p));
}

TensorId GraphBuilder::matmul(const std::string &name, TensorId w, TensorId x) {
  return new_node(name, MINFER_OP_MATMUL, {w, x}, MINFER_DTYPE_F32, 2, {t(w).shape[1], t(x).n_rows(), 1, 1}, {},
                  t(x).token_dim >= 0 ? 1 : -1);
}

TensorId GraphBuilder::rope(const std::string &name, TensorId x, TensorId pos, const minfer_rope_params &p, TensorId factors) {
  std::vector<TensorId> in{x, pos};
  if (factors >= 0) in.push_back(factors);
  return new_node(name, MINFER_OP_ROPE, in, MINFER_DTYPE_F32, t(x).rank, t(x).shape, params_bytes(p));
}

TensorId GraphBuilder::attention(const std::string &name, TensorId q, TensorId k, TensorId v, TensorId k_cache,
                                 TensorId v_cache, TensorId positions, TensorId slots, TensorId page_table,
                                 const minfer_attention_params &p) {
  return new_node(name, MINFER_OP_ATTENTION, {q, k, v, k_cache, v_cache, positions, slots, page_table}, MINFER_DTYPE_F32, t(q).rank, t(q).shape,
                  params_bytes(p), t(q).token_dim);
}

TensorId GraphBuilder::swiglu(const std::string &name, TensorId gate, TensorId up) {
  return new_node(name, MINFER_OP_SWIGLU, {gate, up}, MINFER_DTYPE_F32, t(gate).rank, t(gate).shape);
}

TensorId GraphBuilder::geglu(const std::string &name, TensorId gate, TensorId up) {
  return new_node(name, MINFER_OP_GEGLU, {gate, up}, MINFER_DTYPE_F32, t(gate).rank, t(gate).shape);
}

TensorId GraphBuilder::scale(const std::string &name, TensorId x, float scale, float softcap) {
  minfer_scale_params p{};
  p.scale = scale;
  p.softcap = softcap;
  return new_node(name, MINFER_OP_SCALE, {x}, MINFER_DTYPE_F32, t(x).rank, t(x).shape, params_bytes(p));
}

TensorId GraphBuilder::argmax(const std::string &name, TensorId x) {
  return new_node(name, MINFER_OP_ARGMAX, {x}, MINFER_DTYPE_I32, 1, {t(x).shape[1], 1, 1, 1}, {}, t(x).token_dim >= 0 ? 0 : -1);
}

TensorId GraphBuilder::dequantize(const std::string &name, TensorId a) {
  return new_node(name, MINFER_OP_DEQUANTIZE, {a}, MINFER_DTYPE_F16, t(a).rank, t(a).shape);
}

TensorId GraphBuilder::top_k(const std::string &name, TensorId x, int32_t k) {
  minfer_top_k_params p{};
  p.k = k;
  return new_node(name, MINFER_OP_TOP_K, {x}, MINFER_DTYPE_I32, 2, {k, t(x).shape[1], 1, 1}, params_bytes(p));
}

TensorId GraphBuilder::moe_weights(const std::string &name, TensorId logits, TensorId ids, bool normalize, float scale) {
  minfer_moe_weights_params p{};
  p.gating = MINFER_MOE_GATING_SOFTMAX;
  p.normalize = normalize ? 1 : 0;
  p.scale = scale;
  return new_node(name, MINFER_OP_MOE_WEIGHTS, {logits, ids}, MINFER_DTYPE_F32, 2, t(ids).shape, params_bytes(p), t(ids).token_dim);
}

TensorId GraphBuilder::matmul_id(const std::string &name, TensorId w, TensorId x, TensorId ids) {
  return new_node(name, MINFER_OP_MATMUL_ID, {w, x, ids}, MINFER_DTYPE_F32, 3, {t(w).shape[1], t(ids).shape[0], t(ids).shape[1], 1}, {},
                  t(ids).token_dim >= 0 ? 2 : -1);
}

TensorId GraphBuilder::moe_sum(const std::string &name, TensorId y, TensorId weights) {
  return new_node(name, MINFER_OP_MOE_SUM, {y, weights}, MINFER_DTYPE_F32, 2, {t(y).shape[0], t(y).shape[2], 1, 1}, {},
                  t(y).token_dim >= 0 ? 1 : -1);
}

void GraphBuilder::mark_output(TensorId id) {
  (void)t(id);
  g_.tensors_[size_t(id)].is_output = true;
}

Graph GraphBuilder::finish() {
  bool any_output = false;
  for (const auto &x : g_.tensors_) any_output |= x.is_output;
  if (!any_output) throw Error("graph has no output: mark at least one tensor as output");
  return std::move(g_);
}

}  // namespace minfer
