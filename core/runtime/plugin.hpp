// core/runtime/plugin.hpp — loading backend plugins (Boost.DLL) and RAII over their C ABI.
//
// Everything past this file talks to a plugin through BackendHandle and DeviceBuffer, which
// turn statuses into minfer::Error with the backend's name and the call that failed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "minfer/abi.h"

namespace boost::dll {
class shared_library;
}

namespace minfer {

// A loaded plugin library; keeps the library mapped while any handle uses its table.
class Plugin {
 public:
  // Loads the file and checks the ABI; throws minfer::Error naming the file and what to do.
  static std::shared_ptr<Plugin> load(const std::string &path);
  ~Plugin();

  const minfer_backend_api &api() const { return *api_; }
  const std::string &name() const { return name_; }
  const std::string &path() const { return path_; }
  std::string version() const { return api_->version ? api_->version : "?"; }

  // Devices it sees; when none, why_none says why.
  int32_t device_count(std::string *why_none) const;
  minfer_device_info device_info(int32_t device) const;

  // Turns a status into an exception ("backend 'cuda': <what>: <message>") and frees it.
  void check(minfer_status *status, const std::string &what) const;

 private:
  Plugin() = default;
  std::unique_ptr<boost::dll::shared_library> lib_;
  const minfer_backend_api *api_ = nullptr;
  std::string name_, path_;
};

// Where plugins are looked for, in order: the config's plugin_dir, MINFER_PLUGIN_PATH
// (colon-separated), the folder of the running executable, and the plugin folder of the
// install it belongs to (its ../lib/minfer).
std::vector<std::string> plugin_search_dirs(const std::string &config_plugin_dir);

// The file name a backend's plugin has: libminfer_backend_<name>.so
std::string plugin_file_name(const std::string &backend_name);

// Finds and loads backend `name` (or the explicit file when path is non-empty).
std::shared_ptr<Plugin> find_plugin(const std::string &name, const std::string &explicit_path,
                                    const std::vector<std::string> &dirs);

// Every plugin file found in dirs (first match per name wins), for --list-backends.
std::vector<std::string> discover_plugin_files(const std::vector<std::string> &dirs);

class BackendHandle;

// A buffer of one backend; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(std::shared_ptr<Plugin> plugin, minfer_buffer *buf, uint64_t bytes)
      : plugin_(std::move(plugin)), buf_(buf), bytes_(bytes) {}
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  minfer_buffer *raw() const { return buf_; }
  uint64_t size() const { return bytes_; }
  void write(uint64_t offset, const void *src, uint64_t bytes);
  void read(uint64_t offset, void *dst, uint64_t bytes) const;
  // read, only enqueued (ABI 1.10): done when the backend's next synchronize returns. false
  // when the plugin cannot; nothing was read then.
  bool read_async(uint64_t offset, void *dst, uint64_t bytes) const;
  // Whether copy_from can take src without host memory: both buffers are one plugin's and it
  // has buffer_copy (ABI 1.8).
  bool copies_directly_from(const DeviceBuffer &src) const;
  // [offset, offset + bytes) = src's [src_offset, ...), device to device (ABI 1.8 buffer_copy),
  // ordered after both backends' work so far. false when the plugin cannot: copy through host.
  bool copy_from(const DeviceBuffer &src, uint64_t src_offset, uint64_t offset, uint64_t bytes);

 private:
  std::shared_ptr<Plugin> plugin_;
  minfer_buffer *buf_;
  uint64_t bytes_;
};

// Host memory for reading a backend's outputs into: its own (ABI 1.10 host_alloc; CUDA:
// page-locked, which its copies reach directly) or, where it has none, ordinary memory.
// Freed on destruction, which must come before the backend closes.
class HostMemory {
 public:
  HostMemory() = default;
  ~HostMemory() { release(); }
  HostMemory(HostMemory &&other) noexcept { *this = std::move(other); }
  HostMemory &operator=(HostMemory &&other) noexcept;
  HostMemory(const HostMemory &) = delete;
  HostMemory &operator=(const HostMemory &) = delete;

  void *data() const { return data_; }
  uint64_t size() const { return bytes_; }
  bool backend_owned() const { return backend_ != nullptr; }  // the backend's own memory, not ordinary

 private:
  friend class BackendHandle;
  void release() noexcept;
  std::shared_ptr<Plugin> plugin_;
  minfer_backend *backend_ = nullptr;  // null: ordinary memory
  void *data_ = nullptr;
  uint64_t bytes_ = 0;
};

