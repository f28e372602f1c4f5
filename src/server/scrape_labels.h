// The labels a Prometheus scrape of the agent would add to its series (issue 18). The agent's
// stored series carry them, so that dashboards written against a scraping Prometheus (every
// dcgm-exporter dashboard filters on `instance`) work against the agent's query API unchanged.
#pragma once

#include <string_view>

namespace gpuwatch::server {

// The `job` label of the agent's own series. A series with a `job` label of its own (a
// training job's id on gpuwatch_job_*) keeps it, as a scrape with honor_labels: true would.
inline constexpr std::string_view kScrapeJobName = "gpuwatch";

}  // namespace gpuwatch::server
