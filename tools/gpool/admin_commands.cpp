#include "admin_commands.h"

#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <utility>

#include "cli_common.h"
#include "gpool/allocator/lease_token.h"
#include "gpool/printable.h"
#include "status_report.h"

namespace gpool::cli {

using nlohmann::json;

// Strings quoted as JSON writes them, which TOML reads alike.
std::string QueueFlags::toml() const {
  auto quoted = [](const std::string& v) { return json(v).dump(); };
  auto quota = [&](const std::optional<double>& gpus, const std::string& memory) {
    std::string parts;
    if (gpus) parts += "gpus = " + json(*gpus).dump();
    if (!memory.empty()) parts += (parts.empty() ? "" : ", ") + std::string("memory = ") + quoted(memory);
    return "{ " + parts + " }";
  };
  std::string out;
  if (!parent.empty()) out += "parent = " + quoted(parent) + "\n";
  if (guarantee || !guarantee_memory.empty()) out += "guarantee = " + quota(guarantee, guarantee_memory) + "\n";
  if (limit || !limit_memory.empty()) out += "limit = " + quota(limit, limit_memory) + "\n";
  if (weight) out += "weight = " + json(*weight).dump() + "\n";
  if (!members.empty()) {
    std::string list;
    for (const auto& m : members) list += (list.empty() ? "" : ", ") + quoted(m);
    out += "members = [" + list + "]\n";
  }
  return out;
}

void AdminCommands::declare(CLI::App& app) {
  admin_ = app.add_subcommand("admin", "change partition policies, drain servers, manage service accounts (admins: "
                                       "the allocator's key, or a user the policy's access.admins names)");
  admin_->require_subcommand(1);
  key_file_ = env("GPOOL_KEY_FILE");
  admin_->add_option("--key-file", key_file_, "sign with the allocator's key file instead of proving who you are (default: $GPOOL_KEY_FILE)");
  declarePolicy();
  drain_ = admin_->add_subcommand("drain", "stop granting new shares on SERVER (running leases continue)");
  drain_->add_option("server", server_, "server name")->required();
  drain_->add_flag("--undo", undo_, "put the server back in service");
  declareServers();
  declareServiceAccounts();
  declareQueues();
}

void AdminCommands::declarePolicy() {
  policy_ = admin_->add_subcommand("policy", "show or replace the partition policy (TOML, see docs/admin.md)");
  policy_->require_subcommand(1);
  policy_->add_subcommand("show", "print the policy in force");
  auto* set = policy_->add_subcommand("set", "replace the policy with TOML text given as an argument or on stdin (-)");
  set->add_option("toml", policy_file_, "TOML text, or - for stdin")->required();
  auto* apply = policy_->add_subcommand("apply", "check FILE, then replace the policy with it");
  apply->add_option("file", policy_file_, "TOML policy file")->required()->check(CLI::ExistingFile);
}

void AdminCommands::declareServers() {
  servers_ = admin_->add_subcommand("server", "enroll a gpool-server's key (its requests are refused until then), or "
                                              "unenroll it");
  servers_->require_subcommand(1);
  enroll_ = servers_->add_subcommand("enroll", "enroll SERVER with the public key its --server-key made (FILE.pub)");
  enroll_->add_option("server", server_, "server name (gpool-server --name)")->required();
  enroll_->add_option("public_key", server_pub_, "the server's public key file (PEM)")->required()->check(CLI::ExistingFile);
  servers_->add_subcommand("unenroll", "refuse SERVER's requests from now on")->add_option("server", server_, "server name")->required();
}

void AdminCommands::declareServiceAccounts() {
  accounts_ = admin_->add_subcommand("service-account", "identities for programs without a user on a cluster host; "
                                                        "each has a key, shown once");
  accounts_->require_subcommand(1);
  for (auto [verb, help] : {std::pair{"create", "create NAME and print its key (or write it to -o FILE)"},
                            std::pair{"rotate", "give NAME a new key (the old one stops working at once)"}}) {
    auto* c = accounts_->add_subcommand(verb, help);
    c->add_option("name", account_, "service account name")->required();
    c->add_option("-g,--group", account_groups_, "a group it belongs to (repeat; the first is charged for its leases)");
    c->add_option("-o,--output", key_out_, "write the key to FILE (mode 0600) instead of printing it");
  }
  accounts_->add_subcommand("delete", "delete NAME: its key stops working")->add_option("name", account_, "service account name")->required();
  accounts_->add_subcommand("list", "list service accounts and their groups (never their keys)");
}

void AdminCommands::declareQueues() {
  queues_ = admin_->add_subcommand("queue", "change the policy's queues at run time (guarantees, limits, weights, members; "
                                            "see docs/admin.md); the policy in force is rewritten without its comments");
  queues_->require_subcommand(1);
  QueueFlags& q = queue_;
  auto* set = queues_->add_subcommand("set", "create queue NAME, or change the settings given (the others stay)");
  set->add_option("name", q.name, "queue name")->required();
  set->add_option("--parent", q.parent, "the queue it is part of");
  set->add_option("--guarantee", q.guarantee, "GPUs guaranteed (a sum of fractions)");
  set->add_option("--guarantee-memory", q.guarantee_memory, "GPU memory guaranteed, e.g. 160GiB");
  set->add_option("--limit", q.limit, "the most GPUs it may hold, borrowing included");
  set->add_option("--limit-memory", q.limit_memory, "the most GPU memory it may hold");
  set->add_option("--weight", q.weight, "its share of idle capacity beyond guarantees, relative to other queues");
  set->add_option("--member", q.members, "a user, or @group, whose requests it takes (repeat; replaces the members)");
  queues_->add_subcommand("delete", "remove queue NAME (its members' requests then belong to no queue)")
      ->add_option("name", q.name, "queue name")
      ->required();
}

int AdminCommands::run(AllocatorClient& a) {
  if (!key_file_.empty()) {
    try {
      a.admin_key = gpool::token::loadKey(key_file_, false);
    } catch (const std::exception& e) {
      die(kExitUsage, e.what());
    }
  }
  if (*policy_) return policy(a);
  if (*drain_) {
    must(a, "POST", "/v1/servers/" + server_ + "/drain", Proof::kIdentity, json{{"drain", !undo_}}.dump());
    std::printf("%s %s\n", server_.c_str(), undo_ ? "is back in service" : "drained: no new shares (running leases continue)");
    return 0;
  }
  if (*accounts_) return serviceAccount(a);
  if (*queues_) return queue(a);
  if (*servers_) return server(a);
  return 0;
}

// gpool admin policy show|set|apply. The allocator checks a new policy before it takes it; one it refuses
// (400) is a usage error, its message naming the key at fault.
int AdminCommands::policy(AllocatorClient& a) {
  if (policy_->got_subcommand("show")) {
    auto [st, text] = a.call("GET", "/v1/policy", Proof::kNone);
    if (st != 200) die(kExitAllocator, text);
    std::cout << text;
    return 0;
  }
  bool inline_text = policy_->got_subcommand("set") && policy_file_ != "-" && !std::filesystem::exists(policy_file_);
  std::string text = inline_text ? policy_file_ : readFile(policy_file_);
  auto [st, answer] = a.call("PUT", "/v1/policy", Proof::kIdentity, text);
  if (st == 400) die(kExitUsage, errorText(answer));
  json r = must(st, answer);
  std::printf("policy replaced (%d pools)\n", r.value("pools", 0));
  for (const auto& note : r.value("notes", json::array())) std::printf("note: %s\n", note.get<std::string>().c_str());
  return 0;
}

// gpool admin service-account ...: issue, rotate, list and delete service accounts' keys.
int AdminCommands::serviceAccount(AllocatorClient& a) {
  if (accounts_->got_subcommand("list")) {
    json r = must(a, "GET", "/v1/service-accounts", Proof::kIdentity);
    std::printf("%-24s %s\n", "NAME", "GROUPS");
    for (const auto& acct : r["service_accounts"]) {
      std::string gs;
      for (const auto& g : acct["groups"]) gs += (gs.empty() ? "" : ",") + gpool::printable(g.get<std::string>());
      std::printf("%-24s %s\n", gpool::printable(acct["name"].get<std::string>()).c_str(), gs.c_str());
    }
    return 0;
  }
  if (accounts_->got_subcommand("delete")) {
    must(a, "DELETE", "/v1/service-accounts/" + account_, Proof::kIdentity);
    std::printf("service account %s deleted: its key no longer works\n", account_.c_str());
    return 0;
  }
  bool rotate = accounts_->got_subcommand("rotate");
  json r = must(a, "POST", "/v1/service-accounts", Proof::kIdentity,
                json{{"name", account_}, {"groups", account_groups_}, {"rotate", rotate}}.dump());
  std::string key = r.at("key");
  if (key_out_.empty() || key_out_ == "-") {
    std::printf("%s\n", key.c_str());
    return 0;
  }
  int fd = ::open(key_out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, (key + "\n").data(), key.size() + 1) != static_cast<ssize_t>(key.size() + 1))
    die(kExitUsage, "cannot write " + key_out_ + ": " + std::strerror(errno) + " (the key was issued; rotate it and retry)");
  ::close(fd);
  std::fprintf(stderr, "gpool: %s's key written to %s (mode 0600); give it with GPOOL_SERVICE_KEY_FILE\n", account_.c_str(),
               key_out_.c_str());
  return 0;
}

int AdminCommands::queue(AllocatorClient& a) {
  bool remove = queues_->got_subcommand("delete");
  json r = remove ? must(a, "DELETE", "/v1/queues/" + queue_.name, Proof::kIdentity)
                  : must(a, "PUT", "/v1/queues/" + queue_.name, Proof::kIdentity, queue_.toml());
  std::printf("queue %s %s\n", queue_.name.c_str(), remove ? "removed" : "set");
  printQueues(r["queues"]);
  return 0;
}

int AdminCommands::server(AllocatorClient& a) {
  if (*enroll_) {
    must(a, "PUT", "/v1/servers/" + server_ + "/key", Proof::kIdentity, readFile(server_pub_));
    std::printf("%s enrolled: the allocator accepts its requests signed with that key\n", server_.c_str());
  } else {
    must(a, "DELETE", "/v1/servers/" + server_ + "/key", Proof::kIdentity);
    std::printf("%s unenrolled: its requests are refused\n", server_.c_str());
  }
  return 0;
}

}  // namespace gpool::cli
