#include "cli/agent_flags.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cli/config_file.h"
#include "cli/limits.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/time_base.h"
#include "jobs/template_rules.h"
#include "server/auth.h"
#include "server/listen_address.h"
#include "server/user_rules.h"

namespace gpuwatch::cli {

void AddStoreFlags(CLI::App* app, AgentFlags* f) {
  app->add_option("--retention-raw", f->retention_raw,
                  "How long raw samples are kept (default 7d; h, d, w or y)");
  app->add_option("--retention-1m", f->retention_1m,
                  "How long 1-minute rollups are kept (default 90d)");
  app->add_option("--retention-1h", f->retention_1h,
                  "How long 1-hour rollups are kept (default 365d)");
  app->add_option("--disk-budget", f->disk_budget,
                  "Most disk the store may use; the oldest raw data goes first (default: a "
                  "tenth of the data dir's file system, 64MiB to 5GiB)");
  app->add_option("--wal-sync", f->wal_sync,
                  "always (fsync each write before acknowledging it, default), interval (every "
                  "second) or never (leave it to the OS)");
}

namespace {
Result<store::StoreOptions> ApplyWalSync(const std::string& wal_sync, store::StoreOptions* o) {
  if (wal_sync == "always")
    o->head.wal.sync = store::SyncPolicy::kAlways;
  else if (wal_sync == "interval")
    o->head.wal.sync = store::SyncPolicy::kInterval;
  else if (wal_sync == "never")
    o->head.wal.sync = store::SyncPolicy::kNever;
  else
    return Status::InvalidArgument("bad --wal-sync '" + wal_sync + "': always, interval or never");
  return *o;
}
}  // namespace

Result<store::StoreOptions> MakeStoreOptions(const AgentFlags& f) {
  store::StoreOptions o;
  if (f.is_hub) {
    // Agents resend after an outage while others send live: the hub takes samples this much
    // older than their series' newest (store/head.h).
    auto window = ParseDurationMs(f.out_of_order_window);
    if (!window.ok() || *window < 0 || *window > 24 * 3600'000)
      return Status::InvalidArgument("bad --out-of-order-window '" + f.out_of_order_window +
                                     "': a duration up to 24h, such as 1h");
    o.head.out_of_order_window_ms = *window;
    // 128-sample blocks: each of a hub's series keeps 2 KiB of raw samples buffered, not 8 KiB
    // (11 GB at 1,000 nodes), for 2 % more bytes a sample (bench/fleet/RESULTS.md, run 5).
    o.head.block_shift = 7;
  }
  const std::pair<const std::string*, int64_t*> retentions[] = {
      {&f.retention_raw, &o.raw_retention_ms},
      {&f.retention_1m, &o.rollup_1m_retention_ms},
      {&f.retention_1h, &o.rollup_1h_retention_ms}};
  for (auto [text, out] : retentions) {
    auto ms = ParseRetentionMs(*text);
    if (!ms.ok()) return ms.status();
    *out = *ms;
  }
  if (f.disk_budget.empty()) {
    o.disk_budget_bytes = DefaultDiskBudgetBytes(f.data_dir);
    return ApplyWalSync(f.wal_sync, &o);
  }
  auto budget = ParseByteSize(f.disk_budget);
  if (!budget.ok()) return budget.status();
  // A budget a few blocks cannot fit in deletes all history at the first retention pass
  // (issue 17, D14: "--disk-budget 5" meant 5 bytes).
  constexpr unsigned long long kMinDiskBudgetBytes = 64ull << 20;
  if (*budget < kMinDiskBudgetBytes)
    return Status::InvalidArgument("--disk-budget " + f.disk_budget + " is " +
                                   std::to_string(*budget) +
                                   " bytes, below the minimum of 64MiB (units: MiB, GiB, TiB)");
  o.disk_budget_bytes = *budget;
  return ApplyWalSync(f.wal_sync, &o);
}

std::string UserStateDir() {
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/gpuwatch";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.local/state/gpuwatch";
  return "";
}

std::string DefaultDataDir() { return ::geteuid() == 0 ? "/var/lib/gpuwatch" : UserStateDir(); }

Status ResolveDataDir(AgentFlags* f) {
  if (f->data_dir == "none") {
    f->data_dir.clear();
    return Status::Ok();
  }
  if (!f->data_dir.empty()) return Status::Ok();
  const std::string dir = DefaultDataDir();
  if (dir.empty())
    return Status::InvalidArgument(
        "no --data-dir and no default for it (HOME is not set): give --data-dir DIR, or "
        "--data-dir none to keep no history");
  std::error_code ec;
  const bool made = std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::IoError("cannot create the default data dir " + dir + ": " + ec.message() +
                           " (give --data-dir DIR, or --data-dir none to keep no history)");
  // A user's history and admin token are theirs alone; /var/lib/gpuwatch is root's anyway.
  if (made && ::geteuid() != 0) ::chmod(dir.c_str(), 0700);
  f->data_dir = dir;
  return Status::Ok();
}

uint64_t DefaultDiskBudgetBytes(const std::string& data_dir) {
  constexpr uint64_t kMin = 64ull << 20, kMax = 5ull << 30;
  struct statvfs fs {};
  if (data_dir.empty() || ::statvfs(data_dir.c_str(), &fs) != 0) return kMax;
  const uint64_t total = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  return std::clamp<uint64_t>(total / 10, kMin, kMax);
}

// The flags an agent and a hub share: access, the remote-write destination, alerting, the
// HTTP and series limits, the store, logging.
void AddServingFlags(CLI::App* app, AgentFlags* f) {
  app->add_option("--tokens", f->tokens_file,
                  "Tokens file: one `TOKEN ROLE [PROJECT,...]` a line, ROLE read, write or "
                  "admin (docs/limits.md, Tokens); every route but /healthz then needs a token");
  app->add_option("--trusted-proxy", f->trusted_proxy,
                  "Reverse proxies (CIDRs, comma-separated, e.g. 127.0.0.1) whose "
                  "X-Forwarded-For names the client: the wrong-token limit and the series bound "
                  "per sender then count clients, not the proxy (docs/deploy.md, TLS)");
  app->add_option("--tls-cert-file", f->tls_cert_file,
                  "Serve HTTPS with this certificate chain (PEM, the server's certificate "
                  "first; system OpenSSL, TLS 1.2 or later); needs --tls-key-file. Without it, "
                  "plain HTTP (TLS at a reverse proxy: docs/deploy.md)");
  app->add_option("--tls-key-file", f->tls_key_file,
                  "The private key of --tls-cert-file (PEM, unencrypted; keep it mode 0600)");
  app->add_flag("--insecure-listen", f->insecure_listen,
                "Serve reads beyond loopback with no token (open to the network; writes keep "
                "their tokens); logged as a warning");
  app->add_option("--remote-write", f->remote_write,
                  "Also remote-write the series to this URL (VictoriaMetrics, Mimir, Thanos "
                  "receive, Prometheus), e.g. http://vm:8428/api/v1/write; spooled under "
                  "DATA_DIR/forward while it is down");
  app->add_option("--remote-write-token-file", f->remote_write_token_file,
                  "A file (mode 0600) with the bearer token --remote-write needs, if any");
  app->add_option("--remote-write-ca-file", f->remote_write_ca_file,
                  "For an https:// --remote-write URL: the CA bundle its certificate must chain "
                  "to (default: the system's)");
  app->add_option("--spool-max", f->spool_max,
                  "The most each spool (samples, records) holds for the hub; beyond it the "
                  "oldest unsent goes (default 512MiB)");
  app->add_option("--alert-webhook", f->alert_webhook,
                  "POST alert transitions here as JSON (docs/format/alerts.md; http:// only)");
  app->add_option("--alertmanager", f->alertmanager,
                  "Send alerts to this Prometheus Alertmanager (its v2 API), e.g. "
                  "http://127.0.0.1:9093");
  app->add_option("--rules", f->rules,
                  "Your own alerting rules, PromQL over this agent's store (JSON; "
                  "docs/format/user-rules.md; needs --data-dir)");
  app->add_option("--gpu-prices", f->gpu_prices,
                  "Accounting: price per GPU-hour by model, MODEL=USD,... where MODEL is part of "
                  "the GPU's name (e.g. H100=2.49,A100=1.10,*=0.50)");
  app->add_option("--quotas", f->quotas,
                  "Soft quotas: PROJECT=GPU_HOURS/PERIOD,... (e.g. nlp=5000/30d); an alert at "
                  "80 % and past 100 %, nothing is stopped");
  app->add_option("--accounting-retention", f->accounting_retention,
                  "How long ended jobs stay in the accounting ledger (default 400d)");
  app->add_option("--sacct", f->sacct,
                  "Slurm's sacct, asked for the submit times (queue waits) of Slurm jobs the "
                  "prolog gave none; used when it is there (default sacct, \"\" for never)");
  app->add_option("--sacct-interval", f->sacct_interval,
                  "How often sacct is asked, a batch of 100 jobs at a time (default 5m)");
  app->add_option("--write-max-body", f->write_max_body,
                  "Largest remote-write request body, compressed (default 32MiB)");
  app->add_option("--max-series", f->max_series,
                  "Series in the store's head beyond which remote-write may create no new one "
                  "(default 1000000); samples of further new series get 400");
  app->add_option("--max-series-per-sender", f->max_series_per_sender,
                  "New series one remote-write sender (token, address and the node an agent "
                  "names) may create (default 200000)");
  app->add_option("--http-workers", f->http_workers, "Threads that run HTTP handlers (default 8)");
  app->add_option("--limit", f->limits,
                  "Set any limit of docs/limits.md, NAME=VALUE (repeatable, or comma-separated), "
                  "e.g. --limit http.max_headers=200,query.max_work=1000000000");
  AddStoreFlags(app, f);
  app->add_option("--log-level", f->log_level, "debug, info, warning or error (default info)");
}

void AddAgentFlags(CLI::App* app, AgentFlags* f) {
  app->add_option("--listen", f->listen,
                  "HTTP listen address host:port ([v6]:port); default 127.0.0.1:9470");
  app->add_option("--data-dir", f->data_dir,
                  "Directory for what the agent keeps on disk: the time-series store (wal/, "
                  "blocks/) and events (default /var/lib/gpuwatch as root, else "
                  "$XDG_STATE_HOME/gpuwatch or ~/.local/state/gpuwatch; none: keep nothing)");
  app->add_option("--config", f->config,
                  "Config file of 'key = value' lines (keys = these flag names)");
  app->add_option("--nvml-lib", f->nvml_lib, "NVML library to dlopen (default libnvidia-ml.so.1)");
  app->add_option("--root-dir", f->root_dir,
                  "Root of procfs/sysfs to read (default /; for containers and tests)");
  app->add_option("--hostname", f->hostname,
                  "Node name for the Hostname label (default: gethostname)");
  app->add_option("--gpu-interval", f->gpu_interval, "Hardware tier period (default 1s)");
  app->add_option("--host-interval", f->host_interval, "Host tier period (default 5s)");
  app->add_option("--process-interval", f->process_interval,
                  "Process attribution tier period (default 10s)");
  app->add_option("--job-env-var", f->job_env_var,
                  "Environment variable naming a process's job (default SLURM_JOB_ID)");
  app->add_option(
      "--model-label", f->model_label,
      "Label name for the GPU model: model_name (default) or dcgm-exporter's modelName");
  app->add_option("--keep-history", f->keep_history,
                  "on (default): keep every hardware/host tick in the store under --data-dir; "
                  "off: the store only keeps what is pushed to /api/v1/write");
  app->add_option("--job-socket", f->job_socket,
                  "Unix socket jobs report to (docs/job-protocol.md; default "
                  "/run/gpuwatch/job.sock, a user-writable path when not root; off: none)");
  app->add_option("--job-udp", f->job_udp, "Also take job messages on UDP host:port (loopback)");
  app->add_option("--job-tcp", f->job_tcp, "Also take job messages on TCP host:port (loopback)");
  app->add_option("--job-log-roots", f->job_log_roots,
                  "Directories a job's declared log files may be under, comma-separated; ~ is "
                  "the job user's home (default ~,/tmp,/var/tmp; never /etc, /proc, /sys, "
                  "/root, /boot, /dev, /run or the data dir)");
  app->add_option("--topology-interval", f->topology_interval,
                  "Check the node's topology against its archive this often (default 1h; also "
                  "at start)");
  app->add_option("--job-interval", f->job_interval,
                  "Job tier: the window of step statistics (default 15s)");
  app->add_option("--job-hang-factor", f->job_hang_factor,
                  "A job is hung after no step for this many median step times (default 10)");
  app->add_option("--job-hang-min", f->job_hang_min, "… and at least this long (default 60s)");
  app->add_option("--job-hang-in-phase", f->job_hang_in_phase,
                  "Hung while in a phase such as eval or checkpoint only after this long "
                  "(default 10m)");
  app->add_option("--job-raw-steps-hz", f->job_raw_steps_hz,
                  "Raw steps kept per rank per second at most (default 20)");
  app->add_option("--kmsg", f->kmsg,
                  "Kernel log read for NVRM Xid lines, a second XID source (default /dev/kmsg; "
                  "off)");
  app->add_option("--template-rules", f->template_rules,
                  "Name the template of jobs that do not give one, by user, project, GPUs "
                  "and ranks (JSON; docs/format/baseline.md)");
  app->add_option("--learn-baselines", f->learn_baselines,
                  "on (default): with --data-dir, learn each job template's baseline from a "
                  "run's first stable window when none is current (gpuwatch baseline list); off");
  app->add_option("--alert-resolve-after", f->alert_resolve_after,
                  "A condition's alert resolves when not seen this long (default 2m; events are "
                  "held 1h)");
  app->add_option("--query-timeout", f->query_timeout,
                  "A query is stopped after this long (default 30s)");
  app->add_option("--query-max-concurrency", f->query_max_concurrency,
                  "Queries evaluated at once; more get 503 with Retry-After (default 4)");
  app->add_option("--http-max-connections", f->http_max_connections,
                  "Open HTTP connections at most (default 1024)");
  app->add_option("--http-max-connections-per-source", f->http_max_connections_per_source,
                  "Open HTTP connections from one address at most (default 64)");
  app->add_option("--http-header-timeout", f->http_header_timeout,
                  "A request's head must arrive within this (default 10s)");
  app->add_option("--http-body-timeout", f->http_body_timeout,
                  "A request's body must arrive within this after its head (default 60s)");
  app->add_option("--http-idle-timeout", f->http_idle_timeout,
                  "A kept-alive connection is closed after this long without a request "
                  "(default 60s)");
  app->add_option("--admin-token-file", f->admin_token_file,
                  "The token every state-changing route needs (default DATA_DIR/admin.token, "
                  "made at first start with mode 0600)");
  app->add_option("--write-token-file", f->write_token_file,
                  "A second token that may only send data (remote-write, events)");
  app->add_option("--hub", f->hub,
                  "Push series and records to this hub (http://HOST:PORT) as well as serving "
                  "locally; what the hub has not taken waits in DATA_DIR/spool");
  auto* tok = app->add_option("--hub-token", f->hub_token,
                              "The write token for the hub (visible in ps: prefer "
                              "--hub-token-file)");
  app->add_option("--hub-token-file", f->hub_token_file,
                  "A file (mode 0600) holding the write token for the hub")
      ->excludes(tok);
  app->add_option("--hub-ca-file", f->hub_ca_file,
                  "For an https:// hub (TLS at a reverse proxy in front of it, docs/deploy.md): "
                  "the CA bundle its certificate must chain to (default: the system's)");
  app->add_option("--hub-interval", f->hub_interval,
                  "How often what was collected is spooled and sent to the hub (default 1s)");
  AddServingFlags(app, f);
}

// Every agent flag by its name without "--": the config file's keys, and the effective
// configuration whose hash marks a config_change on the time line.
std::map<std::string, std::string*> FlagFields(AgentFlags* f) {
  return {{"listen", &f->listen},
          {"data-dir", &f->data_dir},
          {"nvml-lib", &f->nvml_lib},
          {"root-dir", &f->root_dir},
          {"hostname", &f->hostname},
          {"gpu-interval", &f->gpu_interval},
          {"host-interval", &f->host_interval},
          {"process-interval", &f->process_interval},
          {"job-env-var", &f->job_env_var},
          {"model-label", &f->model_label},
          {"keep-history", &f->keep_history},
          {"retention-raw", &f->retention_raw},
          {"retention-1m", &f->retention_1m},
          {"retention-1h", &f->retention_1h},
          {"disk-budget", &f->disk_budget},
          {"wal-sync", &f->wal_sync},
          {"job-socket", &f->job_socket},
          {"job-udp", &f->job_udp},
          {"job-tcp", &f->job_tcp},
          {"job-log-roots", &f->job_log_roots},
          {"job-interval", &f->job_interval},
          {"topology-interval", &f->topology_interval},
          {"job-hang-factor", &f->job_hang_factor},
          {"job-hang-min", &f->job_hang_min},
          {"job-hang-in-phase", &f->job_hang_in_phase},
          {"job-raw-steps-hz", &f->job_raw_steps_hz},
          {"kmsg", &f->kmsg},
          {"alert-webhook", &f->alert_webhook},
          {"alertmanager", &f->alertmanager},
          {"alert-resolve-after", &f->alert_resolve_after},
          {"rules", &f->rules},
          {"template-rules", &f->template_rules},
          {"learn-baselines", &f->learn_baselines},
          {"query-timeout", &f->query_timeout},
          {"query-max-concurrency", &f->query_max_concurrency},
          {"http-workers", &f->http_workers},
          {"http-max-connections", &f->http_max_connections},
          {"http-max-connections-per-source", &f->http_max_connections_per_source},
          {"http-header-timeout", &f->http_header_timeout},
          {"http-body-timeout", &f->http_body_timeout},
          {"http-idle-timeout", &f->http_idle_timeout},
          {"write-max-body", &f->write_max_body},
          {"max-series", &f->max_series},
          {"max-series-per-sender", &f->max_series_per_sender},
          {"admin-token-file", &f->admin_token_file},
          {"write-token-file", &f->write_token_file},
          {"tokens", &f->tokens_file},
          {"trusted-proxy", &f->trusted_proxy},
          {"tls-cert-file", &f->tls_cert_file},
          {"tls-key-file", &f->tls_key_file},
          {"hub", &f->hub},
          {"hub-token-file", &f->hub_token_file},
          {"hub-ca-file", &f->hub_ca_file},
          {"hub-interval", &f->hub_interval},
          {"spool-max", &f->spool_max},
          {"remote-write", &f->remote_write},
          {"remote-write-token-file", &f->remote_write_token_file},
          {"read-from", &f->read_from},
          {"read-from-token-file", &f->read_from_token_file},
          {"read-from-ca-file", &f->read_from_ca_file},
          {"remote-write-ca-file", &f->remote_write_ca_file},
          {"gpu-prices", &f->gpu_prices},
          {"quotas", &f->quotas},
          {"accounting-retention", &f->accounting_retention},
          {"sacct", &f->sacct},
          {"sacct-interval", &f->sacct_interval},
          {"log-level", &f->log_level}};
}

// Applies config-file values to flags the command line did not set.
Status ApplyConfig(CLI::App* app, AgentFlags* f) {
  if (f->config.empty()) return Status::Ok();
  auto text = ReadSmallFile(f->config);
  if (!text.ok)
    return Status::IoError("cannot read config " + f->config + ": " + std::strerror(text.err));
  auto kv = ParseConfig(text.data, f->config);
  if (!kv.ok()) return kv.status();
  std::map<std::string, std::string*> fields = FlagFields(f);
  for (const auto& [key, value] : *kv) {
    auto it = fields.find(key);
    if (it == fields.end())
      return Status::InvalidArgument(f->config + ": unknown key '" + key + "'");
    if (app->count("--" + key) == 0) *it->second = value;
  }
  return Status::Ok();
}

Result<std::vector<accounting::Price>> ParseGpuPrices(const std::string& text) {
  std::vector<accounting::Price> out;
  for (std::string_view item : SplitAny(text, ",")) {
    item = TrimWhitespace(item);
    if (item.empty()) continue;
    const size_t eq = item.rfind('=');
    auto usd = eq == std::string_view::npos ? std::nullopt : ParseDouble(item.substr(eq + 1));
    if (eq == 0 || !usd || !std::isfinite(*usd) || *usd < 0)
      return Status::InvalidArgument("bad --gpu-prices entry '" + std::string(item) +
                                     "': MODEL=USD_PER_GPU_HOUR, e.g. H100=2.49");
    out.push_back({std::string(TrimWhitespace(item.substr(0, eq))), *usd});
  }
  return out;
}

Result<std::vector<accounting::Quota>> ParseQuotas(const std::string& text) {
  std::vector<accounting::Quota> out;
  for (std::string_view item : SplitAny(text, ",")) {
    item = TrimWhitespace(item);
    if (item.empty()) continue;
    const size_t eq = item.rfind('=');
    const size_t slash = item.rfind('/');
    auto bad = [&] {
      return Status::InvalidArgument("bad --quotas entry '" + std::string(item) +
                                     "': PROJECT=GPU_HOURS/PERIOD, e.g. nlp=5000/30d");
    };
    if (eq == std::string_view::npos || eq == 0 || slash == std::string_view::npos || slash < eq)
      return bad();
    auto hours = ParseDouble(item.substr(eq + 1, slash - eq - 1));
    auto period = ParseRetentionMs(item.substr(slash + 1));
    if (!hours || !std::isfinite(*hours) || *hours <= 0 || !period.ok() || *period <= 0)
      return bad();
    out.push_back({std::string(item.substr(0, eq)), *hours, *period});
  }
  return out;
}

Result<server::AgentOptions> MakeOptions(const AgentFlags& f, const std::string& version) {
  server::AgentOptions o;
  {
    auto prices = ParseGpuPrices(f.gpu_prices);
    if (!prices.ok()) return prices.status();
    o.accounting.prices = std::move(*prices);
    auto quotas = ParseQuotas(f.quotas);
    if (!quotas.ok()) return quotas.status();
    o.accounting.quotas = std::move(*quotas);
    auto retention = ParseRetentionMs(f.accounting_retention);
    if (!retention.ok() || *retention <= 0)
      return Status::InvalidArgument("bad --accounting-retention '" + f.accounting_retention +
                                     "': a duration such as 400d");
    o.accounting.retention_ms = *retention;
    o.sacct.program = f.sacct == "off" ? "" : f.sacct;
    auto every = ParseDurationMs(f.sacct_interval);
    if (!every.ok() || *every < 1000)
      return Status::InvalidArgument("bad --sacct-interval '" + f.sacct_interval +
                                     "': a duration of at least 1s, such as 5m");
    o.sacct.interval = std::chrono::milliseconds(*every);
  }
  o.version = version;
  o.root_dir = f.root_dir;
  o.data_dir = f.data_dir;
  auto roots = server::ParseJobLogRoots(f.job_log_roots);
  if (!roots.ok()) return roots.status();
  o.job_log_policy.roots = *roots;
  GW_RETURN_IF_ERROR(ApplyLimits(f.limits, LimitTargets{.agent = &o}));
  o.job_env_var = f.job_env_var;
  if (f.model_label != "model_name" && f.model_label != "modelName")
    return Status::InvalidArgument("bad --model-label '" + f.model_label +
                                   "': model_name or modelName");
  o.model_label = f.model_label;
  o.hostname = f.hostname;
  if (o.hostname.empty()) {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) == 0) o.hostname = buf;
  }
  o.notify.webhook_url = f.alert_webhook;
  o.notify.alertmanager_url = f.alertmanager;
  o.notify.generator_url = "http://" + f.listen + "/api/v1/alerts";
  auto resolve = ParseDurationMs(f.alert_resolve_after);
  if (!resolve.ok() || *resolve <= 0)
    return Status::InvalidArgument("bad --alert-resolve-after '" + f.alert_resolve_after +
                                   "': a duration such as 2m");
  o.alerts.resolve_after_ms = *resolve;
  if (f.learn_baselines != "on" && f.learn_baselines != "off")
    return Status::InvalidArgument("bad --learn-baselines '" + f.learn_baselines + "': on or off");
  o.learn_baselines = f.learn_baselines == "on";
  if (!f.rules.empty()) {
    auto rules = server::LoadUserRules(f.rules);
    if (!rules.ok()) return rules.status();
    o.user_rules = std::move(rules).value();
  }
  if (!f.template_rules.empty()) {
    auto rules = jobs::LoadTemplateRules(f.template_rules);
    if (!rules.ok()) return rules.status();
    o.jobs.template_rules = std::move(rules).value();
  }
  const std::pair<const std::string*, std::chrono::milliseconds*> durations[] = {
      {&f.gpu_interval, &o.gpu_interval},
      {&f.host_interval, &o.host_interval},
      {&f.process_interval, &o.process_interval},
      {&f.job_interval, &o.job_interval},
      {&f.topology_interval, &o.topology_interval}};
  for (auto [text, out] : durations) {
    auto ms = ParseDurationMs(*text);
    if (!ms.ok()) return ms.status();
    *out = std::chrono::milliseconds(*ms);
  }
  o.jobs.window_ms = o.job_interval.count();
  o.jobs.job_env_var = f.job_env_var;
  auto hang_min = ParseDurationMs(f.job_hang_min);
  if (!hang_min.ok()) return hang_min.status();
  o.diagnosis.hang.min_s = static_cast<double>(*hang_min) / 1000;
  auto hang_in_phase = ParseDurationMs(f.job_hang_in_phase);
  if (!hang_in_phase.ok()) return hang_in_phase.status();
  o.diagnosis.hang.in_phase_s = static_cast<double>(*hang_in_phase) / 1000;
  auto positive = [](const std::string& flag, const std::string& text) -> Result<double> {
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(v > 0) || v > 1e6)
      return Status::InvalidArgument("bad --" + flag + " '" + text + "': a positive number");
    return v;
  };
  auto factor = positive("job-hang-factor", f.job_hang_factor);
  if (!factor.ok()) return factor.status();
  o.diagnosis.hang.factor = *factor;
  auto hz = positive("job-raw-steps-hz", f.job_raw_steps_hz);
  if (!hz.ok()) return hz.status();
  o.jobs.raw_steps_max_hz = *hz;
  o.hub = f.is_hub;
  // The hub's record logs follow the store's WAL: synced per entry only with --wal-sync always
  // (a process crash loses nothing either way; a power loss may lose the last seconds).
  o.hub_ingest.sync = f.wal_sync == "always";
  auto spool_max = ParseByteSize(f.spool_max);
  if (!spool_max.ok() || *spool_max < (uint64_t{1} << 20))
    return Status::InvalidArgument("bad --spool-max '" + f.spool_max +
                                   "': a size of at least 1MiB, such as 512MiB");
  if (!f.remote_write.empty()) {
    if (!f.remote_write.starts_with("http://") && !f.remote_write.starts_with("https://"))
      return Status::InvalidArgument("--remote-write " + f.remote_write +
                                     ": a URL such as http://vm:8428/api/v1/write");
    o.forward.url = f.remote_write;
    o.forward.ca_file = f.remote_write_ca_file;
    if (!f.remote_write_token_file.empty()) {
      auto token = server::ReadTokenFile(f.remote_write_token_file);
      if (!token.ok()) return token.status();
      o.forward.token = *token;
    }
    o.forward.spool.max_bytes = *spool_max;
    o.forward.spool.segment_bytes =
        std::min<uint64_t>(o.forward.spool.segment_bytes, *spool_max / 4);
    // Samples only: several seconds a request keep a cluster's insert path efficient.
    o.forward.interval = std::chrono::seconds(5);
    // A relaying hub (--read-from too, server/remote_write_handler.h) appends each agent's
    // request to this spool before it answers: synced per append only with --wal-sync always,
    // as the hub's record logs are.
    // Its sender joins the requests of every node: 16 MiB inflated a request is ~20 requests
    // a second at 1,000 nodes (bench/fleet/RESULTS.md, "Relay"), which the agents' 20 a
    // second (meant not to flood a hub that just came back) would cap.
    if (f.is_hub && !f.read_from.empty()) {
      o.forward.spool.sync = f.wal_sync == "always";
      o.forward.max_requests_per_second = 100;
    }
  }
  if (!f.hub.empty()) {
    if (f.is_hub) return Status::InvalidArgument("a hub does not push to another hub (--hub)");
    o.push.url = f.hub;
    while (o.push.url.ends_with("/")) o.push.url.pop_back();
    o.push.token = f.hub_token;
    o.push.ca_file = f.hub_ca_file;
    if (!f.hub_token_file.empty()) {
      auto token = server::ReadTokenFile(f.hub_token_file);
      if (!token.ok()) return token.status();
      o.push.token = *token;
    }
    auto every = ParseDurationMs(f.hub_interval);
    if (!every.ok() || *every < 100 || *every > 3600'000)
      return Status::InvalidArgument("bad --hub-interval '" + f.hub_interval +
                                     "': a duration from 100ms to 1h");
    o.push.interval = std::chrono::milliseconds(*every);
    o.push.spool.max_bytes = *spool_max;
    o.push.spool.segment_bytes = std::min<uint64_t>(o.push.spool.segment_bytes, *spool_max / 4);
  }
  return o;
}

