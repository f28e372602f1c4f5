// The agent's flags (`gpuwatch up`, `agent`, `store compact`): typed in one place, read from the
// command line or a config file, and made into the agent's and the store's options. Only `main`
// and its command files use it.
// Thread-safety: plain values and pure functions.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "accounting/ledger.h"
#include "collect/nvml_source.h"
#include "common/status.h"
#include "jobs/job_listener.h"
#include "server/agent.h"
#include "server/http_server.h"
#include "store/store.h"

namespace gpuwatch::cli {

struct AgentFlags {
  std::string listen = "127.0.0.1:9470";
  std::string data_dir;
  std::string config;
  std::string nvml_lib = collect::kDefaultNvmlLibrary;
  std::string root_dir = "/";
  std::string hostname;
  std::string gpu_interval = "1s";
  std::string host_interval = "5s";
  std::string process_interval = "10s";
  std::string job_env_var = "SLURM_JOB_ID";
  std::string log_level = "info";
  std::string model_label = "model_name";
  std::string keep_history = "on";
  std::string retention_raw = "7d";
  std::string retention_1m = "90d";
  std::string retention_1h = "365d";
  std::string disk_budget;  // empty: DefaultDiskBudgetBytes of the data dir's file system
  std::string wal_sync = "always";
  std::string job_socket = jobs::kDefaultJobSocket;
  std::string job_udp, job_tcp;
  std::string job_interval = "15s";
  std::string job_hang_factor = "10";
  std::string job_hang_min = "60s";
  std::string topology_interval = "1h";
  std::string job_hang_in_phase = "10m";
  std::string job_raw_steps_hz = "20";
  std::string kmsg = "/dev/kmsg";
  std::string alert_webhook, alertmanager;
  std::string alert_resolve_after = "2m";
  std::string rules;
  std::string template_rules;
  std::string learn_baselines = "on";
  // HTTP and query limits (docs/limits.md).
  std::string query_timeout = "30s";
  std::string query_max_concurrency = "4";
  std::string http_workers = "8";
  std::string http_max_connections = "1024";
  std::string http_max_connections_per_source = "64";
  std::string http_header_timeout = "10s";
  std::string http_body_timeout = "60s";
  std::string http_idle_timeout = "60s";
  std::string write_max_body = "32MiB";
  std::string max_series = "1000000";
  std::string max_series_per_sender = "200000";
  // Tokens (server/auth.h).
  std::string admin_token_file;  // default <data-dir>/admin.token
  std::string write_token_file;
  std::string tokens_file;  // --tokens (server/tokens.h)
  bool insecure_listen = false;
  // Slurm queue waits from sacct (accounting/sacct.h): the program ("" off) and how often.
  std::string sacct = "sacct";
  std::string sacct_interval = "5m";
  // Reverse proxies whose X-Forwarded-For names the client (http/forwarded.h): CIDRs, commas.
  std::string trusted_proxy;
  // Serve HTTPS (http::Server::EnableTls): the certificate chain and its key, PEM.
  std::string tls_cert_file, tls_key_file;
  // Push to a hub (server/hub_push.h).
  std::string hub;        // URL; "" is off
  std::string hub_token;  // on the command line: visible in ps; --hub-token-file is better
  std::string hub_token_file;
  std::string hub_ca_file;  // https:// hubs: the CA bundle to verify them with
  std::string hub_interval = "1s";
  std::string spool_max = "512MiB";
  // Remote-write to a Prometheus-compatible cluster (scale-out), through its own spool.
  std::string remote_write, remote_write_token_file;
  std::string remote_write_ca_file;  // https:// clusters: the CA bundle to verify them with
  // `gpuwatch hub --read-from URL`: the query API reads a Prometheus-API cluster.
  std::string read_from, read_from_token_file, read_from_ca_file;
  // Set by `gpuwatch hub` (cli/hub_cmd.h), not a flag of `up`.
  bool is_hub = false;
  std::string out_of_order_window = "1h";  // `gpuwatch hub` only
  // Accounting (accounting/ledger.h): "H100=2.49,A100=1.10" and "nlp=5000/30d,cv=800/7d".
  std::string gpu_prices, quotas;
  std::string accounting_retention = "400d";
  std::string job_log_roots = "~,/tmp,/var/tmp";
  std::vector<std::string> limits;  // --limit NAME=VALUE (cli/limits.h); not a config-file key
};

void AddStoreFlags(CLI::App* app, AgentFlags* f);
// --gpu-prices "MODEL=USD,...": a price per GPU-hour for GPUs whose model name contains MODEL
// ("*" for the rest). --quotas "PROJECT=GPU_HOURS/PERIOD,...". InvalidArgument naming the entry.
Result<std::vector<accounting::Price>> ParseGpuPrices(const std::string& text);
Result<std::vector<accounting::Quota>> ParseQuotas(const std::string& text);
// The flags an agent (`up`) and a hub share.
void AddServingFlags(CLI::App* app, AgentFlags* f);
void AddAgentFlags(CLI::App* app, AgentFlags* f);
// The per-user state directory of gpuwatch: $XDG_STATE_HOME/gpuwatch, else
// ~/.local/state/gpuwatch (XDG base directories: state that outlives a restart). "" without
// HOME.
std::string UserStateDir();
// Where `gpuwatch up` keeps its history when --data-dir is not given (issue 18):
// /var/lib/gpuwatch as root, else UserStateDir().
std::string DefaultDataDir();
// Makes f->data_dir final: "none" keeps nothing (""); empty means DefaultDataDir(), created
// (mode 0700 for a user's) when missing. An error names the directory and the way out.
Status ResolveDataDir(AgentFlags* f);
// The store's disk budget when --disk-budget is not given: a tenth of the file system that
// holds `data_dir`, within 64 MiB .. 5 GiB, so that a small disk is never filled by history
// (5 GiB when the file system cannot be read).
uint64_t DefaultDiskBudgetBytes(const std::string& data_dir);

Result<store::StoreOptions> MakeStoreOptions(const AgentFlags& f);
// Every agent flag by its name without "--": the config file's keys, and the effective
// configuration whose hash marks a config_change on the time line.
std::map<std::string, std::string*> FlagFields(AgentFlags* f);
// Applies config-file values to flags the command line did not set.
Status ApplyConfig(CLI::App* app, AgentFlags* f);
// The agent's options. The --job-hang-* flags set the one hang policy the diagnosis and the
// job registry share (AgentOptions::diagnosis.hang; model/hang_policy.h).
Result<server::AgentOptions> MakeOptions(const AgentFlags& f, const std::string& version);
// The HTTP limits and the tokens: reads or creates the admin token, reads the write token and
// the tokens file, and refuses a listener beyond loopback with no token unless
// --insecure-listen. Reads need a token beyond loopback (unless --insecure-listen) and whenever
// a tokens file is given; on loopback without one they stay open, and that is logged.
Result<server::HttpOptions> MakeHttpOptions(const AgentFlags& f);

}  // namespace gpuwatch::cli
