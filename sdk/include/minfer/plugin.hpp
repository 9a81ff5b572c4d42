// minfer/plugin.hpp — C++ helpers for plugin authors: write a class, get the C table.
//
// A plugin writes a Plugin class with static members (see MINFER_DEFINE_PLUGIN below) and a
// Backend subclass with ordinary methods that throw minfer::sdk::Error. The templates here build
// the minfer_backend_api table and turn every exception into a status at the boundary, so
// nothing is thrown across it and the host survives any plugin failure.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "minfer/abi.h"

// The opaque handles, as this helper implements them (each plugin has its own copy; the host
// never looks inside).
struct minfer_status {
  int32_t code;
  std::string message;
};

namespace minfer::sdk {

class Buffer;
class Backend;
class Segment;
class Group;

}  // namespace minfer::sdk

struct minfer_buffer {
  std::unique_ptr<minfer::sdk::Buffer> impl;
};
struct minfer_segment {
  std::unique_ptr<minfer::sdk::Segment> impl;
};
struct minfer_backend {
  std::unique_ptr<minfer::sdk::Backend> impl;
};
struct minfer_group {
  std::unique_ptr<minfer::sdk::Group> impl;
};

namespace minfer::sdk {

// An error that becomes a status with this code at the ABI boundary.
class Error : public std::runtime_error {
 public:
  Error(minfer_status_code code, const std::string &message)
      : std::runtime_error(message), code_(code) {}
  minfer_status_code code() const { return code_; }

 private:
  minfer_status_code code_;
};

// The host's log callback, wrapped.
class Host {
 public:
  Host() = default;
  explicit Host(const minfer_host &h) : host_(h) {}
  void log(minfer_log_level level, const std::string &message) const {
    if (host_.log) host_.log(host_.user, level, message.c_str());
  }

 private:
  minfer_host host_{};
};

// The plugin's options. take() consumes a key; finish() rejects whatever is left, naming it.
class Options {
 public:
  Options(const char *const *keys, const char *const *values, int32_t n, std::string backend)
      : backend_(std::move(backend)) {
    for (int32_t i = 0; i < n; ++i) {
      if (!keys || !keys[i] || !values || !values[i])
        throw Error(MINFER_ERR_INVALID_ARGUMENT, "option " + std::to_string(i) + " is NULL");
      left_[keys[i]] = values[i];
    }
  }
  // The raw string of key, or fallback when absent.
  std::string take(const std::string &key, const std::string &fallback) {
    known_.push_back(key);
    auto it = left_.find(key);
    if (it == left_.end()) return fallback;
    std::string v = it->second;
    left_.erase(it);
    return v;
  }
  bool take_bool(const std::string &key, bool fallback) {
    const std::string v = take(key, fallback ? "true" : "false");
    if (v == "true" || v == "1" || v == "yes") return true;
    if (v == "false" || v == "0" || v == "no") return false;
    throw bad(key, v, "true or false");
  }
  long long take_int(const std::string &key, long long fallback, long long min, long long max) {
    const std::string v = take(key, std::to_string(fallback));
    char *end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < min || x > max)
      throw bad(key, v, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    return x;
  }
  // Throws for the first key no take() asked for.
  void finish() const {
    if (left_.empty()) return;
    std::string known;
    for (const auto &k : known_) known += (known.empty() ? "" : ", ") + k;
    throw Error(MINFER_ERR_INVALID_ARGUMENT,
                "unknown option '" + left_.begin()->first + "' for backend '" + backend_ +
                    "' (known options: " + (known.empty() ? "none" : known) + ")");
  }

