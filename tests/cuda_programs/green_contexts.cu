// Green contexts, as PyTorch's GreenContext and FlashInfer use them: the device's SMs read and split into
// groups, a descriptor of two groups made into a green context, which is then used both ways: made current
// (the runtime's work on the default stream and on a stream created there runs in it), and through
// streams made for it while the primary context stays current. A green context of a green context's SMs,
// one of the device's all, a context event recorded and waited on, and the splits the driver refuses.
// SM counts are compared with each other and the device's, not with fixed numbers: they differ by GPU.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

const char* cuName(CUresult r) {
  const char* name = nullptr;
  auto getName = driverEntryPoint<CUresult (*)(CUresult, const char**)>("cuGetErrorName", 6000);
  return getName(r, &name) == CUDA_SUCCESS && name ? name : "?";
}
#define CU(call) CHECK_STATUS(call, CUDA_SUCCESS, cuName)

struct Driver {
  decltype(&cuDeviceGetDevResource) deviceResource = driverEntryPoint<decltype(deviceResource)>("cuDeviceGetDevResource", 12040);
  decltype(&cuCtxGetDevResource) ctxResource = driverEntryPoint<decltype(ctxResource)>("cuCtxGetDevResource", 12040);
  decltype(&cuGreenCtxGetDevResource) greenResource = driverEntryPoint<decltype(greenResource)>("cuGreenCtxGetDevResource", 12040);
  decltype(&cuDevSmResourceSplitByCount) split = driverEntryPoint<decltype(split)>("cuDevSmResourceSplitByCount", 12040);
  decltype(&cuDevResourceGenerateDesc) desc = driverEntryPoint<decltype(desc)>("cuDevResourceGenerateDesc", 12040);
  decltype(&cuGreenCtxCreate) create = driverEntryPoint<decltype(create)>("cuGreenCtxCreate", 12040);
  decltype(&cuGreenCtxDestroy) destroy = driverEntryPoint<decltype(destroy)>("cuGreenCtxDestroy", 12040);
  decltype(&cuCtxFromGreenCtx) toContext = driverEntryPoint<decltype(toContext)>("cuCtxFromGreenCtx", 12040);
  decltype(&cuGreenCtxStreamCreate) streamCreate = driverEntryPoint<decltype(streamCreate)>("cuGreenCtxStreamCreate", 12050);
  decltype(&cuStreamGetGreenCtx) streamGreen = driverEntryPoint<decltype(streamGreen)>("cuStreamGetGreenCtx", 12040);
  decltype(&cuStreamGetCtx_v2) streamContexts = driverEntryPoint<decltype(streamContexts)>("cuStreamGetCtx", 12050);
  decltype(&cuGreenCtxRecordEvent) record = driverEntryPoint<decltype(record)>("cuGreenCtxRecordEvent", 12040);
  decltype(&cuGreenCtxWaitEvent) wait = driverEntryPoint<decltype(wait)>("cuGreenCtxWaitEvent", 12040);
  decltype(&cuGreenCtxGetId) id = driverEntryPoint<decltype(id)>("cuGreenCtxGetId", 12090);
  decltype(&cuStreamGetId) streamId = driverEntryPoint<decltype(streamId)>("cuStreamGetId", 12000);
  decltype(&cuCtxPushCurrent) push = driverEntryPoint<decltype(push)>("cuCtxPushCurrent", 4000);
  decltype(&cuCtxPopCurrent) pop = driverEntryPoint<decltype(pop)>("cuCtxPopCurrent", 4000);
};

const int kN = 4096;

