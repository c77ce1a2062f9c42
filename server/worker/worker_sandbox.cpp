#include "worker_sandbox.h"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gpool/landlock_abi.h"
#include "no_new_processes.h"

namespace gpool::worker {

namespace {

// Landlock's access rights and scopes as its ABI numbers them (the system's header may predate the newer ones).
constexpr uint64_t kExecute = 1ull << 0, kWriteFile = 1ull << 1, kReadFile = 1ull << 2, kReadDir = 1ull << 3,
                   kRemoveDir = 1ull << 4, kRemoveFile = 1ull << 5, kMakeChar = 1ull << 6, kMakeDir = 1ull << 7,
                   kMakeReg = 1ull << 8, kMakeSock = 1ull << 9, kMakeFifo = 1ull << 10, kMakeBlock = 1ull << 11,
                   kMakeSym = 1ull << 12, kRefer = 1ull << 13, kTruncate = 1ull << 14;
constexpr uint64_t kScopeSignal = 1ull << 1;
// LANDLOCK_RESTRICT_SELF_TSYNC (ABI 8, Linux 7.0): every thread of the process, not only the calling one and
// those it starts after (on a GPU, threads NVIDIA's driver started while the worker opened the device).
constexpr uint32_t kEveryThread = 1u << 3;
constexpr uint64_t kFileRights = kExecute | kWriteFile | kReadFile | kTruncate;  // (all a rule on a file may grant)

struct RulesetAttr {  // struct landlock_ruleset_attr as of ABI 6; older kernels are given its first fields
  uint64_t handled_access_fs = 0;
  uint64_t handled_access_net = 0;
  uint64_t scoped = 0;
};

// The rights this worker's ruleset restricts, for the kernel's ABI. Not LANDLOCK_ACCESS_FS_IOCTL_DEV (ABI 5):
// the driver is ioctls on its device files, which stay as the files' modes allow.
uint64_t handled(int abi) {
  uint64_t rights = kExecute | kWriteFile | kReadFile | kReadDir | kRemoveDir | kRemoveFile | kMakeChar | kMakeDir |
                    kMakeReg | kMakeSock | kMakeFifo | kMakeBlock | kMakeSym;
  if (abi >= 2) rights |= kRefer;
  if (abi >= 3) rights |= kTruncate;
  return rights;
}

constexpr uint64_t kRead = kReadFile | kReadDir | kExecute;
constexpr uint64_t kOpenDevice = kReadFile | kWriteFile;  // (a character device: opened, not made nor listed)
constexpr uint64_t kWrite = kRead | kWriteFile | kTruncate | kMakeReg | kMakeDir | kRemoveFile | kRemoveDir;

// What the loader, libc and NVIDIA's driver read of the system; a path that does not exist is left out.
const char* const kSystemReads[] = {"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/sys",
                                    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
                                    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf",
                                    "/etc/resolv.conf", "/etc/gai.conf", "/etc/nvidia", "/etc/ucx", "/etc/libibverbs.d",
                                    "/etc/rdma"};
const char* const kDevices[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};

// Adds a rule granting `rights` (what the kernel handles of them) beneath `path`. False (and errno) when the
// kernel refuses it; a path that is not there is skipped.
bool allow(int ruleset, const std::string& path, uint64_t rights, uint64_t handled_rights) {
  int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR || errno == EACCES;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) rights &= kFileRights;
  landlock_path_beneath_attr rule{};
  rule.allowed_access = rights & handled_rights;
  rule.parent_fd = fd;
  long rc = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  int saved = errno;
  ::close(fd);
  errno = saved;
  return rc == 0;
}

// NVIDIA's device files (/dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-caps/...) and RDMA's (/dev/infiniband).
std::vector<std::string> driverDevices() {
  std::vector<std::string> found = {"/dev/infiniband", "/dev/dri"};
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec))
    if (entry.path().filename().string().rfind("nvidia", 0) == 0) found.push_back(entry.path().string());
  return found;
}

// What /proc holds but other processes' directories: the kernel's own files (/proc/driver/nvidia, cpuinfo,
// sys, ...) and /proc/self, which is this process's. Another process's environment, command line and status
// stay out of reach (its memory already is: Landlock's own check on tracing).
std::vector<std::string> procButOtherProcesses() {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) found.push_back(entry.path().string());
  }
  return found;
}

void addDirectoriesOf(const char* list, std::vector<std::string>& into) {
  if (!list) return;
  std::string all = list;
  for (size_t at = 0; at <= all.size();) {
    size_t end = all.find(':', at);
    if (end == std::string::npos) end = all.size();
    if (end > at) into.push_back(all.substr(at, end - at));
    at = end + 1;
  }
}

}  // namespace

SandboxPaths workerPaths(const std::string& module_cache, const std::string& jit_cache, const std::vector<std::string>& plugins) {
  SandboxPaths paths;
  for (const std::string& cache : {module_cache, jit_cache})
    if (!cache.empty()) paths.write.push_back(cache);
  paths.read = plugins;
  addDirectoriesOf(std::getenv("LD_LIBRARY_PATH"), paths.read);
  std::error_code ec;
  if (auto self = std::filesystem::read_symlink("/proc/self/exe", ec); !ec) paths.read.push_back(self.string());
  return paths;
}

int enterSandbox(const SandboxPaths& paths, std::string& why, bool* every_thread) {
  if (!forbidNewProcesses(why)) return -1;
  int abi = landlockAbi(why);
  if (abi < 1) return 0;
  RulesetAttr attr;
  attr.handled_access_fs = handled(abi);
  if (abi >= 6) attr.scoped = kScopeSignal;
  size_t size = abi >= 6 ? sizeof attr : abi >= 4 ? 2 * sizeof(uint64_t) : sizeof(uint64_t);
  int ruleset = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, size, 0));
  if (ruleset < 0) {
    why = std::string("landlock_create_ruleset: ") + std::strerror(errno);
    return -1;
  }
  bool ok = true;
  std::string failed;
  auto grant = [&](const std::string& path, uint64_t rights) {
    if (ok && !allow(ruleset, path, rights, attr.handled_access_fs)) ok = false, failed = path + ": " + std::strerror(errno);
  };
  for (const char* path : kSystemReads) grant(path, kRead);
  for (const char* path : kDevices) grant(path, kOpenDevice);
  for (const std::string& path : driverDevices()) grant(path, kOpenDevice | kReadDir);
  // CUDA's and gpool's IPC records, and the sockets that hand over shared descriptors: opened by name, not listed.
  grant("/dev/shm", (kWrite | kMakeSock) & ~kReadDir & ~kExecute);
  for (const std::string& path : procButOtherProcesses()) grant(path, kRead & ~kExecute);
  grant("/proc/" + std::to_string(::getpid()), kReadFile | kReadDir | kWriteFile);  // (its own: thread names, settings)
  for (const std::string& path : paths.read) grant(path, kRead);
  for (const std::string& path : paths.write) grant(path, kWrite | kRefer);  // (a cache may move an entry between its directories)
  if (ok && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ok = false, failed = std::string("no_new_privs: ") + std::strerror(errno);
  bool every = abi >= 8 && ok && ::syscall(SYS_landlock_restrict_self, ruleset, kEveryThread) == 0;
  if (ok && !every && ::syscall(SYS_landlock_restrict_self, ruleset, 0) != 0)  // (and where every thread failed)
    ok = false, failed = std::string("landlock_restrict_self: ") + std::strerror(errno);
  if (every_thread) *every_thread = every;
  ::close(ruleset);
  if (!ok) {
    why = failed;
    return -1;
  }
  return abi;
}

}  // namespace gpool::worker
