#include "cli/hub_cmd.h"

namespace gpuwatch::cli {

CLI::App* AddHubCommand(CLI::App* app, AgentFlags* f) {
  auto* hub = app->add_subcommand(
      "hub",
      "Run the fleet's hub: agents push to it (gpuwatch up --hub URL); it diagnoses across "
      "nodes and serves the API and dashboard for all of them, with /api/v1/nodes");
  f->is_hub = true;
  f->job_socket = "off";
  f->kmsg = "off";
  f->listen = "";
  hub->add_option("--listen", f->listen, "Address to serve on, HOST:PORT")->required();
  hub->add_option("--data-dir", f->data_dir,
                  "Where the fleet's series, record logs, alerts and snapshots are kept")
      ->required();
  hub->add_option("--tokens", f->tokens_file,
                  "Tokens file: one `TOKEN ROLE [PROJECT,...]` a line (agents push with write "
                  "tokens); every route but /healthz then needs a token");
  hub->add_flag("--insecure-listen", f->insecure_listen,
                "Serve reads beyond loopback with no token (logged as a warning)");
  hub->add_option("--remote-write", f->remote_write,
                  "Pass every series the hub takes on to this Prometheus-compatible cluster "
                  "(VictoriaMetrics, Mimir, Thanos receive, Prometheus), e.g. "
                  "http://vm:8428/api/v1/write; spooled under DATA_DIR/forward while it is down");
  hub->add_option("--remote-write-token-file", f->remote_write_token_file,
                  "A file (mode 0600) with the bearer token --remote-write needs, if any");
  hub->add_option("--read-from", f->read_from,
                  "Answer the query API, panels and dashboard from this Prometheus-API "
                  "cluster (VictoriaMetrics, Mimir, Thanos query, Prometheus), e.g. "
                  "http://vm:8428, instead of the embedded store");
  hub->add_option("--read-from-token-file", f->read_from_token_file,
                  "A file (mode 0600) with the bearer token --read-from needs, if any");
  hub->add_option("--spool-max", f->spool_max,
                  "The most the --remote-write spool holds (default 512MiB)");
  hub->add_option("--hostname", f->hostname, "The hub's own name in its events (default: host)");
  hub->add_option("--out-of-order-window", f->out_of_order_window,
                  "Samples this much older than their series' newest are still taken, as "
                  "after an agent's outage (default 1h)");
  hub->add_option("--alert-webhook", f->alert_webhook, "POST alert changes here as JSON");
  hub->add_option("--alertmanager", f->alertmanager, "Send alerts to this Alertmanager");
  hub->add_option("--rules", f->rules, "The operator's own alert rules over the fleet's store");
  hub->add_option("--write-max-body", f->write_max_body,
                  "Largest push accepted, compressed (default 32MiB)");
  hub->add_option("--max-series", f->max_series,
                  "Series the store holds before new remote-written ones are refused");
  hub->add_option("--max-series-per-sender", f->max_series_per_sender,
                  "New series one sender may create (a label explosion stops here)");
  hub->add_option("--http-workers", f->http_workers, "Request handler threads (default 8)");
  hub->add_option("--limit", f->limits, "Set any limit of docs/limits.md, NAME=VALUE")
      ->delimiter(',');
  AddStoreFlags(hub, f);
  hub->add_option("--log-level", f->log_level, "debug, info, warning or error (default info)");
  return hub;
}

}  // namespace gpuwatch::cli
