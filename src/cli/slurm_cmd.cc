#include "cli/slurm_cmd.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/strings.h"
#include "jobs/job_listener.h"

extern char** environ;

namespace gpuwatch::cli {
namespace {

// "2021-08-09T14:30:17", the local time Slurm prints, → Unix seconds.
std::optional<double> LocalTime(std::string_view s) {
  std::tm tm{};
  const std::string text(s);
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end || *end != '\0') return std::nullopt;
  tm.tm_isdst = -1;
  const time_t t = mktime(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<double>(t);
}

// "<exit>:<signal>" (SLURM_JOB_EXIT_CODE2, scontrol's ExitCode) → an exit status as a shell
// says it: 128 + signal when a signal ended the job.
std::optional<int> ExitStatus(std::string_view s) {
  const size_t colon = s.find(':');
  auto code = ParseInt<int>(s.substr(0, colon));
  auto sig =
      colon == std::string_view::npos ? std::optional<int>(0) : ParseInt<int>(s.substr(colon + 1));
  if (!code || !sig || *code < 0 || *sig < 0) return std::nullopt;
  return *sig ? 128 + *sig : *code;
}

bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
  return true;
}

// Runs `scontrol show job ID` for at most timeout_s; its stdout, or "" on any failure.
std::string RunScontrol(const std::string& scontrol, const std::string& id, double timeout_s,
                        std::ostream& err) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return "";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  // Slurm's default time format, whatever the site set (parse_time.c honours it).
  setenv("SLURM_TIME_FORMAT", "standard", 1);
  std::string a0 = scontrol, a1 = "show", a2 = "job", a3 = id;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, scontrol.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    err << "gpuwatch slurm: cannot run " << scontrol << ": " << std::strerror(rc) << "\n";
    return "";
  }
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline && out.size() < (1 << 20)) {
    char buf[4096];
    const ssize_t n = read(pipefd[0], buf, sizeof buf);
    if (n > 0)
      out.append(buf, static_cast<size_t>(n));
    else if (n == 0)
      done = true;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  close(pipefd[0]);
  if (!done) {
    kill(pid, SIGKILL);
    err << "gpuwatch slurm: " << scontrol << " show job " << id << " took over " << timeout_s
        << " s; going on without what it would have said\n";
    out.clear();
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (done && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) out.clear();
  return out;
}

}  // namespace

ScontrolJob ParseScontrolShowJob(const std::string& text) {
  ScontrolJob j;
  // Space-separated KEY=VALUE over several lines; JobName's value may hold spaces in theory,
  // but it is followed by a newline on the first line.
  for (std::string_view tok : SplitAny(text, " \t\r\n")) {
    const size_t eq = tok.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = tok.substr(0, eq), value = tok.substr(eq + 1);
    if (key == "SubmitTime")
      j.submit_s = LocalTime(value);
    else if (key == "StartTime")
      j.start_s = LocalTime(value);
    else if (key == "JobName" && j.name.empty())
      j.name = std::string(value);
    else if (key == "ExitCode")
      j.exit_code = ExitStatus(value);
  }
  return j;
}

Result<std::string> SlurmMessage(bool prolog, const EnvFn& env, const ScontrolJob& sc,
                                 double now_s) {
  const std::string id = env("SLURM_JOB_ID").value_or("");
  if (!ValidJobId(id)) return Status::InvalidArgument("SLURM_JOB_ID is missing or not a job id");
  nlohmann::json m = {{"v", 1}, {"job", id}};
  if (!prolog) {
    m["type"] = "release";
    // "<exit>:<signal>"; a job killed by a signal ends as a shell would say, 128 + signal.
    if (auto ec2 = env("SLURM_JOB_EXIT_CODE2")) {
      if (auto code = ExitStatus(*ec2)) m["exit_code"] = *code;
    } else if (auto ec = env("SLURM_JOB_EXIT_CODE")) {
      if (auto status = ParseInt<int>(*ec)) {
        if (WIFEXITED(*status))
          m["exit_code"] = WEXITSTATUS(*status);
        else if (WIFSIGNALED(*status))
          m["exit_code"] = 128 + WTERMSIG(*status);
      }
    } else if (sc.exit_code) {
      m["exit_code"] = *sc.exit_code;
    }
    m["t"] = now_s;
    return m.dump();
  }
  m["type"] = "allocation";
  const std::string user = env("SLURM_JOB_USER").value_or("");
  if (user.empty()) return Status::InvalidArgument("SLURM_JOB_USER is missing");
  m["user"] = user;
  if (auto account = env("SLURM_JOB_ACCOUNT"); account && !account->empty())
    m["project"] = *account;
  if (!sc.name.empty()) m["template"] = sc.name.substr(0, 128);
  std::vector<unsigned> devices;
  if (auto gpus = env("SLURM_JOB_GPUS"); gpus && !gpus->empty()) {
    for (std::string_view g : SplitAny(*gpus, ",")) {
      auto v = ParseInt<unsigned>(TrimWhitespace(g));
      if (!v || *v > 255)
        return Status::InvalidArgument("SLURM_JOB_GPUS '" + *gpus +
                                       "' is not a list of GPU numbers");
      devices.push_back(*v);
    }
  }
  m["devices"] = devices;
  // The start: scontrol's, when it is a plausible past moment (the prolog runs at the start).
  double t = now_s;
  if (sc.start_s && *sc.start_s <= now_s && *sc.start_s > now_s - 3000) t = *sc.start_s;
  m["t"] = t;
  if (sc.submit_s && *sc.submit_s <= t) m["submit_t"] = *sc.submit_s;
  return m.dump();
}

