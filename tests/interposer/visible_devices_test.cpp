// CUDA_VISIBLE_DEVICES over a lease's devices, and the UUIDs they show (interposer/src/visible_devices.h).
// End to end, through `gpool run`: allocator.multi_gpu's test_cuda_visible_devices_*.
#include "visible_devices.h"

#include <gtest/gtest.h>

#include "gpool/protocol/gpu_uuid.h"
#include "lease_shares.h"

namespace gpool::client {
namespace {

const std::vector<std::string> kUuids = {"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-8932f937-d72c-8106-c12f-20bd9faed9f7",
                                         "GPU-1a2b3c4d-0000-4000-8000-000000000000"};

std::vector<int> visible(const char* env, const std::vector<std::string>& uuids = kUuids, std::string* ignored_out = nullptr) {
  std::string ignored;
  auto v = visibleDevices(env, 3, uuids, ignored);
  if (ignored_out) *ignored_out = ignored;
  return v;
}

TEST(VisibleDevices, UnsetShowsEveryDeviceInOrder) { EXPECT_EQ(visible(nullptr), (std::vector<int>{0, 1, 2})); }

TEST(VisibleDevices, IndicesInTheirOrderUpToTheFirstThatNamesNone) {
  EXPECT_EQ(visible("2,0"), (std::vector<int>{2, 0}));
  std::string ignored;
  EXPECT_EQ(visible("1,3,0", kUuids, &ignored), (std::vector<int>{1}));
  EXPECT_EQ(ignored, "3");
  EXPECT_EQ(visible("0,0,1", kUuids, &ignored), (std::vector<int>{0}));  // a device named twice ends the list
  EXPECT_EQ(ignored, "0");
  EXPECT_TRUE(visible("-1").empty());
  EXPECT_TRUE(visible("").empty());
  EXPECT_TRUE(visible("1x").empty());
}

TEST(VisibleDevices, AWholeUuidOrTheStartOfOnlyOne) {
  EXPECT_EQ(visible("GPU-1a2b3c4d-0000-4000-8000-000000000000"), (std::vector<int>{2}));
  EXPECT_EQ(visible("GPU-1a2b,0"), (std::vector<int>{2, 0}));
  EXPECT_EQ(visible("GPU-8932f937-d72c-8"), (std::vector<int>{1}));  // where the two first differ
  EXPECT_EQ(visible("gpu-8932F937-D72C-4,2"), (std::vector<int>{0, 2}));  // hex digits in either case
  EXPECT_EQ(visible("1,GPU-1a2b"), (std::vector<int>{1, 2}));            // indices and UUIDs mixed
}

TEST(VisibleDevices, TheStartOfSeveralUuidsNamesNone) {
  std::string ignored;
  EXPECT_EQ(visible("2,GPU-8932f937,0", kUuids, &ignored), (std::vector<int>{2}));
  EXPECT_EQ(ignored, "GPU-8932f937");
  EXPECT_TRUE(visible("GPU-").empty());        // the start of every one
  EXPECT_TRUE(visible("GPU-ffff").empty());    // of none
  EXPECT_TRUE(visible("MIG-8932f937").empty());  // no device of a lease is a MIG instance
  EXPECT_EQ(visible("GPU-1a2b,GPU-1a2b3c"), (std::vector<int>{2}));  // the same device twice
  EXPECT_TRUE(visible("GPU-1a2b", {}).empty());  // UUIDs not known: a UUID names nothing
}

TEST(VisibleDevices, UuidEntriesAreNoticedAnywhereInTheList) {
  EXPECT_FALSE(namesDevicesByUuid(nullptr));
  EXPECT_FALSE(namesDevicesByUuid("0,1"));
  EXPECT_TRUE(namesDevicesByUuid("0,GPU-1a2b"));
  EXPECT_TRUE(namesDevicesByUuid("gpu-1a2b"));
  EXPECT_FALSE(namesDevicesByUuid("GPU-"));  // names nothing: no need to learn the UUIDs
}

TEST(VisibleDevices, ASharesGpuRepeatsWhenAnEarlierShareHasTheSameServerAndDevice) {
  std::vector<Share> lease = {{"10.0.0.1:7070", 0, "a"}, {"10.0.0.2:7070", 0, "b"}, {"10.0.0.1:7070", 0, "c"}, {"10.0.0.1:7070", 1, "d"}};
  EXPECT_EQ(repeatedShares(lease), (std::vector<bool>{false, false, true, false}));
}

Uuid gpu(uint8_t seed) {
  Uuid u{};
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(seed + i * 17);
  return u;
}

TEST(KeepUuidsApart, SharesOfOneGpuShowDistinctDerivedUuids) {
  std::vector<LeaseDevice> devices = {{0, gpu(1), false}, {1, gpu(1), true}, {2, gpu(1), true}, {3, gpu(9), false}};
  keepUuidsApart(devices);
  EXPECT_EQ(devices[0].uuid, gpu(1));  // the first share shows the GPU's own
  EXPECT_EQ(devices[3].uuid, gpu(9));  // another GPU's is its own
  for (int d : {1, 2}) {
    EXPECT_NE(devices[d].uuid, gpu(1));
    EXPECT_EQ(devices[d].uuid[6] >> 4, 8) << "a derived UUID (RFC 9562 version 8)";
  }
  EXPECT_NE(devices[1].uuid, devices[2].uuid);
}

TEST(KeepUuidsApart, ADeviceShowsTheSameUuidWhicheverOthersAreVisible) {
  std::vector<LeaseDevice> all = {{0, gpu(1), false}, {1, gpu(1), true}, {2, gpu(1), true}};
  keepUuidsApart(all);
  std::vector<LeaseDevice> second = {{1, gpu(1), true}};  // CUDA_VISIBLE_DEVICES=1
  keepUuidsApart(second);
  EXPECT_EQ(second[0].uuid, all[1].uuid);
  std::vector<LeaseDevice> reversed = {{2, gpu(1), true}, {0, gpu(1), false}};  // CUDA_VISIBLE_DEVICES=2,0
  keepUuidsApart(reversed);
  EXPECT_EQ(reversed[0].uuid, all[2].uuid);
  EXPECT_EQ(reversed[1].uuid, all[0].uuid);
}

TEST(KeepUuidsApart, TwoGpusReportingOneUuidAreStillTwoDevices) {
  std::vector<LeaseDevice> devices = {{0, gpu(1), false}, {1, gpu(1), false}};  // sim servers all report one UUID
  keepUuidsApart(devices);
  EXPECT_NE(devices[0].uuid, devices[1].uuid);
}

TEST(KeepUuidsApart, TheDerivedUuidIsReadableAsTextThatNamesItsDevice) {
  std::vector<LeaseDevice> devices = {{0, gpu(1), false}, {1, gpu(1), true}};
  keepUuidsApart(devices);
  std::vector<std::string> text = {proto::gpuUuidText(devices[0].uuid.data()), proto::gpuUuidText(devices[1].uuid.data())};
  std::string ignored;
  EXPECT_EQ(visibleDevices(text[1].c_str(), 2, text, ignored), (std::vector<int>{1}));
}

}  // namespace
}  // namespace gpool::client
