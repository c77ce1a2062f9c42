// CUDA_VISIBLE_DEVICES over a lease, and the UUIDs its devices show (visible_devices.h).
#include "visible_devices.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "lease_shares.h"

namespace gpool::client {
namespace {

bool isUuidEntry(const std::string& entry) {
  return entry.size() > 4 && std::equal(entry.begin(), entry.begin() + 4, "GPU-", [](char a, char b) {
           return std::toupper(static_cast<unsigned char>(a)) == b;
         });
}

bool startsWithIgnoringCase(const std::string& text, const std::string& prefix) {
  return prefix.size() <= text.size() && std::equal(prefix.begin(), prefix.end(), text.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
         });
}

// The device an entry names, or -1: an index below `count`, or the one UUID that starts with it.
int deviceNamed(const std::string& entry, int count, const std::vector<std::string>& uuids) {
  if (isUuidEntry(entry)) {
    int found = -1;
    for (size_t i = 0; i < uuids.size(); ++i) {
      if (!startsWithIgnoringCase(uuids[i], entry)) continue;
      if (found >= 0) return -1;  // the start of several: CUDA takes neither
      found = static_cast<int>(i);
    }
    return found;
  }
  char* end = nullptr;
  long v = std::strtol(entry.c_str(), &end, 10);
  return entry.empty() || *end || v < 0 || v >= count ? -1 : static_cast<int>(v);
}

}  // namespace

bool namesDevicesByUuid(const char* env) {
  if (!env) return false;
  std::stringstream in(env);
  for (std::string entry; std::getline(in, entry, ',');)
    if (isUuidEntry(entry)) return true;
  return false;
}

std::vector<int> visibleDevices(const char* env, int count, const std::vector<std::string>& uuids, std::string& ignored) {
  std::vector<int> out;
  if (!env) {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::stringstream in(env);
  for (std::string entry; std::getline(in, entry, ',');) {
    int d = deviceNamed(entry, count, uuids);
    if (d < 0 || std::find(out.begin(), out.end(), d) != out.end()) {
      ignored = entry;
      break;
    }
    out.push_back(d);
  }
  return out;
}

std::vector<bool> repeatedShares(const std::vector<Share>& lease) {
  std::vector<bool> repeat(lease.size(), false);
  for (size_t i = 0; i < lease.size(); ++i)
    for (size_t j = 0; j < i && !repeat[i]; ++j)
      repeat[i] = lease[j].address == lease[i].address && lease[j].device == lease[i].device;
  return repeat;
}

void keepUuidsApart(std::vector<LeaseDevice>& devices) {
  for (size_t d = 0; d < devices.size(); ++d) {
    auto taken = [&](const Uuid& u) {
      for (size_t e = 0; e < d; ++e)
        if (devices[e].uuid == u) return true;
      return false;
    };
    Uuid& uuid = devices[d].uuid;
    if (!devices[d].repeat && !taken(uuid)) continue;
    uuid[6] = static_cast<uint8_t>((uuid[6] & 0x0f) | 0x80);
    const uint8_t last = uuid[15];
    const unsigned position = static_cast<unsigned>(devices[d].position);
    uuid[15] = static_cast<uint8_t>(last ^ position);
    for (unsigned k = 1; k < 256 && taken(uuid); ++k) uuid[15] = static_cast<uint8_t>(last ^ (position + k));
  }
}

}  // namespace gpool::client
