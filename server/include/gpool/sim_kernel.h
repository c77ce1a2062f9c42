/* Host implementations of kernels for gpool-worker's `sim` backend (tests only).
 * A plugin is a shared library that exports gpool_sim_register_kernels; the worker loads it when started
 * with --sim-kernels PATH and runs a registered function whenever a kernel of that (mangled) name is
 * launched. Device pointers in the sim backend are host addresses, so a host implementation can
 * dereference them directly. Kernels without a registration are recorded and succeed. */
#ifndef GPOOL_SIM_KERNEL_H
#define GPOOL_SIM_KERNEL_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpool_sim_launch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  unsigned nparams;
  void* const* params; /* params[i] points at parameter i, as in cuLaunchKernel's kernelParams */
  /* cudaGraphSetConditional(handle, value) for a kernel that runs inside a graph; call it as
   * launch->set_conditional(launch->sim, handle, value). Handles the worker did not make are ignored. */
  void (*set_conditional)(void* sim, unsigned long long handle, unsigned value);
  void* sim;
} gpool_sim_launch;

typedef void (*gpool_sim_kernel_fn)(const gpool_sim_launch* launch);

/* Registers `fn` for kernel `name` whose parameters have the given sizes (their layout follows the
 * CUDA ABI: each aligned to its size, up to 8, or as given by `param_aligns` when non-null). */
typedef void (*gpool_sim_register_fn)(const char* name, gpool_sim_kernel_fn fn, unsigned nparams,
                                      const unsigned* param_sizes, const unsigned* param_aligns);

/* Exported by a plugin. */
void gpool_sim_register_kernels(gpool_sim_register_fn register_kernel);

#ifdef __cplusplus
}
#endif

#endif
