#include "runtime/session.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/progress.hpp"
#include "minfer/dtype.h"
#include "runtime/memory_plan.hpp"

namespace minfer {
namespace {

uint64_t align_up(uint64_t x) { return (x + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

}  // namespace

Session::Session(const Graph &graph, const RunConfig &cfg, BackendSet &backends, Trace *trace,
                 std::function<void(double, const std::string &)> progress)
    : graph_(graph), cfg_(cfg), backends_(backends), trace_(trace), progress_(std::move(progress)) {
  for (const auto &t : graph_.tensors())
    if (t.is_output && t.role != TensorRole::Intermediate)
      throw Error("tensor '" + t.name + "' is marked as output but no node produces it");
  for (const auto &t : graph_.tensors()) {
    if (t.token_dim < 0) continue;
    // Per-step byte counts assume the token dim is the outermost one (rows of whole tokens).
    if (t.token_dim != t.rank - 1)
      throw Error("tensor '" + t.name + "': its token dim must be its last dim");
    int64_t &most = t.output_rows ? max_outputs_ : max_tokens_;
    most = most ? std::min(most, t.shape[size_t(t.token_dim)]) : t.shape[size_t(t.token_dim)];
  }
  placement_ = place(graph_, cfg_, backends_);
  if (trace_) {  // one node per segment: each is timed and read on its own
    std::vector<Step> split;
    for (const Step &st : placement_.steps) {
      if (st.kind != Step::Kind::Segment) {
        split.push_back(st);
        continue;
      }
      for (NodeId id : st.nodes) {
        Step one = st;
        one.nodes = {id};
        split.push_back(one);
      }
    }
    placement_.steps = std::move(split);
    trace_->set_graph(graph_, placement_);
  }
  open_group();
  plan_memory();
  upload_weights();
  zero_states();
  compile_segments();
}

void Session::open_group() {
  if (cfg_.split != "tensor") return;
  bool reduces = false;
  for (const Step &s : placement_.steps) reduces = reduces || s.kind == Step::Kind::AllReduce;
  if (!reduces) return;
  std::vector<BackendHandle *> ranks;
  for (const auto &name : cfg_.split_devices) ranks.push_back(backends_.at(name).get());
  group_ = std::make_unique<BackendGroup>(ranks, cfg_.split_devices);
}

Session::~Session() {
  // Segments, buffers and the group go before the backends that own them (BackendSet outlives us).
  group_.reset();
  segments_.clear();
  where_.clear();
  memory_.clear();
}

namespace {

// How many nodes after one of this op a backend may run together with it, writing their
// outputs while it still reads the node's inputs: those inputs live that much longer, so the
// arena never puts those outputs over them (else the fusion depends on where the greedy
// placement happened to land, and it did not land apart at one-token builds). A matmul with
// its bias or residual add, the FFN's two matmuls with their SwiGLU, the query and key RoPEs:
// one node; a decode token's down experts with their weighted sum and its residual add: two;
// the sum with its add: one; a decode token's whole routed FFN, whose gate/up experts write
// their activations while other blocks still read the router's logits: the expert weights'
// inputs (the logits, the ids) three, through the gate, the up and their SwiGLU.
int64_t fused_reach(int32_t op) {
  switch (op) {
    case MINFER_OP_MATMUL:
    case MINFER_OP_ROPE:
    case MINFER_OP_MOE_SUM: return 1;
    case MINFER_OP_MATMUL_ID: return 2;
    case MINFER_OP_MOE_WEIGHTS: return 3;
    default: return 0;
  }
}

}  // namespace

void Session::plan_memory() {
  // Positions: one per node and per copy, in execution order.
  std::map<Key, Lifetime> life;
  std::set<Key> weights, states, inputs;
  int64_t pos = 0;
  const int64_t end = std::numeric_limits<int64_t>::max();
  auto use = [&](const Key &k, int64_t at) {
    if (graph_.tensor(k.first).role == TensorRole::Input) {
      inputs.insert(k);
      return;
    }
    auto it = life.find(k);
    if (it == life.end()) {
      life[k] = {graph_.tensor(k.first).n_bytes(), at, at};
    } else {
      it->second.last = std::max(it->second.last, at);
    }
  };
  for (const Step &s : placement_.steps) {
    if (s.kind == Step::Kind::Copy) {
      use({s.tensor, s.from}, pos);
      use({s.tensor, s.backend}, pos);
      ++pos;
      continue;
    }
    for (NodeId id : s.nodes) {
      const Node &n = graph_.node(id);
      const std::string &b = placement_.node_backend[size_t(id)];  // an all-reduce's nodes: one per rank
      for (TensorId in : n.inputs) {
        const TensorRole role = graph_.tensor(in).role;
        if (role == TensorRole::Weight) weights.insert({in, b});
        else if (role == TensorRole::State) states.insert({in, b});
        else use({in, b}, pos + fused_reach(n.op));
      }
      use({n.output, b}, pos);
      if (graph_.tensor(n.output).is_output) life[{n.output, b}].last = end;
      ++pos;
    }
  }

  for (const auto &[name, _] : backends_) {
    BackendMemory &mem = memory_[name];
    std::vector<Key> keys;
    std::vector<Lifetime> reqs;
    for (const auto &[k, l] : life)
      if (k.second == name) keys.push_back(k), reqs.push_back(l);
    const ArenaPlan plan = plan_arena(reqs);
    mem.activation_bytes = plan.size;
    mem.unshared_bytes = plan.unshared;
    if (plan.size) mem.activations = backends_.at(name)->alloc(plan.size);
    for (size_t i = 0; i < keys.size(); ++i)
      where_[keys[i]] = {mem.activations.get(), plan.offsets[i]};

    // Weights and states live for the whole session: packed one after another.
    auto pack = [&](const std::set<Key> &set, std::unique_ptr<DeviceBuffer> &buf, uint64_t &total) {
      std::vector<Key> keys;
      for (const auto &k : set)
        if (k.second == name) keys.push_back(k);
      std::vector<uint64_t> offsets;
      uint64_t off = 0;
      for (const auto &k : keys) offsets.push_back(off), off += align_up(graph_.tensor(k.first).n_bytes());
      total = off;
      if (off) buf = backends_.at(name)->alloc(off);
      for (size_t i = 0; i < keys.size(); ++i) where_[keys[i]] = {buf.get(), offsets[i]};
    };
    // Weights: used in place from host memory when the backend can (no second copy of the
    // model), else packed into one buffer and uploaded.
    std::set<Key> to_copy;
    for (const auto &k : weights) {
      if (k.second != name) continue;
      const Tensor &t = graph_.tensor(k.first);
      if (auto buf = backends_.at(name)->wrap_host(t.weight.data, t.weight.size)) {
        where_[k] = {buf.get(), 0};
        mem.mapped_bytes += t.weight.size;
        mem.mapped.push_back(std::move(buf));
      } else {
        to_copy.insert(k);
      }
    }
    pack(to_copy, mem.weights, mem.weight_bytes);
    pack(states, mem.states, mem.state_bytes);
    // Inputs: packed together and mirrored on the host, so a step's inputs reach the backend
    // as one write (run) instead of one each (a CUDA copy costs ~2 us of the host's time).
    pack(inputs, mem.inputs, mem.input_bytes);
    mem.input_mirror.assign(mem.input_bytes, 0);
  }
}

void Session::upload_weights() {
  auto copied = [&](const Key &k, const Location &loc) {
    const Tensor &t = graph_.tensor(k.first);
    return t.role == TensorRole::Weight && loc.buffer == memory_.at(k.second).weights.get();
  };
  uint64_t total = 0, done = 0;
  for (const auto &[k, loc] : where_)
    if (copied(k, loc)) total += graph_.tensor(k.first).weight.size;
  // Weights some backend reads in place keep their host pages; the others' are released once
  // copied (a model's file pages would otherwise stay in this process's memory beside the copy).
  // A weight copied to several backends is released by its last copy (gathered bytes, as a
  // split: tensor's weight columns, are freed then, not just paged out).
  std::set<TensorId> in_place;
  std::map<TensorId, int> copies_left;
  for (const auto &[k, loc] : where_) {
    if (graph_.tensor(k.first).role != TensorRole::Weight) continue;
    if (copied(k, loc)) ++copies_left[k.first];
    else in_place.insert(k.first);
  }
  for (const auto &[k, loc] : where_) {
    if (!copied(k, loc)) continue;
    const Tensor &t = graph_.tensor(k.first);
    // Straight from the file's mapping, in chunks whose pages are dropped as soon as they are
    // copied: at most one chunk is resident twice, whatever the tensor's size.
    constexpr uint64_t kChunk = uint64_t(16) << 20;
    const bool release = t.weight.release && !in_place.count(k.first) && --copies_left[k.first] == 0;
    for (uint64_t off = 0; off < t.weight.size; off += kChunk) {
      const uint64_t n = std::min(kChunk, t.weight.size - off);
      loc.buffer->write(loc.offset + off, t.weight.data + off, n);
      if (release) t.weight.release(t.weight.data + off, n);
    }
    done += t.weight.size;
    if (progress_) progress_(double(done) / double(total), t.name);
  }
}

void Session::zero_states() {
  std::vector<uint8_t> zeros;
  for (const auto &[k, loc] : where_) {
    const Tensor &t = graph_.tensor(k.first);
    if (t.role != TensorRole::State) continue;
    const uint64_t chunk = std::min<uint64_t>(t.n_bytes(), uint64_t(64) << 20);
    zeros.assign(chunk, 0);
    for (uint64_t off = 0; off < t.n_bytes(); off += chunk)
      loc.buffer->write(loc.offset + off, zeros.data(), std::min(chunk, t.n_bytes() - off));
  }
}

uint64_t Session::bytes_for(const Tensor &t, const StepShape &s) const {
  const int64_t n = t.output_rows ? s.n_outputs : s.n_tokens;
  if (t.token_dim < 0 || n <= 0) return t.n_bytes();
  return t.n_bytes() / uint64_t(t.shape[size_t(t.token_dim)]) * uint64_t(n);
}

const Session::Location &Session::at(TensorId t, const std::string &backend) const {
  auto it = where_.find({t, backend});
  if (it == where_.end())
    throw Error("internal: tensor '" + graph_.tensor(t).name + "' has no memory on backend '" +
                backend + "'");
  return it->second;
}

void Session::compile_segments() {
  segments_.resize(placement_.steps.size());

  for (size_t si = 0; si < placement_.steps.size(); ++si) {
    const Step &s = placement_.steps[si];
    if (s.kind != Step::Kind::Segment) continue;
    std::vector<std::unique_ptr<AbiNode>> abi;
    std::vector<const minfer_node *> nodes;
    const std::set<TensorId> local = segment_local_outputs(graph_, s.nodes);
    for (NodeId id : s.nodes) {
      const Node &n = graph_.node(id);
      abi.push_back(std::make_unique<AbiNode>(graph_, n));
      for (size_t j = 0; j < n.inputs.size(); ++j) {
        const Location &l = at(n.inputs[j], s.backend);
        abi.back()->input(j).buffer = l.buffer->raw();
        abi.back()->input(j).offset = l.offset;
      }
      const Location &o = at(n.output, s.backend);
      abi.back()->output().buffer = o.buffer->raw();
      abi.back()->output().offset = o.offset;
      if (local.count(n.output)) abi.back()->output().flags |= MINFER_TENSOR_SEGMENT_LOCAL;
      nodes.push_back(&abi.back()->node());
    }
    segments_[si] = backends_.at(s.backend)->compile(nodes);
  }
}

void Session::set_input(const std::string &name, const void *data, uint64_t bytes) {
  const TensorId id = graph_.find_tensor(name);
  if (id < 0 || graph_.tensor(id).role != TensorRole::Input)
    throw Error("set_input: the graph has no input named '" + name + "'");
  const Tensor &t = graph_.tensor(id);
  const uint64_t per_token = t.token_dim >= 0 ? t.n_bytes() / uint64_t(t.shape[size_t(t.token_dim)]) : t.n_bytes();
  if (bytes > t.n_bytes() || bytes == 0 || bytes % per_token != 0 || (t.token_dim < 0 && bytes != t.n_bytes()))
    throw Error("set_input: input " + t.describe() + " takes " +
                (t.token_dim >= 0 ? "whole tokens of " + std::to_string(per_token) + " bytes, at most " + std::to_string(t.n_bytes())
                                  : std::to_string(t.n_bytes())) +
                " bytes; got " + std::to_string(bytes));
  bool any = false;  // its copy on each backend that reads it (where_ is ordered by tensor first)
  for (auto it = where_.lower_bound({id, std::string()}); it != where_.end() && it->first.first == id; ++it) {
    BackendMemory &mem = memory_.at(it->first.second);  // into the mirror; run() writes it
    std::memcpy(mem.input_mirror.data() + it->second.offset, data, bytes);
    mem.inputs_dirty_begin = std::min(mem.inputs_dirty_begin, it->second.offset);
    mem.inputs_dirty_end = std::max(mem.inputs_dirty_end, it->second.offset + bytes);
    any = true;
  }
  if (!any) spdlog::warn("input '{}' is not used by any node", name);
}

void Session::run(const StepShape &shape) {
  std::vector<PendingRead> reads;
  reads.swap(pending_reads_);  // asked for this run only, whatever happens to it
  const int64_t n_tokens = shape.n_tokens, n_past = shape.n_past;
  if (n_tokens < 0 || (max_tokens_ && n_tokens > max_tokens_) || n_past < 0)
    throw Error("run: " + std::to_string(n_tokens) + " tokens at position " + std::to_string(n_past) +
                "; this graph takes at most " + std::to_string(max_tokens_) + " tokens per step");
  if (shape.n_outputs < 0 || (max_outputs_ && shape.n_outputs > max_outputs_) || (n_tokens > 0 && shape.n_outputs > n_tokens))
    throw Error("run: " + std::to_string(shape.n_outputs) + " output rows in a step of " + std::to_string(n_tokens) +
                " tokens; this graph gives at most " + std::to_string(max_outputs_));
  if (shape.n_seqs < 1 || (n_tokens > 0 && shape.n_seqs > n_tokens))
    throw Error("run: " + std::to_string(shape.n_seqs) + " sequences in a step of " + std::to_string(n_tokens) + " tokens");
  for (const PendingRead &r : reads)  // before anything runs
    if (const uint64_t bytes = bytes_for(graph_.tensor(r.id), shape); bytes > r.capacity)
      throw Error("read_output_after_next_run: '" + graph_.tensor(r.id).name + "' holds " + std::to_string(bytes) + " bytes after this step; " +
                  std::to_string(r.capacity) + " were given for it");
  // The inputs set since the last step: one write a backend, their span in its inputs region.
  for (auto &[name, mem] : memory_)
    if (mem.inputs_dirty_begin < mem.inputs_dirty_end) {
      mem.inputs->write(mem.inputs_dirty_begin, mem.input_mirror.data() + mem.inputs_dirty_begin, mem.inputs_dirty_end - mem.inputs_dirty_begin);
      mem.inputs_dirty_begin = UINT64_MAX, mem.inputs_dirty_end = 0;
    }
  const int64_t step = step_counter_++;
  last_ = shape;
  using Clock = std::chrono::steady_clock;
  const auto step_start = Clock::now();
  if (trace_) trace_->begin_step(n_tokens, n_past);
  for (size_t si = 0; si < placement_.steps.size(); ++si) {
    const Step &s = placement_.steps[si];
    if (s.kind == Step::Kind::Segment) {
      BackendHandle &b = *backends_.at(s.backend);
      if (!trace_ || !trace_->recording()) {
        b.execute(*segments_[si], step, shape);
        continue;
      }
      const auto t0 = Clock::now();
      b.execute(*segments_[si], step, shape, /*node_times=*/true);
      b.synchronize();
      // The backend's own clock when it has one (CUDA events), else the host's around a sync.
      const std::vector<double> device_ms = b.node_times(*segments_[si], 1);
      const bool on_device = device_ms.size() == 1;
      const double ms = on_device ? device_ms[0] : std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      const NodeId id = s.nodes.front();
      const Tensor &out = graph_.tensor(graph_.node(id).output);
      const Location &l = at(graph_.node(id).output, s.backend);
      std::vector<uint8_t> bytes(bytes_for(out, shape));
      l.buffer->read(l.offset, bytes.data(), bytes.size());
      trace_->node(id, ms, on_device, out, bytes);
      continue;
    }
    if (s.kind == Step::Kind::AllReduce) {  // every rank's part at once, in rank order
      std::vector<std::pair<DeviceBuffer *, uint64_t>> send, recv;
      for (NodeId id : s.nodes) {
        const Node &n = graph_.node(id);
        const std::string &b = placement_.node_backend[size_t(id)];
        const Location &in = at(n.inputs[0], b), &out = at(n.output, b);
        send.emplace_back(in.buffer, in.offset);
        recv.emplace_back(out.buffer, out.offset);
      }
      const NodeId first = s.nodes.front();
      const auto t0 = Clock::now();
      group_->all_reduce(bytes_for(graph_.tensor(graph_.node(first).output), shape) / sizeof(float), send, recv, graph_.node(first).name);
      if (trace_ && trace_->recording()) {  // every rank's node, timed on the host around the collective
        for (NodeId id : s.nodes) backends_.at(placement_.node_backend[size_t(id)])->synchronize();
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        for (size_t r = 0; r < s.nodes.size(); ++r) {
          const Tensor &out = graph_.tensor(graph_.node(s.nodes[r]).output);
          std::vector<uint8_t> bytes(bytes_for(out, shape));
          recv[r].first->read(recv[r].second, bytes.data(), bytes.size());
          trace_->node(s.nodes[r], ms, false, out, bytes);
        }
      }
      continue;
    }
    // Device to device where both ends are one plugin's (enqueued, ordered on both backends);
    // else through host memory: the source must be finished before it is read.
    const Tensor &t = graph_.tensor(s.tensor);
    const Location &src = at(s.tensor, s.from), &dst = at(s.tensor, s.backend);
    const uint64_t bytes = bytes_for(t, shape);
    if (dst.buffer->copy_from(*src.buffer, src.offset, dst.offset, bytes)) continue;
    staging_.resize(bytes);
    src.buffer->read(src.offset, staging_.data(), staging_.size());
    dst.buffer->write(dst.offset, staging_.data(), staging_.size());
  }
  // The outputs asked for, queued behind the step where their backend can (done by its wait).
  std::vector<std::pair<const PendingRead *, uint64_t>> after_wait;
  for (const PendingRead &r : reads) {
    const uint64_t bytes = bytes_for(graph_.tensor(r.id), shape);
    const Location &l = at(r.id, placement_.home[size_t(r.id)]);
    if (!l.buffer->read_async(l.offset, r.dst, bytes)) after_wait.emplace_back(&r, bytes);
  }
  for (auto &[name, b] : backends_) b->synchronize();
  for (const auto &[r, bytes] : after_wait) {
    const Location &l = at(r->id, placement_.home[size_t(r->id)]);
    l.buffer->read(l.offset, r->dst, bytes);
  }
  if (trace_) trace_->end_step(std::chrono::duration<double, std::milli>(Clock::now() - step_start).count());
}

TensorId Session::output_id(const std::string &name) const {
  const TensorId id = graph_.find_tensor(name);
  if (id < 0 || !graph_.tensor(id).is_output)
    throw Error("output: the graph has no output named '" + name + "'");
  return id;
}

bool Session::has_output(const std::string &name) const {
  const TensorId id = graph_.find_tensor(name);
  return id >= 0 && graph_.tensor(id).is_output;
}

uint64_t Session::output_bytes(const std::string &name) const { return bytes_for(graph_.tensor(output_id(name)), last_); }

void Session::read_output(const std::string &name, void *dst, uint64_t bytes) const {
  const TensorId id = output_id(name);
  const uint64_t have = bytes_for(graph_.tensor(id), last_);
  if (bytes != have)
    throw Error("read_output: '" + name + "' holds " + std::to_string(have) + " bytes after the last step, not " + std::to_string(bytes));
  const Location &l = at(id, placement_.home[size_t(id)]);
  l.buffer->read(l.offset, dst, bytes);
}

void Session::read_output_after_next_run(const std::string &name, void *dst, uint64_t capacity) {
  pending_reads_.push_back({output_id(name), dst, capacity});
}

HostMemory Session::output_host_memory(const std::string &name, uint64_t bytes) const {
  return backends_.at(placement_.home[size_t(output_id(name))])->host_alloc(bytes);
}

void Session::read_output_rows(const std::string &name, int64_t first, int64_t count, void *dst) const {
  const TensorId id = output_id(name);
  const Tensor &t = graph_.tensor(id);
  bool outermost = t.token_dim >= 0;
  for (size_t d = size_t(t.token_dim) + 1; outermost && d < t.shape.size(); ++d) outermost = t.shape[d] == 1;
  if (!outermost)
    throw Error("read_output_rows: '" + name + "' has no outermost token dim to read rows of");
  const uint64_t row = t.n_bytes() / uint64_t(t.shape[size_t(t.token_dim)]), rows = bytes_for(t, last_) / row;
  if (first < 0 || count < 0 || uint64_t(first + count) > rows)
    throw Error("read_output_rows: rows " + std::to_string(first) + ".." + std::to_string(first + count) + " of '" + name + "', which holds " +
                std::to_string(rows) + " after the last step");
  const Location &l = at(id, placement_.home[size_t(id)]);
  l.buffer->read(l.offset + uint64_t(first) * row, dst, uint64_t(count) * row);
}

std::vector<uint8_t> Session::output(const std::string &name) const {
  std::vector<uint8_t> bytes(output_bytes(name));
  read_output(name, bytes.data(), bytes.size());
  return bytes;
}

// What each backend says about how it runs its nodes (ABI 1.3), for a one-token step and for
// a prompt-sized one; nodes its backend says nothing about are left out.
std::string Session::explain_kernels() const {
  const int64_t big = max_tokens_ > 0 ? std::min<int64_t>(max_tokens_, 512) : 512;
  std::string lines;
  char line[1400];
  for (size_t si = 0; si < placement_.steps.size(); ++si) {
    const Step &s = placement_.steps[si];
    if (s.kind != Step::Kind::Segment || !segments_[si]) continue;
    const BackendHandle &b = *backends_.at(s.backend);
    for (size_t j = 0; j < s.nodes.size(); ++j) {
      const std::string one = b.explain(*segments_[si], int32_t(j), 1), many = b.explain(*segments_[si], int32_t(j), big);
      if (one.empty() && many.empty()) continue;
      std::snprintf(line, sizeof line, "  %-28s %-8s 1: %s\n  %-28s %-8s %lld: %s\n", graph_.node(s.nodes[j]).name.c_str(), s.backend.c_str(),
                    one.c_str(), "", "", static_cast<long long>(big), many.c_str());
      lines += line;
    }
  }
  if (lines.empty()) return "";
  return "kernels (per node, for a step of 1 token and of " + std::to_string(big) + "):\n" + lines;
}

std::string Session::explain() const {
  std::string split;
  for (const auto &d : cfg_.split_devices) split += (split.empty() ? ", split: " + cfg_.split + " over " : ", ") + d;
  std::string out = "placement (" + cfg_.source + ", default backend '" + cfg_.default_backend + "'" + split + ")\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-28s %-18s %-8s %s\n", "node", "op", "backend", "output");
  out += line;
  for (size_t i = 0; i < graph_.nodes().size(); ++i) {
    const Node &n = graph_.nodes()[i];
    std::snprintf(line, sizeof line, "  %-28s %-18s %-8s %s\n", n.name.c_str(),
                  minfer_op_name(n.op), placement_.node_backend[i].c_str(),
                  graph_.tensor(n.output).describe().c_str());
    out += line;
  }
  int copies = 0;
  std::string copy_lines;
  for (size_t si = 0; si < placement_.steps.size(); ++si) {
    const Step &s = placement_.steps[si];
    if (s.kind != Step::Kind::Copy) continue;
    ++copies;
    const Tensor &t = graph_.tensor(s.tensor);
    size_t next = si + 1;  // the segment this copy feeds
    while (next < placement_.steps.size() && placement_.steps[next].kind == Step::Kind::Copy) ++next;
    const bool direct = at(s.tensor, s.backend).buffer->copies_directly_from(*at(s.tensor, s.from).buffer);
    copy_lines += "  copy " + t.name + ": " + s.from + " -> " + s.backend + " (" + human_bytes(t.n_bytes()) +
                  (direct ? ", device to device" : ", through host memory") + ")";
    if (next < placement_.steps.size())
      copy_lines += " before the segment starting at node " +
                    graph_.node(placement_.steps[next].nodes.front()).name;
    copy_lines += "\n";
  }
  out += "copies inserted: " + std::to_string(copies) + "\n" + copy_lines;
  std::string reduce_lines;
  int reduces = 0;
  for (const Step &s : placement_.steps) {
    if (s.kind != Step::Kind::AllReduce) continue;
    ++reduces;
    const Tensor &t = graph_.tensor(graph_.node(s.nodes.front()).output);
    std::string ranks;
    for (NodeId id : s.nodes) ranks += (ranks.empty() ? "" : ", ") + placement_.node_backend[size_t(id)];
    reduce_lines += "  all-reduce " + graph_.node(s.nodes.front()).name + " over " + ranks + " (" + human_bytes(t.n_bytes()) + " each)\n";
  }
  if (reduces) out += "all-reduces (split: tensor): " + std::to_string(reduces) + "\n" + reduce_lines;
  out += explain_kernels();
  int segments = 0;
  for (const auto &s : placement_.steps) segments += s.kind == Step::Kind::Segment;
  out += "segments: " + std::to_string(segments) + "\n";
  out += "memory per backend:\n";
  for (const auto &[name, m] : memory_) {
    out += "  " + name + ": weights " + human_bytes(m.weight_bytes + m.mapped_bytes) +
           (m.mapped_bytes ? " (" + human_bytes(m.mapped_bytes) + " used in place from the file)" : "") + ", state " +
           human_bytes(m.state_bytes) + ", inputs " + human_bytes(m.input_bytes) + ", activations " +
           human_bytes(m.activation_bytes) + " (" + human_bytes(m.unshared_bytes) +
           " without reuse)\n";
  }
  return out;
}

}  // namespace minfer
