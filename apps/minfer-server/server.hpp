// apps/minfer-server/server.hpp — minfer-server: the OpenAI-compatible HTTP API over one
// Engine (continuous batching; SERVING.md). The listener comes up first and answers /health
// with 503 while the model loads; every generation request becomes an engine request whose
// tokens stream back as they are sampled.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/run_config.hpp"

namespace minfer::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0: any free port (the one taken is printed)
  int64_t parallel = 4;       // sequences at once
  std::string api_key;        // empty: no key asked
  int timeout_s = 600;        // read and write timeout of a connection
  std::string alias;          // the model's name in the API; empty: the file's name
  std::vector<std::string> cors_origins;  // browser pages' origins answered with CORS headers (cors.hpp)
};

class Server {
 public:
  Server(RunConfig cfg, ServerOptions opts);
  ~Server();
  // Binds, prints "minfer-server listening on http://HOST:PORT", loads the model, serves until
  // stop() (or a load failure: returns 1).
  int run();
  void stop();   // at once: running requests end "cancelled"
  void drain();  // SIGINT/SIGTERM: refuse new generations, let running ones finish (up to the timeout), then stop

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::server
