// Processes that only ask about the device (cuInit, the device count, its properties: what
// torch.cuda.is_available() does in every DataLoader worker) hold no device context, through gpool as
// natively, where a context costs hundreds of MiB of a GPU's memory: a worker makes its client's context
// on the first call that needs one. CI runs this on a sim device whose contexts take
// GPOOL_TEST_CONTEXT_BYTES each (gpool-server --sim-context-memory), seen in cudaMemGetInfo as on a GPU.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "checks.h"

namespace {

constexpr int kAskers = 4;

// One process that asks, then waits for a word from the parent on `go`: 'w' makes it work (allocate and
// free device memory, which needs a context) and wait again; end of input ends it. Exits 0 when every
// answer was right.
[[noreturn]] void asker(int ready, int go) {
  int count = 0, version = 0;
  cudaDeviceProp prop{};
  bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count >= 1 && cudaDriverGetVersion(&version) == cudaSuccess &&
            version > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.name[0] != '\0' && prop.totalGlobalMem > 0;
  for (char word = 'r'; write(ready, &word, 1) == 1 && read(go, &word, 1) == 1;) {
    void* p = nullptr;
    // (gpool sends a free without waiting for it; the synchronize is answered after it, so the parent,
    // another process, sees the memory free again.)
    ok = ok && cudaMalloc(&p, 1 << 20) == cudaSuccess && cudaFree(p) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
    word = 'd';
  }
  std::_Exit(ok ? 0 : 1);
}

struct Asker {
  pid_t pid = -1;
  int ready = -1, go = -1;  // the parent's ends
};

// The next asker; it closes the parent's ends of the earlier ones' pipes, so each sees its own end of input.
Asker start(const Asker* earlier, int n) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) std::exit(2);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    close(go[1]);
    for (int i = 0; i < n; ++i) close(earlier[i].ready), close(earlier[i].go);
    asker(ready[1], go[0]);
  }
  close(ready[1]);
  close(go[0]);
  return Asker{pid, ready[0], go[1]};
}

bool heard(const Asker& a) {
  char word = 0;
  return read(a.ready, &word, 1) == 1;
}

size_t usedMemory() {
  size_t free = 0, total = 0;
  CK(cudaMemGetInfo(&free, &total));
  return total - free;
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

int main() {
  const char* context = std::getenv("GPOOL_TEST_CONTEXT_BYTES");
  if (!context) {
    std::printf("SKIP  needs GPOOL_TEST_CONTEXT_BYTES: what one context takes (gpool-server --sim-context-memory)\n");
    return 2;
  }
  const size_t ctx = std::strtoull(context, nullptr, 10);
  // Before this process touches CUDA: children inherit none of its state.
  Asker askers[kAskers];
  bool all_heard = true;
  for (int i = 0; i < kAskers; ++i) askers[i] = start(askers, i);
  for (Asker& a : askers) all_heard = heard(a) && all_heard;
  check(all_heard, "4 processes asked about the device and hold on");

  const size_t asked = usedMemory();  // this process's context, made by cudaMemGetInfo
  check(asked == ctx, "processes that only asked hold no context: only this one's is in use",
        (mib(asked) + " in use, one context is " + mib(ctx)).c_str());

  char word = 'w';
  bool worked = write(askers[0].go, &word, 1) == 1 && heard(askers[0]);
  const size_t after = usedMemory();
  check(worked && after == 2 * ctx, "a process's first call that needs the device makes its context",
        (mib(after) + " in use").c_str());

  int wrong = 0;
  for (Asker& a : askers) {
    close(a.go);
    int status = 0;
    if (waitpid(a.pid, &status, 0) != a.pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++wrong;
  }
  check(wrong == 0, "every process got right answers (count, driver version, properties; memory once it worked)");
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures == 0 ? 0 : 1;
}