 private:
  Error bad(const std::string &key, const std::string &v, const std::string &want) const {
    return Error(MINFER_ERR_INVALID_ARGUMENT, "option '" + key + "' of backend '" + backend_ +
                                                  "' has value '" + v + "'; expected " + want);
  }
  std::string backend_;
  std::map<std::string, std::string> left_;
  std::vector<std::string> known_;
};

// Memory owned by a backend.
class Buffer {
 public:
  explicit Buffer(uint64_t bytes) : bytes_(bytes) {}
  virtual ~Buffer() = default;
  uint64_t size() const { return bytes_; }
  virtual void write(uint64_t offset, const void *src, uint64_t bytes) = 0;
  virtual void read(uint64_t offset, void *dst, uint64_t bytes) = 0;
  // read, only enqueued: done when the backend's next synchronize returns (ABI 1.10). The
  // default says the plugin cannot, and the host reads after synchronize.
  virtual void read_async(uint64_t /*offset*/, void * /*dst*/, uint64_t /*bytes*/) {
    throw Error(MINFER_ERR_UNSUPPORTED, "this backend has no reads that do not wait");
  }
  // [offset, offset + bytes) = src's [src_offset, src_offset + bytes), src a buffer of this
  // plugin (ABI 1.8 buffer_copy; the host checks that both are one plugin's), ordered after the
  // work enqueued on both buffers' backends. The default says the plugin cannot: the host
  // copies through host memory.
  virtual void copy_from(Buffer & /*src*/, uint64_t /*src_offset*/, uint64_t /*offset*/, uint64_t /*bytes*/) {
    throw Error(MINFER_ERR_UNSUPPORTED, "this backend does not copy between its buffers");
  }

 protected:
  // Throws unless [offset, offset + bytes) lies inside the buffer.
  void check_range(uint64_t offset, uint64_t bytes, const char *what) const {
    if (offset > bytes_ || bytes > bytes_ - offset)
      throw Error(MINFER_ERR_INVALID_ARGUMENT,
                  std::string(what) + " of " + std::to_string(bytes) + " bytes at offset " +
                      std::to_string(offset) + " exceeds the buffer's " + std::to_string(bytes_) +
                      " bytes");
  }

 private:
  uint64_t bytes_;
};

// The Buffer behind a tensor descriptor, as the plugin's own type.
template <class B>
B &buffer_of(const minfer_tensor &t) {
  if (!t.buffer || !t.buffer->impl)
    throw Error(MINFER_ERR_INVALID_ARGUMENT,
                std::string("tensor '") + (t.name ? t.name : "?") + "' has no buffer");
  return static_cast<B &>(*t.buffer->impl);
}

// Throws unless tensor t of node n lies wholly inside its buffer. Plugins check this once per
// node at compile, so no kernel can write outside memory the host gave it.
inline void check_fits(const minfer_node &n, const minfer_tensor &t, int64_t t_bytes) {
  const Buffer &buf = buffer_of<Buffer>(t);
  if (t_bytes < 0 || t.offset > buf.size() || uint64_t(t_bytes) > buf.size() - t.offset)
    throw Error(MINFER_ERR_INVALID_ARGUMENT,
                std::string("node '") + (n.name ? n.name : "?") + "': tensor '" +
                    (t.name ? t.name : "?") + "' (" + std::to_string(t_bytes) + " bytes at offset " +
                    std::to_string(t.offset) + ") does not fit its buffer of " +
                    std::to_string(buf.size()) + " bytes");
}

// A tensor descriptor read field by field: only the fields the writer's struct_size covers
// are taken, the rest keep their defaults (so old and new hosts both work).
inline minfer_tensor read_tensor(const minfer_tensor &src) {
  minfer_tensor t{};
  t.token_dim = -1;
  const size_t n = src.struct_size < sizeof(minfer_tensor) ? src.struct_size : sizeof(minfer_tensor);
  std::memcpy(&t, &src, n);
  t.struct_size = sizeof(minfer_tensor);
  return t;
}

// The compile-time checks every plugin makes of a node's tensors: each lies inside its
// buffer. Returns the most tokens the node takes per step (INT64_MAX when none follows it;
// tensors of the step's output rows follow n_outputs, which the host bounds).
inline int64_t check_compiled_node(const minfer_node &n) {
  int64_t max_tokens = INT64_MAX;
  for (int i = 0; i <= n.n_inputs; ++i) {
    const minfer_tensor &t = i < n.n_inputs ? *n.inputs[i] : *n.output;
    int64_t bytes = -1;
    if (const minfer_dtype_traits tr = minfer_dtype_info(t.dtype); tr.name && t.shape[0] % tr.block_values == 0) {
      bytes = t.shape[0] / tr.block_values * tr.block_bytes;
      for (int d = 1; d < t.rank; ++d) bytes *= t.shape[d];
    }
    check_fits(n, t, bytes);
    const bool output_rows = t.struct_size >= MINFER_SIZE_UP_TO(minfer_tensor, flags) && (t.flags & MINFER_TENSOR_OUTPUT_ROWS);
    if (t.token_dim >= 0 && !output_rows && t.shape[t.token_dim] < max_tokens) max_tokens = t.shape[t.token_dim];
  }
  return max_tokens;
}

// A node copied out of the host's call so a compiled segment can keep it.
class OwnedNode {
 public:
  explicit OwnedNode(const minfer_node &n)
      : name_(n.name ? n.name : ""), node_(n) {
    for (int32_t i = 0; i < n.n_inputs; ++i) {
      tensors_.push_back(read_tensor(*n.inputs[i]));
      names_.emplace_back(n.inputs[i]->name ? n.inputs[i]->name : "");
    }
    tensors_.push_back(read_tensor(*n.output));
    names_.emplace_back(n.output->name ? n.output->name : "");
    if (n.params) {
      const auto *p = reinterpret_cast<const unsigned char *>(n.params);
      params_.assign(p, p + n.params->struct_size);
    }
    relink();
  }
  OwnedNode(const OwnedNode &o)
      : name_(o.name_), names_(o.names_), tensors_(o.tensors_), params_(o.params_), node_(o.node_) {
    relink();
  }
  OwnedNode &operator=(const OwnedNode &) = delete;
  const minfer_node &node() const { return node_; }
  const std::string &name() const { return name_; }

