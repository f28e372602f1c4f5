#include "cli/slurm_cmd.h"

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

#include "accounting/sacct.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "jobs/job_listener.h"

namespace gpuwatch::cli {
namespace {

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
  // Slurm's default time format, whatever the site set (parse_time.c honours it).
  auto r = RunCommand({scontrol, "show", "job", id}, {{"SLURM_TIME_FORMAT", "standard"}},
                      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  if (!r.ok()) {
    err << "gpuwatch slurm: cannot run " << scontrol << ": " << r.status().message() << "\n";
    return "";
  }
  if (r->timed_out) {
    err << "gpuwatch slurm: " << scontrol << " show job " << id << " took over " << timeout_s
        << " s; going on without what it would have said\n";
    return "";
  }
  return r->exit_code == 0 ? r->out : "";
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
      j.submit_s = accounting::ParseSlurmLocalTime(value);
    else if (key == "StartTime")
      j.start_s = accounting::ParseSlurmLocalTime(value);
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
