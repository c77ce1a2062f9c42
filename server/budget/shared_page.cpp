#include "shared_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gpool::budget {
namespace {

void* mapPage(int fd, size_t bytes, const char* what) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map the ") + what + ": " + std::strerror(errno));
  return p;
}

}  // namespace

void* createSharedPage(size_t bytes, int lowest, const char* what, int& fd) {
  fd = ::memfd_create("gpool-shared", MFD_CLOEXEC);
  if (fd >= 0 && fd < lowest) {  // above the numbers a worker receives descriptors at
    int high = ::fcntl(fd, F_DUPFD_CLOEXEC, lowest);
    ::close(fd);
    fd = high;
  }
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(std::string("cannot make a shared ") + what + ": " + why);
  }
  try {
    return mapPage(fd, bytes, what);
  } catch (...) {
    ::close(fd);
    throw;
  }
}

void* adoptSharedPage(int fd, size_t bytes, uint64_t magic, const char* what) {
  struct stat st{};
  const std::string not_one = "descriptor " + std::to_string(fd) + " is not a gpool " + what;
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes || bytes < sizeof magic)
    throw std::runtime_error(not_one);
  void* p = mapPage(fd, bytes, what);
  uint64_t first = 0;
  std::memcpy(&first, p, sizeof first);
  if (first != magic) {
    ::munmap(p, bytes);
    throw std::runtime_error(not_one);
  }
  return p;
}

void releaseSharedPage(void* page, size_t bytes, int fd) {
  ::munmap(page, bytes);
  ::close(fd);
}

}  // namespace gpool::budget
