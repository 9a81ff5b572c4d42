#include "trace/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/error.hpp"
#include "common/json.hpp"
#include "minfer/dtype.h"
#include "quant/reference.hpp"
#include "runtime/placement.hpp"

namespace minfer {
namespace {

json::Json shape_json(const Tensor &t) { return std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.rank); }

json::Json id_or_null(int64_t id) { return id >= 0 ? json::Json(id) : json::Json(nullptr); }

const char *role_name(TensorRole r) {
  switch (r) {
    case TensorRole::Input: return "input";
    case TensorRole::Weight: return "weight";
    case TensorRole::State: return "state";
    default: return "intermediate";
  }
}

// "blk.12.attn_q" -> 12; -1 for nodes outside the layers.
int layer_of(const std::string &name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

}  // namespace

std::string Trace::path_from(const std::string &config_value) {
  if (!config_value.empty()) return config_value;
  const char *env = std::getenv("MINFER_TRACE");
  return env ? env : "";
}

void Trace::set_graph(const Graph &g, const Placement &p) {
  json::Json nodes = json::Json::array(), tensors = json::Json::array(), copies = json::Json::array();
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node &n = g.nodes()[i];
    const Tensor &out = g.tensor(n.output);
    json::Json inputs = json::Json::array();
    for (TensorId in : n.inputs) inputs.push_back(g.tensor(in).name);
    nodes.push_back({{"id", i},
                     {"name", n.name},
                     {"op", minfer_op_name(n.op)},
                     {"layer", id_or_null(layer_of(n.name))},
                     {"backend", p.node_backend[i]},
                     {"inputs", inputs},
                     {"output", {{"name", out.name}, {"dtype", minfer_dtype_name(out.dtype)}, {"shape", shape_json(out)}}}});
  }
  for (const Tensor &t : g.tensors())
    tensors.push_back({{"name", t.name},
                       {"dtype", minfer_dtype_name(t.dtype)},
                       {"shape", shape_json(t)},
                       {"role", role_name(t.role)},
                       {"producer", id_or_null(t.producer)}});
  for (const auto &st : p.steps)
    if (st.kind == minfer::Step::Kind::Copy) copies.push_back({{"tensor", g.tensor(st.tensor).name}, {"from", st.from}, {"to", st.backend}});
  graph_ = {{"nodes", nodes}, {"tensors", tensors}, {"copies", copies}};
}

void Trace::begin_step(int64_t n_tokens, int64_t n_past) {
  recording_ = int(steps_.size()) < kMaxSteps;
  if (!recording_) {
    ++dropped_steps_;
    return;
  }
  Step st;
  st.n_tokens = n_tokens;
  st.n_past = n_past;
  steps_.push_back(std::move(st));
}

void Trace::node(NodeId id, double ms, bool device_clock, const Tensor &t, const std::vector<uint8_t> &out) {
  if (!recording_) return;
  NodeRecord r{id, ms, device_clock, false, {}};
  const bool f32 = t.dtype == MINFER_DTYPE_F32, f16 = t.dtype == MINFER_DTYPE_F16;
  if (f32 || f16) {
    const int64_t n = int64_t(out.size()) / (f32 ? 4 : 2);
    auto at = [&](int64_t i) -> float {
      if (f32) {
        float v;
        std::memcpy(&v, &out[size_t(i) * 4], 4);
        return v;
      }
      uint16_t h;
      std::memcpy(&h, &out[size_t(i) * 2], 2);
      return quant::f16_to_f32(h);
    };
    Stats &s = r.stats;
    double sum = 0, sum2 = 0;
    bool any = false;
    for (int64_t i = 0; i < n; ++i) {
      const double v = at(i);
      if (std::isnan(v)) ++s.nan;
      else if (std::isinf(v)) ++s.inf;
      else {
        s.min = any ? std::min(s.min, v) : v;
        s.max = any ? std::max(s.max, v) : v;
        any = true;
        sum += v, sum2 += v * v;
        ++s.count;
      }
    }
    if (s.count) {
      s.mean = sum / double(s.count);
      s.std = std::sqrt(std::max(0.0, sum2 / double(s.count) - s.mean * s.mean));
    }
    // The grid: rows (tokens / outer dims) x columns (the row's values), each cell a mean.
    if (int(steps_.size()) <= kGridSteps && n > 0) {
      const int64_t cols = t.shape[0], rows = n / cols;
      s.grid_rows = int(std::min<int64_t>(rows, kGrid));
      s.grid_cols = int(std::min<int64_t>(cols, kGrid));
      s.grid.assign(size_t(s.grid_rows * s.grid_cols), 0.0f);
      for (int gr = 0; gr < s.grid_rows; ++gr)
        for (int gc = 0; gc < s.grid_cols; ++gc) {
          const int64_t r0 = rows * gr / s.grid_rows, r1 = rows * (gr + 1) / s.grid_rows;
          const int64_t c0 = cols * gc / s.grid_cols, c1 = cols * (gc + 1) / s.grid_cols;
          double acc = 0;
          int64_t cnt = 0;
          for (int64_t rr = r0; rr < r1; ++rr)
            for (int64_t cc = c0; cc < c1; ++cc) {
              const float v = at(rr * cols + cc);
              if (std::isfinite(v)) acc += v, ++cnt;
            }
          s.grid[size_t(gr * s.grid_cols + gc)] = cnt ? float(acc / double(cnt)) : NAN;
        }
    }
    r.has_stats = true;
  }
  steps_.back().nodes.push_back(std::move(r));
}

