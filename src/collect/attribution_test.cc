#include "collect/attribution.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/strings.h"

namespace gpuwatch::collect {
namespace {

namespace fs = std::filesystem;
using Kind = VisibleDeviceRef::Kind;

constexpr char kId[] = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899";
constexpr char kId2[] = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
constexpr char kPod[] = "0f3c2a8e-5b1d-4c7e-9a2f-6d8e1b4c3a70";
constexpr char kPodUnderscore[] = "0f3c2a8e_5b1d_4c7e_9a2f_6d8e1b4c3a70";

constexpr char kUuid0[] = "GPU-5f9a1c2e-7d3b-4e6f-8a1b-2c3d4e5f6a70";
constexpr char kUuid1[] = "GPU-8c3e6b1d-2a4f-4b9c-9d7e-1f2a3b4c5d61";
constexpr char kUuid2[] = "GPU-8c3e9f04-6b7a-4c1d-8e2f-3a4b5c6d7e82";
constexpr char kUuid3[] = "GPU-d2a7c5e9-1b3f-4d6a-9c8e-5f7a9b1c3e93";
constexpr char kMig31[] = "MIG-4f2e8a1c-3b5d-5e7f-9a0b-1c2d3e4f5a6b";
constexpr char kMig32[] = "MIG-9a1b7c3d-5e2f-5a4b-8c6d-7e8f9a0b1c2d";

std::string Fixture(const std::string& name) {
  return std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/" + name;
}

std::string ReadFixture(const std::string& rel) {
  FileReadResult f = ReadSmallFile(Fixture(rel));
  EXPECT_TRUE(f.ok) << rel;
  return f.data;
}

// Four GPUs in NVML order; GPU 3 is in MIG mode with two instances.
std::vector<model::GpuStaticInfo> Gpus() {
  std::vector<model::GpuStaticInfo> g(4);
  const char* uuids[] = {kUuid0, kUuid1, kUuid2, kUuid3};
  for (unsigned i = 0; i < 4; ++i) {
    g[i].index = i;
    g[i].uuid = uuids[i];
  }
  g[3].mig_enabled = true;
  g[3].mig_instances = {{1, 0, kMig31}, {2, 0, kMig32}};
  return g;
}

ContainerRef Cg(const std::string& text) { return ParseCgroup(text); }

// ---- ParseCgroup ----------------------------------------------------------------------------

TEST(ParseCgroupTest, DockerCgroupV1) {
  ContainerRef r = Cg(std::string("12:memory:/docker/") + kId + "\n11:cpuset:/docker/" + kId +
                      "\n0::/system.slice/containerd.service\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "docker");
  EXPECT_EQ(r.pod_uid, "");
}

TEST(ParseCgroupTest, DockerSystemdCgroupV2) {
  ContainerRef r = Cg(std::string("0::/system.slice/docker-") + kId + ".scope\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "docker");
}

TEST(ParseCgroupTest, DockerScopeNestedUnderSystemdPaths) {
  // A container running its own systemd, and rootless docker under the user's manager.
  EXPECT_EQ(Cg(std::string("0::/system.slice/docker-") + kId + ".scope/init.scope\n").id, kId);
  ContainerRef r = Cg(std::string("0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
                                  "docker-") +
                      kId + ".scope\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "docker");
}

TEST(ParseCgroupTest, KubepodsCgroupfsV1) {
  ContainerRef r = Cg(std::string("11:memory:/kubepods/burstable/pod") + kPod + "/" + kId + "\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "containerd");
  EXPECT_EQ(r.pod_uid, kPod);
}

TEST(ParseCgroupTest, KubepodsSystemdContainerdV2) {
  ContainerRef r = Cg(ReadFixture("root/proc/4242/cgroup"));
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "containerd");
  EXPECT_EQ(r.pod_uid, kPod);  // underscores back to dashes
}

TEST(ParseCgroupTest, KubepodsGuaranteedQos) {
  ContainerRef r = Cg(std::string("0::/kubepods.slice/kubepods-pod") + kPodUnderscore +
                      ".slice/cri-containerd-" + kId + ".scope\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.pod_uid, kPod);
}

TEST(ParseCgroupTest, CrioSystemdAndCgroupfs) {
  ContainerRef r = Cg(std::string("0::/kubepods.slice/kubepods-besteffort.slice/"
                                  "kubepods-besteffort-pod") +
                      kPodUnderscore + ".slice/crio-" + kId + ".scope\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "cri-o");
  EXPECT_EQ(r.pod_uid, kPod);
  r = Cg(std::string("4:memory:/kubepods/besteffort/pod") + kPod + "/crio-" + kId + "\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "cri-o");
  EXPECT_EQ(r.pod_uid, kPod);
}

TEST(ParseCgroupTest, ConmonIsNotAContainer) {
  ContainerRef r = Cg(std::string("0::/kubepods.slice/kubepods-burstable.slice/"
                                  "kubepods-burstable-pod") +
                      kPodUnderscore + ".slice/crio-conmon-" + kId + ".scope\n");
  EXPECT_EQ(r.id, "");
  EXPECT_EQ(r.pod_uid, kPod);
  EXPECT_EQ(Cg(std::string("0::/machine.slice/libpod-conmon-") + kId + ".scope\n").id, "");
}

TEST(ParseCgroupTest, Podman) {
  ContainerRef r = Cg(std::string("0::/machine.slice/libpod-") + kId + ".scope\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "podman");
  // Rootless podman with a nested "container" cgroup.
  r = Cg(std::string("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-") + kId +
         ".scope/container\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "podman");
}

TEST(ParseCgroupTest, HostProcesses) {
  EXPECT_EQ(Cg("0::/user.slice/user-1000.slice/session-3.scope\n").id, "");
  EXPECT_EQ(Cg("0::/\n").id, "");
  EXPECT_EQ(Cg("").id, "");
  ContainerRef r = Cg(ReadFixture("root/proc/5151/cgroup"));  // Slurm step, v1 hybrid
  EXPECT_EQ(r.id, "");
  EXPECT_EQ(r.runtime, "");
  EXPECT_EQ(r.pod_uid, "");
}

TEST(ParseCgroupTest, HybridV1WithRootV2Line) {
  ContainerRef r = Cg(ReadFixture("root/proc/6161/cgroup"));
  EXPECT_EQ(r.id, kId2);
  EXPECT_EQ(r.runtime, "docker");
}

TEST(ParseCgroupTest, NestedContainersInnermostWins) {
  // kind: a Kubernetes node inside a docker container.
  ContainerRef r = Cg(std::string("0::/docker/") + kId2 +
                      "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                      "kubelet-kubepods-besteffort-pod" +
                      kPodUnderscore + ".slice/cri-containerd-" + kId + ".scope\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "containerd");
  EXPECT_EQ(r.pod_uid, kPod);
}

TEST(ParseCgroupTest, StaticPodUidAndEcs) {
  ContainerRef r =
      Cg(std::string("4:memory:/kubepods/burstable/pod6b1d4e0c7a3f9e2b5d8c1a4f7e0b3d6c/") + kId +
         "\n");
  EXPECT_EQ(r.pod_uid, "6b1d4e0c7a3f9e2b5d8c1a4f7e0b3d6c");
  r = Cg(std::string("9:memory:/ecs/5a4c0b1e2d3f4a5b6c7d8e9f0a1b2c3d/") + kId + "\n");
  EXPECT_EQ(r.id, kId);
  EXPECT_EQ(r.runtime, "docker");
}

TEST(ParseCgroupTest, PodLevelOnly) {
  ContainerRef r = Cg(std::string("0::/kubepods.slice/kubepods-burstable.slice/"
                                  "kubepods-burstable-pod") +
                      kPodUnderscore + ".slice\n");
  EXPECT_EQ(r.id, "");
  EXPECT_EQ(r.pod_uid, kPod);
}

TEST(ParseCgroupTest, NotAContainerId) {
  EXPECT_EQ(Cg("0::/docker/3f4e5d6c\n").id, "");  // short
  std::string upper(kId);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(Cg("0::/docker/" + upper + "\n").id, "");
  EXPECT_EQ(Cg("no colons here\n").id, "");
  EXPECT_EQ(Cg("0::/kubepods.slice/kubepods-pod.slice\n").pod_uid, "");
}

// ---- ParseCudaVisibleDevices ----------------------------------------------------------------

VisibleDeviceRef Idx(unsigned i) {
  VisibleDeviceRef r;
  r.index = i;
  return r;
}
VisibleDeviceRef Uuid(Kind k, std::string u) {
  VisibleDeviceRef r;
  r.kind = k;
  r.uuid = std::move(u);
  return r;
}

TEST(ParseCudaVisibleDevicesTest, Indices) {
  EXPECT_EQ(ParseCudaVisibleDevices("0,2,1"),
            (std::vector<VisibleDeviceRef>{Idx(0), Idx(2), Idx(1)}));
  EXPECT_EQ(ParseCudaVisibleDevices(" 0 , 1 "), (std::vector<VisibleDeviceRef>{Idx(0), Idx(1)}));
}

TEST(ParseCudaVisibleDevicesTest, EmptyAndHideAllIdioms) {
  EXPECT_TRUE(ParseCudaVisibleDevices("").empty());
  EXPECT_TRUE(ParseCudaVisibleDevices("-1").empty());
  EXPECT_TRUE(ParseCudaVisibleDevices("NoDevFiles").empty());
  EXPECT_TRUE(ParseCudaVisibleDevices("void").empty());
  EXPECT_TRUE(ParseCudaVisibleDevices(",0").empty());
}

TEST(ParseCudaVisibleDevicesTest, FirstInvalidEntryTruncates) {
  EXPECT_EQ(ParseCudaVisibleDevices("0,1,-1,2"), (std::vector<VisibleDeviceRef>{Idx(0), Idx(1)}));
  EXPECT_EQ(ParseCudaVisibleDevices("0,,1"), (std::vector<VisibleDeviceRef>{Idx(0)}));
  EXPECT_EQ(ParseCudaVisibleDevices("1,"), (std::vector<VisibleDeviceRef>{Idx(1)}));
  EXPECT_EQ(ParseCudaVisibleDevices("3,foo,1"), (std::vector<VisibleDeviceRef>{Idx(3)}));
  EXPECT_EQ(ParseCudaVisibleDevices("2,99999999999"), (std::vector<VisibleDeviceRef>{Idx(2)}));
  EXPECT_EQ(ParseCudaVisibleDevices("1,GPU-,0"), (std::vector<VisibleDeviceRef>{Idx(1)}));
  EXPECT_EQ(ParseCudaVisibleDevices("1,GPU-xyz,0"), (std::vector<VisibleDeviceRef>{Idx(1)}));
}

TEST(ParseCudaVisibleDevicesTest, UuidsAndPrefixes) {
  EXPECT_EQ(ParseCudaVisibleDevices(std::string(kUuid2) + ",GPU-8c3e6,1"),
            (std::vector<VisibleDeviceRef>{Uuid(Kind::kGpuUuid, kUuid2),
                                           Uuid(Kind::kGpuUuid, "GPU-8c3e6"), Idx(1)}));
}

TEST(ParseCudaVisibleDevicesTest, MigNewAndLegacy) {
  EXPECT_EQ(ParseCudaVisibleDevices(kMig32),
            (std::vector<VisibleDeviceRef>{Uuid(Kind::kMigUuid, kMig32)}));
  std::vector<VisibleDeviceRef> v = ParseCudaVisibleDevices(std::string("MIG-") + kUuid3 + "/2/0");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, Kind::kMigLegacy);
  EXPECT_EQ(v[0].uuid, kUuid3);
  EXPECT_EQ(v[0].gpu_instance_id, 2u);
  EXPECT_EQ(v[0].compute_instance_id, 0u);
  EXPECT_TRUE(ParseCudaVisibleDevices(std::string("MIG-") + kUuid3 + "/2").empty());
  EXPECT_TRUE(ParseCudaVisibleDevices(std::string("MIG-") + kUuid3 + "/x/0").empty());
}

// ---- ParseNvidiaVisibleDevices --------------------------------------------------------------

TEST(ParseNvidiaVisibleDevicesTest, Forms) {
  auto all = ParseNvidiaVisibleDevices("all");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->all);
  for (const char* none : {"", "none", "void"}) {
    auto r = ParseNvidiaVisibleDevices(none);
    ASSERT_TRUE(r.ok()) << none;
    EXPECT_FALSE(r->all);
    EXPECT_TRUE(r->devices.empty());
  }
  auto list = ParseNvidiaVisibleDevices(std::string("3,") + kUuid1 + "," + kMig31);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->devices, (std::vector<VisibleDeviceRef>{Idx(3), Uuid(Kind::kGpuUuid, kUuid1),
                                                          Uuid(Kind::kMigUuid, kMig31)}));
  EXPECT_EQ(ParseNvidiaVisibleDevices("0:1").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseNvidiaVisibleDevices("/var/run/nvidia-container-devices").ok());
}

// ---- ResolveVisibleIndex --------------------------------------------------------------------

std::optional<int> Resolve(const char* cvd, const char* nvd, const char* uuid,
                           std::optional<unsigned> gi = std::nullopt,
                           std::optional<unsigned> ci = std::nullopt) {
  std::vector<model::GpuStaticInfo> gpus = Gpus();
  std::optional<std::vector<VisibleDeviceRef>> cuda;
  if (cvd != nullptr) cuda = ParseCudaVisibleDevices(cvd);
  std::optional<ContainerDevices> container;
  if (nvd != nullptr) {
    auto r = ParseNvidiaVisibleDevices(nvd);
    EXPECT_TRUE(r.ok()) << nvd;
    if (r.ok()) container = r.value();
  }
  return ResolveVisibleIndex(cuda ? &*cuda : nullptr, container ? &*container : nullptr,
                             DeviceTarget{uuid, gi, ci}, gpus);
}

TEST(ResolveVisibleIndexTest, NoEnvironmentIsNvmlOrder) {
  EXPECT_EQ(Resolve(nullptr, nullptr, kUuid0), 0);
  EXPECT_EQ(Resolve(nullptr, nullptr, kUuid2), 2);
  EXPECT_EQ(Resolve(nullptr, nullptr, kUuid3, 2, 0), 3);
  EXPECT_EQ(Resolve(nullptr, nullptr, "GPU-00000000-0000-0000-0000-000000000000"), std::nullopt);
}

TEST(ResolveVisibleIndexTest, CudaIndicesReorder) {
  EXPECT_EQ(Resolve("2,0", nullptr, kUuid2), 0);
  EXPECT_EQ(Resolve("2,0", nullptr, kUuid0), 1);
  EXPECT_EQ(Resolve("2,0", nullptr, kUuid1), std::nullopt);
  EXPECT_EQ(Resolve("", nullptr, kUuid0), std::nullopt);
  EXPECT_EQ(Resolve("-1", nullptr, kUuid0), std::nullopt);
}

TEST(ResolveVisibleIndexTest, UnresolvableEntriesTruncate) {
  EXPECT_EQ(Resolve("0,5,1", nullptr, kUuid0), 0);
  EXPECT_EQ(Resolve("0,5,1", nullptr, kUuid1), std::nullopt);  // 5 is out of range
  EXPECT_EQ(Resolve("1,1,2", nullptr, kUuid2), std::nullopt);  // repeat ends the list
  EXPECT_EQ(Resolve("1,1,2", nullptr, kUuid1), 0);
}

TEST(ResolveVisibleIndexTest, UuidAndUniquePrefix) {
  EXPECT_EQ(Resolve("GPU-8c3e6,0", nullptr, kUuid1), 0);
  EXPECT_EQ(Resolve("GPU-8c3e6,0", nullptr, kUuid0), 1);
  EXPECT_EQ(Resolve((std::string(kUuid3) + ",2").c_str(), nullptr, kUuid2), 1);
  // "GPU-8c3e" matches GPUs 1 and 2: ambiguous, so it and everything after it is hidden.
  EXPECT_EQ(Resolve("GPU-8c3e,0", nullptr, kUuid1), std::nullopt);
  EXPECT_EQ(Resolve("GPU-8c3e,0", nullptr, kUuid0), std::nullopt);
}

TEST(ResolveVisibleIndexTest, MigNewAndLegacy) {
  EXPECT_EQ(Resolve(kMig32, nullptr, kUuid3, 2, 0), 0);
  EXPECT_EQ(Resolve(kMig32, nullptr, kUuid3, 1, 0), std::nullopt);
  EXPECT_EQ(Resolve("MIG-4f2e", nullptr, kUuid3, 1, 0), 0);  // prefix of kMig31
  const std::string legacy = std::string("MIG-") + kUuid3 + "/1/0";
  EXPECT_EQ(Resolve(legacy.c_str(), nullptr, kUuid3, 1, 0), 0);
  EXPECT_EQ(Resolve(legacy.c_str(), nullptr, kUuid3, 2, 0), std::nullopt);
  // A whole-GPU entry on a MIG-enabled GPU covers its instances.
  EXPECT_EQ(Resolve("3", nullptr, kUuid3, 2, 0), 0);
}

TEST(ResolveVisibleIndexTest, ContainerSeesItsGpusInBusOrder) {
  // Listed 3 then 2; the container still enumerates physical 2 first.
  const std::string nvd = std::string(kUuid3) + "," + kUuid2;
  EXPECT_EQ(Resolve(nullptr, nvd.c_str(), kUuid2), 0);
  EXPECT_EQ(Resolve(nullptr, nvd.c_str(), kUuid3, 1, 0), 1);
  EXPECT_EQ(Resolve(nullptr, nvd.c_str(), kUuid0), std::nullopt);
  // CUDA_VISIBLE_DEVICES indexes the container's list, not the host's.
  EXPECT_EQ(Resolve("1", nvd.c_str(), kUuid3, 1, 0), 0);
  EXPECT_EQ(Resolve("1", nvd.c_str(), kUuid2), std::nullopt);
  EXPECT_EQ(Resolve("2", nvd.c_str(), kUuid2), std::nullopt);  // out of the container's range
  EXPECT_EQ(Resolve(nullptr, "3,1", kUuid1), 0);
  EXPECT_EQ(Resolve(nullptr, "3,1", kUuid3, 2, 0), 1);
  EXPECT_EQ(Resolve(nullptr, "all", kUuid2), 2);
  EXPECT_EQ(Resolve(nullptr, "none", kUuid2), std::nullopt);
  // A device the host does not have: the container's list is not known exactly.
  EXPECT_EQ(Resolve(nullptr, "0,7", kUuid0), std::nullopt);
}

TEST(ResolveVisibleIndexTest, ContainerWithMigDevice) {
  EXPECT_EQ(Resolve(nullptr, kMig31, kUuid3, 1, 0), 0);
  EXPECT_EQ(Resolve(nullptr, kMig31, kUuid3, 2, 0), std::nullopt);
  const std::string nvd = std::string("1,") + kMig32;
  EXPECT_EQ(Resolve(nullptr, nvd.c_str(), kUuid3, 2, 0), 1);
  EXPECT_EQ(Resolve("1", nvd.c_str(), kUuid3, 2, 0), 0);
}

// ---- ParseEnviron ---------------------------------------------------------------------------

TEST(ParseEnvironTest, Basic) {
  auto env = ParseEnviron(std::string_view("A=1\0B=\0C=x=y\0", 13));
  EXPECT_EQ(env.size(), 3u);
  EXPECT_EQ(env["A"], "1");
  EXPECT_EQ(env["B"], "");
  EXPECT_EQ(env["C"], "x=y");
  EXPECT_TRUE(ParseEnviron("").empty());
  EXPECT_TRUE(ParseEnviron("NO_NUL=at all").empty());
}

TEST(ParseEnvironTest, FixtureTruncationDuplicatesAndRawBytes) {
  auto env = ParseEnviron(ReadFixture("root/proc/4242/environ"));
  EXPECT_EQ(env.count("TRUNCATED_VAR"), 0u);  // no trailing NUL: cut short, dropped
  EXPECT_EQ(env["SLURM_JOB_ID"], "918273");   // first of two wins, as getenv does
  EXPECT_EQ(env["LANG_RAW"], "caf\xe9\xff");  // bytes kept, no UTF-8 assumption
  EXPECT_EQ(env.count("NOEQUALS"), 0u);
  EXPECT_EQ(env.count(""), 0u);
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(env["HOME"], "/root");
  EXPECT_EQ(env.size(), 8u);
}

// ---- ParseStatusIds / ParseStatStartTime / ParsePasswd --------------------------------------

TEST(ParseStatusIdsTest, ContainerHostAndOldKernel) {
  StatusIds c = ParseStatusIds(ReadFixture("root/proc/4242/status"));
  EXPECT_EQ(c.uid, 1000u);
  EXPECT_EQ(c.nspid, (std::vector<uint32_t>{4242, 57}));
  StatusIds h = ParseStatusIds(ReadFixture("root/proc/5151/status"));
  EXPECT_EQ(h.uid, 1001u);
  EXPECT_EQ(h.nspid, (std::vector<uint32_t>{5151}));
  StatusIds old = ParseStatusIds("Name:\tx\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n");
  EXPECT_EQ(old.uid, 0u);
  EXPECT_TRUE(old.nspid.empty());
  // Nested namespaces: innermost last.
  EXPECT_EQ(ParseStatusIds("NSpid:\t900\t40\t1\n").nspid, (std::vector<uint32_t>{900, 40, 1}));
  StatusIds bad = ParseStatusIds("Uid:\tabc\t0\nNSpid:\t12\tx\n");
  EXPECT_FALSE(bad.uid.has_value());
  EXPECT_TRUE(bad.nspid.empty());
}

TEST(ParseStatStartTimeTest, CommWithSpacesAndParens) {
  EXPECT_EQ(ParseStatStartTime(ReadFixture("root/proc/4242/stat")), 123456u);
  EXPECT_EQ(ParseStatStartTime("77 (a b) c)) S 1 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 "
                               "987654 1 1 18446744073709551615\n"),
            987654u);
  EXPECT_EQ(ParseStatStartTime("77 (x) S 1 2 3"), std::nullopt);
  EXPECT_EQ(ParseStatStartTime("no parens"), std::nullopt);
}

TEST(ParsePasswdTest, FixtureAndOddLines) {
  auto users = ParsePasswd(ReadFixture("root/etc/passwd"));
  EXPECT_EQ(users[0], "root");
  EXPECT_EQ(users[1001], "alice");
  EXPECT_EQ(users[1000], "bob");
  EXPECT_EQ(users.size(), 8u);
  auto odd = ParsePasswd(
      "+@netgroup::::::\nfirst:x:5:5::/:/bin/sh\nsecond:x:5:5::/:/bin/sh\n"
      "broken\n:x:6:6::/:\nnum:x:notanumber:1::/:\n");
  EXPECT_EQ(odd.size(), 1u);
  EXPECT_EQ(odd[5], "first");
}

// ---- Attributor -----------------------------------------------------------------------------

GpuProcessRef Ref(unsigned gpu, uint32_t pid, std::optional<unsigned> gi = std::nullopt,
                  std::optional<unsigned> ci = std::nullopt) {
  GpuProcessRef r;
  r.gpu_index = gpu;
  r.process.pid = pid;
  r.process.gpu_instance_id = gi;
  r.process.compute_instance_id = ci;
  return r;
}

TEST(AttributorTest, FixtureRoot) {
  Attributor attr(Fixture("root"));
  std::vector<GpuProcessRef> procs = {Ref(3, 4242, 2, 0), Ref(1, 5151), Ref(0, 5151), Ref(2, 6161),
                                      Ref(0, 999999)};
  procs[0].process.used_memory_bytes = uint64_t{8} << 30;
  std::vector<model::ProcessAttribution> a = attr.Attribute(procs, Gpus());
  ASSERT_EQ(a.size(), 5u);

  // Kubernetes pod container; NVIDIA_VISIBLE_DEVICES lists GPUs 3 and 2, CUDA_VISIBLE_DEVICES=1
  // picks the container's second in bus order: physical 3.
  EXPECT_EQ(a[0].pid, 4242u);
  EXPECT_EQ(a[0].container_pid, 57u);
  EXPECT_EQ(a[0].gpu_index, 3u);
  EXPECT_EQ(a[0].gpu_uuid, kUuid3);
  EXPECT_EQ(a[0].gpu_instance_id, 2u);
  EXPECT_EQ(a[0].compute_instance_id, 0u);
  EXPECT_EQ(a[0].used_memory_bytes, uint64_t{8} << 30);
  EXPECT_EQ(a[0].command, "pt_main_thread");
  EXPECT_EQ(a[0].uid, 1000u);
  EXPECT_EQ(a[0].user, "bob");
  EXPECT_EQ(a[0].container_id, kId);
  EXPECT_EQ(a[0].container_runtime, "containerd");
  EXPECT_EQ(a[0].pod_uid, kPod);
  EXPECT_EQ(a[0].job_id, "918273");
  EXPECT_EQ(a[0].visible_index, 0);

  // Slurm step on the host, CUDA_VISIBLE_DEVICES=GPU-8c3e6,0.
  EXPECT_EQ(a[1].command, "python");
  EXPECT_EQ(a[1].user, "alice");
  EXPECT_EQ(a[1].uid, 1001u);
  EXPECT_EQ(a[1].container_pid, std::nullopt);
  EXPECT_EQ(a[1].container_id, "");
  EXPECT_EQ(a[1].container_runtime, "");
  EXPECT_EQ(a[1].job_id, "55");
  EXPECT_EQ(a[1].gpu_uuid, kUuid1);
  EXPECT_EQ(a[1].visible_index, 0);
  EXPECT_EQ(a[2].gpu_uuid, kUuid0);
  EXPECT_EQ(a[2].visible_index, 1);
  EXPECT_EQ(a[2].job_id, "55");

  // Docker container whose environ cannot be read: no job id, no visibility claim.
  EXPECT_EQ(a[3].command, "tritonserver");
  EXPECT_EQ(a[3].container_id, kId2);
  EXPECT_EQ(a[3].container_runtime, "docker");
  EXPECT_EQ(a[3].container_pid, 1u);
  EXPECT_EQ(a[3].uid, 4711u);
  EXPECT_EQ(a[3].user, "4711");  // not in /etc/passwd
  EXPECT_EQ(a[3].job_id, "");
  EXPECT_EQ(a[3].visible_index, std::nullopt);

  // Gone before we looked: what NVML said, nothing more.
  EXPECT_EQ(a[4].pid, 999999u);
  EXPECT_EQ(a[4].gpu_uuid, kUuid0);
  EXPECT_EQ(a[4].command, "");
  EXPECT_EQ(a[4].uid, std::nullopt);
  EXPECT_EQ(a[4].user, "");
  EXPECT_EQ(a[4].visible_index, std::nullopt);

  EXPECT_EQ(attr.cached_processes(), 4u);
}

TEST(AttributorTest, ConfiguredJobVariableFirstThenFallbacks) {
  Attributor attr(Fixture("root"), "TRAINING_JOB");
  auto a = attr.Attribute({Ref(3, 4242, 2, 0), Ref(1, 5151)}, Gpus());
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].job_id, "llm-pretrain-7");
  EXPECT_EQ(a[1].job_id, "55");  // no TRAINING_JOB: SLURM_JOB_ID
}

TEST(AttributorTest, UnknownGpuIndexKeepsProcessFields) {
  Attributor attr(Fixture("root"));
  auto a = attr.Attribute({Ref(9, 5151)}, Gpus());
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].gpu_uuid, "");
  EXPECT_EQ(a[0].user, "alice");
  EXPECT_EQ(a[0].visible_index, std::nullopt);
}

class TempTree {
 public:
  TempTree() {
    std::string tmpl = (fs::temp_directory_path() / "gw_attr_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
    fs::copy(Fixture("root"), path_, fs::copy_options::recursive);
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  void Write(const std::string& rel, const std::string& data) const {
    std::ofstream(path_ + "/" + rel, std::ios::trunc | std::ios::binary) << data;
  }

 private:
  std::string path_;
};

TEST(AttributorTest, CachedPerPidAndStartTimeEvictedWhenGone) {
  TempTree t;
  Attributor attr(t.path());
  auto gpus = Gpus();
  EXPECT_EQ(attr.Attribute({Ref(3, 4242, 2, 0)}, gpus)[0].command, "pt_main_thread");

  // Same process (same start time): resolved once, so a later comm change is not re-read.
  t.Write("proc/4242/comm", "renamed\n");
  EXPECT_EQ(attr.Attribute({Ref(3, 4242, 2, 0)}, gpus)[0].command, "pt_main_thread");

  // The pid was recycled: a new start time means a new process.
  std::string stat = ReadFixture("root/proc/4242/stat");
  stat.replace(stat.find(" 123456 "), 8, " 999999 ");
  t.Write("proc/4242/stat", stat);
  EXPECT_EQ(attr.Attribute({Ref(3, 4242, 2, 0)}, gpus)[0].command, "renamed");

  // Not reported this tick: evicted; reported again: resolved afresh.
  EXPECT_EQ(attr.Attribute({Ref(1, 5151)}, gpus).size(), 1u);
  EXPECT_EQ(attr.cached_processes(), 1u);
  t.Write("proc/4242/comm", "again\n");
  EXPECT_EQ(attr.Attribute({Ref(3, 4242, 2, 0)}, gpus)[0].command, "again");
  EXPECT_EQ(attr.cached_processes(), 1u);
}

TEST(AttributorTest, NvidiaVisibleDevicesIgnoredOnTheHost) {
  TempTree t;
  t.Write("proc/5151/environ", std::string("SLURM_JOB_ID=55\0NVIDIA_VISIBLE_DEVICES=3\0", 41));
  Attributor attr(t.path());
  auto a = attr.Attribute({Ref(0, 5151)}, Gpus());
  EXPECT_EQ(a[0].visible_index, 0);  // host process: the runtime variable restricts nothing
}

TEST(AttributorTest, UnparsedContainerDeviceListClaimsNoIndex) {
  TempTree t;
  t.Write("proc/4242/environ", std::string("NVIDIA_VISIBLE_DEVICES=0:1\0", 27));
  Attributor attr(t.path());
  auto a = attr.Attribute({Ref(0, 4242)}, Gpus());
  EXPECT_EQ(a[0].container_id, kId);
  EXPECT_EQ(a[0].visible_index, std::nullopt);
}

TEST(AttributorTest, PasswdReloadedWhenChanged) {
  TempTree t;
  auto gpus = Gpus();
  {
    Attributor attr(t.path());
    EXPECT_EQ(attr.Attribute({Ref(2, 6161)}, gpus)[0].user, "4711");
  }
  Attributor attr(t.path());
  EXPECT_EQ(attr.Attribute({Ref(2, 6161)}, gpus)[0].user, "4711");
  std::string passwd = ReadFixture("root/etc/passwd") + "triton:x:4711:4711::/opt:/bin/false\n";
  t.Write("etc/passwd", passwd);
  // Force a new mtime even on coarse-timestamp file systems.
  fs::last_write_time(t.path() + "/etc/passwd",
                      fs::last_write_time(t.path() + "/etc/passwd") + std::chrono::seconds(5));
  std::string stat = ReadFixture("root/proc/6161/stat");
  stat.replace(stat.find(" 334455 "), 8, " 334456 ");
  t.Write("proc/6161/stat", stat);  // new process so it is resolved again
  EXPECT_EQ(attr.Attribute({Ref(2, 6161)}, gpus)[0].user, "triton");
}

}  // namespace
}  // namespace gpuwatch::collect

namespace gpuwatch::collect {
namespace {

TEST(CpuListTest, ParsesKernelCpuLists) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::vector<unsigned>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList(""), std::vector<unsigned>{});
  EXPECT_EQ(ParseCpuList("5,1-2,2"), (std::vector<unsigned>{1, 2, 5}));
  EXPECT_EQ(ParseCpuList("3-1"), std::nullopt);
  EXPECT_EQ(ParseCpuList("0-99999999"), std::nullopt);  // bounded on any input
  EXPECT_EQ(ParseCpuList("a-b"), std::nullopt);
}

// R11: a process whose CPU affinity excludes its GPU's NUMA node.
TEST(AttributorTest, NumaNodesOfAffinityAgainstTheGpusNode) {
  char tmpl[] = "/tmp/gw-numa-XXXXXX";
  const std::string root = mkdtemp(tmpl);
  auto write = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root + rel).parent_path());
    std::ofstream(root + rel) << text;
  };
  write("/sys/devices/system/node/online", "0-1\n");
  write("/sys/devices/system/node/node0/cpulist", "0-31\n");
  write("/sys/devices/system/node/node1/cpulist", "32-63\n");
  write("/sys/bus/pci/devices/0000:18:00.0/numa_node", "0\n");
  write("/sys/bus/pci/devices/0000:9a:00.0/numa_node", "1\n");
  write("/proc/700/stat", "700 (train) S 1 700 700 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345\n");
  write("/proc/700/status", "Name:\ttrain\nUid:\t0\t0\t0\t0\nCpus_allowed_list:\t32-47\n");
  write("/proc/701/stat", "701 (wide) S 1 701 701 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12346\n");
  write("/proc/701/status", "Name:\twide\nUid:\t0\t0\t0\t0\nCpus_allowed_list:\t0-63\n");
  std::vector<model::GpuStaticInfo> gpus(2);
  gpus[0].index = 0;
  gpus[0].uuid = "GPU-a";
  gpus[0].pci_bus_id = "00000000:18:00.0";
  gpus[1].index = 1;
  gpus[1].uuid = "GPU-b";
  gpus[1].pci_bus_id = "00000000:9A:00.0";
  Attributor attr(root);
  GpuProcessRef p0{0, {}}, p1{1, {}}, p2{0, {}};
  p0.process.pid = 700;  // pinned to node 1's CPUs, using node 0's GPU
  p1.process.pid = 700;  // … and node 1's GPU
  p2.process.pid = 701;  // allowed everywhere
  auto a = attr.Attribute({p0, p1, p2}, gpus);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].cpu_numa_nodes, std::vector<unsigned>{1});
  EXPECT_EQ(a[0].gpu_numa_node, 0);
  EXPECT_TRUE(a[0].numa_mismatch());
  EXPECT_EQ(a[1].gpu_numa_node, 1);
  EXPECT_FALSE(a[1].numa_mismatch());
  EXPECT_EQ(a[2].cpu_numa_nodes, (std::vector<unsigned>{0, 1}));
  EXPECT_FALSE(a[2].numa_mismatch());
  // Without NUMA sysfs nothing is claimed.
  std::filesystem::remove_all(root + "/sys");
  Attributor bare(root);
  auto b = bare.Attribute({p0}, gpus);
  EXPECT_TRUE(b[0].cpu_numa_nodes.empty());
  EXPECT_FALSE(b[0].gpu_numa_node.has_value());
  EXPECT_FALSE(b[0].numa_mismatch());
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace gpuwatch::collect
