#include "accounting/report_format.h"

#include <fmt/format.h>

namespace gpuwatch::accounting {
namespace {

using json = nlohmann::json;

// Derived numbers that every client would otherwise compute differently.
double Ratio(double num, double den) { return den > 0 ? num / den : 0; }

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

json ReportJson(const ReportDoc& doc) {
  json rows = json::array();
  for (const ReportRow& r : doc.rows) {
    const uint64_t ended = r.succeeded + r.failed;
    json row = {
        {"key", r.key},
        {"jobs", r.jobs},
        {"attempts", r.attempts},
        {"reruns", r.reruns},
        {"rerun_rate", Ratio(static_cast<double>(r.reruns), static_cast<double>(r.attempts))},
        {"succeeded", r.succeeded},
        {"failed", r.failed},
        {"ended_unknown", r.ended_unknown},
        {"running", r.running},
        {"success_rate", Ratio(static_cast<double>(r.succeeded), static_cast<double>(ended))},
        {"gpu_hours", r.gpu_hours},
        {"measured_gpu_hours", r.measured_gpu_hours},
        {"idle_gpu_hours", r.idle_gpu_hours},
        {"busywait_gpu_hours", r.busywait_gpu_hours},
        {"idle_share", Ratio(r.idle_gpu_hours + r.busywait_gpu_hours, r.measured_gpu_hours)},
        {"queue_waits", r.queue_waits},
        {"queue_wait_s_mean", Ratio(r.queue_wait_s_sum, static_cast<double>(r.queue_waits))},
        {"queue_wait_s_max", r.queue_wait_s_max},
        {"cost_usd", r.cost_usd},
        {"unpriced_gpu_hours", r.unpriced_gpu_hours},
    };
    if (doc.query.by == GroupBy::kJob) {
      row["user"] = r.user;
      row["project"] = r.project;
      row["template"] = r.template_name;
      row["state"] = r.state;
      row["start_ms"] = r.start_ms;
      row["end_ms"] = r.end_ms;
    }
    rows.push_back(std::move(row));
  }
  json quotas = json::array();
  for (const QuotaStatus& q : doc.quotas)
    quotas.push_back({{"project", q.quota.project},
                      {"gpu_hours", q.quota.gpu_hours},
                      {"period_s", q.quota.period_ms / 1000},
                      {"used_gpu_hours", q.used_gpu_hours},
                      {"state", q.state}});
  return {{"by", GroupByName(doc.query.by)},
          {"since_ms", doc.query.since_ms},
          {"until_ms", doc.query.until_ms},
          {"rows", rows},
          {"quotas", quotas}};
}

Result<ReportDoc> ReportFromJson(const json& j) {
  ReportDoc doc;
  try {
    auto by = ParseGroupBy(j.at("by").get<std::string>());
    if (!by) return Status::InvalidArgument("\"by\" is not user, project, template or job");
    doc.query.by = *by;
    doc.query.since_ms = j.at("since_ms").get<int64_t>();
    doc.query.until_ms = j.at("until_ms").get<int64_t>();
    for (const json& r : j.at("rows")) {
      ReportRow row;
      row.key = r.at("key").get<std::string>();
      row.jobs = r.at("jobs").get<uint64_t>();
      row.attempts = r.at("attempts").get<uint64_t>();
      row.reruns = r.at("reruns").get<uint64_t>();
      row.succeeded = r.at("succeeded").get<uint64_t>();
      row.failed = r.at("failed").get<uint64_t>();
      row.ended_unknown = r.at("ended_unknown").get<uint64_t>();
      row.running = r.at("running").get<uint64_t>();
      row.gpu_hours = r.at("gpu_hours").get<double>();
      row.measured_gpu_hours = r.at("measured_gpu_hours").get<double>();
      row.idle_gpu_hours = r.at("idle_gpu_hours").get<double>();
      row.busywait_gpu_hours = r.at("busywait_gpu_hours").get<double>();
      row.queue_waits = r.at("queue_waits").get<uint64_t>();
      row.queue_wait_s_sum =
          r.at("queue_wait_s_mean").get<double>() * static_cast<double>(row.queue_waits);
      row.queue_wait_s_max = r.at("queue_wait_s_max").get<double>();
      row.cost_usd = r.at("cost_usd").get<double>();
      row.unpriced_gpu_hours = r.at("unpriced_gpu_hours").get<double>();
      if (doc.query.by == GroupBy::kJob) {
        row.user = r.at("user").get<std::string>();
        row.project = r.at("project").get<std::string>();
        row.template_name = r.at("template").get<std::string>();
        row.state = r.at("state").get<std::string>();
        row.start_ms = r.at("start_ms").get<int64_t>();
        row.end_ms = r.at("end_ms").get<int64_t>();
      }
      doc.rows.push_back(std::move(row));
    }
    for (const json& q : j.at("quotas")) {
      QuotaStatus s;
      s.quota.project = q.at("project").get<std::string>();
      s.quota.gpu_hours = q.at("gpu_hours").get<double>();
      s.quota.period_ms = q.at("period_s").get<int64_t>() * 1000;
      s.used_gpu_hours = q.at("used_gpu_hours").get<double>();
      s.state = q.at("state").get<std::string>();
      doc.quotas.push_back(std::move(s));
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("not an accounting report: ") + e.what());
  }
  return doc;
}

std::string ReportCsv(const ReportDoc& doc) {
  const bool by_job = doc.query.by == GroupBy::kJob;
  std::string out = std::string(GroupByName(doc.query.by));
  if (by_job) out += ",user,project,template,state,start_ms,end_ms";
  out +=
      ",jobs,attempts,reruns,succeeded,failed,running,gpu_hours,idle_gpu_hours,"
      "busywait_gpu_hours,measured_gpu_hours,queue_wait_s_mean,queue_wait_s_max,cost_usd,"
      "unpriced_gpu_hours\n";
  for (const ReportRow& r : doc.rows) {
    out += CsvField(r.key);
    if (by_job)
      out += fmt::format(",{},{},{},{},{},{}", CsvField(r.user), CsvField(r.project),
                         CsvField(r.template_name), r.state, r.start_ms, r.end_ms);
    out +=
        fmt::format(",{},{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.1f},{:.1f},{:.2f},{:.6f}\n",
                    r.jobs, r.attempts, r.reruns, r.succeeded, r.failed, r.running, r.gpu_hours,
                    r.idle_gpu_hours, r.busywait_gpu_hours, r.measured_gpu_hours,
                    Ratio(r.queue_wait_s_sum, static_cast<double>(r.queue_waits)),
                    r.queue_wait_s_max, r.cost_usd, r.unpriced_gpu_hours);
  }
  return out;
}

}  // namespace gpuwatch::accounting
