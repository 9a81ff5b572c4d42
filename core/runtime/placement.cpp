#include "runtime/placement.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "common/error.hpp"
#include "minfer/dtype.h"

namespace minfer {

BackendSet open_backends(const RunConfig &cfg) {
  BackendSet set;
  const auto dirs = plugin_search_dirs(cfg.plugin_dir);
  // Backends of one plugin (cpu0 and cpu1, gpu0 and gpu1) share its library, loaded once.
  std::map<std::string, std::shared_ptr<Plugin>> loaded;
  for (const auto &b : cfg.backends) {
    std::shared_ptr<Plugin> &plugin = loaded[b.plugin_path.empty() ? "name:" + b.plugin_name() : "path:" + b.plugin_path];
    if (!plugin) plugin = find_plugin(b.plugin_name(), b.plugin_path, dirs);
    std::string why;
    const int32_t n = plugin->device_count(&why);
    if (b.device >= n)
      throw Error(cfg.source + ": backend '" + b.name + "' asks for device " +
                  std::to_string(b.device) + ", but the plugin sees " + std::to_string(n) +
                  " device(s)" + (n == 0 && !why.empty() ? " (" + why + ")" : "") +
                  "; pick another device or place the nodes on another backend");
    set[b.name] = std::make_unique<BackendHandle>(plugin, b.device, b.options);
  }
  return set;
}

namespace {

std::string node_signature(const Graph &g, const Node &n) {
  std::string s;
  for (TensorId id : n.inputs) s += (s.empty() ? "" : ", ") + g.tensor(id).describe();
  return s + " -> " + g.tensor(n.output).describe();
}

// The layer of a node named "blk.N.…", else -1.
int64_t layer_of(const std::string &name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  char *end = nullptr;
  const long long l = std::strtoll(name.c_str() + 4, &end, 10);
  return end != name.c_str() + 4 && *end == '.' ? l : -1;
}

}  // namespace

Placement place(const Graph &g, const RunConfig &cfg, BackendSet &backends) {
  Placement p;
  const auto &nodes = g.nodes();
  p.node_backend.resize(nodes.size());
  p.home.assign(g.tensors().size(), "");

  int32_t ranks = 0;
  int64_t n_layer = 0;
  for (const Node &n : nodes) ranks = std::max(ranks, n.rank + 1), n_layer = std::max(n_layer, layer_of(n.name) + 1);
  if (cfg.split == "tensor" && ranks != cfg.tensor_ranks())
    throw Error(cfg.source + ": 'split: tensor' divides the model among " + std::to_string(cfg.tensor_ranks()) +
                " devices, but its graph was built for " + std::to_string(ranks) +
                " rank(s); build the model with BuildOptions::tensor_parallel = RunConfig::tensor_ranks()");
  if (cfg.split != "tensor" && ranks > 0)
    throw Error(cfg.source + ": the model's graph is divided among " + std::to_string(ranks) +
                " ranks, but the config has no 'split: tensor' placing them");

  bool past_layers = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node &n = nodes[i];
    std::string where = cfg.default_backend, why_here = "the default backend";
    bool ruled = false;
    for (const auto &rule : cfg.rules)
      if (fnmatch(rule.match.c_str(), n.name.c_str(), 0) == 0) {
        where = rule.backend;
        why_here = "placement rule '" + rule.match + "'";
        ruled = true;
        break;
      }
    const int64_t layer = layer_of(n.name);
    past_layers = past_layers || layer == n_layer - 1;
    if (cfg.split == "tensor") {
      where = cfg.split_devices[size_t(std::max(n.rank, 0))];
      why_here = "split: tensor, rank " + std::to_string(std::max(n.rank, 0));
    } else if (cfg.split == "layer" && !ruled) {
      // Layer l on device l * D / n_layer; what comes before the layers (the embeddings) on the
      // first, what comes after them (the output) on the last.
      const size_t d = cfg.split_devices.size();
      const size_t at = layer >= 0 ? size_t(layer * int64_t(d) / std::max<int64_t>(n_layer, 1)) : past_layers ? d - 1 : 0;
      where = cfg.split_devices[at];
      why_here = layer >= 0 ? "split: layer, layer " + std::to_string(layer) : "split: layer";
    }
    auto it = backends.find(where);
    if (it == backends.end())
      throw Error("node '" + n.name + "': backend '" + where + "' (" + why_here +
                  ") is not open; list it under 'backends' in " + cfg.source);
    p.node_backend[i] = where;
    p.home[size_t(n.output)] = where;
    if (n.op == MINFER_OP_ALL_REDUCE) continue;  // no kernel: the group's collective (Session)
    const AbiNode desc(g, n);
    const SupportAnswer a = it->second->supports(desc.node());
    if (!a.yes)
      throw Error("node '" + n.name + "' (op " + minfer_op_name(n.op) + ": " +
                  node_signature(g, n) + ") cannot run on backend '" + where + "' (chosen by " +
                  why_here + "): " + (a.why.empty() ? "no reason given" : a.why) +
                  ". minfer never moves a node to another backend by itself: add a placement "
                  "rule in " + cfg.source + " that sends it to a backend that supports it");
    p.node_backend[i] = where;
    p.home[size_t(n.output)] = where;
  }

  // Steps: each maximal run of consecutive nodes on one backend is one segment, preceded by
  // the copies its nodes need (their producers all sit in earlier runs, by topological order),
  // so a copy never splits a run. A run of ALL_REDUCE nodes (one per rank) is one collective.
  std::set<std::pair<TensorId, std::string>> copied;
  for (size_t start = 0; start < nodes.size();) {
    const std::string &b = p.node_backend[start];
    const bool reduce = nodes[start].op == MINFER_OP_ALL_REDUCE;
    size_t end = start;
    while (end < nodes.size() && (reduce ? nodes[end].op == MINFER_OP_ALL_REDUCE && nodes[end].rank == int32_t(end - start)
                                         : p.node_backend[end] == b && nodes[end].op != MINFER_OP_ALL_REDUCE))
      ++end;
    Step seg;
    seg.kind = reduce ? Step::Kind::AllReduce : Step::Kind::Segment;
    seg.backend = b;
    for (size_t i = start; i < end; ++i) {
      seg.nodes.push_back(NodeId(i));
      const std::string &at = p.node_backend[i];
      for (TensorId in : nodes[i].inputs) {
        const std::string &home = p.home[size_t(in)];
        if (home.empty() || home == at || !copied.insert({in, at}).second) continue;
        Step c;
        c.kind = Step::Kind::Copy;
        c.tensor = in;
        c.from = home;
        c.backend = at;
        p.steps.push_back(c);
      }
    }
    p.steps.push_back(std::move(seg));
    start = end;
  }
  return p;
}

std::set<TensorId> segment_local_outputs(const Graph &g, const std::vector<NodeId> &segment) {
  const std::set<NodeId> in_segment(segment.begin(), segment.end());
  std::map<TensorId, bool> read_inside;  // tensor -> every reader so far is in the segment
  for (NodeId id = 0; id < NodeId(g.nodes().size()); ++id)
    for (TensorId t : g.node(id).inputs) {
      auto [it, fresh] = read_inside.emplace(t, true);
      it->second = it->second && in_segment.count(id) > 0;
    }
  std::set<TensorId> local;
  for (NodeId id : segment) {
    const TensorId out = g.node(id).output;
    const auto it = read_inside.find(out);
    if (it != read_inside.end() && it->second && !g.tensor(out).is_output) local.insert(out);
  }
  return local;
}

}  // namespace minfer
