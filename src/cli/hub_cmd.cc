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
  hub->add_option("--read-from", f->read_from,
                  "Answer the query API, panels and dashboard from this Prometheus-API "
                  "cluster (VictoriaMetrics, Mimir, Thanos query, Prometheus), e.g. "
                  "http://vm:8428, instead of the embedded store; with --remote-write to it "
                  "too, the hub relays the agents' series there and keeps none (docs/deploy.md)");
  hub->add_option("--read-from-token-file", f->read_from_token_file,
                  "A file (mode 0600) with the bearer token --read-from needs, if any");
  hub->add_option("--read-from-ca-file", f->read_from_ca_file,
                  "For an https:// --read-from URL: the CA bundle its certificate must chain to "
                  "(default: the system's)");
  hub->add_option("--hostname", f->hostname, "The hub's own name in its events (default: host)");
  hub->add_option("--out-of-order-window", f->out_of_order_window,
                  "Samples this much older than their series' newest are still taken, as "
                  "after an agent's outage (default 1h)");
  AddServingFlags(hub, f);
  return hub;
}

}  // namespace gpuwatch::cli
