#include "trace/flight_recorder.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "trace/trace_writer.h"

namespace gpuwatch::trace {
namespace {

// The node's name (still JSON-escaped) when `line` is a node record in the writer's canonical
// form {"t":<number>,"type":"node","node":"<name>",...; "" otherwise.
std::string NodeOfNodeRecord(std::string_view line) {
  constexpr std::string_view kStart = "{\"t\":";
  constexpr std::string_view kType = ",\"type\":\"node\",\"node\":\"";
  if (!line.starts_with(kStart)) return {};
  size_t i = kStart.size();
  while (i < line.size() && line[i] != ',') ++i;  // the t number has no comma
  if (line.substr(i, kType.size()) != kType) return {};
  i += kType.size();
  const size_t begin = i;
  while (i < line.size() && line[i] != '"') i += line[i] == '\\' ? 2 : 1;
  if (i >= line.size() || i == begin) return {};
  return std::string(line.substr(begin, i - begin));
}

size_t Charge(const std::string& line) { return line.size() + FlightRecorder::kLineOverheadBytes; }

// `line` with its "t" set to t_ms: a splice for the writer's canonical form, else (a node
// record a hub took in another key order) a parse and a dump. The line as it was when it is
// not a JSON object (it was checked as one when it came in).
std::string Restamp(const std::string& line, int64_t t_ms) {
  constexpr std::string_view kPrefix = "{\"t\":";
  const size_t comma = line.find(',');
  if (line.starts_with(kPrefix) && comma != std::string::npos)
    return std::string(kPrefix) + FormatTraceTime(t_ms) + line.substr(comma);
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return line;
  j["t"] = static_cast<double>(t_ms) / 1000;
  return j.dump();
}

}  // namespace

FlightRecorder::FlightRecorder(FlightRecorderOptions options) : options_(options) {}

void FlightRecorder::Add(int64_t t_ms, std::string line) {
  Entry e{t_ms, std::make_shared<const std::string>(std::move(line)), {}};
  e.node = NodeOfNodeRecord(*e.line);
  AddEntry(std::move(e));
}

void FlightRecorder::AddNodeRecord(int64_t t_ms, std::string line, std::string node) {
  AddEntry({t_ms, std::make_shared<const std::string>(std::move(line)), std::move(node)});
}

void FlightRecorder::AddEntry(Entry e) {
  const int64_t t_ms = e.t_ms;
  const size_t charge = Charge(*e.line);

  std::lock_guard<std::mutex> lock(mu_);
  const bool too_old =
      !ring_.empty() && t_ms < ring_.back().t_ms - static_cast<int64_t>(options_.max_age.count());
  if (too_old || charge > options_.max_bytes) {
    ++dropped_lines_;
    dropped_bytes_ += charge;
    if (!e.node.empty()) {
      auto it = pinned_.find(e.node);
      if (it == pinned_.end() || it->second.t_ms <= t_ms) pinned_[e.node] = std::move(e);
    }
    return;
  }
  // In order (the common case): append. Late: after the last line with t <= t_ms (stable on
  // ties); the deque then moves only the lines newer than it, a few for source jitter.
  if (ring_.empty() || ring_.back().t_ms <= t_ms) {
    ring_.push_back(std::move(e));
  } else {
    const auto pos = std::upper_bound(ring_.begin(), ring_.end(), t_ms,
                                      [](int64_t t, const Entry& x) { return t < x.t_ms; });
    ring_.insert(pos, std::move(e));
  }
  bytes_ += charge;
  EvictLocked();
}

void FlightRecorder::DropFrontLocked() {
  Entry& front = ring_.front();
  const size_t charge = Charge(*front.line);
  bytes_ -= charge;
  ++dropped_lines_;
  dropped_bytes_ += charge;
  if (!front.node.empty()) {
    // The ring is sorted, so this is the newest node record of that node to leave it.
    const std::string node = front.node;
    pinned_[node] = std::move(front);
  }
  ring_.pop_front();
}

void FlightRecorder::EvictLocked() {
  while (bytes_ > options_.max_bytes && !ring_.empty()) DropFrontLocked();
  if (ring_.empty()) return;
  const int64_t min_t = ring_.back().t_ms - static_cast<int64_t>(options_.max_age.count());
  while (!ring_.empty() && ring_.front().t_ms < min_t) DropFrontLocked();
}

std::vector<std::string> FlightRecorder::Window(int64_t from_ms, int64_t to_ms) const {
  std::vector<std::string> out;
  std::vector<TimedLine> timed = TimedWindow(from_ms, to_ms);
  out.reserve(timed.size());
  for (TimedLine& l : timed) out.push_back(std::move(l.line));
  return out;
}

std::vector<FlightRecorder::TimedLine> FlightRecorder::TimedWindow(int64_t from_ms,
                                                                   int64_t to_ms) const {
  // (t, the line), and the time a hoisted node record is restamped to (-1: kept as it is).
  struct Ref {
    int64_t t_ms;
    std::shared_ptr<const std::string> line;
    int64_t restamp_ms = -1;
  };
  std::vector<Ref> refs;
  if (from_ms > to_ms) return {};
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto after = [](int64_t t, const Entry& e) { return t < e.t_ms; };
    const auto first = std::lower_bound(ring_.begin(), ring_.end(), from_ms,
                                        [](const Entry& e, int64_t t) { return e.t_ms < t; });
    const auto last = std::upper_bound(ring_.begin(), ring_.end(), to_ms, after);

    // The node record in force at from_ms, per node: the latest one in the ring with t <=
    // from_ms (at from_ms itself it sits inside [first, last)), else the pinned one.
    std::map<std::string_view, const Entry*> in_force;
    for (const auto& [node, e] : pinned_) in_force[node] = &e;
    const auto upto = std::upper_bound(ring_.begin(), ring_.end(), from_ms, after);
    for (auto it = ring_.begin(); it != upto; ++it)
      if (!it->node.empty()) in_force[it->node] = &*it;
    std::vector<const Entry*> header;
    header.reserve(in_force.size());
    for (const auto& [node, e] : in_force) header.push_back(e);
    std::stable_sort(header.begin(), header.end(),
                     [](const Entry* a, const Entry* b) { return a->t_ms < b->t_ms; });

    // A node described only after from_ms (an agent that started inside the window, while a
    // job's steps stamped a moment earlier were still on their way): its first node record
    // leads the window anyway, restamped to the window's first record, since a trace starts
    // with its node record and keeps each node's records in time order.
    std::vector<const Entry*> hoisted;
    for (auto it = first; it < last; ++it)
      if (!it->node.empty() && !in_force.count(it->node)) {
        in_force[it->node] = &*it;
        hoisted.push_back(&*it);
      }

    refs.reserve(header.size() + static_cast<size_t>(last - first));
    for (const Entry* e : header) refs.push_back({e->t_ms, e->line});
    for (const Entry* e : hoisted) {
      const int64_t t0 = first < last ? first->t_ms : e->t_ms;
      refs.push_back({std::min(t0, e->t_ms), e->line, t0 < e->t_ms ? t0 : -1});
    }
    for (auto it = first; it < last; ++it) {
      if (!it->node.empty() && (std::find(header.begin(), header.end(), &*it) != header.end() ||
                                std::find(hoisted.begin(), hoisted.end(), &*it) != hoisted.end()))
        continue;  // a node record already first
      refs.push_back({it->t_ms, it->line});
    }
  }
  // Copied (and restamped) after the lock is released.
  std::vector<TimedLine> out;
  out.reserve(refs.size());
  for (const Ref& r : refs)
    out.push_back({r.t_ms, r.restamp_ms < 0 ? *r.line : Restamp(*r.line, r.restamp_ms)});
  return out;
}

FlightRecorderStats FlightRecorder::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  FlightRecorderStats s;
  s.lines = ring_.size();
  s.bytes = bytes_;
  s.pinned_node_records = pinned_.size();
  s.dropped_lines = dropped_lines_;
  s.dropped_bytes = dropped_bytes_;
  if (!ring_.empty()) {
    s.oldest_t_ms = ring_.front().t_ms;
    s.newest_t_ms = ring_.back().t_ms;
  }
  return s;
}

}  // namespace gpuwatch::trace