void Trace::end_step(double total_ms) {
  if (recording_) steps_.back().total_ms = total_ms;
}

void Trace::sample(const float *logits, int64_t n_vocab, int32_t chosen, const std::vector<std::string> &texts) {
  if (!recording_ || steps_.empty()) return;
  Step &st = steps_.back();
  const float mx = *std::max_element(logits, logits + n_vocab);
  double z = 0;
  for (int64_t i = 0; i < n_vocab; ++i) z += std::exp(double(logits[i]) - mx);
  std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) idx[size_t(i)] = int32_t(i);
  const size_t k = std::min<size_t>(kTopK, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  auto text_of = [&](int32_t id) { return id >= 0 && size_t(id) < texts.size() ? texts[size_t(id)] : std::string(); };
  st.top.clear();
  for (size_t i = 0; i < k; ++i) st.top.push_back({idx[i], std::exp(double(logits[idx[i]]) - mx) / z, text_of(idx[i])});
  st.sampled = true;
  st.chosen = chosen;
  if (std::none_of(st.top.begin(), st.top.end(), [&](const Candidate &c) { return c.id == chosen; }) && chosen >= 0 && chosen < n_vocab)
    st.top.push_back({chosen, std::exp(double(logits[chosen]) - mx) / z, text_of(chosen)});
}

void Trace::write() const {
  json::Json steps = json::Json::array();
  for (size_t si = 0; si < steps_.size(); ++si) {
    const Step &st = steps_[si];
    json::Json nodes = json::Json::array();
    for (const NodeRecord &r : st.nodes) {
      json::Json n = {{"id", r.id}, {"ms", json::number(r.ms)}, {"clock", r.device_clock ? "device" : "host"}};
      if (r.has_stats) {
        const Stats &s = r.stats;
        n["stats"] = {{"min", json::number(s.min)}, {"max", json::number(s.max)}, {"mean", json::number(s.mean)},
                      {"std", json::number(s.std)}, {"nan", s.nan},                 {"inf", s.inf},
                      {"count", s.count}};
        if (!s.grid.empty()) {
          json::Json values = json::Json::array();
          for (float v : s.grid) values.push_back(json::number(v));
          n["grid"] = {{"rows", s.grid_rows}, {"cols", s.grid_cols}, {"values", values}};
        }
      }
      nodes.push_back(std::move(n));
    }
    json::Json step = {{"index", si},
                       {"kind", st.n_past == 0 && st.n_tokens > 1 ? "prefill" : "decode"},
                       {"n_tokens", st.n_tokens},
                       {"n_past", st.n_past},
                       {"total_ms", json::number(st.total_ms)},
                       {"nodes", nodes}};
    if (st.sampled) {
      json::Json top = json::Json::array();
      for (const Candidate &c : st.top) top.push_back({{"id", c.id}, {"p", json::number(c.p)}, {"text", c.text}});
      step["sample"] = {{"chosen", st.chosen}, {"top", top}};
    }
    steps.push_back(std::move(step));
  }
  const json::Json trace = {{"format", "minfer-trace"},
                            {"version", 1},
                            {"model", {{"name", model_}, {"arch", arch_}}},
                            {"config", config_},
                            {"caps", {{"max_steps", kMaxSteps}, {"grid", kGrid}, {"grid_steps", kGridSteps}, {"top_k", kTopK}}},
                            {"dropped_steps", dropped_steps_},
                            {"graph", graph_},
                            {"steps", steps}};
  std::ofstream f(path_);
  if (!f) throw Error(path_ + ": cannot write the trace file");
  f << json::dump(trace, 1) << "\n";
  if (!f) throw Error(path_ + ": writing the trace failed");
}

}  // namespace minfer
