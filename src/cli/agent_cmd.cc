// The commands that run the agent: `up` and `agent` (the node agent), `hub` (the fleet's hub,
// cli/hub_cmd.h), `demo` (the agent on a simulated node, cli/demo_cmd.h) and the one-shot
// `status` table. The agent serves until SIGINT or SIGTERM.
#include "cli/agent_cmd.h"

#include <fmt/format.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>

#include "cli/agent_flags.h"
#include "cli/config_file.h"
#include "cli/demo_cmd.h"
#include "cli/hub_cmd.h"
#include "cli/limits.h"
#include "cli/status_view.h"
#include "collect/nvml_library.h"
#include "common/log.h"
#include "common/time_base.h"
#include "server/agent.h"
#include "server/api.h"
#include "server/dashboard_assets.h"
#include "server/http_client_tls.h"
#include "server/http_server.h"
#include "server/prom_querier.h"
#include "server/tokens.h"
#include "store/event_store.h"
#include "store/store.h"

#ifndef GPUWATCH_VERSION
#define GPUWATCH_VERSION "0.0.0"
#endif

namespace gpuwatch::cli {
namespace {

// Called each second while the agent serves, with the HTTP port; false stops the agent.
using EverySecond = std::function<bool(const server::Agent&, int http_port)>;

// The node's own inputs beside the GPUs: the job listener and the kernel log. 0, or the exit
// code of a failure.
int StartNodeInputs(const AgentFlags* flags, server::Agent* agent_ptr) {
  server::Agent& agent = *agent_ptr;
  jobs::JobListenerOptions jl;
  jl.socket_path = flags->job_socket;
  jl.udp = flags->job_udp;
  jl.tcp = flags->job_tcp;
  if (Status st = ApplyLimits(flags->limits, LimitTargets{.listener = &jl}); !st.ok())
    return Fail(st);
  if (Status st = agent.StartJobListener(jl); !st.ok()) {
    // Another agent already answers at the default path: jobs report to it. Only a socket
    // asked for by name is worth refusing to start over.
    if (st.code() != StatusCode::kUnavailable || jl.socket_path != jobs::kDefaultJobSocket)
      return Fail(st);
    GW_LOG_WARN("{}; this agent takes no job reports on a Unix socket", st.message());
    jl.socket_path = "off";
    if (Status st2 = agent.StartJobListener(jl); !st2.ok()) return Fail(st2);
  }
  if (flags->kmsg != "off") {
    // Reading the kernel log needs CAP_SYSLOG where dmesg_restrict=1: without it NVML's event
    // set is the only XID source, which is no reason to stop.
    if (Status st = agent.StartKernelLog(flags->kmsg); !st.ok())
      GW_LOG_WARN("kernel log {} not read ({}): XIDs come from NVML only", flags->kmsg,
                  st.message());
  }
  return 0;
}

// Runs an agent on `gpu` with the store, event store, job listener, kernel log and HTTP server
// `flags` ask for, until SIGINT or SIGTERM (or until `every_second` says stop).
int ServeAgent(const AgentFlags* flags, const server::AgentOptions& agent_opts,
               std::unique_ptr<collect::GpuSource> gpu, const EverySecond& every_second) {
  auto addr = server::ParseListenAddress(flags->listen);
  if (!addr.ok()) return Fail(addr.status());
  server::AgentOptions with_instance = agent_opts;
  // The stored series' `instance`, as a scrape of this agent would name it (docs/metrics.md).
  with_instance.instance = agent_opts.hostname + ":" + std::to_string(addr->port);
  const auto* opts = &with_instance;

  // Block the stop signals in every thread; main waits for them with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto store_opts = MakeStoreOptions(*flags);
  if (!store_opts.ok()) return Fail(store_opts.status());
  auto http_opts = MakeHttpOptions(*flags);
  if (!http_opts.ok()) return Fail(http_opts.status());
  if (flags->keep_history != "on" && flags->keep_history != "off")
    return Fail(
        Status::InvalidArgument("bad --keep-history '" + flags->keep_history + "': on or off"));

  server::Agent agent(*opts, std::move(gpu));
  if (Status st = agent.Init(); !st.ok()) return Fail(st);
  // The store lives under the data dir; every acknowledged write is in its WAL. The event
  // store outlives it: the store reports into it until it is closed.
  std::unique_ptr<store::EventStore> events;
  std::unique_ptr<store::Store> db;
  store::StoreOpenReport rep;
  if (!flags->data_dir.empty()) {
    auto s = store::Store::Open(flags->data_dir, *store_opts, &rep);
    if (!s.ok()) return Fail(s.status());
    db = std::move(s).value();
    for (const auto& d : rep.wal.damage)
      GW_LOG_WARN("store: wal/{} {} at offset {}: {} ({} bytes)", d.segment,
                  d.torn_tail ? "torn tail" : "damage", d.offset, d.reason, d.bytes_lost);
    for (const auto& q : rep.quarantined) GW_LOG_ERROR("store: quarantined {}", q);
    for (const auto& r : rep.removed) GW_LOG_INFO("store: removed {}", r);
    const store::StoreStats st = db->Stats();
    GW_LOG_INFO("store: {} series, {} samples in {} blocks and the WAL under {}", st.series,
                st.samples, st.blocks, flags->data_dir);
  } else {
    GW_LOG_INFO("--data-dir none: no history is kept and /api/v1/write and queries are off");
  }
  // Events and log lines are kept apart from the samples, with their own retention.
  if (db) {
    store::EventStoreOptions eo;
    eo.bulk_kinds = {"log", "annotation"};
    if (Status st = ApplyLimits(flags->limits, LimitTargets{.events = &eo}); !st.ok())
      return Fail(st);
    auto e = store::EventStore::Open(flags->data_dir + "/events", eo);
    if (!e.ok()) return Fail(e.status());
    events = std::move(e).value();
    for (const auto& d : events->stats().damage)
      GW_LOG_WARN("event store: events/{} {} at offset {}: {}", d.segment,
                  d.torn_tail ? "torn tail" : "damage", d.offset, d.reason);
    agent.SetEventStore(events.get());
    // A failed flush or a full disk is an event an operator sees beside the GPU events.
    db->SetEventSink([ev = events.get(), host = opts->hostname](const std::string& kind,
                                                                const std::string& severity,
                                                                const std::string& message) {
      store::EventRecord r;
      r.t_ms = WallClockMs();
      r.kind = kind;
      r.severity = severity;
      r.node = host.substr(0, store::kMaxEventIdBytes);
      r.message = message.substr(0, store::kMaxEventMessageBytes);
      ev->Append({r}).IgnoreError();  // on a full disk this fails too; the log has it
    });
    // Damage found at open is on the time line too, naming what was skipped (issue 17, D10,
    // D13); a torn tail is the normal end of a crash, not damage.
    // A block that would not open is named with what was salvaged from it (D13).
    std::vector<std::string> damage = rep.quarantined;
    for (const auto& d : rep.wal.damage)
      if (!d.torn_tail)
        damage.push_back(fmt::format("wal/{} offset {}: {}; {} bytes skipped", d.segment, d.offset,
                                     d.reason, d.bytes_lost));
    for (const auto& message : damage) {
      store::EventRecord r;
      r.t_ms = WallClockMs();
      r.kind = "store_damage";
      r.severity = "warning";
      r.node = opts->hostname.substr(0, store::kMaxEventIdBytes);
      r.message = message.substr(0, store::kMaxEventMessageBytes);
      events->Append({r}).IgnoreError();
    }
  }
  // --read-from: the query API reads a Prometheus-API cluster (server/prom_querier.h).
  std::unique_ptr<server::PromApiQuerier> remote_reader;
  if (!flags->read_from.empty()) {
    if (Status st = server::CheckClientUrl(flags->read_from, flags->read_from_ca_file); !st.ok())
      return Fail(Status::InvalidArgument("--read-from: " + st.message()));
    server::PromApiOptions po;
    po.url = flags->read_from;
    po.ca_file = flags->read_from_ca_file;
    if (!flags->read_from_token_file.empty()) {
      auto token = server::ReadTokenFile(flags->read_from_token_file);
      if (!token.ok()) return Fail(token.status());
      po.token = *token;
    }
    remote_reader = std::make_unique<server::PromApiQuerier>(po);
    http_opts->read_from = remote_reader.get();
    agent.SetRulesQuerier(remote_reader.get());
    GW_LOG_INFO("queries read {} (--read-from), not the embedded store", flags->read_from);
  }
  // A hub that writes to a cluster and reads from it relays: the agents' series, and its own,
  // go to --remote-write through its spool and are not kept here (nothing would read them).
  const bool relay = opts->hub && remote_reader && agent.forwarder();
  if (relay)
    GW_LOG_INFO(
        "relaying the agents' series to {} (--remote-write with --read-from): the "
        "embedded store keeps none",
        flags->remote_write);
  if (flags->keep_history == "on" && db && !relay) agent.SetStore(db.get());
  if (!opts->user_rules.empty() && !remote_reader && !(flags->keep_history == "on" && db))
    return Fail(Status::InvalidArgument(
        "--rules needs --data-dir and --keep-history on (the rules query the agent's store), "
        "or --read-from"));
  if (opts->hub) {
    GW_LOG_INFO("hub: agents push to {}://{}/api/v1/write and /api/v1/records",
                flags->tls_cert_file.empty() ? "http" : "https", flags->listen);
  } else {
    if (int rc = StartNodeInputs(flags, &agent); rc != 0) return rc;
  }
  // The agent first: its snapshot manager exists before any HTTP thread can ask for it.
  agent.Start();
  server::HttpServer http(&agent, db.get(), events.get(), *http_opts);
  if (Status st = http.Start(*addr); !st.ok()) {
    // The tier threads write into the store: stop them before `db` goes (declared after the
    // agent, it is destroyed first), or they block on its freed mutex (a taken port hung here).
    agent.Stop();
    return Fail(st);
  }
  // An IPv6 host goes in brackets, or the URL reads "http://:::9470".
  const std::string url_host =
      addr->host.find(':') != std::string::npos ? "[" + addr->host + "]" : addr->host;
  GW_LOG_INFO("gpuwatch {} {} on {} serving {}://{}:{}/metrics", GPUWATCH_VERSION,
              opts->hub ? "hub" : "agent", opts->hostname,
              flags->tls_cert_file.empty() ? "http" : "https", url_host, http.port());
  if (!agent.job_socket_path().empty()) GW_LOG_INFO("jobs report to {}", agent.job_socket_path());
  if (const std::string_view why = server::DashboardNotBuiltReason(); !why.empty())
    GW_LOG_WARN("the dashboard at / was not built into this binary: {}", why);
  int sig = 0;
  const timespec second{1, 0};
  while (true) {
    if (!every_second) {
      sigwait(&stop_signals, &sig);
      break;
    }
    sig = sigtimedwait(&stop_signals, nullptr, &second);
    if (sig > 0) break;
    if (!every_second(agent, http.port())) break;
  }
  if (sig > 0) GW_LOG_INFO("signal {}: stopping", sig);
  http.Stop();
  agent.Stop();
  if (db) {
    // Everything acknowledged is in the WAL already; flushing makes the next start fast.
    if (Status st = db->Close(); !st.ok()) GW_LOG_ERROR("store: {}", st.message());
  }
  return 0;
}

int RunAgent(CLI::App* app, AgentFlags* flags) {
  if (Status st = ApplyConfig(app, flags); !st.ok()) return Fail(st);
  if (Status st = SetLevel(flags->log_level); !st.ok()) return Fail(st);
  const bool default_dir = flags->data_dir.empty();
  if (Status st = ResolveDataDir(flags); !st.ok()) return Fail(st);
  if (default_dir)
    GW_LOG_INFO("keeping history in {} (--data-dir none: keep nothing)", flags->data_dir);
  auto opts = MakeOptions(*flags, GPUWATCH_VERSION);
  if (!opts.ok()) return Fail(opts.status());
  for (const auto& [key, value] : FlagFields(flags)) opts->config_text += key + "=" + *value + "\n";
  return ServeAgent(flags, *opts, MakeGpuSource(flags->nvml_lib), nullptr);
}

int RunHub(CLI::App* app, AgentFlags* flags) {
  // A second malloc arena for the hub (main() keeps one for the agent's query latency): its
  // two remote-write decoders (write.max_concurrency), the record pushes and the diagnosis
  // all allocate, and on one arena they queued on its lock (perf: 4 % in its futex waits, as
  // much again in the scheduler). 400 simulated nodes for 60 s on this 2-core VM
  // (bench/fleet/RESULTS.md, "Malloc arenas"): hub CPU 54-59 s with one arena (mean 56), 48-55 s
  // with two (mean 51), peak RSS the same (1.93 GB). Set before any thread starts.
  mallopt(M_ARENA_MAX, 2);
  if (Status st = ApplyConfig(app, flags); !st.ok()) return Fail(st);
  if (Status st = SetLevel(flags->log_level); !st.ok()) return Fail(st);
  auto opts = MakeOptions(*flags, GPUWATCH_VERSION);
  if (!opts.ok()) return Fail(opts.status());
  for (const auto& [key, value] : FlagFields(flags)) opts->config_text += key + "=" + *value + "\n";
  return ServeAgent(flags, *opts, nullptr, nullptr);
}

// `gpuwatch demo`: the agent on a simulated node (cli/demo_cmd.h).
int RunDemo(const DemoCommand& c, const std::string& listen, const std::string& log_level) {
  // Before any thread: the demo forks its rank processes.
  auto demo = Demo::Start(c);
  if (!demo.ok()) return Fail(demo.status());
  AgentFlags flags;
  flags.listen = listen;
  flags.log_level = log_level;
  flags.hostname = (*demo)->hostname();
  flags.data_dir = (*demo)->data_dir();
  flags.job_socket = (*demo)->job_socket();
  flags.kmsg = "off";  // the real host's XIDs are not the simulated node's
  flags.process_interval = "5s";
  flags.hub = c.hub;
  flags.hub_token_file = c.hub_token_file;
  if (Status st = SetLevel(flags.log_level); !st.ok()) return Fail(st);
  auto opts = MakeOptions(flags, GPUWATCH_VERSION);
  if (!opts.ok()) return Fail(opts.status());
  opts->simulated = true;
  return ServeAgent(&flags, *opts, (*demo)->TakeSource(),
                    [&demo](const server::Agent& agent, int port) {
                      return (*demo)->Tick(agent, port, std::cout);
                    });
}

int RunStatus(bool json, bool capabilities, const std::string& nvml_lib,
              const std::string& root_dir) {
  SetLogLevel(LogLevel::kError);  // a one-shot table: warnings would interleave with it
  server::AgentOptions o;
  o.version = GPUWATCH_VERSION;
  o.root_dir = root_dir;
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) == 0) o.hostname = buf;
  server::Agent agent(o, MakeGpuSource(nvml_lib));
  if (Status st = agent.Init(); !st.ok()) return Fail(st);
  // Processes first: the GPU tick then publishes capabilities that include the process query.
  agent.TickProcesses();
  agent.TickGpu();
  agent.PollEvents(0);
  std::string out = agent.WithState([&](const server::AgentState& s) {
    if (json) {
      nlohmann::json j = server::GpusJson(s);
      j["processes"] = server::ProcessesJson(s)["processes"];
      if (capabilities) j["capabilities"] = server::CapabilitiesJson(s)["gpus"];
      return server::DumpJson(j, 2) + "\n";
    }
    return capabilities ? RenderCapabilities(s) : RenderStatusTable(s);
  });
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

void RegisterAgentCommands(CLI::App* app, Commands* out) {
  auto up_flags = std::make_shared<AgentFlags>();
  auto* up = app->add_subcommand(
      "up", "Run the main job: the node agent with its HTTP endpoint (port 9470)");
  AddAgentFlags(up, up_flags.get());
  out->push_back({up, [up, up_flags] { return RunAgent(up, up_flags.get()); }});

  auto agent_flags = std::make_shared<AgentFlags>();
  auto* agent = app->add_subcommand("agent", "Run the node agent (same flags as up)");
  AddAgentFlags(agent, agent_flags.get());
  out->push_back({agent, [agent, agent_flags] { return RunAgent(agent, agent_flags.get()); }});

  auto hub_flags = std::make_shared<AgentFlags>();
  auto* hub = AddHubCommand(app, hub_flags.get());
  out->push_back({hub, [hub, hub_flags] { return RunHub(hub, hub_flags.get()); }});

  struct StatusFlags {
    bool json = false, capabilities = false;
    std::string nvml = collect::kDefaultNvmlLibrary, root = "/";
  };
  auto s = std::make_shared<StatusFlags>();
  auto* status =
      app->add_subcommand("status", "One-shot table of this node's GPUs and their processes");
  status->add_flag("--json", s->json, "Print JSON instead of a table");
  status->add_flag("--capabilities", s->capabilities,
                   "List, per GPU, which fields this device exposes (R2)");
  status->add_option("--nvml-lib", s->nvml, "NVML library to dlopen (default libnvidia-ml.so.1)");
  status->add_option("--root-dir", s->root, "Root of procfs/sysfs to read (default /)");
  out->push_back({status, [s] { return RunStatus(s->json, s->capabilities, s->nvml, s->root); }});

  struct DemoFlags {
    DemoCommand demo;
    std::string listen = "127.0.0.1:9470", log_level = "warning";
  };
  auto d = std::make_shared<DemoFlags>();
  auto* demo_cmd = app->add_subcommand(
      "demo",
      "A SIMULATED 8-GPU node running a training job, watched by the agent (API, findings), "
      "with a fault injected after a few minutes");
  std::string faults;
  for (const auto& f : DemoFaults()) faults += (faults.empty() ? "" : ", ") + f;
  demo_cmd->add_option("--fault", d->demo.fault,
                       "cause[:gpu=G,severity=0..1,onset=SECONDS] (default thermal_throttle); one "
                       "of " +
                           faults);
  demo_cmd->add_option("--fault-after", d->demo.fault_after,
                       "When the fault starts, unless it names its onset (default 3m)");
  demo_cmd->add_option("--shape", d->demo.shape,
                       "<N>x<MODEL>: H100, A100, L40S, 4090 (default 8xH100)");
  demo_cmd->add_option("--duration", d->demo.duration,
                       "How long the simulation runs (default 30m)");
  demo_cmd->add_option("--seed", d->demo.seed, "Seed of the simulation");
  demo_cmd->add_option("--hostname", d->demo.hostname,
                       "The simulated node's name (default SIMULATED-node)");
  demo_cmd->add_option("--hub", d->demo.hub,
                       "Also push to this hub (gpuwatch hub), as `up --hub` does: several demos "
                       "with their own --hostname make a simulated fleet");
  demo_cmd->add_option("--hub-token-file", d->demo.hub_token_file,
                       "The hub's write token, in a file (a hub without --tokens writes its own "
                       "to <data-dir>/admin.token)");
  demo_cmd->add_option("--listen", d->listen, "HTTP listen address (default 127.0.0.1:9470)");
  demo_cmd->add_option("--log-level", d->log_level, "The agent's log level (default warning)");
  out->push_back({demo_cmd, [d] { return RunDemo(d->demo, d->listen, d->log_level); }});
}

}  // namespace gpuwatch::cli
