// Throughputs measured from jobs' progress reports (issue 15): they take the place of the policy's
// [job_kinds] table for a kind once it has been seen on every type the table names, and placement follows.
#include <gtest/gtest.h>

#include <cmath>

#include "scheduler_fixtures.h"
#include "throughput.h"

using namespace gpool::allocator;
using namespace gpool::allocator::fixtures;

TEST(Throughputs, MeasurementsReplaceTheTableOnlyOnceEveryTypeOfItIsMeasured) {
  Policy p = parsePolicy("[job_kinds.gan]\nK80 = 1\nV100 = 2\n");
  Throughputs t;
  EXPECT_DOUBLE_EQ(t.relative(p, "gan", "K80"), 0.5);  // the table
  t.add("gan", "V100", 90, 1.0);
  EXPECT_DOUBLE_EQ(t.relative(p, "gan", "K80"), 0.5);  // one type measured: its units are not the table's
  t.add("gan", "K80", 10, 0.5);                         // 10 per second on half a K80: 20 on a whole one
  EXPECT_NEAR(t.relative(p, "gan", "K80"), 20.0 / 90, 1e-12);
  EXPECT_DOUBLE_EQ(t.relative(p, "gan", "V100"), 1.0);
  t.add("gan", "K80", 70, 1.0);  // a moving average: 0.8 x 20 + 0.2 x 70 = 30
  EXPECT_NEAR(t.relative(p, "gan", "K80"), 30.0 / 90, 1e-12);
  EXPECT_EQ(t.measured().at("gan").at("K80").samples, 2);
  // A kind the table does not name: measured once seen on two types; 1 (alike) before.
  EXPECT_DOUBLE_EQ(t.relative(p, "lm", "K80"), 1.0);
  EXPECT_FALSE(t.knows(p, "lm"));
  t.add("lm", "K80", 5, 1.0);
  t.add("lm", "V100", 10, 1.0);
  EXPECT_TRUE(t.knows(p, "lm"));
  EXPECT_DOUBLE_EQ(t.relative(p, "lm", "K80"), 0.5);
  EXPECT_DOUBLE_EQ(t.relative(p, "lm", "P100"), 1.0);  // never seen there: what the table says (nothing)
  t.add("lm", "V100", std::nan(""), 1.0);              // junk is not a measurement
  t.add("", "V100", 3, 1.0);
  EXPECT_EQ(t.measured().at("lm").at("V100").samples, 1);
  EXPECT_EQ(t.measured().count(""), 0u);
}

TEST(Throughputs, ProgressReportsTeachPlacementWhereAKindRunsFastest) {
  Scheduler s = make("[settings]\nlease_ttl = \"100h\"\nserver_timeout = \"100h\"\n");
  s.registerServer(typed("k80s", 2, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 2, "Tesla V100-SXM2-16GB"), 0);
  LeaseRequest r = req("u");
  r.kind = "gan";
  ASSERT_EQ(s.request(r, 0, "A").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("A")->shares[0].server, "k80s");  // nothing known: the first that fits
  ASSERT_EQ(s.request(r, 0, "B").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("B")->shares[0].server, "v100s");  // (the type with the most room)
  EXPECT_TRUE(s.reportProgress("A", 0, 1000));  // the first report: where counting starts
  EXPECT_TRUE(s.reportProgress("B", 0, 1000));
  EXPECT_TRUE(s.reportProgress("A", 10, 11000));   // 1 per second on a K80
  EXPECT_TRUE(s.reportProgress("B", 90, 11000));   // 9 per second on a V100
  EXPECT_NEAR(s.speedOf("gan", "K80"), 1.0 / 9, 1e-12);
  EXPECT_TRUE(s.end("A", "released", 12000));
  EXPECT_TRUE(s.end("B", "released", 12000));
  ASSERT_EQ(s.request(r, 12000, "D").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("D")->shares[0].server, "v100s");  // now known: the faster type first
  EXPECT_FALSE(s.reportProgress("A", 20, 13000));      // ended: not counted
  EXPECT_FALSE(s.reportProgress("nope", 20, 13000));
}

TEST(Throughputs, KernelLaunchesCountWhereJobsReportNoProgressAndProgressComesFirst) {
  Scheduler s = make("[settings]\nlease_ttl = \"100h\"\nserver_timeout = \"100h\"\n");
  s.registerServer(typed("k80s", 1, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 1, "Tesla V100-SXM2-16GB"), 0);
  LeaseRequest r = req("u");
  r.kind = "gan";
  ASSERT_EQ(s.request(r, 0, "A").kind, Decision::kGranted);
  ASSERT_EQ(s.request(r, 0, "B").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("A")->shares[0].server, "k80s");
  EXPECT_FALSE(s.reportLaunches("v100s", "A", 100, 1000));  // only the server the lease is on counts it
  EXPECT_TRUE(s.reportLaunches("k80s", "A", 100, 1000));
  EXPECT_TRUE(s.reportLaunches("v100s", "B", 100, 1000));
  EXPECT_TRUE(s.reportLaunches("k80s", "A", 1100, 2000));   // 1,000 kernels a second
  EXPECT_TRUE(s.reportLaunches("v100s", "B", 4100, 2000));  // 4,000
  EXPECT_NEAR(s.speedOf("gan", "K80"), 0.25, 1e-12);
  EXPECT_TRUE(s.reportProgress("A", 0, 2000));  // its own progress, where it reports it, comes first
  EXPECT_TRUE(s.reportProgress("B", 0, 2000));
  EXPECT_TRUE(s.reportProgress("A", 5, 3000));
  EXPECT_TRUE(s.reportProgress("B", 10, 3000));
  EXPECT_NEAR(s.speedOf("gan", "K80"), 0.5, 1e-12);
}
