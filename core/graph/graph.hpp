// core/graph/graph.hpp — the backend-neutral compute graph: tensors, nodes and a builder.
//
// Shapes are innermost-first (shape[0] = row length), as in GGUF and the plugin ABI.
// The builder checks every node's dtypes and shapes as it is added, so a graph that exists
// is well-formed; backends are assigned later, by placement.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "minfer/abi.h"

namespace minfer {

using TensorId = int32_t;
using NodeId = int32_t;

enum class TensorRole {
  Input,         // written by the host before each run (token ids, ...)
  Weight,        // constant data, uploaded once at build
  Intermediate,  // produced and consumed inside one run
  State,         // lives on its backend for the whole session, zeroed at start (KV caches)
};

// Host bytes of a weight, with whatever keeps them alive (a vector, an mmap).
struct HostBytes {
  const uint8_t *data = nullptr;
  uint64_t size = 0;
  std::shared_ptr<const void> owner;
  // When set (bytes of a mapped file): once every backend holds its own copy, the session
  // calls it so the host's pages stop counting as this process's memory.
  std::function<void(const uint8_t *, uint64_t)> release;
};

struct Tensor {
  std::string name;
  int32_t dtype = 0;
  int rank = 1;
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  TensorRole role = TensorRole::Intermediate;
  bool is_output = false;  // read by the host after a run
  HostBytes weight;        // Weight only
  int token_dim = -1;      // the dim whose run-time extent is the step's token count (-1: none)
  bool output_rows = false;  // that dim follows the step's output count instead (logit rows)
  NodeId producer = -1;    // Intermediate only

  int64_t n_elements() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  int64_t n_rows() const { return shape[1] * shape[2] * shape[3]; }
  uint64_t n_bytes() const;  // whole blocks; validated by the builder
  std::string describe() const;  // "name q8_0[64, 16]"
};

struct Node {
  std::string name;
  int32_t op = MINFER_OP_NONE;
  std::vector<TensorId> inputs;
  TensorId output = -1;
  std::vector<uint8_t> params;  // the op's params struct bytes, empty when none
  // Tensor parallelism (placement `split: tensor`): the rank whose device runs it; -1: none.
  int32_t rank = -1;
};

class Graph {
 public:
  const std::vector<Tensor> &tensors() const { return tensors_; }
  const std::vector<Node> &nodes() const { return nodes_; }
  const Tensor &tensor(TensorId id) const { return tensors_.at(size_t(id)); }
  const Node &node(NodeId id) const { return nodes_.at(size_t(id)); }
  TensorId find_tensor(const std::string &name) const;  // -1 when absent

 private:
  friend class GraphBuilder;
  std::vector<Tensor> tensors_;
  std::vector<Node> nodes_;
  // Names are unique and never change: every decode step looks its inputs and outputs up by
  // name (a scan of a 0.5B graph's 779 tensors took microseconds a lookup).
  std::unordered_map<std::string, TensorId> by_name_;
};

// Builds a Graph; each method validates its node and throws minfer::Error naming it.
class GraphBuilder {
 public:
  TensorId input(const std::string &name, int32_t dtype, std::vector<int64_t> shape);
  TensorId weight(const std::string &name, int32_t dtype, std::vector<int64_t> shape,
                  HostBytes bytes);
  // An input whose dim token_dim holds the step's token count (shape: the maximum).
  TensorId input(const std::string &name, int32_t dtype, std::vector<int64_t> shape, int token_dim);
  // An input whose last dim holds the step's output count (the rows whose logits it wants).
  TensorId output_rows_input(const std::string &name, int32_t dtype, std::vector<int64_t> shape);
  TensorId state(const std::string &name, int32_t dtype, std::vector<int64_t> shape);