 private:
  void relink() {
    ptrs_.clear();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      tensors_[i].name = names_[i].c_str();
      ptrs_.push_back(&tensors_[i]);
    }
    node_.name = name_.c_str();
    node_.inputs = ptrs_.data();
    node_.output = ptrs_.back();
    node_.params = params_.empty() ? nullptr
                                   : reinterpret_cast<const minfer_params_header *>(params_.data());
  }
  std::string name_;
  std::vector<std::string> names_;          // inputs..., output
  std::vector<minfer_tensor> tensors_;      // inputs..., output (our struct size)
  std::vector<const minfer_tensor *> ptrs_;
  std::vector<unsigned char> params_;
  minfer_node node_;
};

// The answer of Backend::supports.
struct Support {
  bool ok = true;
  std::string why;
  static Support yes() { return {true, {}}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

// A compiled run of nodes.
class Segment {
 public:
  virtual ~Segment() = default;
  virtual void execute(const minfer_step_args &args) = 0;
  // Device time of each node in the last execute that asked for it (ABI 1.1); the default
  // says the plugin cannot.
  virtual std::vector<double> node_times() {
    throw Error(MINFER_ERR_UNSUPPORTED, "this backend does not time nodes");
  }
  // How node `node` runs in a step of `tokens` tokens (kernel or path, fusions), for reports
  // (ABI 1.3); "" says nothing.
  virtual std::string explain(size_t /*node*/, int64_t /*tokens*/) const { return ""; }
};

// Whether the host asked for per-node times in these step arguments (ABI 1.1 field).
inline bool wants_node_times(const minfer_step_args &a) {
  return a.struct_size >= MINFER_SIZE_UP_TO(minfer_step_args, node_times) && a.node_times != 0;
}

// Ranks for collectives (ABI 1.8): several backends of this plugin, rank order.
class Group {
 public:
  explicit Group(size_t ranks) : ranks_(ranks) {}
  virtual ~Group() = default;
  size_t size() const { return ranks_; }
  // recv[r] (count values at its offset) = the sum over ranks q of send[q]; the same bits on
  // every rank; in place allowed. Ordered on every rank's backend like its other work.
  virtual void all_reduce(int32_t dtype, uint64_t count, const std::vector<Buffer *> &send, const std::vector<uint64_t> &send_offsets,
                          const std::vector<Buffer *> &recv, const std::vector<uint64_t> &recv_offsets) = 0;

 private:
  size_t ranks_;
};

// One opened device.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<Buffer> alloc(uint64_t bytes) = 0;
  // Host memory used in place (ABI 1.1); backends whose kernels cannot read host memory keep
  // this default, and the host copies instead.
  virtual std::unique_ptr<Buffer> wrap_host(const void *, uint64_t) {
    throw Error(MINFER_ERR_UNSUPPORTED, "this backend cannot use host memory in place");
  }
  virtual Support supports(const minfer_node &node) = 0;
  virtual std::unique_ptr<Segment> compile(std::vector<OwnedNode> nodes) = 0;
  virtual void synchronize() {}
  // Host memory that read and write move fastest (ABI 1.10; CUDA: page-locked). The default
  // says there is none, and the host uses its own.
  virtual void *host_alloc(uint64_t /*bytes*/) { throw Error(MINFER_ERR_UNSUPPORTED, "this backend has no host memory of its own"); }
  virtual void host_free(void * /*host*/) {}
  // A group of ranks (ABI 1.8 group_open), asked of rank 0's backend; ranks[0] is this one and
  // every rank is a backend of this plugin. The default says the plugin has no collectives.
  virtual std::unique_ptr<Group> open_group(const std::vector<Backend *> & /*ranks*/) {
    throw Error(MINFER_ERR_UNSUPPORTED, "this backend has no collectives (group_all_reduce)");
  }
};

namespace detail {

// Returned when even the status cannot be allocated; status_free knows not to delete it.
inline minfer_status *oom_status() {
  static minfer_status s{MINFER_ERR_OUT_OF_MEMORY, "out of host memory while reporting an error"};
  return &s;
}

inline minfer_status *make_status(int32_t code, const std::string &msg) {
  try {
    return new minfer_status{code, msg};
  } catch (...) {
    return oom_status();
  }
}

// Runs f; any exception becomes a status. NULL = success.
template <class F>
minfer_status *guard(const char *what, F &&f) noexcept {
  try {
    f();
    return nullptr;
  } catch (const Error &e) {
    return make_status(e.code(), e.what());
  } catch (const std::bad_alloc &) {
    return make_status(MINFER_ERR_OUT_OF_MEMORY, std::string(what) + ": out of host memory");
  } catch (const std::exception &e) {
    return make_status(MINFER_ERR_INTERNAL, std::string(what) + ": " + e.what());
  } catch (...) {
    return make_status(MINFER_ERR_INTERNAL, std::string(what) + ": unknown exception");
  }
}

inline void copy_why(const std::string &s, char *why, size_t why_size) {
  if (!why || why_size == 0) return;
  const size_t n = s.size() < why_size - 1 ? s.size() : why_size - 1;
  std::memcpy(why, s.data(), n);
  why[n] = '\0';
}

inline void check_node(const minfer_node *n) {
  if (!n) throw Error(MINFER_ERR_INVALID_ARGUMENT, "node is NULL");
  if (n->struct_size < MINFER_SIZE_UP_TO(minfer_node, params))
    throw Error(MINFER_ERR_INVALID_ARGUMENT,
                "minfer_node.struct_size " + std::to_string(n->struct_size) +
                    " is smaller than ABI 1.0's " +
                    std::to_string(MINFER_SIZE_UP_TO(minfer_node, params)));
  const std::string name = n->name ? n->name : "?";
  if (n->n_inputs < 0 || (n->n_inputs > 0 && !n->inputs) || !n->output)
    throw Error(MINFER_ERR_INVALID_ARGUMENT, "node '" + name + "': bad input list or no output");
  for (int32_t i = 0; i < n->n_inputs; ++i)
    if (!n->inputs[i]) throw Error(MINFER_ERR_INVALID_ARGUMENT, "node '" + name + "': input " + std::to_string(i) + " is NULL");
  auto check_tensor = [&](const minfer_tensor &t) {
    if (t.struct_size < MINFER_SIZE_UP_TO(minfer_tensor, name))
      throw Error(MINFER_ERR_INVALID_ARGUMENT,
                  "node '" + name + "': a tensor's struct_size is smaller than ABI 1.0's");
    if (t.rank < 1 || t.rank > 4)
      throw Error(MINFER_ERR_INVALID_ARGUMENT, "node '" + name + "': tensor rank " +
                                                   std::to_string(t.rank) + " is not 1..4");
  };
  for (int32_t i = 0; i < n->n_inputs; ++i) check_tensor(*n->inputs[i]);
  check_tensor(*n->output);
  if (n->params && n->params->struct_size < sizeof(minfer_params_header))
    throw Error(MINFER_ERR_INVALID_ARGUMENT, "node '" + name + "': params.struct_size too small");
}

template <class P>
struct Api {
  static const minfer_backend_api *table() {
    static const minfer_backend_api api = make();
    return &api;
  }

