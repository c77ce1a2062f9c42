// gpool admin: partition policies, draining servers, enrolling their keys, service accounts and queues.
// Each is a request the allocator checks (admins only: its key, or a user the policy's access.admins names).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "allocator_client.h"

namespace gpool::cli {

// gpool admin queue set: the settings given, as the TOML keys of a [queues.NAME] table.
struct QueueFlags {
  std::string name, parent, guarantee_memory, limit_memory;
  std::optional<double> guarantee, limit, weight;
  std::vector<std::string> members;

  std::string toml() const;
};

class AdminCommands {
 public:
  // Declares `gpool admin` and its subcommands on `app`.
  void declare(CLI::App& app);
  bool chosen() const { return admin_ && static_cast<bool>(*admin_); }
  // Runs the subcommand the command line chose: gpool's exit status (dies with a message on an error).
  int run(AllocatorClient& a);

 private:
  void declarePolicy();
  void declareServers();
  void declareServiceAccounts();
  void declareQueues();
  int policy(AllocatorClient& a);
  int serviceAccount(AllocatorClient& a);
  int queue(AllocatorClient& a);
  int server(AllocatorClient& a);

  CLI::App *admin_ = nullptr, *policy_ = nullptr, *drain_ = nullptr, *servers_ = nullptr, *enroll_ = nullptr,
           *accounts_ = nullptr, *queues_ = nullptr;
  std::string key_file_, policy_file_, server_, server_pub_, account_, key_out_;
  std::vector<std::string> account_groups_;
  bool undo_ = false;
  QueueFlags queue_;
};

}  // namespace gpool::cli
