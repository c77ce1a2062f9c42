// When the request gate hands a connection to a thread (allocator/src/request_arrival.h).
#include "request_arrival.h"

#include <gtest/gtest.h>

#include <string>

namespace gpool::allocator {
namespace {

const std::string kGet = "GET /v1/status HTTP/1.1\r\nHost: a\r\n\r\n";

TEST(RequestArrival, AHeadIsWholeAtItsEmptyLine) {
  EXPECT_EQ(requestArrival(""), Arrival::kPartial);
  for (size_t n = 0; n < kGet.size(); ++n) EXPECT_EQ(requestArrival(kGet.substr(0, n)), Arrival::kPartial) << n;
  EXPECT_EQ(requestArrival(kGet), Arrival::kWhole);
  EXPECT_EQ(requestArrival("GET / HTTP/1.1\nHost: a\n\n"), Arrival::kWhole);  // lines ended by \n alone
  EXPECT_EQ(requestArrival(kGet + "GET /v1/policy"), Arrival::kWhole);       // the next one has begun
}

TEST(RequestArrival, ABodyIsWaitedForToItsContentLength) {
  const std::string head = "PUT /v1/servers/a/key HTTP/1.1\r\ncOnTeNt-LeNgTh:  5 \r\nHost: a\r\n\r\n";
  EXPECT_EQ(requestArrival(head), Arrival::kPartial);
  EXPECT_EQ(requestArrival(head + "1234"), Arrival::kPartial);
  EXPECT_EQ(requestArrival(head + "12345"), Arrival::kWhole);
  EXPECT_EQ(requestArrival("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), Arrival::kWhole);
}

TEST(RequestArrival, AClientWaitingForContinueIsToldToGoOn) {
  const std::string head = "PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
  EXPECT_EQ(requestArrival(head), Arrival::kContinue);
  EXPECT_EQ(requestArrival(head + "ab"), Arrival::kContinue);
  EXPECT_EQ(requestArrival(head + "abc"), Arrival::kWhole);
}

TEST(RequestArrival, AChunkedBodyIsLeftToTheRefusalFromItsHead) {
  EXPECT_EQ(requestArrival("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), Arrival::kWhole);
}

TEST(RequestArrival, TooMuchIsRefused) {
  EXPECT_EQ(requestArrival("POST / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n"), Arrival::kBodyTooLarge);
  EXPECT_EQ(requestArrival("POST / HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n"), Arrival::kPartial);
  EXPECT_EQ(requestArrival("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"), Arrival::kBodyTooLarge);
  std::string endless = "GET / HTTP/1.1\r\nX: " + std::string(kMaxRequestHead, 'x');
  EXPECT_EQ(requestArrival(endless.substr(0, kMaxRequestHead - 1)), Arrival::kPartial);
  EXPECT_EQ(requestArrival(endless), Arrival::kUnreadable);
}

TEST(RequestArrival, ALengthThatIsNoNumberOrSaidTwiceIsUnreadable) {
  for (const char* length : {"Content-Length: 5x\r\n", "Content-Length: -1\r\n", "Content-Length:\r\n",
                             "Content-Length: 3\r\nContent-Length: 3\r\n", "Content-Length: 3\r\ncontent-length: 4\r\n"})
    EXPECT_EQ(requestArrival(std::string("POST / HTTP/1.1\r\n") + length + "\r\nabcd"), Arrival::kUnreadable) << length;
}

}  // namespace
}  // namespace gpool::allocator