  static minfer_backend_api make() {
    minfer_backend_api a{};
    a.struct_size = sizeof(minfer_backend_api);
    a.abi_major = MINFER_ABI_MAJOR;
    a.abi_minor = MINFER_ABI_MINOR;
    a.name = P::name;
    a.version = P::version;
    a.status_code = [](const minfer_status *s) -> int32_t { return s ? s->code : MINFER_OK; };
    a.status_message = [](const minfer_status *s) -> const char * {
      return s ? s->message.c_str() : "ok";
    };
    a.status_free = [](minfer_status *s) {
      if (s != oom_status()) delete s;
    };
    a.device_count = [](int32_t *out, char *why, size_t why_size) {
      return guard("device_count", [&] {
        if (!out) throw Error(MINFER_ERR_INVALID_ARGUMENT, "out_count is NULL");
        std::string reason;
        *out = P::device_count(reason);
        copy_why(*out == 0 ? reason : std::string(), why, why_size);
      });
    };
    a.device_info = [](int32_t device, minfer_device_info *info) {
      return guard("device_info", [&] {
        if (!info || info->struct_size < MINFER_SIZE_UP_TO(minfer_device_info, free_bytes))
          throw Error(MINFER_ERR_INVALID_ARGUMENT, "device_info: info is NULL or too small");
        const size_t size = info->struct_size;
        P::device_info(device, *info);
        info->struct_size = size;
      });
    };
    a.open = [](int32_t device, const minfer_host *host, const char *const *keys,
                const char *const *values, int32_t n, minfer_backend **out) {
      return guard("open", [&] {
        if (!out) throw Error(MINFER_ERR_INVALID_ARGUMENT, "open: out is NULL");
        *out = nullptr;
        if (!host || host->struct_size < MINFER_SIZE_UP_TO(minfer_host, log))
          throw Error(MINFER_ERR_INVALID_ARGUMENT,
                      "open: minfer_host is NULL or smaller than ABI 1.0's");
        Options opts(keys, values, n, P::name);
        auto b = std::make_unique<minfer_backend>();
        b->impl = P::open(device, opts, Host(*host));
        opts.finish();
        *out = b.release();
      });
    };
    a.close = [](minfer_backend *b) { delete b; };
    a.buffer_alloc = [](minfer_backend *b, uint64_t bytes, minfer_buffer **out) {
      return guard("buffer_alloc", [&] {
        if (!b || !out) throw Error(MINFER_ERR_INVALID_ARGUMENT, "buffer_alloc: NULL argument");
        auto buf = std::make_unique<minfer_buffer>();
        buf->impl = b->impl->alloc(bytes);
        *out = buf.release();
      });
    };
    a.buffer_free = [](minfer_buffer *buf) { delete buf; };
    a.buffer_wrap_host = [](minfer_backend *b, const void *host, uint64_t bytes, minfer_buffer **out) {
      return guard("buffer_wrap_host", [&] {
        if (!b || !out || (!host && bytes)) throw Error(MINFER_ERR_INVALID_ARGUMENT, "buffer_wrap_host: NULL argument");
        auto buf = std::make_unique<minfer_buffer>();
        buf->impl = b->impl->wrap_host(host, bytes);
        *out = buf.release();
      });
    };
    a.buffer_write = [](minfer_buffer *buf, uint64_t off, const void *src, uint64_t bytes) {
      return guard("buffer_write", [&] {
        if (!buf || (!src && bytes)) throw Error(MINFER_ERR_INVALID_ARGUMENT, "buffer_write: NULL");
        buf->impl->write(off, src, bytes);
      });
    };
    a.buffer_read = [](minfer_buffer *buf, uint64_t off, void *dst, uint64_t bytes) {
      return guard("buffer_read", [&] {
        if (!buf || (!dst && bytes)) throw Error(MINFER_ERR_INVALID_ARGUMENT, "buffer_read: NULL");
        buf->impl->read(off, dst, bytes);
      });
    };
    a.buffer_read_async = [](minfer_buffer *buf, uint64_t off, void *dst, uint64_t bytes) {
      return guard("buffer_read_async", [&] {
        if (!buf || (!dst && bytes)) throw Error(MINFER_ERR_INVALID_ARGUMENT, "buffer_read_async: NULL");
        buf->impl->read_async(off, dst, bytes);
      });
    };
    a.buffer_copy = [](minfer_buffer *dst, uint64_t dst_off, minfer_buffer *src, uint64_t src_off, uint64_t bytes) {
      return guard("buffer_copy", [&] {
        if (!dst || !src || !dst->impl || !src->impl) throw Error(MINFER_ERR_INVALID_ARGUMENT, "buffer_copy: NULL buffer");
        dst->impl->copy_from(*src->impl, src_off, dst_off, bytes);
      });
    };
    a.host_alloc = [](minfer_backend *b, uint64_t bytes, void **out) {
      return guard("host_alloc", [&] {
        if (!b || !out) throw Error(MINFER_ERR_INVALID_ARGUMENT, "host_alloc: NULL argument");
        *out = b->impl->host_alloc(bytes);
      });
    };
    a.host_free = [](minfer_backend *b, void *host) {
      try {
        if (b && host) b->impl->host_free(host);
      } catch (...) {  // nothing crosses the ABI; a free has no one to report to
      }
    };
    a.group_open = [](minfer_backend *const *backends, int32_t n, minfer_group **out) {
      return guard("group_open", [&] {
        if (!backends || n < 1 || !out) throw Error(MINFER_ERR_INVALID_ARGUMENT, "group_open: no backends");
        *out = nullptr;
        std::vector<Backend *> ranks;
        for (int32_t r = 0; r < n; ++r) {
          if (!backends[r]) throw Error(MINFER_ERR_INVALID_ARGUMENT, "group_open: rank " + std::to_string(r) + "'s backend is NULL");
          ranks.push_back(backends[r]->impl.get());
        }
        auto g = std::make_unique<minfer_group>();
        g->impl = ranks[0]->open_group(ranks);
        *out = g.release();
      });
    };
    a.group_free = [](minfer_group *g) { delete g; };
    a.group_all_reduce = [](minfer_group *g, int32_t dtype, uint64_t count, minfer_buffer *const *send, const uint64_t *send_off,
                            minfer_buffer *const *recv, const uint64_t *recv_off) {
      return guard("group_all_reduce", [&] {
        if (!g || !send || !send_off || !recv || !recv_off) throw Error(MINFER_ERR_INVALID_ARGUMENT, "group_all_reduce: NULL argument");
        // The group knows its size; the host passes one buffer per rank.
        const size_t n = g->impl ? g->impl->size() : 0;
        std::vector<Buffer *> s, r;
        for (size_t i = 0; i < n; ++i) {
          if (!send[i] || !recv[i]) throw Error(MINFER_ERR_INVALID_ARGUMENT, "group_all_reduce: rank " + std::to_string(i) + "'s buffer is NULL");
          s.push_back(send[i]->impl.get());
          r.push_back(recv[i]->impl.get());
        }
        g->impl->all_reduce(dtype, count, s, std::vector<uint64_t>(send_off, send_off + n), r, std::vector<uint64_t>(recv_off, recv_off + n));
      });
    };
    a.supports = [](minfer_backend *b, const minfer_node *node, int32_t *yes, char *why,
                    size_t why_size) {
      return guard("supports", [&] {
        if (!b || !yes) throw Error(MINFER_ERR_INVALID_ARGUMENT, "supports: NULL argument");
        check_node(node);
        const Support s = b->impl->supports(*node);
        *yes = s.ok ? 1 : 0;
        copy_why(s.ok ? std::string() : s.why, why, why_size);
      });
    };
    a.compile = [](minfer_backend *b, const minfer_node *const *nodes, int32_t n, minfer_segment **out) {
      return guard("compile", [&] {
        if (!b || !out || n < 0 || (n > 0 && !nodes))
          throw Error(MINFER_ERR_INVALID_ARGUMENT, "compile: bad arguments");
        *out = nullptr;
        std::vector<OwnedNode> owned;
        owned.reserve(size_t(n));
        for (int32_t i = 0; i < n; ++i) {
          check_node(nodes[i]);
          owned.emplace_back(*nodes[i]);
        }
        auto seg = std::make_unique<minfer_segment>();
        seg->impl = b->impl->compile(std::move(owned));
        *out = seg.release();
      });
    };
    a.segment_free = [](minfer_segment *s) { delete s; };
    a.execute = [](minfer_backend *b, minfer_segment *s, const minfer_step_args *args) {
      return guard("execute", [&] {
        if (!b || !s || !args || args->struct_size < MINFER_SIZE_UP_TO(minfer_step_args, n_past))
          throw Error(MINFER_ERR_INVALID_ARGUMENT, "execute: bad arguments");
        s->impl->execute(*args);
      });
    };
    a.segment_node_times = [](minfer_backend *b, minfer_segment *s, double *ms, int32_t n) {
      return guard("segment_node_times", [&] {
        if (!b || !s || (!ms && n)) throw Error(MINFER_ERR_INVALID_ARGUMENT, "segment_node_times: NULL argument");
        const std::vector<double> t = s->impl->node_times();
        if (int32_t(t.size()) != n)
          throw Error(MINFER_ERR_INVALID_ARGUMENT, "segment_node_times: the segment has " + std::to_string(t.size()) +
                                                       " nodes, not " + std::to_string(n));
        std::copy(t.begin(), t.end(), ms);
      });
    };
    a.segment_explain = [](minfer_backend *b, minfer_segment *s, int32_t node, int64_t n_tokens, char *out, size_t out_size) {
      return guard("segment_explain", [&] {
        if (!b || !s || !out || out_size == 0) throw Error(MINFER_ERR_INVALID_ARGUMENT, "segment_explain: NULL argument");
        const std::string text = node >= 0 ? s->impl->explain(size_t(node), n_tokens) : std::string();
        const size_t n = std::min(text.size(), out_size - 1);
        std::memcpy(out, text.data(), n);
        out[n] = '\0';
      });
    };
    a.synchronize = [](minfer_backend *b) {
      return guard("synchronize", [&] {
        if (!b) throw Error(MINFER_ERR_INVALID_ARGUMENT, "synchronize: backend is NULL");
        b->impl->synchronize();
      });
    };
    return a;
  }
};

}  // namespace detail
}  // namespace minfer::sdk

// Defines the entry symbol for Plugin, a class with:
//   static constexpr const char *name, *version;
//   static int32_t device_count(std::string &why_none);
//   static void device_info(int32_t device, minfer_device_info &info);   // throws for a bad id
//   static std::unique_ptr<minfer::sdk::Backend> open(int32_t device, minfer::sdk::Options &,
//                                                     const minfer::sdk::Host &);
#define MINFER_DEFINE_PLUGIN(Plugin)                                                        \
  extern "C" MINFER_EXPORT const minfer_backend_api *minfer_backend_entry(uint32_t, uint32_t) { \
    return ::minfer::sdk::detail::Api<Plugin>::table();                                     \
  }