// A compiled segment; freed on destruction.
class CompiledSegment {
 public:
  CompiledSegment(std::shared_ptr<Plugin> plugin, minfer_segment *seg)
      : plugin_(std::move(plugin)), seg_(seg) {}
  ~CompiledSegment();
  CompiledSegment(const CompiledSegment &) = delete;
  CompiledSegment &operator=(const CompiledSegment &) = delete;
  minfer_segment *raw() const { return seg_; }

 private:
  std::shared_ptr<Plugin> plugin_;
  minfer_segment *seg_;
};

struct SupportAnswer {
  bool yes = false;
  std::string why;
};

// What one step runs over (minfer_step_args): its tokens (0 = the graph's full shapes), the
// positions before them (single-sequence graphs), the rows that produce logits, and the
// sequences its tokens belong to (n_seqs == n_tokens: one token of each, a decode step).
struct StepShape {
  int64_t n_tokens = 0, n_past = 0, n_outputs = 0, n_seqs = 1;
  int64_t max_positions = 0;  // every token's position is below it (0: not said; minfer_step_args)
};

// One opened device of a plugin.
class BackendHandle {
 public:
  // Opens device `device` with options; plugin log lines go to spdlog tagged with the name.
  BackendHandle(std::shared_ptr<Plugin> plugin, int32_t device,
                const std::vector<std::pair<std::string, std::string>> &options);
  ~BackendHandle();
  BackendHandle(const BackendHandle &) = delete;
  BackendHandle &operator=(const BackendHandle &) = delete;

  const std::string &name() const { return plugin_->name(); }
  const Plugin &plugin() const { return *plugin_; }
  int32_t device() const { return device_; }

  std::unique_ptr<DeviceBuffer> alloc(uint64_t bytes);
  // Host memory used in place, or nullptr when the plugin cannot (ABI < 1.1, or it declines).
  std::unique_ptr<DeviceBuffer> wrap_host(const void *host, uint64_t bytes);
  // bytes of host memory that this backend's reads move fastest (ABI 1.10), else (the plugin
  // has none, or could not give it: a warning says why) ordinary memory.
  HostMemory host_alloc(uint64_t bytes);
  SupportAnswer supports(const minfer_node &node);
  std::unique_ptr<CompiledSegment> compile(const std::vector<const minfer_node *> &nodes);
  void execute(CompiledSegment &seg, int64_t step, const StepShape &shape, bool node_times = false);
  // The device time of each node of the last execute with node_times (ABI 1.1); empty when
  // the plugin cannot say.
  std::vector<double> node_times(CompiledSegment &seg, int32_t n_nodes);
  // How the backend runs the segment's node `node` in a step of n_tokens tokens (ABI 1.3);
  // "" when it does not say (or predates 1.3).
  std::string explain(const CompiledSegment &seg, int32_t node, int64_t n_tokens) const;
  void synchronize();
  minfer_backend *raw() const { return backend_; }
  const std::shared_ptr<Plugin> &shared_plugin() const { return plugin_; }

 private:
  std::shared_ptr<Plugin> plugin_;
  int32_t device_;
  minfer_host host_{};
  minfer_backend *backend_ = nullptr;
};

// Several backends of one plugin as the ranks of collectives (ABI 1.8 group_*): tensor
// parallelism's all-reduce. Made at build; freed before the backends close.
class BackendGroup {
 public:
  // ranks[r] is rank r; names[r] its backend name in the run config, for errors. Throws naming
  // them when they are not one plugin's, or the plugin has no collectives, or it fails to open.
  BackendGroup(const std::vector<BackendHandle *> &ranks, const std::vector<std::string> &names);
  ~BackendGroup();
  BackendGroup(const BackendGroup &) = delete;
  BackendGroup &operator=(const BackendGroup &) = delete;
  // recv[r] = the sum over ranks of send[q], count f32 values each (buffer, offset per rank).
  void all_reduce(uint64_t count, const std::vector<std::pair<DeviceBuffer *, uint64_t>> &send,
                  const std::vector<std::pair<DeviceBuffer *, uint64_t>> &recv, const std::string &node);

 private:
  std::shared_ptr<Plugin> plugin_;
  minfer_group *group_ = nullptr;
};

}  // namespace minfer
