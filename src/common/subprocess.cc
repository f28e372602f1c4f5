#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace gpuwatch {

bool ProgramExists(const std::string& program) {
  if (program.empty()) return false;
  auto executable = [](const std::string& path) {
    struct stat sb {};
    return ::stat(path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return executable(program);
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string dir = colon > start ? dirs.substr(start, colon - start) : ".";
    if (executable(dir + "/" + program)) return true;
    start = colon + 1;
  }
  return false;
}

Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                 const std::vector<std::pair<std::string, std::string>>& env,
                                 std::chrono::milliseconds timeout, size_t max_bytes) {
  if (argv.empty()) return Status::InvalidArgument("no command to run");
  if (!ProgramExists(argv[0])) return Status::NotFound("no program " + argv[0]);
  // The environment: the caller's, each of `env` replacing its name or added.
  std::vector<std::string> envs;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view kv(*e);
    bool replaced = false;
    for (const auto& [name, value] : env)
      if (kv.size() > name.size() && kv.starts_with(name) && kv[name.size()] == '=')
        replaced = true;
    if (!replaced) envs.emplace_back(kv);
  }
  for (const auto& [name, value] : env) envs.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0)
    return Status::IoError(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argp[0], &fa, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return Status::IoError("cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  CommandOutput result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool eof = false;
  while (!eof) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{pipefd[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buf[8192];
    const ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n > 0) {
      const size_t keep = std::min(static_cast<size_t>(n), max_bytes - result.out.size());
      result.out.append(buf, keep);
    } else if (n == 0 || errno != EINTR) {
      eof = true;
    }
  }
  ::close(pipefd[0]);
  if (!eof) {
    result.timed_out = true;
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status))
    result.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    result.exit_code = 128 + WTERMSIG(status);
  return result;
}

}  // namespace gpuwatch
