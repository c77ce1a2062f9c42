// The cuda backend's modules and libraries, their functions and globals, tensor maps, launches and
// occupancy questions.
#include "cuda_backend_class.h"

namespace gpool::worker {

Status CudaBackend::ModuleLoad(Blob image, uint32_t kind, Created<ModuleRef>& out) {
  if (kind > 1 || image.size == 0) return CUDA_ERROR_INVALID_VALUE;
  out.kind = kind;
  // The driver reads the image through its own headers: refuse one whose headers claim more than
  // arrived, and hand it a private, padded copy.
  uint64_t need = proto::moduleImageSize(image.data, image.size);
  if (need == 0 || need > image.size) return CUDA_ERROR_INVALID_IMAGE;
  std::vector<uint8_t> copy(static_cast<const uint8_t*>(image.data), static_cast<const uint8_t*>(image.data) + image.size);
  copy.resize(copy.size() + 64, 0);
  if (kind == 0) {
    CUmodule m = nullptr;
    CUresult r = d_.cuModuleLoadData_(&m, copy.data());
    out.handle = reinterpret_cast<uint64_t>(m);
    return r;
  }
  CUlibrary l = nullptr;
  CUresult r = d_.cuLibraryLoadData_(&l, copy.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  out.handle = reinterpret_cast<uint64_t>(l);
  return r;
}

Status CudaBackend::ModuleUnload(Released<ModuleRef> m) {
  uint64_t handle = m.handle;
  layouts_.clear();  // the driver may hand a later function the address of one unloaded now
  kernel_of_function_.clear();
  return m.kind == 0 ? d_.cuModuleUnload_(reinterpret_cast<CUmodule>(handle))
                   : d_.cuLibraryUnload_(reinterpret_cast<CUlibrary>(handle));
}

Status CudaBackend::ModuleGetFunction(ModuleRef m, std::string name, Created<Launchable>& out) {
  void* f = nullptr;
  CUresult r = m.kind == 0 ? d_.cuModuleGetFunction_(reinterpret_cast<CUfunction*>(&f), reinterpret_cast<CUmodule>(m.handle), name.c_str())
                           : d_.cuLibraryGetKernel_(reinterpret_cast<CUkernel*>(&f), reinterpret_cast<CUlibrary>(m.handle), name.c_str());
  out = reinterpret_cast<uint64_t>(f);
  return r;
}

Status CudaBackend::ModuleGetGlobal(ModuleRef m, std::string name, ModuleGlobal& out) {
  CUdeviceptr p = 0;
  size_t n = 0;
  CUresult r = m.kind == 0 ? d_.cuModuleGetGlobal_(&p, &n, reinterpret_cast<CUmodule>(m.handle), name.c_str())
                           : d_.cuLibraryGetGlobal_(&p, &n, reinterpret_cast<CUlibrary>(m.handle), name.c_str());
  out = ModuleGlobal{p, n};  // copies to and from module variables are legitimate
  return r;
}

Status CudaBackend::LibraryGetModule(ModuleRef lib, Created<ModuleRef>& out) {
  if (lib.kind != 1) return CUDA_ERROR_INVALID_HANDLE;
  CUmodule m = nullptr;
  CUresult r = d_.cuLibraryGetModule_(&m, reinterpret_cast<CUlibrary>(lib.handle));
  out = ModuleRef{reinterpret_cast<uint64_t>(m), 0};
  return r;
}

Status CudaBackend::LibraryGetManaged(ModuleRef m, std::string name, ModuleGlobal& out) {
  if (m.kind != 1) return CUDA_ERROR_INVALID_HANDLE;  // a library's
  CUdeviceptr p = 0;
  size_t n = 0;
  CUresult r = d_.cuLibraryGetManaged_(&p, &n, reinterpret_cast<CUlibrary>(m.handle), name.c_str());
  out = ModuleGlobal{p, n};
  return r;
}

Status CudaBackend::ModuleFunctions(ModuleRef m, std::vector<char>& names, Created<LaunchableList>& handles) {
  uint64_t handle = m.handle;
  uint32_t kind = m.kind;
  unsigned n = 0;
  CUresult r = kind == 0 ? d_.cuModuleGetFunctionCount_(&n, reinterpret_cast<CUmodule>(handle))
                         : d_.cuLibraryGetKernelCount_(&n, reinterpret_cast<CUlibrary>(handle));
  if (r != CUDA_SUCCESS) return r;
  std::vector<void*> found(n);
  r = kind == 0 ? d_.cuModuleEnumerateFunctions_(reinterpret_cast<CUfunction*>(found.data()), n, reinterpret_cast<CUmodule>(handle))
                : d_.cuLibraryEnumerateKernels_(reinterpret_cast<CUkernel*>(found.data()), n, reinterpret_cast<CUlibrary>(handle));
  if (r != CUDA_SUCCESS) return r;
  for (void* f : found) {
    const char* name = nullptr;
    r = kind == 0 ? d_.cuFuncGetName_(&name, static_cast<CUfunction>(f)) : d_.cuKernelGetName_(&name, static_cast<CUkernel>(f));
    if (r != CUDA_SUCCESS) return r;
    if (name) names.insert(names.end(), name, name + std::strlen(name));
    names.push_back('\0');
    handles.v.push_back(reinterpret_cast<uint64_t>(f));
  }
  return CUDA_SUCCESS;
}

Status CudaBackend::TensorMapEncode(TensorMapShape t, uint32_t interleave, uint32_t swizzle, uint32_t l2, uint32_t oob, std::vector<uint8_t>& map) {
  CUtensorMap m;
  auto* p = reinterpret_cast<void*>(t.address);
  auto dt = static_cast<CUtensorMapDataType>(t.dtype);
  auto il = static_cast<CUtensorMapInterleave>(interleave);
  auto sw = static_cast<CUtensorMapSwizzle>(swizzle);
  auto pr = static_cast<CUtensorMapL2promotion>(l2);
  auto fill = static_cast<CUtensorMapFloatOOBfill>(oob);
  CUresult r = t.kind == 0 ? d_.cuTensorMapEncodeTiled_(&m, dt, t.rank, p, t.dims.data(), t.strides.data(), t.box.data(),
                                                        t.estrides.data(), il, sw, pr, fill)
                           : d_.cuTensorMapEncodeIm2col_(&m, dt, t.rank, p, t.dims.data(), t.strides.data(), t.lower.data(),
                                                         t.upper.data(), t.channels, t.pixels, t.estrides.data(), il, sw, pr, fill);
  if (r == CUDA_SUCCESS) map.assign(reinterpret_cast<const uint8_t*>(&m), reinterpret_cast<const uint8_t*>(&m) + sizeof m);
  return r;
}

Status CudaBackend::TensorMapReplaceAddress(std::vector<uint8_t> in, uint64_t address, std::vector<uint8_t>& map) {
  if (in.size() != sizeof(CUtensorMap)) return CUDA_ERROR_INVALID_VALUE;
  CUtensorMap m;
  std::memcpy(&m, in.data(), sizeof m);
  CUresult r = d_.cuTensorMapReplaceAddress_(&m, reinterpret_cast<void*>(address));
  if (r == CUDA_SUCCESS) map.assign(reinterpret_cast<const uint8_t*>(&m), reinterpret_cast<const uint8_t*>(&m) + sizeof m);
  return r;
}

Status CudaBackend::FuncGetParamLayout(Launchable f, std::vector<uint32_t>& layout) {
  const std::vector<uint32_t>* l = nullptr;
  CUresult r = paramLayout(f, l);
  if (r == CUDA_SUCCESS) layout = *l;
  return r;
}

Status CudaBackend::FuncGetAttribute(Launchable f, int32_t attribute, int32_t& value) {
  CUfunction fn = nullptr;
  if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
  int v = 0;
  CUresult r = d_.cuFuncGetAttribute_(&v, static_cast<CUfunction_attribute>(attribute), fn);
  value = v;
  return r;
}

Status CudaBackend::FuncSetAttribute(Launchable f, int32_t attribute, int32_t value) {
  CUfunction fn = nullptr;
  if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
  return d_.cuFuncSetAttribute_(fn, static_cast<CUfunction_attribute>(attribute), value);
}

Status CudaBackend::FuncSetCacheConfig(Launchable f, uint32_t config) {
  CUfunction fn = nullptr;
  if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
  return d_.cuFuncSetCacheConfig_(fn, static_cast<CUfunc_cache>(config));
}

Status CudaBackend::LaunchKernel(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz,
                    uint32_t shared, Stream stream, Blob params, LaunchAttrs attrs) {
  const std::vector<uint32_t>* layout = nullptr;
  if (CUresult r = paramLayout(f, layout); r != CUDA_SUCCESS) return r;
  args_.clear();
  const auto* base = static_cast<const uint8_t*>(params.data);
  for (size_t i = 0; i + 1 < layout->size(); i += 2) {
    if (uint64_t{(*layout)[i]} + (*layout)[i + 1] > params.size) return CUDA_ERROR_INVALID_VALUE;
    args_.push_back(const_cast<uint8_t*>(base + (*layout)[i]));
  }
  CUlaunchConfig cfg = config(gx, gy, gz, bx, by, bz, shared, stream, attrs);
  CUfunction fn = nullptr;
  if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
  return d_.cuLaunchKernelEx_(&cfg, fn, args_.data(), nullptr);
}

Status CudaBackend::OccupancyMaxActiveBlocks(Launchable f, int32_t block, uint64_t smem, uint32_t flags, int32_t& blocks) {
  CUfunction fn = nullptr;
  if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
  int n = 0;
  CUresult r = d_.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_(&n, fn, block, smem, flags);
  blocks = n;
  return r;
}

Status CudaBackend::OccupancyAvailableDynamicSMem(Launchable f, int32_t blocks, int32_t block, uint64_t& bytes) {
  CUfunction fn = nullptr;
  if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
  size_t n = 0;
  CUresult r = d_.cuOccupancyAvailableDynamicSMemPerBlock_(&n, fn, blocks, block);
  bytes = n;
  return r;
}

Status CudaBackend::OccupancyMaxActiveClusters(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                  uint32_t bz, uint32_t shared, LaunchAttrs attrs, int32_t& clusters) {
  return clusterQuery(d_.cuOccupancyMaxActiveClusters_, f, gx, gy, gz, bx, by, bz, shared, attrs, clusters);
}

Status CudaBackend::OccupancyMaxPotentialClusterSize(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                        uint32_t bz, uint32_t shared, LaunchAttrs attrs, int32_t& size) {
  return clusterQuery(d_.cuOccupancyMaxPotentialClusterSize_, f, gx, gy, gz, bx, by, bz, shared, attrs, size);
}

Status CudaBackend::DeviceTexture1DLinearMaxWidth(uint32_t format, uint32_t channels, uint64_t& width) {
  size_t w = 0;
  CUresult r = d_.cuDeviceGetTexture1DLinearMaxWidth_(&w, static_cast<CUarray_format>(format), channels, dev_);
  width = w;
  return r;
}
}  // namespace gpool::worker
