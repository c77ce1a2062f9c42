// Replicas' leader key (issue 16), against a real etcd: one member started here on loopback (skipped
// where etcd is not installed). A leader whose etcd lease lapsed can write nothing, even before it
// notices; a standby takes over at once when the leader resigns.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "etcd_client.h"
#include "etcd_leader.h"
#include "etcd_store.h"
#include "model_json.h"

extern char** environ;

namespace gpool::allocator {
namespace {

using nlohmann::json;

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class OneEtcd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "etcd is not installed (apt-get install etcd-server)";
    char tmpl[] = "/tmp/gpool-etcd-leader-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    std::string client = "http://127.0.0.1:" + std::to_string(freePort()), peer = "http://127.0.0.1:" + std::to_string(freePort());
    url_ = "etcd://" + client.substr(7);
    std::vector<std::string> args = {"/usr/bin/etcd", "--data-dir", dir_ + "/data", "--listen-client-urls", client,
                                     "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                     "--initial-advertise-peer-urls", peer, "--initial-cluster", "default=" + peer,
                                     "--log-level", "error"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t output;  // its log, beside its data
    posix_spawn_file_actions_init(&output);
    posix_spawn_file_actions_addopen(&output, 2, (dir_ + "/log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&output, 2, 1);
    int spawned = ::posix_spawn(&pid_, argv[0], &output, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&output);
    ASSERT_EQ(spawned, 0);
    EtcdClient probe(url_, 1);
    for (int i = 0; i < 100; ++i) {
      try {
        probe.call("/v3/maintenance/status", json::object());
        return;
      } catch (const StoreError&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    FAIL() << "etcd did not start";
  }
  void TearDown() override {
    if (pid_ > 0) ::kill(pid_, SIGTERM), ::waitpid(pid_, nullptr, 0);
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  Campaign campaign(const std::string& me) {
    Campaign c;
    c.me = me;
    c.ttl_s = 2;
    c.stop = &stop_;
    c.lost = [] {};
    return c;
  }
  std::string dir_, url_;
  pid_t pid_ = -1;
  std::atomic<bool> stop_{false};
};

TEST_F(OneEtcd, ALeaderWhoseLeaseLapsedWritesNothingEvenBeforeItKnows) {
  EtcdStore a(url_);
  ASSERT_TRUE(a.lead(campaign("http://a")));
  Changes mine;
  mine.policy = "# written by a, leading\n";
  a.write(mine);
  EXPECT_EQ(a.policyText(), mine.policy);
  // a's lease lapses, as when it is stopped or cut off past its time to live: here it is revoked at once,
  // before a's keeper (renewing every 2/3 s) can notice. b takes the lead.
  EtcdClient etcd(url_);
  for (const auto& l : etcd.call("/v3/lease/leases", json::object()).value("leases", json::array()))
    etcd.call("/v3/lease/revoke", {{"ID", l.at("ID")}});
  EtcdStore b(url_);
  ASSERT_TRUE(b.lead(campaign("http://b")));
  Changes stale;
  stale.policy = "# written by a, deposed\n";
  stale.leases["L1"] = {LeaseState::kGranted, "{}"};
  EXPECT_THROW(a.write(stale), StoreDeposed);
  EXPECT_EQ(b.policyText(), mine.policy);
  EXPECT_TRUE(b.leases(true).empty());
  Changes next;
  next.policy = "# written by b\n";
  b.write(next);  // the leader writes on
  EXPECT_EQ(b.policyText(), next.policy);
}

TEST_F(OneEtcd, AStandbyWaitsWhileTheLeaderLeadsAndTakesOverWhenItResigns) {
  auto a = std::make_unique<EtcdStore>(url_);
  ASSERT_TRUE(a->lead(campaign("http://a")));
  EtcdStore b(url_);
  std::atomic<bool> leads{false};
  std::vector<std::string> told;
  Campaign cb = campaign("http://b");
  cb.standing_by = [&](const std::string& leader) { told.push_back(leader); };
  std::thread t([&] { leads = b.lead(cb); });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past a's time to live: a renews it
  EXPECT_FALSE(leads);
  auto resigned = std::chrono::steady_clock::now();
  a.reset();  // resigns: its lease is revoked, the key goes, b's watch sees it
  t.join();
  EXPECT_TRUE(leads);
  EXPECT_LT(std::chrono::steady_clock::now() - resigned, std::chrono::seconds(2));
  EXPECT_EQ(told, std::vector<std::string>{"http://a"});
}

TEST_F(OneEtcd, EndedLeasesMoveAsideSoThatANewLeaderReadsOnlyLiveOnes) {
  EtcdStore a(url_);
  ASSERT_TRUE(a.lead(campaign("http://a")));
  Lease l;
  l.id = "L1";
  l.state = LeaseState::kGranted;
  Changes granted;
  granted.leases["L1"] = {l.state, toJson(l, LeaseView::kRecord).dump()};
  a.write(granted);
  EXPECT_EQ(a.leases(false).count("L1"), 1u);
  l.state = LeaseState::kEnded;
  l.ended_unix_s = 1000;
  Changes ended;
  ended.leases["L1"] = {l.state, toJson(l, LeaseView::kRecord).dump()};
  a.write(ended);
  EtcdClient etcd(url_);
  auto count = [&](const std::string& key) {
    return etcd.call("/v3/kv/range", {{"key", etcdBase64(key)}, {"count_only", true}}).value("count", "0");
  };
  EXPECT_EQ(count("/gpool/leases/L1"), "0");
  EXPECT_EQ(count("/gpool/ended/L1"), "1");
  EXPECT_TRUE(a.leases(false).empty());
  EXPECT_EQ(a.leases(true).at("L1").state, LeaseState::kEnded);
  EXPECT_EQ(a.forgetEndedBefore(999), 0);
  EXPECT_EQ(a.forgetEndedBefore(1001), 1);
  EXPECT_TRUE(a.leases(true).empty());
}

TEST_F(OneEtcd, ReplicasWithDifferentKeysAreToldWhichFileToShare) {
  EtcdStore a(url_), b(url_);
  a.agreeOn("token-key", "aaaa", "give every replica the same file");
  a.agreeOn("token-key", "aaaa", "give every replica the same file");  // the same key: fine, again
  try {
    b.agreeOn("token-key", "bbbb", "give every replica the same file");
    FAIL() << "a replica with another key was let in";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("give every replica the same file"), std::string::npos) << e.what();
  }
}

// etcd's gateway ends an error answer with an HTTP trailer; the refusal must still reach the admin as
// etcd's reason and gpool's remedy, not as "no etcd member answered" (which sends one looking at the network).
TEST_F(OneEtcd, ARefusalReachesTheAdminWithEtcdsReasonAndTheRemedy) {
  EtcdClient etcd(url_, 2);
  json puts = json::array();
  for (int i = 0; i < 200; ++i)  // over etcd's default --max-txn-ops (128)
    puts.push_back({{"request_put", {{"key", etcdBase64("/gpool/t/" + std::to_string(i))}, {"value", etcdBase64("v")}}}});
  try {
    etcd.call("/v3/kv/txn", {{"success", puts}});
    FAIL() << "etcd took 200 operations in one transaction";
  } catch (const StoreError& e) {
    std::string why = e.what();
    EXPECT_NE(why.find("refused /v3/kv/txn: 400"), std::string::npos) << why;
    EXPECT_NE(why.find("too many operations in txn request"), std::string::npos) << why;
    EXPECT_NE(why.find("start etcd with a larger --max-txn-ops"), std::string::npos) << why;
  }
  EXPECT_EQ(etcd.call("/v3/kv/range", {{"key", etcdBase64("/gpool/t/0")}}).value("count", "0"), "0");  // and it serves on
}

}  // namespace
}  // namespace gpool::allocator
