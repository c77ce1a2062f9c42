// Host implementations of the test programs' kernels for gpool-worker's sim backend (loaded with --sim-kernels).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gpool/sim_kernel.h"

namespace {

template <typename T>
T arg(const gpool_sim_launch* l, unsigned i) {
  T v;
  std::memcpy(&v, l->params[i], sizeof v);
  return v;
}

uint64_t threads(const gpool_sim_launch* l) {
  return uint64_t{l->grid[0]} * l->grid[1] * l->grid[2] * l->block[0] * l->block[1] * l->block[2];
}

void saxpy(const gpool_sim_launch* l) {
  int n = arg<int>(l, 0);
  float a = arg<float>(l, 1);
  auto* x = arg<const float*>(l, 2);
  auto* y = arg<float*>(l, 3);
  for (uint64_t i = 0; i < threads(l) && i < static_cast<uint64_t>(n); ++i) y[i] = a * x[i] + y[i];
}

void increment(const gpool_sim_launch* l) {
  auto* p = arg<unsigned*>(l, 0);
  int n = arg<int>(l, 1);
  for (uint64_t i = 0; i < threads(l) && i < static_cast<uint64_t>(n); ++i) p[i] += 1;
}

// graph_nodes.cu: cudaGraphSetConditional, through the worker's hook.
void loopCondition(const gpool_sim_launch* l) {
  auto h = arg<unsigned long long>(l, 0);
  auto* counter = arg<unsigned*>(l, 1);
  unsigned limit = arg<unsigned>(l, 2);
  unsigned ran = ++*counter;
  l->set_conditional(l->sim, h, ran < limit ? 1 : 0);
}

void setCondition(const gpool_sim_launch* l) {
  l->set_conditional(l->sim, arg<unsigned long long>(l, 0), arg<unsigned>(l, 1));
}

// device_output.cu: a kernel's printf, which a GPU's driver writes to the worker's standard output.
void say(const gpool_sim_launch* l) {
  int tag = arg<int>(l, 0);
  for (uint64_t i = 0; i < threads(l); ++i) std::printf("gpool device says %d from thread %llu\n", tag, static_cast<unsigned long long>(i));
}

// compute_share.cu: keeps the device busy for the given nanoseconds.
void spin(const gpool_sim_launch* l) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(arg<unsigned long long>(l, 0));
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace

extern "C" void gpool_sim_register_kernels(gpool_sim_register_fn reg) {
  const unsigned saxpy_sizes[] = {4, 4, 8, 8};
  reg("gpool_test_saxpy", &saxpy, 4, saxpy_sizes, nullptr);
  const unsigned inc_sizes[] = {8, 4};
  reg("gpool_test_increment", &increment, 2, inc_sizes, nullptr);
  const unsigned loop_sizes[] = {8, 8, 4};
  reg("gpool_test_loop_condition", &loopCondition, 3, loop_sizes, nullptr);
  const unsigned set_sizes[] = {8, 4};
  reg("gpool_test_set_condition", &setCondition, 2, set_sizes, nullptr);
  const unsigned say_sizes[] = {4};
  reg("gpool_test_say", &say, 1, say_sizes, nullptr);
  const unsigned spin_sizes[] = {8};
  reg("gpool_test_spin", &spin, 1, spin_sizes, nullptr);
}
