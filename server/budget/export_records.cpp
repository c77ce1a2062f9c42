// The host's export records (export_records.h).
#include "export_records.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace gpool::budget {
namespace {

struct Header {
  static constexpr uint32_t kMagic = 0x52585047;  // "GPXR"
  uint32_t magic = kMagic;
  int32_t server = 0;  // the exporter's parent: the gpool-server that started it
  int32_t worker = 0;  // the exporter
  uint32_t reserved = 0;
  uint64_t charge = 0;  // bytes the exporter's lease pays for while the record is held
  RecordSeal seal{};    // the exporter's, from its gpool-server
};
RecordSeal own_seal{};  // this process's (sealRecordsWith)
constexpr size_t kMaxBody = 4096;
constexpr const char* kWithdrawn = ".withdrawn";

bool readHeader(int fd, Header& h) {
  return pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) && h.magic == Header::kMagic;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

RecordFile::RecordFile(RecordFile&& o) noexcept : fd_(o.fd_), withdrawn_(std::move(o.withdrawn_)) {
  o.fd_ = -1;
  o.withdrawn_.clear();
}

RecordFile& RecordFile::operator=(RecordFile&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    withdrawn_ = std::move(o.withdrawn_);
    o.fd_ = -1;
    o.withdrawn_.clear();
  }
  return *this;
}

RecordFile::~RecordFile() { close(); }

void RecordFile::close() {
  if (!withdrawn_.empty()) unlink(withdrawn_.c_str());
  withdrawn_.clear();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// Importers hold a shared lock; the exclusive one is free only once none does. (Taken, it is kept until the
// file closes, which does no harm: the record was withdrawn, so no importer comes any more.)
bool RecordFile::unheld() const { return fd_ < 0 || flock(fd_, LOCK_EX | LOCK_NB) == 0; }

RecordSeal newRecordSeal() {
  RecordSeal seal{};
  for (size_t got = 0; got < seal.size();) {
    ssize_t n = getrandom(seal.data() + got, seal.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return seal;
}

void sealRecordsWith(const RecordSeal& seal) { own_seal = seal; }

std::string recordDirectory(uid_t uid) { return "/dev/shm/gpool-ipc-" + std::to_string(uid); }

bool fileRecord(const std::string& path, const std::vector<uint8_t>& body, uint64_t charge) {
  if (body.size() > kMaxBody) return false;
  Header h;
  h.server = getppid(), h.worker = getpid(), h.charge = charge, h.seal = own_seal;
  std::vector<uint8_t> bytes(sizeof h + body.size());
  std::memcpy(bytes.data(), &h, sizeof h);
  if (!body.empty()) std::memcpy(bytes.data() + sizeof h, body.data(), body.size());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  if (!ok) unlink(path.c_str());
  return ok;
}

bool readRecord(int fd, std::vector<uint8_t>& body) {
  Header h;
  if (!readHeader(fd, h)) return false;
  body.resize(kMaxBody + 1);
  ssize_t n = pread(fd, body.data(), body.size(), sizeof h);
  if (n < 0 || static_cast<size_t>(n) > kMaxBody) return false;
  body.resize(static_cast<size_t>(n));
  return true;
}

bool stillFiled(int fd, const std::string& path) {
  struct stat open_file {}, filed {};
  return fstat(fd, &open_file) == 0 && stat(path.c_str(), &filed) == 0 && open_file.st_dev == filed.st_dev &&
         open_file.st_ino == filed.st_ino;
}

namespace {

// Withdraws the record open as `fd` and filed at `path` (withdrawRecord). Renamed first: an importer that
// opened the file but has not yet locked it then finds it withdrawn.
RecordFile withdrawOpen(int fd, const std::string& path) {
  std::string withdrawn = path + kWithdrawn;
  if (rename(path.c_str(), withdrawn.c_str()) != 0) {
    unlink(path.c_str());
    withdrawn.clear();
  }
  RecordFile file(fd, std::move(withdrawn));
  return file.unheld() ? RecordFile{} : std::move(file);
}

}  // namespace

RecordFile withdrawRecord(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  return fd < 0 ? RecordFile{} : withdrawOpen(fd, path);
}

std::vector<HeldRecord> withdrawAllOf(pid_t worker, uid_t uid, const RecordSeal& seal) {
  std::vector<HeldRecord> held;
  const std::string dir = recordDirectory(uid);
  DIR* d = opendir(dir.c_str());
  if (!d) return held;
  struct Found {
    std::string path;
    int fd;
    uint64_t charge;
  };
  std::vector<Found> found;  // all of them before any is renamed (the directory is read meanwhile)
  while (const dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) continue;  // (the workers' sockets live here too)
    struct stat st {};
    Header h;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid && readHeader(fd, h) && h.server == getpid() &&
        h.worker == worker && h.seal == seal)
      found.push_back(Found{std::move(path), fd, h.charge});
    else
      ::close(fd);
  }
  closedir(d);
  for (Found& f : found) {
    RecordFile file = endsWith(f.path, kWithdrawn) ? RecordFile(f.fd, f.path) : withdrawOpen(f.fd, f.path);
    if (file && !file.unheld() && f.charge > 0) held.push_back(HeldRecord{std::move(file), f.charge});
  }
  return held;
}

}  // namespace gpool::budget