CLI::App* AddSlurmCommand(CLI::App* app, SlurmCommand* c, CLI::App** prolog, CLI::App** epilog) {
  auto* cmd = app->add_subcommand(
      "slurm", "Register Slurm jobs with the agent from slurmd's Prolog/Epilog (always exits 0)");
  cmd->require_subcommand(1);
  for (auto* sub : {* prolog = cmd->add_subcommand(
                        "prolog", "Tell the agent the job's owner, account and GPUs (as root)"),
                      *epilog = cmd->add_subcommand(
                          "epilog", "Tell the agent the job gave its GPUs back (as root)")}) {
    sub->add_option("--socket", c->socket,
                    "The agent's job socket (default /run/gpuwatch/job.sock)");
    sub->add_option("--timeout", c->timeout_s, "Seconds the whole run may take (default 5)");
    sub->add_option("--scontrol", c->scontrol,
                    "scontrol to ask for the submit time and job name (prolog) or the exit "
                    "code slurmd left out (epilog); \"\" skips it");
  }
  return cmd;
}

int RunSlurm(const SlurmCommand& c, bool prolog, std::ostream& err) {
  const auto start = std::chrono::steady_clock::now();
  const EnvFn env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  };
  ScontrolJob sc;
  const std::string id = env("SLURM_JOB_ID").value_or("");
  // The epilog asks only when slurmd left out the exit code.
  const bool ask = prolog || (!env("SLURM_JOB_EXIT_CODE2") && !env("SLURM_JOB_EXIT_CODE"));
  if (ask && !c.scontrol.empty() && ValidJobId(id))
    sc = ParseScontrolShowJob(RunScontrol(c.scontrol, id, c.timeout_s * 0.6, err));
  const double now_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto line = SlurmMessage(prolog, env, sc, now_s);
  if (!line.ok()) {
    err << "gpuwatch slurm: " << line.status().message() << "; nothing sent\n";
    return 0;
  }
  const std::string path = c.socket.empty() ? jobs::kDefaultJobSocket : c.socket;
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof addr.sun_path) {
    err << "gpuwatch slurm: cannot open a socket to " << path << "\n";
    if (fd >= 0) close(fd);
    return 0;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const std::string payload = *line + "\n";
  // A full socket buffer (an agent busy or stopped) is retried until the time box ends.
  while (true) {
    if (sendto(fd, payload.data(), payload.size(), MSG_DONTWAIT,
               reinterpret_cast<const sockaddr*>(&addr), sizeof addr) >= 0)
      break;
    const int e = errno;
    if ((e != EAGAIN && e != ENOBUFS) ||
        std::chrono::steady_clock::now() - start > std::chrono::duration<double>(c.timeout_s)) {
      err << "gpuwatch slurm: cannot tell the agent at " << path << ": " << std::strerror(e)
          << " (job " << id << " is not registered; the node is not drained for it)\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  close(fd);
  return 0;
}

void RegisterSlurmCommands(CLI::App* app, Commands* out) {
  auto c = std::make_shared<SlurmCommand>();
  CLI::App *prolog = nullptr, *epilog = nullptr;
  AddSlurmCommand(app, c.get(), &prolog, &epilog);
  out->push_back({prolog, [c] { return RunSlurm(*c, true, std::cerr); }});
  out->push_back({epilog, [c] { return RunSlurm(*c, false, std::cerr); }});
}

}  // namespace gpuwatch::cli
