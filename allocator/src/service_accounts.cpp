#include "service_accounts.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "gpool/allocator/lease_token.h"
#include "gpool/printable.h"

namespace gpool::allocator {
namespace {

// Names as POSIX user and group names are: letters, digits, '.', '_', '-'; not starting with '-'.
bool plainName(const std::string& s) { return gpool::isPlainName(s) && s[0] != '-'; }

}  // namespace

void ServiceAccounts::restore(std::vector<ServiceAccount> accounts) {
  by_name_.clear();
  name_by_hash_.clear();
  for (auto& a : accounts) {
    name_by_hash_[a.key_hash] = a.name;
    by_name_[a.name] = std::move(a);
  }
}

std::string ServiceAccounts::issue(const std::string& name, const std::vector<std::string>& groups, bool rotate, int64_t now_unix_s) {
  if (!plainName(name)) throw std::invalid_argument("a service account's name is 1-64 letters, digits, '.', '_' or '-'");
  for (const auto& g : groups)
    if (!plainName(g)) throw std::invalid_argument("group '" + g + "' is not 1-64 letters, digits, '.', '_' or '-'");
  auto it = by_name_.find(name);
  if (it != by_name_.end() && !rotate)
    throw std::invalid_argument("service account '" + name + "' exists: rotate its key (--rotate) or delete it first");
  if (it == by_name_.end() && rotate) throw std::invalid_argument("no service account '" + name + "' to rotate");
  std::string key = kKeyPrefix + token::randomHex(32);
  ServiceAccount a{name, groups, token::sha256Hex(key), now_unix_s};
  if (it != by_name_.end()) {
    name_by_hash_.erase(it->second.key_hash);
    if (groups.empty()) a.groups = it->second.groups;  // rotating keeps the groups unless new ones are given
  }
  name_by_hash_[a.key_hash] = name;
  by_name_[name] = std::move(a);
  return key;
}

bool ServiceAccounts::remove(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return false;
  name_by_hash_.erase(it->second.key_hash);
  by_name_.erase(it);
  return true;
}

const ServiceAccount* ServiceAccounts::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

std::optional<Identity> ServiceAccounts::identify(const std::string& key) const {
  if (key.rfind(kKeyPrefix, 0) != 0) return std::nullopt;
  auto it = name_by_hash_.find(token::sha256Hex(key));
  if (it == name_by_hash_.end()) return std::nullopt;
  const ServiceAccount& a = by_name_.at(it->second);
  Identity id;
  id.via = Via::kServiceKey;
  id.user = a.name;
  id.groups = a.groups;
  id.group = a.groups.empty() ? "" : a.groups.front();
  return id;
}

}  // namespace gpool::allocator
