// The driver symbol table generated from cudaTypedefs.h (gen_driver_table.py): one row per ABI variant.
#pragma once

namespace gpool::client {

struct DriverSymbol {
  const char* name;     // base name, as passed to cuGetProcAddress ("cuMemAlloc")
  int version;          // the variant's version (3020 for cuMemAlloc_v2); 0: any version
  int per_thread;       // 1 for the _ptds/_ptsz variants
  const char* symbol;   // exported symbol ("cuMemAlloc_v2")
  void* address;        // gpool's implementation, or its logging NOT_SUPPORTED stub
};

extern const DriverSymbol kDriverSymbols[];
extern const unsigned kDriverSymbolCount;

}  // namespace gpool::client

namespace gpool::client {

struct ErrorName {
  int code;
  const char* name;
};
extern const ErrorName kErrorNames[];
extern const unsigned kErrorNameCount;

}  // namespace gpool::client