  TensorId add(const std::string &name, TensorId a, TensorId b);
  TensorId mul(const std::string &name, TensorId a, TensorId b);
  TensorId silu(const std::string &name, TensorId a);
  TensorId add_row_broadcast(const std::string &name, TensorId a, TensorId bias);
  TensorId convert(const std::string &name, TensorId a, int32_t dtype);
  TensorId get_rows(const std::string &name, TensorId table, TensorId ids);
  TensorId dequantize(const std::string &name, TensorId a);
  // group > 0: each run of `group` values of a row normalized on its own (per-head norms).
  TensorId rms_norm(const std::string &name, TensorId x, TensorId weight, float eps, int32_t group = 0);
  TensorId matmul(const std::string &name, TensorId w, TensorId x);
  // factors >= 0: f32 [n_dims/2] frequency factors dividing each pair's frequency (rope_freqs).
  TensorId rope(const std::string &name, TensorId x, TensorId pos, const minfer_rope_params &p, TensorId factors = -1);
  // Paged: caches [kvd, n_pages * page_size]; positions and slots i32 per token; page_table
  // i32 [max_pages, n_slots] (minfer/ops.h).
  TensorId attention(const std::string &name, TensorId q, TensorId k, TensorId v, TensorId k_cache,
                     TensorId v_cache, TensorId positions, TensorId slots, TensorId page_table,
                     const minfer_attention_params &p);
  TensorId swiglu(const std::string &name, TensorId gate, TensorId up);
  TensorId geglu(const std::string &name, TensorId gate, TensorId up);  // gelu(tanh form)(gate) * up
  // scale * x, or with softcap > 0 softcap * tanh(scale * x / softcap).
  TensorId scale(const std::string &name, TensorId x, float scale, float softcap = 0.0f);
  // i32 [rows]: the index of each row's largest value (greedy sampling on the backend).
  TensorId argmax(const std::string &name, TensorId x);

  // Mixture of experts (minfer/ops.h): each row's k largest values' indices; the chosen
  // experts' weights from the router logits; the matmul of each row with each chosen expert
  // (w [in, out, n_expert], x [in, rows] or [in, k, rows]) -> [out, k, rows]; the weighted sum
  // of the k experts' outputs -> [d, rows].
  TensorId top_k(const std::string &name, TensorId x, int32_t k);
  TensorId moe_weights(const std::string &name, TensorId logits, TensorId ids, bool normalize, float scale = 1.0f);
  TensorId matmul_id(const std::string &name, TensorId w, TensorId x, TensorId ids);
  TensorId moe_sum(const std::string &name, TensorId y, TensorId weights);

  // Tensor parallelism: every node added from now on runs on rank r (-1: not split).
  void set_rank(int32_t r) { rank_ = r; }
  // The sum over ranks of parts[r] (one f32 tensor per rank, alike in shape), as one
  // ALL_REDUCE node per rank named name@r: entry r is rank r's copy of the sum.
  std::vector<TensorId> all_reduce(const std::string &name, const std::vector<TensorId> &parts);

  void mark_output(TensorId t);
  Graph finish();

 private:
  TensorId new_tensor(Tensor t);
  TensorId new_node(const std::string &name, int32_t op, std::vector<TensorId> inputs,
                    int32_t out_dtype, int rank, std::array<int64_t, 4> shape,
                    std::vector<uint8_t> params = {}, int token_dim = -2);
  const Tensor &t(TensorId id) const;
  Graph g_;
  int32_t rank_ = -1;
};

// The plugin ABI's view of a tensor (buffer NULL, offset 0: placement fills them).
minfer_tensor to_abi(const Tensor &t);

// The plugin ABI's view of a node, owning the descriptors its pointers point to.
// tensors: the inputs in order, then the output; set their buffer/offset before use.
class AbiNode {
 public:
  AbiNode(const Graph &g, const Node &n);
  AbiNode(const AbiNode &) = delete;
  AbiNode &operator=(const AbiNode &) = delete;
  minfer_tensor &input(size_t i) { return tensors_.at(i); }
  minfer_tensor &output() { return tensors_.back(); }
  const minfer_node &node() const { return node_; }

 private:
  std::vector<minfer_tensor> tensors_;
  std::vector<const minfer_tensor *> inputs_;
  minfer_node node_{};
};

// Helpers over dtypes shared by the graph, the planner and the tests.
// Bytes of n values (n a multiple of the block size); throws on overflow or partial blocks.
uint64_t dtype_bytes(int32_t dtype, int64_t n, const std::string &what);

}  // namespace minfer
