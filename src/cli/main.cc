// gpuwatch: one binary — agent (`up`, `agent`), one-shot `status`, `store` admin commands and
// docs generation.
// Flags and the config file are parsed only here; modules receive plain option structs.
#include <fmt/format.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>

#include "analyze/prometheus_rules.h"
#include "cli/agent_flags.h"
#include "cli/alerts_cmd.h"
#include "cli/baseline_cmd.h"
#include "cli/config_file.h"
#include "cli/demo_cmd.h"
#include "cli/doctor.h"
#include "cli/explain_cmd.h"
#include "cli/hub_cmd.h"
#include "cli/job_view.h"
#include "cli/limits.h"
#include "cli/link_tools.h"
#include "cli/linkbase_cmd.h"
#include "cli/record.h"
#include "cli/replay_cmd.h"
#include "cli/report_cmd.h"
#include "cli/slurm_cmd.h"
#include "cli/status_view.h"
#include "cli/store_admin.h"
#include "cli/top_cmd.h"
#include "cli/topo_cmd.h"
#include "collect/nvml_source.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/time_base.h"
#include "model/metric_catalog.h"
#include "server/agent.h"
#include "server/api.h"
#include "server/dashboard_assets.h"
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

Status SetLevel(const std::string& level) {
  if (level == "debug")
    SetLogLevel(LogLevel::kDebug);
  else if (level == "info")
    SetLogLevel(LogLevel::kInfo);
  else if (level == "warning" || level == "warn")
    SetLogLevel(LogLevel::kWarning);
  else if (level == "error")
    SetLogLevel(LogLevel::kError);
  else
    return Status::InvalidArgument("bad --log-level '" + level +
                                   "': debug, info, warning or error");
  return Status::Ok();
}

std::unique_ptr<collect::GpuSource> MakeGpuSource(const std::string& nvml_lib) {
  collect::NvmlSourceOptions o;
  o.library_path = nvml_lib;
  return std::make_unique<collect::NvmlSource>(o);
}

int Fail(const Status& st) {
  std::fprintf(stderr, "gpuwatch: %s\n", st.message().c_str());
  return 2;
}

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
  if (flags->keep_history == "on" && db) agent.SetStore(db.get());
  if (!opts->user_rules.empty() && !(flags->keep_history == "on" && db))
    return Fail(Status::InvalidArgument(
        "--rules needs --data-dir and --keep-history on: the rules query the agent's store"));
  if (opts->hub) {
    GW_LOG_INFO("hub: agents push to http://{}/api/v1/write and /api/v1/records", flags->listen);
  } else {
    if (int rc = StartNodeInputs(flags, &agent); rc != 0) return rc;
  }
  // The agent first: its snapshot manager exists before any HTTP thread can ask for it.
  agent.Start();
  // --read-from: the query API reads a Prometheus-API cluster (server/prom_querier.h).
  std::unique_ptr<server::PromApiQuerier> remote_reader;
  if (!flags->read_from.empty()) {
    if (!flags->read_from.starts_with("http://")) {
      agent.Stop();
      return Fail(Status::InvalidArgument("--read-from " + flags->read_from +
                                          ": an http:// URL such as http://vm:8428"));
    }
    server::PromApiOptions po;
    po.url = flags->read_from;
    if (!flags->read_from_token_file.empty()) {
      auto token = server::ReadTokenFile(flags->read_from_token_file);
      if (!token.ok()) {
        agent.Stop();
        return Fail(token.status());
      }
      po.token = *token;
    }
    remote_reader = std::make_unique<server::PromApiQuerier>(po);
    http_opts->read_from = remote_reader.get();
    GW_LOG_INFO("queries read {} (--read-from), not the embedded store", flags->read_from);
  }
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
  GW_LOG_INFO("gpuwatch {} {} on {} serving http://{}:{}/metrics", GPUWATCH_VERSION,
              opts->hub ? "hub" : "agent", opts->hostname, url_host, http.port());
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