Result<server::HttpOptions> MakeHttpOptions(const AgentFlags& f) {
  server::HttpOptions o;
  // The dedicated flags are limits of the table (cli/limits.cc): one parser, one set of bounds.
  const LimitTargets targets{.http = &o};
  for (const auto& [flag, value] :
       std::initializer_list<std::pair<const char*, const std::string&>>{
           {"--query-timeout", f.query_timeout},
           {"--query-max-concurrency", f.query_max_concurrency},
           {"--http-workers", f.http_workers},
           {"--http-max-connections", f.http_max_connections},
           {"--http-max-connections-per-source", f.http_max_connections_per_source},
           {"--http-header-timeout", f.http_header_timeout},
           {"--http-body-timeout", f.http_body_timeout},
           {"--http-idle-timeout", f.http_idle_timeout},
           {"--write-max-body", f.write_max_body},
           {"--max-series", f.max_series},
           {"--max-series-per-sender", f.max_series_per_sender}})
    GW_RETURN_IF_ERROR(ApplyLimitFlag(flag, value, targets));

  // --limit last: it may set any limit, those with a flag of their own included.
  GW_RETURN_IF_ERROR(ApplyLimits(f.limits, targets));

  std::string admin_path = f.admin_token_file;
  if (admin_path.empty() && !f.data_dir.empty())
    admin_path = f.data_dir + "/" + server::kAdminTokenFile;
  if (!admin_path.empty()) {
    auto token = server::LoadOrCreateAdminToken(admin_path);
    if (!token.ok()) return token.status();
    o.auth.admin_token = *token;
    o.auth.admin_token_path = admin_path;
  }
  if (!f.write_token_file.empty()) {
    auto token = server::ReadTokenFile(f.write_token_file);
    if (!token.ok()) return token.status();
    o.auth.write_token = *token;
  }
  if (!f.tokens_file.empty()) {
    auto tokens = server::TokensFile::Open(f.tokens_file);
    if (!tokens.ok()) return tokens.status();
    o.auth.tokens = std::move(tokens).value();
  }
  for (std::string_view text : SplitAny(f.trusted_proxy, ",")) {
    text = TrimWhitespace(text);
    if (text.empty()) continue;
    auto block = http::ParseAddressBlock(text);
    if (!block.ok()) return Status::InvalidArgument("--trusted-proxy: " + block.status().message());
    o.trusted_proxies.push_back(*block);
  }
  if (f.tls_cert_file.empty() != f.tls_key_file.empty())
    return Status::InvalidArgument(
        "--tls-cert-file and --tls-key-file go together: give both to serve HTTPS, or neither");
  o.tls_cert_file = f.tls_cert_file;
  o.tls_key_file = f.tls_key_file;
  auto addr = server::ParseListenAddress(f.listen);
  if (!addr.ok()) return addr.status();
  const bool loopback = server::IsLoopbackHost(addr->host);
  const bool any_token =
      !o.auth.admin_token.empty() || !o.auth.write_token.empty() || o.auth.tokens;
  if (!loopback && !any_token && !f.insecure_listen)
    return Status::InvalidArgument(
        "--listen " + f.listen +
        " serves beyond loopback, and no token is configured: give --tokens (read tokens for "
        "Prometheus and Grafana), --data-dir (its admin.token) or --admin-token-file, or "
        "--insecure-listen to serve reads to the network anyway");
  o.auth.reads_need_token = o.auth.tokens || (!loopback && !f.insecure_listen);
  if (!loopback && f.insecure_listen)
    GW_LOG_WARN(
        "INSECURE: --listen {} serves beyond loopback and --insecure-listen leaves reads open: "
        "anyone who reaches it reads every job's logs and metrics",
        f.listen);
  else if (!o.auth.reads_need_token)
    GW_LOG_INFO(
        "reads are open to every local user on {} (loopback, no --tokens); state changes need "
        "the admin token",
        f.listen);
  else if (!o.auth.tokens)
    GW_LOG_WARN(
        "--listen {} serves beyond loopback: every read needs a token, and only the admin token "
        "is configured; give --tokens with read tokens for Prometheus and Grafana",
        f.listen);
  return o;
}

}  // namespace gpuwatch::cli
