#include "cli/top_cmd.h"

#include <curses.h>
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <thread>

#include "cli/job_view.h"
#include "common/time_base.h"

namespace gpuwatch::cli {

using nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
void OnStopSignal(int) { g_stop = true; }

// A query API answer: the JSON envelope, success or error. NotFound: the agent keeps no store.
Result<json> Query(const std::string& url, const std::string& promql, int64_t time_ms) {
  auto body = AgentGet(url, fmt::format("/api/v1/query?query={}&time={:.3f}",
                                        EncodePathSegment(promql), time_ms / 1000.0));
  if (!body.ok()) {
    if (body.status().code() == StatusCode::kNotFound)
      return Status::NotFound("the agent keeps no history (started with --data-dir none)");
    return body.status();
  }
  json j = json::parse(*body, nullptr, false);
  if (j.is_discarded()) return Status::Corruption("the query API's answer is not JSON");
  return j;
}

// The columns of the terminal (or of what --plain prints into).
int OutputWidth() {
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 0) return std::atoi(c);
  return 200;  // a file or a pipe: every column
}

int RunPlain(const TopCommand& c) {
  top::View v;
  v.job_filter = c.job;
  v.user_filter = c.user;
  for (bool first = true; !g_stop; first = false) {
    if (!first) {
      // Sleep in slices, so that SIGINT ends a long --interval promptly.
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(c.interval_s * 1000));
      while (!g_stop && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (g_stop) break;
      std::fputs("\n", stdout);
    }
    auto snap = FetchTopSnapshot(c.agent_url, 0);
    if (!snap.ok()) {
      std::fprintf(stderr, "gpuwatch top: %s\n", snap.status().message().c_str());
      if (c.once) return 1;
      continue;
    }
    const std::string text = top::PlainText(*snap, v, OutputWidth());
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (c.once) return 0;
  }
  return 0;
}

int KeyCode(int ch) {
  switch (ch) {
    case KEY_LEFT:
      return top::kKeyLeft;
    case KEY_RIGHT:
      return top::kKeyRight;
    case KEY_UP:
      return top::kKeyUp;
    case KEY_DOWN:
      return top::kKeyDown;
    case KEY_PPAGE:
      return top::kKeyPageUp;
    case KEY_NPAGE:
      return top::kKeyPageDown;
    case KEY_END:
      return top::kKeyEnd;
    default:
      return ch;
  }
}

int RunCurses(const TopCommand& c) {
  std::setlocale(LC_ALL, "");
  SCREEN* screen = newterm(nullptr, stdout, stdin);
  if (!screen) {
    std::fprintf(stderr, "gpuwatch top: cannot drive this terminal (TERM=%s); printing tables\n",
                 std::getenv("TERM") ? std::getenv("TERM") : "");
    return RunPlain(c);
  }
  set_term(screen);
  cbreak();
  noecho();
  keypad(stdscr, TRUE);
  curs_set(0);
  timeout(200);  // getch waits at most this long: the refresh and the stop flag are checked
  enum Pair : short { kWarnPair = 1, kCritPair = 2, kDimPair = 3 };
  if (has_colors()) {
    start_color();
    use_default_colors();
    init_pair(kWarnPair, COLOR_YELLOW, -1);
    init_pair(kCritPair, COLOR_RED, -1);
    init_pair(kDimPair, COLOR_CYAN, -1);
  }
  auto attr = [](top::Style s) -> attr_t {
    const bool color = has_colors();
    switch (s) {
      case top::Style::kTitle:
        return A_BOLD;
      case top::Style::kHeader:
        return A_REVERSE;
      case top::Style::kWarn:
        return color ? COLOR_PAIR(kWarnPair) : A_BOLD;
      case top::Style::kCrit:
        return color ? COLOR_PAIR(kCritPair) | A_BOLD : A_BOLD | A_UNDERLINE;
      case top::Style::kDim:
        return color ? COLOR_PAIR(kDimPair) : A_DIM;
      case top::Style::kNormal:
        return A_NORMAL;
    }
    return A_NORMAL;
  };

  top::View v;
  v.job_filter = c.job;
  v.user_filter = c.user;
  top::Snapshot snap;
  std::string error;
  auto next_fetch = std::chrono::steady_clock::now();
  bool dirty = true;
  while (!g_stop) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_fetch) {
      auto r = FetchTopSnapshot(c.agent_url, v.history_offset_s);
      if (r.ok()) {
        snap = std::move(r).value();
        error.clear();
      } else if (r.status().code() == StatusCode::kNotFound && v.history_offset_s > 0) {
        v.history_offset_s = 0;  // no store: back to live, saying why
        error = r.status().message();
        continue;
      } else {
        error = r.status().message();
      }
      // A past instant stays where it is; live refreshes every interval.
      next_fetch =
          now + (v.history_offset_s > 0
                     ? std::chrono::hours(24)
                     : std::chrono::milliseconds(static_cast<int64_t>(c.interval_s * 1000)));
      dirty = true;
    }
    if (dirty) {
      std::vector<top::Line> lines = top::Layout(snap, v, COLS, LINES);
      if (!error.empty() && lines.size() > 1) lines[1] = {error, top::Style::kCrit};
      erase();
      for (size_t i = 0; i < lines.size() && i < static_cast<size_t>(LINES); ++i) {
        attrset(attr(lines[i].style));
        mvaddnstr(static_cast<int>(i), 0, lines[i].text.c_str(), COLS);
      }
      attrset(A_NORMAL);
      refresh();
      dirty = false;
    }
    const int ch = getch();
    if (ch == ERR) continue;
    if (ch == KEY_RESIZE) {
      dirty = true;
      continue;
    }
    switch (top::HandleKey(KeyCode(ch), snap, &v)) {
      case top::KeyEffect::kQuit:
        g_stop = true;
        break;
      case top::KeyEffect::kRefetch:
        next_fetch = std::chrono::steady_clock::now();
        break;
      case top::KeyEffect::kRedraw:
        dirty = true;
        break;
      case top::KeyEffect::kNone:
        break;
    }
  }
  endwin();
  delscreen(screen);
  return 0;
}

}  // namespace