int Main(int argc, char** argv) {
  CLI::App app{"gpuwatch — monitoring for multi-GPU training servers", "gpuwatch"};
  app.set_version_flag("--version", std::string("gpuwatch ") + GPUWATCH_VERSION);
  app.require_subcommand(1);

  AgentFlags up_flags, agent_flags;
  auto* up = app.add_subcommand(
      "up", "Run the main job: the node agent with its HTTP endpoint (port 9470)");
  AddAgentFlags(up, &up_flags);
  auto* agent = app.add_subcommand("agent", "Run the node agent (same flags as up)");
  AddAgentFlags(agent, &agent_flags);
  AgentFlags hub_flags;
  auto* hub = AddHubCommand(&app, &hub_flags);

  bool status_json = false, status_caps = false;
  std::string status_nvml = collect::kDefaultNvmlLibrary, status_root = "/";
  auto* status =
      app.add_subcommand("status", "One-shot table of this node's GPUs and their processes");
  status->add_flag("--json", status_json, "Print JSON instead of a table");
  status->add_flag("--capabilities", status_caps,
                   "List, per GPU, which fields this device exposes (R2)");
  status->add_option("--nvml-lib", status_nvml,
                     "NVML library to dlopen (default libnvidia-ml.so.1)");
  status->add_option("--root-dir", status_root, "Root of procfs/sysfs to read (default /)");

  std::string doctor_nvml = collect::kDefaultNvmlLibrary, doctor_root = "/", doctor_data;
  bool doctor_json = false;
  auto* doctor = app.add_subcommand(
      "doctor",
      "One-shot health check of this node as a checklist: driver and NVML, GPUs, ECC and row "
      "remaps, clock reasons, temperatures, PCIe and NVLinks, topology against the archive, "
      "NUMA of GPU processes, clock sync (exit 0 all well, 1 something wrong, 2 error)");
  doctor->add_flag("--json", doctor_json, "Print the checks as JSON");
  doctor->add_option("--nvml-lib", doctor_nvml,
                     "NVML library to dlopen (default libnvidia-ml.so.1)");
  doctor->add_option("--root-dir", doctor_root, "Root of procfs/sysfs to read (default /)");
  doctor->add_option("--data-dir", doctor_data,
                     "The agent's --data-dir: compare the topology with its archive (read only)");

  auto* store_cmd = app.add_subcommand("store", "Inspect and maintain the store under a data dir");
  store_cmd->require_subcommand(1);
  std::string store_dir;
  bool store_json = false, store_no_quarantine = false;
  AgentFlags compact_flags;
  auto* store_stats =
      store_cmd->add_subcommand("stats", "Series, samples and bytes per sample per tier");
  store_stats->add_option("--data-dir", store_dir, "The agent's --data-dir")->required();
  store_stats->add_flag("--json", store_json, "Print JSON");
  auto* store_check = store_cmd->add_subcommand(
      "check",
      "Verify every chunk and WAL record; quarantine damage (exit 1 when damage was found)");
  store_check->add_option("--data-dir", store_dir, "The agent's --data-dir")->required();
  store_check->add_flag("--no-quarantine", store_no_quarantine,
                        "Only report: leave damaged files where they are");
  auto* store_compact = store_cmd->add_subcommand(
      "compact", "Flush the WAL, merge blocks per day and apply retention (agent stopped)");
  store_compact->add_option("--data-dir", store_dir, "The agent's --data-dir")->required();
  AddStoreFlags(store_compact, &compact_flags);

  std::string agent_url = DefaultAgentUrl();
  bool jobs_json = false;
  auto* jobs_cmd = app.add_subcommand(
      "jobs", "Running and recent jobs on this node: throughput, step time, data/comm shares");
  jobs_cmd->add_option("--agent", agent_url,
                       "The agent's URL (default $GPUWATCH_AGENT or http://127.0.0.1:9470)");
  jobs_cmd->add_flag("--json", jobs_json, "Print the agent's JSON");
  std::string job_id;
  auto* job_cmd = app.add_subcommand("job", "One job: its ranks, their steps, GPUs and state");
  job_cmd->add_option("id", job_id, "Job id")->required();
  job_cmd->add_option("--agent", agent_url, "The agent's URL");
  job_cmd->add_flag("--json", jobs_json, "Print the agent's JSON");
  TopCommand top_opts;
  auto* top_cmd = app.add_subcommand(
      "top", "Full-screen view of the node: GPUs, processes, jobs, findings, and their history");
  top_cmd->add_option("--agent", agent_url, "The agent's URL");
  auto* top_once = top_cmd->add_flag("--once", top_opts.once, "Print one table and exit");
  top_cmd
      ->add_flag("--plain", top_opts.plain, "Print a table every refresh, with no terminal control")
      ->excludes(top_once);
  top_cmd->add_option("--interval", top_opts.interval_s, "Seconds between refreshes (default 1)");
  top_cmd->add_option("--job", top_opts.job, "Show only this job");
  top_cmd->add_option("--user", top_opts.user, "Show only this user's jobs and processes");
  ReportCommand report;
  auto* report_cmd = AddReportCommand(&app, &report);
  SlurmCommand slurm;
  CLI::App *slurm_prolog = nullptr, *slurm_epilog = nullptr;
  AddSlurmCommand(&app, &slurm, &slurm_prolog, &slurm_epilog);
  std::string annotate_text, annotate_job, annotate_token_file;
  auto* annotate_cmd = app.add_subcommand(
      "annotate", "Put a note on the time line (R21), e.g. gpuwatch annotate \"switched to TP=4\"");
  annotate_cmd->add_option("text", annotate_text, "What changed")->required();
  annotate_cmd->add_option("--job", annotate_job, "The job it concerns");
  annotate_cmd->add_option("--agent", agent_url, "The agent's URL");
  annotate_cmd->add_option("--token-file", annotate_token_file,
                           "A token of the agent (default $GPUWATCH_TOKEN_FILE, else admin.token "
                           "in the default data dir)");

  RecordOptions rec;
  rec.agent_url = agent_url;
  std::string rec_duration;
  auto* record_cmd = app.add_subcommand(
      "record", "Write the agent's records for the next DURATION in the trace format");
  record_cmd->add_option("--duration", rec_duration, "How long to record (30s, 10m, 2h)")
      ->required();
  record_cmd->add_option("--out", rec.out, "Trace file to write (.jsonl, .jsonl.gz or .jsonl.zst)")
      ->required();
  record_cmd->add_option("--agent", rec.agent_url, "The agent's URL");

  std::string link_file, link_topo;
  bool link_json = false;
  std::string replay_path, eval_dir;
  bool replay_json = false, eval_json = false;
  double replay_speed = 0;
  auto* replay_cmd = app.add_subcommand(
      "replay",
      "Run a trace (../shared/spec/trace-format.md; .jsonl, .gz, .zst) through the diagnosis as "
      "fast as the CPU allows and print the findings");
  replay_cmd->add_option("trace", replay_path, "The trace")->required();
  replay_cmd->add_option("--speed", replay_speed,
                         "Pace the records at N times real time (default: as fast as possible)");
  replay_cmd->add_flag("--json", replay_json,
                       "Print exactly the findings document of findings.md on stdout");
  // The contract: `replay TRACE [--json] [--speed N] [--serve]`; where to serve is
  // --listen.
  bool replay_serve = false;
  std::string replay_listen = "127.0.0.1:9471";
  replay_cmd->add_flag("--serve", replay_serve,
                       "Then keep the findings open at http://LISTEN/api/v1/findings until "
                       "SIGINT or SIGTERM");
  replay_cmd->add_option("--listen", replay_listen, "Where --serve listens")->capture_default_str();
  std::string replay_baselines;
  replay_cmd->add_option("--baselines", replay_baselines,
                         "A baseline store (e.g. DATA_DIR/baselines): jobs are also judged "
                         "against their template's newest baseline");
  std::string diagnose_target;
  bool diagnose_json = false;
  auto* diagnose_cmd = app.add_subcommand(
      "diagnose",
      "The running agent's current findings (task -> card -> link, deepest cause), all or those "
      "of one job or node; exit 0 none, 1 findings, 2 error");
  diagnose_cmd->add_option("target", diagnose_target, "A job id or a node name");
  diagnose_cmd->add_flag("--json", diagnose_json, "The findings document of findings.md");
  diagnose_cmd->add_option("--agent", agent_url, "The agent's URL")->capture_default_str();
  auto* eval_cmd = app.add_subcommand(
      "eval",
      "Replay every NAME.jsonl[.gz|.zst] in DIR that has a NAME.truth.json and score the findings "
      "(precision, recall, F1, detection latency per cause and overall)");
  eval_cmd->add_option("dir", eval_dir, "The scenario directory")->required();
  eval_cmd->add_flag("--json", eval_json, "Print JSON");

  SimCommand sim;
  auto* sim_cmd = app.add_subcommand(
      "sim",
      "Simulate a training job on GPU nodes, with faults, as a trace plus its truth file "
      "(SIMULATED data)");
  sim_cmd->add_option("--shape", sim.shape, "<N>x<MODEL>: H100, A100, L40S, 4090 (default 8xH100)");
  sim_cmd->add_option("--nodes", sim.nodes, "Nodes (default 1)");
  sim_cmd->add_option("--duration", sim.duration, "Length (default 15m)");
  sim_cmd->add_option("--seed", sim.seed, "Seed: the same seed gives the same trace");
  sim_cmd->add_option("--fault", sim.faults,
                      "cause[:gpu=G,node=N,onset=SECONDS,severity=0..1], repeatable");
  sim_cmd->add_option("--out", sim.out, "Output prefix: PREFIX.jsonl.gz, PREFIX.truth.json")
      ->required();

  DemoCommand demo;
  std::string demo_listen = "127.0.0.1:9470", demo_log_level = "warning";
  auto* demo_cmd = app.add_subcommand(
      "demo",
      "A SIMULATED 8-GPU node running a training job, watched by the agent (API, findings), "
      "with a fault injected after a few minutes");
  std::string demo_faults;
  for (const auto& f : DemoFaults()) demo_faults += (demo_faults.empty() ? "" : ", ") + f;
  demo_cmd->add_option("--fault", demo.fault,
                       "cause[:gpu=G,severity=0..1,onset=SECONDS] (default thermal_throttle); one "
                       "of " +
                           demo_faults);
  demo_cmd->add_option("--fault-after", demo.fault_after,
                       "When the fault starts, unless it names its onset (default 3m)");
  demo_cmd->add_option("--shape", demo.shape,
                       "<N>x<MODEL>: H100, A100, L40S, 4090 (default 8xH100)");
  demo_cmd->add_option("--duration", demo.duration, "How long the simulation runs (default 30m)");
  demo_cmd->add_option("--seed", demo.seed, "Seed of the simulation");
  demo_cmd->add_option("--listen", demo_listen, "HTTP listen address (default 127.0.0.1:9470)");
  demo_cmd->add_option("--log-level", demo_log_level, "The agent's log level (default warning)");

  TopoOptions topo_opts;
  std::string topo_a, topo_b;
  auto* topo_cmd = app.add_subcommand(
      "topo",
      "Node topology (R8): without a subcommand, this node's live `nvidia-smi topo -m` matrix "
      "with its NVLinks, PCIe links and NICs");
  topo_cmd->require_subcommand(0, 1);
  auto add_topo_flags = [&topo_opts](CLI::App* c, bool live) {
    c->add_flag("--json", topo_opts.json, "Print the snapshot as JSON (docs/format/topology.md)");
    c->add_option("--data-dir", topo_opts.data_dir,
                  "The agent's --data-dir (its topology archive is <data-dir>/topology)");
    if (live) {
      c->add_option("--nvml-lib", topo_opts.nvml_lib,
                    "NVML library to dlopen (default libnvidia-ml.so.1)");
      c->add_option("--root", topo_opts.root, "sysfs root (default /)");
    }
  };
  add_topo_flags(topo_cmd, true);
  topo_cmd->add_flag("--p2p", topo_opts.p2p, "Also print the P2P read support matrix");
  auto* topo_list = topo_cmd->add_subcommand("list", "The archived topology versions");
  add_topo_flags(topo_list, false);
  auto* topo_show = topo_cmd->add_subcommand("show", "One archived version, or a snapshot file");
  topo_show->add_option("version", topo_a, "v3, 3, or a file")->required();
  add_topo_flags(topo_show, false);
  auto* topo_diff = topo_cmd->add_subcommand(
      "diff",
      "What changed between two topologies: each an archived version (v3), live, or a file "
      "(snapshot JSON or a topo -m capture); default the newest version against live. Exit 0 "
      "when nothing changed, 1 when something did");
  topo_diff->add_option("a", topo_a, "The older topology (default: the newest archived)");
  topo_diff->add_option("b", topo_b, "The newer topology (default: live)");
  add_topo_flags(topo_diff, true);
  auto* topo_import = topo_cmd->add_subcommand(
      "import", "Parse a `nvidia-smi topo -m` capture (from any machine) into the topology model");
  topo_import->add_option("file", link_file, "The capture")->required();
  topo_import->add_flag("--json", link_json, "Print the model as JSON");
  auto* nccl_cmd = app.add_subcommand(
      "nccl",
      "Analyze an NCCL_DEBUG=INFO log: version, ranks, the transport of every channel, "
      "and fallbacks against the topology (R9)");
  nccl_cmd->add_option("file", link_file, "The log")->required();
  nccl_cmd->add_option("--topo", link_topo, "A `nvidia-smi topo -m` capture of the node");
  nccl_cmd->add_flag("--json", link_json, "Print JSON");

  std::vector<std::string> explain_files;
  bool explain_json = false;
  std::string explain_node;
  auto* explain_cmd = app.add_subcommand(
      "explain",
      "The post-mortem from the text you have: kernel logs, NCCL logs, launcher and training "
      "logs, nvidia-smi output, topo -m, nccl-tests output (plain or .gz, any mix); what each "
      "file holds and the findings they support together (docs/format/explain.md). Exit 0 with "
      "no warning or critical finding, 1 with one, 2 when a file cannot be read");
  explain_cmd->add_option("files", explain_files, "The files")->required();
  explain_cmd->add_flag("--json", explain_json, "Print JSON");
  explain_cmd->add_option("--node", explain_node,
                          "The node, when the text names no host (default: unknown)");

  LinkbaseOptions lb;
  auto* linkbase_cmd = app.add_subcommand(
      "linkbase",
      "Link baselines (R12): nccl-tests bus bandwidth per size, kept per node set; later runs "
      "are judged against it");
  linkbase_cmd->require_subcommand(1);
  auto add_linkbase_flags = [&lb](CLI::App* c) {
    c->add_option("--dir", lb.dir,
                  "Where baselines are kept (default <--data-dir>/linkbase, else "
                  "/var/lib/gpuwatch/linkbase)");
    c->add_option("--data-dir", lb.data_dir, "The agent's --data-dir: baselines in its linkbase/");
    c->add_flag("--json", lb.json, "Print JSON");
  };
  auto add_run_flags = [&lb](CLI::App* c) {
    c->add_option("file", lb.file, "all_reduce_perf, all_gather_perf, … output")->required();
    c->add_option("--name", lb.name,
                  "Key of the baseline (default: the capture's host names, sorted, joined by ',')");
    c->add_option("--collective", lb.collective,
                  "The collective, when the capture does not say (e.g. all_gather_perf)");
  };
  auto* lb_import = linkbase_cmd->add_subcommand(
      "import",
      "Store a run as the next baseline version of its node set; compare it with the "
      "previous version");
  add_run_flags(lb_import);
  add_linkbase_flags(lb_import);
  auto* lb_show =
      linkbase_cmd->add_subcommand("show", "List baselines: key, collective, versions, peak busbw");
  add_linkbase_flags(lb_show);
  auto* lb_compare = linkbase_cmd->add_subcommand(
      "compare",
      "Judge a run against the latest baseline without storing it (exit 0 ok, 3 degraded, 4 "
      "insufficient, 2 error)");
  add_run_flags(lb_compare);
  add_linkbase_flags(lb_compare);

  auto* docs = app.add_subcommand("docs", "Print generated documentation");
  docs->require_subcommand(1);
  auto* docs_metrics = docs->add_subcommand("metrics", "docs/metrics.md, from the metric catalog");
  auto* docs_limits =
      docs->add_subcommand("limits", "docs/limits.md's table of limits, from the code's defaults");
  std::string token_role;
  std::vector<std::string> token_projects;
  auto* token_cmd = app.add_subcommand("token", "Tokens for a --tokens file");
  token_cmd->require_subcommand(1);
  auto* token_new = token_cmd->add_subcommand(
      "new", "Print a tokens-file line, TOKEN ROLE [PROJECT,...], with a new random token");
  token_new->add_option("role", token_role, "read, write or admin")
      ->required()
      ->check(CLI::IsMember({"read", "write", "admin"}));
  token_new->add_option("projects", token_projects, "Confine the token to these projects (a,b)")
      ->delimiter(',');
  bool alerts_json = false;
  auto* alerts_cmd = app.add_subcommand(
      "alerts", "The agent's alerts: firing, silenced, resolved (exit 1 while any fires)");
  alerts_cmd->add_option("--agent", agent_url, "The agent's URL");
  alerts_cmd->add_flag("--json", alerts_json, "Print the API's JSON");
  SilenceCommand sil;
  auto* silence_cmd = app.add_subcommand(
      "silence", "Silences and maintenance windows on the agent's alerts: add, list, expire");
  silence_cmd->require_subcommand(1);
  auto* sil_add = silence_cmd->add_subcommand(
      "add", "Silence alerts matching --node/--gpu/--job/--cause for --for; prints the id");
  sil_add->add_option("--node", sil.node, "Match this node");
  sil_add->add_option("--gpu", sil.gpu, "Match this GPU index");
  sil_add->add_option("--job", sil.job, "Match this job");
  sil_add->add_option("--cause", sil.cause, "Match this cause (findings.md, or user:RULE)");
  sil_add->add_option("--for", sil.duration, "How long (default 2h)");
  sil_add->add_option("--comment", sil.comment, "Why");
  sil_add->add_option("--created-by", sil.created_by,
                      "Who, added to the comment (default $USER); the agent records the token "
                      "that authenticated as created_by");
  sil_add->add_flag("--maintenance", sil.maintenance, "A maintenance window, not a silence");
  auto* sil_list = silence_cmd->add_subcommand("list", "Active and pending silences");
  sil_list->add_flag("--json", sil.json, "Print JSON");
  auto* sil_expire = silence_cmd->add_subcommand("expire", "End a silence now");
  sil_expire->add_option("ID", sil.id, "The silence's id")->required();
  for (auto* c : {sil_add, sil_list, sil_expire})
    c->add_option("--agent", sil.agent, "The agent's URL");
  for (auto* c : {sil_add, sil_expire})
    c->add_option("--token-file", sil.token_file,
                  "The agent's admin token (default $GPUWATCH_TOKEN_FILE, else admin.token in "
                  "the default data dir)");

  BaselineCommand bl;
  auto* baseline_cmd = app.add_subcommand(
      "baseline", "Per-template baselines (R13): learn from a trace, list, show, import, compare");
  baseline_cmd->require_subcommand(1);
  auto add_data_dir = [&bl](CLI::App* c) {
    c->add_option("--data-dir", bl.data_dir, "The data dir; baselines live in DIR/baselines");
  };
  auto* bl_learn = baseline_cmd->add_subcommand(
      "learn", "Learn each job's baseline from its first stable window after warm-up");
  bl_learn->add_option("TRACE", bl.trace, "Trace file (.jsonl, .gz, .zst)")->required();
  add_data_dir(bl_learn);
  bl_learn->add_option("--job", bl.job, "Only this job");
  bl_learn->add_option("--warmup", bl.warmup, "Left out after the first step (default 2m)");
  bl_learn->add_option("--window", bl.window, "How long a window to learn from (default 10m)");
  auto* bl_list = baseline_cmd->add_subcommand("list", "The stored baselines");
  add_data_dir(bl_list);
  bl_list->add_option("--agent", bl.agent,
                      "Mark baselines stale against this agent's topology and driver");
  bl_list->add_flag("--json", bl.json, "Print JSON");
  auto* bl_show = baseline_cmd->add_subcommand("show", "One baseline as JSON (its export form)");
  bl_show->add_option("TEMPLATE", bl.template_name, "Job template")->required();
  add_data_dir(bl_show);
  bl_show->add_option("--shape", bl.shape, "Node shape, when the template has several");
  bl_show->add_option("--version", bl.version, "Version (default the newest)");
  auto* bl_import = baseline_cmd->add_subcommand("import", "Add a baseline JSON as a new version");
  bl_import->add_option("FILE", bl.file, "Baseline JSON (from `baseline show`)")->required();
  add_data_dir(bl_import);
  auto* bl_compare = baseline_cmd->add_subcommand(
      "compare",
      "Per-metric shift between two runs with a significance test (exit 1 when one shifted)");
  bl_compare->add_option("RUN_A", bl.run_a, "TRACE, TRACE:JOB or baseline:TEMPLATE[@VERSION]")
      ->required();
  bl_compare->add_option("RUN_B", bl.run_b, "TRACE, TRACE:JOB or baseline:TEMPLATE[@VERSION]")
      ->required();
  add_data_dir(bl_compare);
  bl_compare->add_option("--shape", bl.shape, "Shape of a baseline: run");
  bl_compare->add_option("--warmup", bl.warmup,
                         "Left out after each run's first step (default 2m)");
  bl_compare->add_flag("--json", bl.json, "Print JSON");

  auto* rules_cmd = app.add_subcommand("rules", "gpuwatch's built-in alerting rules");
  rules_cmd->require_subcommand(1);
  std::string rules_out;
  auto* rules_export = rules_cmd->add_subcommand(
      "export",
      "Write the built-in rules as Prometheus alerting rules (YAML; checked with `promtool check "
      "rules`) for teams that alert from Prometheus");
  rules_export->add_option("--out", rules_out, "Write to this file (default: stdout)");

  CLI11_PARSE(app, argc, argv);

  if (up->parsed()) return RunAgent(up, &up_flags);
  if (agent->parsed()) return RunAgent(agent, &agent_flags);
  if (hub->parsed()) return RunHub(hub, &hub_flags);
  if (status->parsed()) return RunStatus(status_json, status_caps, status_nvml, status_root);
  if (doctor->parsed())
    return RunDoctor(MakeGpuSource(doctor_nvml), doctor_root, doctor_data, doctor_json, std::cout,
                     std::cerr);
  if (store_stats->parsed()) return RunStoreStats(store_dir, store_json, std::cout, std::cerr);
  if (store_check->parsed())
    return RunStoreCheck(store_dir, !store_no_quarantine, std::cout, std::cerr);
  if (store_compact->parsed()) {
    auto o = MakeStoreOptions(compact_flags);
    if (!o.ok()) return Fail(o.status());
    return RunStoreCompact(store_dir, *o, std::cout, std::cerr);
  }
  if (top_cmd->parsed()) {
    top_opts.agent_url = agent_url;
    return RunTop(top_opts);
  }
  if (jobs_cmd->parsed() || job_cmd->parsed()) {
    auto j =
        AgentGetJson(agent_url, jobs_cmd->parsed() ? "/api/v1/jobs"
                                                   : "/api/v1/jobs/" + EncodePathSegment(job_id));
    if (!j.ok()) return Fail(j.status());
    if (jobs_json)
      std::cout << j->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else
      std::cout << (jobs_cmd->parsed() ? RenderJobsTable(*j) : RenderJobTable(*j));
    return 0;
  }
  if (replay_cmd->parsed())
    return RunReplay(replay_path, replay_json, replay_speed, std::cout, std::cerr,
                     replay_serve ? replay_listen : "", replay_baselines);
  if (diagnose_cmd->parsed())
    return RunDiagnose(agent_url, diagnose_target, diagnose_json, std::cout, std::cerr);
  if (eval_cmd->parsed()) return RunEval(eval_dir, eval_json, std::cout, std::cerr);
  if (sim_cmd->parsed()) return RunSim(sim, std::cout, std::cerr);
  if (demo_cmd->parsed()) return RunDemo(demo, demo_listen, demo_log_level);
  if (topo_import->parsed()) return RunTopoImport(link_file, link_json, std::cout, std::cerr);
  if (topo_list->parsed()) return RunTopoList(topo_opts, std::cout, std::cerr);
  if (topo_show->parsed()) return RunTopoShow(topo_opts, topo_a, std::cout, std::cerr);
  if (topo_diff->parsed()) return RunTopoDiff(topo_opts, topo_a, topo_b, std::cout, std::cerr);
  if (topo_cmd->parsed()) return RunTopoLive(topo_opts, std::cout, std::cerr);
  if (explain_cmd->parsed())
    return RunExplain(explain_files, explain_json, explain_node, std::cout, std::cerr);
  if (nccl_cmd->parsed())
    return RunNcclAnalysis(link_file, link_topo, link_json, std::cout, std::cerr);
  if (lb_import->parsed()) return RunLinkbaseImport(lb, std::cout, std::cerr);
  if (lb_show->parsed()) return RunLinkbaseShow(lb, std::cout, std::cerr);
  if (lb_compare->parsed()) return RunLinkbaseCompare(lb, std::cout, std::cerr);
  if (record_cmd->parsed()) {
    auto ms = ParseDurationMs(rec_duration);
    if (!ms.ok()) return Fail(ms.status());
    rec.duration_ms = *ms;
    return RunRecord(rec, std::cout, std::cerr);
  }
  if (annotate_cmd->parsed()) {
    if (Status st = AgentAnnotate(agent_url, annotate_text, annotate_job, annotate_token_file);
        !st.ok())
      return Fail(st);
    return 0;
  }
  if (slurm_prolog->parsed()) return RunSlurm(slurm, true, std::cerr);
  if (slurm_epilog->parsed()) return RunSlurm(slurm, false, std::cerr);
  if (report_cmd->parsed()) {
    if (report.agent.empty()) report.agent = agent_url;
    return RunReport(report, std::cout, std::cerr);
  }
  if (sil.agent.empty()) sil.agent = agent_url;
  if (alerts_cmd->parsed()) return RunAlerts(agent_url, alerts_json, std::cout, std::cerr);
  if (sil_add->parsed()) return RunSilenceAdd(sil, std::cout, std::cerr);
  if (sil_list->parsed()) return RunSilenceList(sil, std::cout, std::cerr);
  if (sil_expire->parsed()) return RunSilenceExpire(sil, std::cout, std::cerr);
  if (bl_learn->parsed()) return RunBaselineLearn(bl, std::cout, std::cerr);
  if (bl_list->parsed()) return RunBaselineList(bl, std::cout, std::cerr);
  if (bl_show->parsed()) return RunBaselineShow(bl, std::cout, std::cerr);
  if (bl_import->parsed()) return RunBaselineImport(bl, std::cout, std::cerr);
  if (bl_compare->parsed()) return RunBaselineCompare(bl, std::cout, std::cerr);
  if (rules_export->parsed()) {
    const std::string yaml = analyze::PrometheusRulesYaml();
    if (rules_out.empty()) {
      std::cout << yaml;
      return 0;
    }
    if (Status st = WriteFileAtomically(rules_out, yaml); !st.ok()) return Fail(st);
    return 0;
  }
  if (token_new->parsed()) {
    const server::Role role = token_role == "admin"   ? server::Role::kAdmin
                              : token_role == "write" ? server::Role::kWrite
                                                      : server::Role::kRead;
    auto line = server::NewTokenLine(role, token_projects);
    if (!line.ok()) {
      std::cerr << "gpuwatch token new: " << line.status().message() << "\n";
      return 2;
    }
    std::cout << *line << "\n";
    return 0;
  }
  if (docs_limits->parsed()) {
    std::cout << RenderLimitsTable();
    return 0;
  }
  if (docs_metrics->parsed()) {
    std::cout << model::RenderMetricsMarkdown();
    return 0;
  }
  return 1;
}

}  // namespace gpuwatch::cli

int main(int argc, char** argv) {
  // Queries build vectors of tens of MiB (a range query over every series of a node). glibc
  // would mmap each and unmap it after, paying page faults on every query; above the
  // default thresholds keep freed memory for reuse instead. And one arena for all threads:
  // with one per HTTP worker thread, each worker's first large query faults its own arena in
  // (the slow p99). Measured on a 6 h, 1280-series store (bench/store/RESULTS.md): avg over
  // every series at 60 s step p50/p99 113/180 -> 80/85 ms, one raw series 10 -> 2 ms, RSS
  // after queries 58 MiB. The agent's own threads allocate little: one arena costs nothing.
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  // Under a file-size limit (systemd's LimitFSIZE, ulimit -f) a write past it raises SIGXFSZ,
  // whose default action kills the process without a word. Ignored, the write fails with
  // EFBIG and the store reports it like a full disk (issue 17, D11).
  signal(SIGXFSZ, SIG_IGN);
  return gpuwatch::cli::Main(argc, argv);
}
