// A libFuzzer-compatible driver for g++ builds, so every fuzz target also runs in CTest (and
// under ASan/UBSan in CI) without clang. Usage: TARGET [SEED_FILE_OR_DIR...] [-runs=N]
// It runs each seed, then N deterministic mutations of the seeds (bit flips, truncations,
// splices, random bytes). scripts/fuzz.sh builds the same targets with real libFuzzer.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void AddSeed(const std::string& path, std::vector<std::string>* seeds) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR* d = opendir(path.c_str());
    if (!d) return;
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      AddSeed(path + "/" + e->d_name, seeds);
    }
    closedir(d);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  seeds->push_back(ss.str().substr(0, 1 << 16));
}

void Run(const std::string& s) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 10000;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-runs=", 6) == 0)
      runs = std::atol(argv[i] + 6);
    else
      AddSeed(argv[i], &seeds);
  }
  if (seeds.empty()) seeds.push_back("");
  for (const auto& s : seeds) Run(s);
  std::mt19937_64 rng(0x67707577617463ULL);  // fixed: a failure reproduces
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  for (long r = 0; r < runs; ++r) {
    std::string s = seeds[pick(seeds.size())];
    const int edits = 1 + static_cast<int>(pick(8));
    for (int e = 0; e < edits; ++e) {
      switch (pick(6)) {
        case 0:
          if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
          break;
        case 1:
          s.resize(pick(s.size() + 1));
          break;
        case 2:
          s.insert(pick(s.size() + 1), 1, static_cast<char>(rng()));
          break;
        case 3: {
          const auto& o = seeds[pick(seeds.size())];
          s.insert(pick(s.size() + 1), o.substr(pick(o.size() + 1)));
          break;
        }
        case 4:
          if (!s.empty()) s.erase(pick(s.size()), pick(16));
          break;
        case 5: {
          static const char* kTok[] = {"\n",  ":",      "=",    ",",    "/",       "\0",
                                       "-",   "GPU-",   "MIG-", "0::/", "docker-", ".scope",
                                       "pod", "NSpid:", "Uid:", ")"};
          std::string t = kTok[pick(16)];
          if (t.empty()) t.assign(1, '\0');
          s.insert(pick(s.size() + 1), t);
          break;
        }
      }
    }
    if (s.size() > (1 << 16)) s.resize(1 << 16);
    Run(s);
  }
  std::printf("fuzz driver: %zu seeds, %ld mutated runs, no crash\n", seeds.size(), runs);
  return 0;
}