Result<top::Snapshot> FetchTopSnapshot(const std::string& url, int64_t offset_s) {
  auto gpus = AgentGetJson(url, "/api/v1/gpus");
  if (!gpus.ok()) return gpus.status();
  if (offset_s <= 0) {
    // The other parts are optional: an agent without a job listener still shows its GPUs.
    auto part = [&](const char* path) {
      auto r = AgentGetJson(url, path);
      return r.ok() ? *r : json();
    };
    return top::ParseLive(*gpus, part("/api/v1/processes"), part("/api/v1/jobs"),
                          part("/api/v1/findings"));
  }
  const std::string host = gpus->value("hostname", "");
  const int64_t t_ms = WallClockMs() - offset_s * 1000;
  const top::HistoryQueries q = top::MakeHistoryQueries(host);
  json answers[4];
  const std::string* queries[4] = {&q.gpus, &q.samples_per_s, &q.iterations_per_s, &q.step_seconds};
  for (int i = 0; i < 4; ++i) {
    auto r = Query(url, *queries[i], t_ms);
    if (!r.ok()) return r.status();
    answers[i] = std::move(r).value();
  }
  auto snap = top::ParseHistory(host, t_ms, answers[0], answers[1], answers[2], answers[3]);
  if (snap.ok()) snap->simulated = gpus->value("simulated", false);
  return snap;
}

int RunTop(const TopCommand& c) {
  if (!(c.interval_s >= 0.1 && c.interval_s <= 3600)) {
    std::fprintf(stderr, "gpuwatch top: --interval must be 0.1 to 3600 seconds\n");
    return 2;
  }
  g_stop = false;
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  if (c.once || c.plain) return RunPlain(c);
  const char* term = std::getenv("TERM");
  if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO) || !term || !*term ||
      std::string_view(term) == "dumb") {
    std::fprintf(stderr,
                 "gpuwatch top: not an interactive terminal (TERM=%s); printing tables "
                 "(--plain)\n",
                 term ? term : "");
    return RunPlain(c);
  }
  return RunCurses(c);
}

void RegisterTopCommand(CLI::App* app, Commands* out) {
  auto t = std::make_shared<TopCommand>();
  t->agent_url = DefaultAgentUrl();
  auto* top = app->add_subcommand(
      "top", "Full-screen view of the node: GPUs, processes, jobs, findings, and their history");
  top->add_option("--agent", t->agent_url, "The agent's URL");
  auto* once = top->add_flag("--once", t->once, "Print one table and exit");
  top->add_flag("--plain", t->plain, "Print a table every refresh, with no terminal control")
      ->excludes(once);
  top->add_option("--interval", t->interval_s, "Seconds between refreshes (default 1)");
  top->add_option("--job", t->job, "Show only this job");
  top->add_option("--user", t->user, "Show only this user's jobs and processes");
  out->push_back({top, [t] { return RunTop(*t); }});
}

}  // namespace gpuwatch::cli