// Adds one to each of kN words on stream s (0: the default stream) and reads them back: true when all
// went from `before` to before + 1.
bool incrementOn(cudaStream_t s, unsigned* d, unsigned before) {
  std::vector<unsigned> h(kN, before);
  CK(cudaMemcpyAsync(d, h.data(), kN * sizeof(unsigned), cudaMemcpyHostToDevice, s));
  gpool_test_increment<<<kN / 256, 256, 0, s>>>(d, kN);
  CK(cudaGetLastError());
  CK(cudaMemcpyAsync(h.data(), d, kN * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  for (unsigned v : h)
    if (v != before + 1) return false;
  return true;
}

// A green context of `n` resources of one split (or one resource whole).
CUgreenCtx greenOf(const Driver& cu, CUdevResource* parts, unsigned n, CUdevice dev) {
  CUdevResourceDesc desc;
  CU(cu.desc(&desc, parts, n));
  CUgreenCtx g;
  CU(cu.create(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  return g;
}

unsigned smsOf(const Driver& cu, CUgreenCtx g) {
  CUdevResource r;
  CU(cu.greenResource(g, &r, CU_DEV_RESOURCE_TYPE_SM));
  return r.sm.smCount;
}

// The device's SMs, split into groups of at least 16: their sizes add up, and a part is not split again.
std::vector<CUdevResource> splitDevice(const Driver& cu, CUdevice dev, CUdevResource& whole, CUdevResource& rest) {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CU(cu.deviceResource(dev, &whole, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(whole.type == CU_DEV_RESOURCE_TYPE_SM && static_cast<int>(whole.sm.smCount) == sms,
        "the device's SM resource: %u SMs, as the device has %d", whole.sm.smCount, sms);
  CHECK(whole.sm.minSmPartitionSize > 0 && whole.sm.smCoscheduledAlignment > 0, "it gives a partition's least size (%u) and step (%u)",
        whole.sm.minSmPartitionSize, whole.sm.smCoscheduledAlignment);
  unsigned count = 0;
  CU(cu.split(nullptr, &count, &whole, nullptr, 0, 16));
  CHECK(count >= 2 && count <= whole.sm.smCount / 16, "a split into groups of 16 SMs or more would make %u", count);
  std::vector<CUdevResource> groups(count);
  unsigned made = count;
  CU(cu.split(groups.data(), &made, &whole, &rest, 0, 16));
  unsigned total = rest.sm.smCount;
  bool sized = made == count;
  for (const CUdevResource& g : groups) {
    total += g.sm.smCount;
    sized = sized && g.sm.smCount >= 16 && g.sm.smCount % whole.sm.smCoscheduledAlignment == 0;
  }
  CHECK(sized, "%u groups made, each of 16 SMs or more in steps of %u", made, whole.sm.smCoscheduledAlignment);
  CHECK(total == whole.sm.smCount, "groups and remainder hold the device's %u SMs (%u)", whole.sm.smCount, total);
  unsigned again = 1;
  CUdevResource sub;
  CHECK(cu.split(&sub, &again, &groups[0], nullptr, 0, 8) != CUDA_SUCCESS, "a group is not split again before it is a green context's");
  CUdevResource bad = whole;
  bad.type = CU_DEV_RESOURCE_TYPE_INVALID;
  CHECK(cu.split(nullptr, &again, &bad, nullptr, 0, 8) != CUDA_SUCCESS, "a resource of no type is not split");
  return groups;
}

// The green context made current: the runtime's default stream and a stream created there are its, and
// work on both runs.
void useCurrent(const Driver& cu, CUgreenCtx g, unsigned* d) {
  unsigned long long primary_id = 0, green_id = 0;
  CU(cu.streamId(nullptr, &primary_id));
  CUcontext gc;
  CU(cu.toContext(&gc, g));
  CU(cu.push(gc));
  CUdevResource r;
  CU(cu.ctxResource(gc, &r, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(r.sm.smCount == smsOf(cu, g), "its context's SM resource is the green context's (%u)", r.sm.smCount);
  CUgreenCtx of = nullptr;
  CU(cu.streamGreen(nullptr, &of));
  CHECK(of == g, "while it is current, the default stream is the green context's");
  CU(cu.streamId(nullptr, &green_id));
  CHECK(green_id != primary_id, "and not the primary context's default stream (ids %llu, %llu)", green_id, primary_id);
  CHECK(incrementOn(0, d, 10), "the runtime's copies and a kernel on the default stream ran in the green context");
  unsigned* e = nullptr;
  CK(cudaMalloc(&e, kN * sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU(cu.streamGreen(s, &of));
  CHECK(of == g, "a stream created while it is current is the green context's");
  CUcontext ctx = nullptr;
  of = nullptr;
  CU(cu.streamContexts(s, &ctx, &of));
  CHECK(of == g && ctx != nullptr, "cuStreamGetCtx_v2 names the green context (and a context)");
  CHECK(incrementOn(s, e, 20), "a kernel on that stream ran, on memory allocated while the green context was current");
  CK(cudaStreamDestroy(s));
  CK(cudaFree(e));
  CUcontext popped;
  CU(cu.pop(&popped));
  CHECK(popped == gc, "the green context's context pops");
  CU(cu.streamGreen(nullptr, &of));
  CHECK(of == nullptr, "with the primary context current again, the default stream is no green context's");
}

// A stream made for the green context, used while the primary context stays current; a context event; a
// graph captured on that stream.
void useStreams(const Driver& cu, CUgreenCtx g, unsigned* d) {
  CUstream s;
  CU(cu.streamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0));
  CUgreenCtx of = nullptr;
  CU(cu.streamGreen(s, &of));
  CHECK(of == g, "cuGreenCtxStreamCreate's stream is the green context's");
  CHECK(incrementOn(s, d, 30), "a kernel on it ran, with the primary context current");
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  gpool_test_increment<<<kN / 256, 256, 0, s>>>(d, kN);
  CU(cu.record(g, ev));
  CK(cudaStreamWaitEvent(0, ev, 0));
  CU(cu.wait(g, ev));
  CK(cudaEventSynchronize(ev));
  std::vector<unsigned> h(kN);
  CK(cudaMemcpy(h.data(), d, kN * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(h[0] == 32 && h[kN - 1] == 32, "the green context's event followed its stream's kernel (%u)", h[0]);
  CK(cudaEventDestroy(ev));

  // A graph captured on the green context's stream, launched there twice.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  gpool_test_increment<<<kN / 256, 256, 0, s>>>(d, kN);
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h.data(), d, kN * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(h[0] == 34 && h[kN - 1] == 34, "a graph captured on its stream and launched there twice ran twice (%u)", h[0]);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(s));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  Driver cu;
  CUdevice dev = 0;
  CUdevResource whole, rest;
  std::vector<CUdevResource> groups = splitDevice(cu, dev, whole, rest);
  CUgreenCtx g = greenOf(cu, groups.data(), 2, dev);
  CHECK(smsOf(cu, g) == groups[0].sm.smCount + groups[1].sm.smCount, "a green context of two groups has their %u SMs", smsOf(cu, g));
  unsigned count = 2;
  std::vector<CUdevResource> other(2);
  CU(cu.split(other.data(), &count, &whole, nullptr, 0, 16));
  CUdevResource mixed[2] = {groups[0], other[1]};
  CUdevResourceDesc desc;
  CHECK(cu.desc(&desc, mixed, 2) != CUDA_SUCCESS, "a descriptor of two splits' groups is refused");

  unsigned* d = nullptr;
  CK(cudaMalloc(&d, kN * sizeof(unsigned)));
  useCurrent(cu, g, d);
  useStreams(cu, g, d);

  // A green context of the green context's SMs, and one of the device's all.
  CUdevResource mine, part[4];
  CU(cu.greenResource(g, &mine, CU_DEV_RESOURCE_TYPE_SM));
  unsigned parts = 4;
  CU(cu.split(part, &parts, &mine, nullptr, 0, 8));
  CHECK(parts >= 1 && part[0].sm.smCount >= 8 && part[0].sm.smCount <= mine.sm.smCount, "its own SMs split into %u groups", parts);
  CUgreenCtx inner = greenOf(cu, part, 1, dev);
  CHECK(smsOf(cu, inner) == part[0].sm.smCount, "a green context of one of them has its %u SMs", smsOf(cu, inner));
  CUgreenCtx all = greenOf(cu, &whole, 1, dev);
  CHECK(smsOf(cu, all) == whole.sm.smCount, "a green context of the device's resource has all %u SMs", smsOf(cu, all));
  unsigned long long a = 0, b = 0;
  CU(cu.id(g, &a));
  CU(cu.id(all, &b));
  CHECK(a != b, "green contexts have ids of their own (%llu, %llu)", a, b);
  CHECK(incrementOn(0, d, 40), "the primary context's work runs while green contexts exist");

  CU(cu.destroy(inner));
  CU(cu.destroy(all));
  CU(cu.destroy(g));
  CHECK(incrementOn(0, d, 50), "and after they are destroyed");
  CK(cudaFree(d));
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures == 0 ? 0 : 1;
}
