// A remote-write destination that keeps nothing (bench/fleet/profile_hub.sh --relay-sink): it
// answers 204 to POST /api/v1/write and counts requests, their bytes and what they say they
// inflate to (the snappy header alone), so that a relaying hub's own cost can be measured on
// the 2-core machine without a time-series database beside it taking the cores. With
// --count-samples it also decodes each request and counts its samples (what the relay passed
// on; it costs this process CPU, not the hub). GET /stats: one line of key=value.
//
//   rw_sink --port 19872 [--count-samples]
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>

#include "http/server.h"
#include "store/remote_write.h"

using namespace gpuwatch;

int main(int argc, char** argv) {
  CLI::App app{"A remote-write sink for the fleet benchmark"};
  int port = 19872;
  bool count_samples = false;
  app.add_option("--port", port, "Loopback port");
  app.add_flag("--count-samples", count_samples, "Decode each request and count its samples");
  CLI11_PARSE(app, argc, argv);

  std::atomic<uint64_t> requests{0}, bytes{0}, inflated{0}, samples{0}, bad{0};
  http::ServerLimits limits;
  limits.max_buffered_body_bytes = size_t{1} << 30;
  http::Server server(limits);
  server.Route("POST", "/api/v1/write",
               [&](const http::Request& req, http::Response& res) {
                 auto n = store::SnappyInflatedLength(req.body);
                 if (!n.ok()) {
                   bad.fetch_add(1);
                   res.status = 400;
                   res.Set(n.status().message() + "\n", "text/plain");
                   return;
                 }
                 if (count_samples) {
                   store::RemoteWriteLimits l;
                   l.max_uncompressed_bytes = size_t{64} << 20;
                   auto d = store::DecodeRemoteWrite(req.body, l);
                   if (!d.ok()) {
                     bad.fetch_add(1);
                     res.status = 400;
                     res.Set(d.status().message() + "\n", "text/plain");
                     return;
                   }
                   uint64_t k = 0;
                   for (const auto& s : *d) k += s.samples.size();
                   samples.fetch_add(k);
                 }
                 requests.fetch_add(1);
                 bytes.fetch_add(req.body.size());
                 inflated.fetch_add(*n);
                 res.status = 204;
               },
               {.access = http::Access::kWrite, .max_body_bytes = size_t{64} << 20});
  server.Route("GET", "/stats", [&](const http::Request&, http::Response& res) {
    res.Set("requests=" + std::to_string(requests.load()) +
                " bytes=" + std::to_string(bytes.load()) + " inflated_bytes=" +
                std::to_string(inflated.load()) + " samples=" + std::to_string(samples.load()) +
                " bad=" + std::to_string(bad.load()) + "\n",
            "text/plain");
  });
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  if (Status st = server.Start("127.0.0.1", port); !st.ok()) {
    std::fprintf(stderr, "rw_sink: %s\n", st.message().c_str());
    return 1;
  }
  int sig = 0;
  sigwait(&stop, &sig);
  server.Stop();
  return 0;
}
