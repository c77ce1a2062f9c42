// The host's module image cache, the worker's use of it, and the sim's reading of images sent by clients.
#include <gtest/gtest.h>

#include <elf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <fstream>
#include <thread>

#include "cubin_index.h"
#include "dispatcher.h"
#include "gpool/protocol/loopback_transport.h"
#include "module_cache.h"
#include "sim_backend.h"
#include "test_client.h"

using namespace gpool;
using namespace gpool::proto;
namespace calls = gpool::proto::calls;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("gpool-cache-test-" + std::to_string(::getpid()) + "-" +
                                               std::to_string(reinterpret_cast<uintptr_t>(this)));
  ~TempDir() { fs::remove_all(path); }
};

std::string hashString(const void* data, size_t size) {
  worker::ImageHash h = worker::sha256(data, size);
  return std::string(reinterpret_cast<const char*>(h.data()), h.size());
}

}  // namespace

TEST(ModuleCache, StoresByContentAndRefusesCorruptFiles) {
  TempDir dir;
  worker::ModuleCache cache(dir.path, 1 << 20);
  const std::string image = "// PTX\n.version 8.0\n";
  cache.put(image.data(), image.size());
  worker::ImageHash key = worker::sha256(image.data(), image.size());
  auto back = cache.get(key);
  ASSERT_TRUE(back);
  EXPECT_EQ(std::string(back->begin(), back->end()), image);
  EXPECT_EQ(worker::toHex(worker::sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2 vector

  // A file whose bytes no longer match its name is removed, not loaded.
  std::ofstream(dir.path / worker::toHex(key), std::ios::trunc) << "tampered";
  EXPECT_FALSE(cache.get(key));
  EXPECT_FALSE(fs::exists(dir.path / worker::toHex(key)));
}

TEST(ModuleCache, EvictsLeastRecentlyUsedPastItsLimit) {
  TempDir dir;
  worker::ModuleCache cache(dir.path, 2500, std::chrono::seconds(0));
  std::string a(1000, 'a'), b(1000, 'b'), c(1000, 'c');
  cache.put(a.data(), a.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cache.put(b.data(), b.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(cache.get(worker::sha256(a.data(), a.size())));  // a is now the most recently used
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cache.put(c.data(), c.size());
  EXPECT_TRUE(cache.get(worker::sha256(a.data(), a.size())));
  EXPECT_FALSE(cache.get(worker::sha256(b.data(), b.size())));
  EXPECT_TRUE(cache.get(worker::sha256(c.data(), c.size())));
}

// With gpool-server --worker-uids the cache is open to every user, and each lease's workers are a user of
// their own: an image one lease's worker stored counts as used when another lease's worker loads it (before,
// only its owner could refresh its time, so the images other users loaded were evicted first).
TEST(ModuleCache, AnImageAnotherUserStoredIsRefreshedWhenLoaded) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to act as two users";
  TempDir dir;
  fs::create_directories(dir.path);
  fs::permissions(dir.path, fs::perms::all);  // as WorkerUsers::shareDirectory makes it
  const std::string image(100, 'x');
  auto as = [&](uid_t uid, auto&& body) {
    pid_t child = fork();
    if (child == 0) {
      if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(3);
      worker::ModuleCache cache(dir.path, 1 << 20, std::chrono::seconds(0));
      _exit(body(cache) ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(as(61190, [&](worker::ModuleCache& c) { return c.put(image.data(), image.size()), true; }), 0);
  fs::path file = dir.path / worker::toHex(worker::sha256(image.data(), image.size()));
  ASSERT_TRUE(fs::exists(file));
  auto old = fs::file_time_type::clock::now() - std::chrono::hours(24);
  fs::last_write_time(file, old);
  ASSERT_EQ(as(61191, [&](worker::ModuleCache& c) { return c.get(worker::sha256(image.data(), image.size())).has_value(); }), 0);
  EXPECT_GT(fs::last_write_time(file), old + std::chrono::hours(23)) << "loaded by another user, it is recent again";
}

// Workers of one host store images at once, each with its own view of the directory: together they stay
// within the cap (each store recounts under the directory's lock).
TEST(ModuleCache, ConcurrentWritersStayWithinTheCap) {
  TempDir dir;
  const uint64_t cap = 5000;
  std::vector<std::unique_ptr<worker::ModuleCache>> workers;  // each started while the directory was empty
  for (int w = 0; w < 8; ++w) workers.push_back(std::make_unique<worker::ModuleCache>(dir.path, cap, std::chrono::seconds(0)));
  std::vector<std::thread> writers;
  for (int w = 0; w < 8; ++w)
    writers.emplace_back([&workers, w] {
      for (int i = 0; i < 2; ++i) {
        std::string image(1000, static_cast<char>('A' + w));
        image += std::to_string(i);
        workers[w]->put(image.data(), image.size());
      }
    });
  for (auto& t : writers) t.join();
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir.path))
    if (e.is_regular_file() && !e.path().filename().string().starts_with(".")) total += e.file_size();
  EXPECT_LE(total, cap);
  EXPECT_GT(total, 0u);
}

TEST(ModuleCache, WorkerLoadsByHashAfterOneUpload) {
  TempDir dir;
  worker::ModuleCache cache(dir.path, 1 << 20);
  auto [client, server] = makeLoopbackPair({});
  worker::SimBackend backend{worker::SimOptions{}};
  HelloReply hello;
  backend.open(0, hello);
  worker::ServeResult result;
  std::thread t([&] { result = worker::Dispatcher(backend, *server, UINT64_MAX, &cache).serve(); });
  test::RawClient c(*client);

  const char ptx[] = "// a PTX module\n.version 8.0\n";
  std::string key = hashString(ptx, sizeof ptx);
  EXPECT_EQ(c.call<calls::ModuleLoadCached>(key, 0u).first, 500 /*NOT_FOUND: send the image*/);
  EXPECT_EQ(c.call<calls::ModuleLoad>(Blob{ptx, sizeof ptx}, 0u).first, 0);
  auto [st, handle] = c.call<calls::ModuleLoadCached>(key, 1u);
  EXPECT_EQ(st, 0);
  EXPECT_EQ(c.call<calls::ModuleGetFunction>(ModuleRef{std::get<0>(handle), 1}, std::string("k")).first, 0);
  // An image the device refused is not cached.
  EXPECT_EQ(c.call<calls::ModuleLoad>(Blob{"garbage!", 8}, 0u).first, 200);
  EXPECT_EQ(c.call<calls::ModuleLoadCached>(hashString("garbage!", 8), 0u).first, 500);
  client->shutdown();
  t.join();
  EXPECT_TRUE(result.clean);
  EXPECT_EQ(result.images_received, 2u);
  EXPECT_EQ(result.images_from_cache, 1u);
  EXPECT_EQ(result.image_bytes_from_cache, sizeof ptx);
}

TEST(ModuleCache, AHashOfTheWrongLengthIsAViolation) {
  auto [client, server] = makeLoopbackPair({});
  worker::SimBackend backend{worker::SimOptions{}};
  HelloReply hello;
  backend.open(0, hello);
  worker::ServeResult result;
  std::thread t([&] { result = worker::Dispatcher(backend, *server, UINT64_MAX, nullptr).serve(); });
  test::RawClient c(*client);
  c.send(calls::ModuleLoadCached::id, kWantsReply, c.payload<calls::ModuleLoadCached>(std::string("short"), 0u));
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*client, p, 1024), TransportError);
  t.join();
  EXPECT_FALSE(result.clean);
}

// A minimal ELF: one .symtab with one object of 24 bytes in a PROGBITS section holding its initial value.
static std::vector<uint8_t> tinyElf(uint64_t shoff_override = 0) {
  std::vector<uint8_t> data(64, 0);
  const char shstr[] = "\0.symtab\0.strtab\0.shstrtab\0.nv.global.init\0.nv.info.kern";
  const char strtab[] = "\0table\0kern";
  auto append = [&](const void* p, size_t n) {
    size_t at = data.size();
    data.insert(data.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return at;
  };
  size_t shstr_at = append(shstr, sizeof shstr);
  size_t str_at = append(strtab, sizeof strtab);
  uint8_t init[24];
  for (int i = 0; i < 24; ++i) init[i] = static_cast<uint8_t>(i + 1);
  size_t init_at = append(init, sizeof init);
  // .nv.info.kern: two KPARAM_INFO records (ordinal 1 at offset 8 size 4, ordinal 0 at offset 0 size 8)
  uint8_t info[2][16] = {{4, 0x17, 12, 0, 0, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0x10, 0},
                         {4, 0x17, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}};
  size_t info_at = append(info, sizeof info);
  Elf64_Sym syms[3] = {};
  syms[1].st_name = 1;
  syms[1].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
  syms[1].st_shndx = 4;
  syms[1].st_size = 24;
  syms[2].st_name = 7;  // a kernel: a function marked as an entry point
  syms[2].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
  syms[2].st_other = 0x10;
  syms[2].st_shndx = 4;
  size_t sym_at = append(syms, sizeof syms);
  Elf64_Shdr sh[6] = {};
  sh[1] = {1, SHT_SYMTAB, 0, 0, sym_at, sizeof syms, 2, 0, 8, sizeof(Elf64_Sym)};
  sh[2] = {9, SHT_STRTAB, 0, 0, str_at, sizeof strtab, 0, 0, 1, 0};
  sh[3] = {17, SHT_STRTAB, 0, 0, shstr_at, sizeof shstr, 0, 0, 1, 0};
  sh[4] = {27, SHT_PROGBITS, 0, 0, init_at, sizeof init, 0, 0, 8, 0};
  sh[5] = {43, SHT_LOPROC, 0, 0, info_at, sizeof info, 0, 0, 4, 0};
  size_t sh_at = append(sh, sizeof sh);
  Elf64_Ehdr eh = {};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_shoff = shoff_override ? shoff_override : sh_at;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 6;
  eh.e_shstrndx = 3;
  std::memcpy(data.data(), &eh, sizeof eh);
  return data;
}

TEST(CubinIndex, ReadsGlobalsAndParameterLayouts) {
  auto elf = tinyElf();
  auto index = worker::CubinIndex::build(elf.data(), elf.size());
  const auto* g = index.global("table");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->size, 24u);
  ASSERT_EQ(g->init.size(), 24u);
  EXPECT_EQ(g->init[23], 24);
  EXPECT_EQ(index.global("missing"), nullptr);
  auto layout = index.paramLayout("kern");
  ASSERT_TRUE(layout);
  EXPECT_EQ(*layout, (std::vector<uint32_t>{0, 8, 8, 4}));
  EXPECT_EQ(index.kernels(), std::vector<std::string>{"kern"});
}

TEST(CubinIndex, SimEnumeratesAModulesKernels) {
  auto [client, server] = makeLoopbackPair({});
  worker::SimBackend backend{worker::SimOptions{}};
  HelloReply hello;
  backend.open(0, hello);
  std::thread t([&] { worker::Dispatcher(backend, *server, UINT64_MAX).serve(); });
  test::RawClient c(*client);
  auto elf = tinyElf();
  auto [st, mod] = c.call<calls::ModuleLoad>(Blob{elf.data(), elf.size()}, 0u);
  ASSERT_EQ(st, 0);
  auto [st2, fns] = c.call<calls::ModuleFunctions>(std::get<0>(mod));
  EXPECT_EQ(st2, 0);
  EXPECT_EQ(std::string(std::get<0>(fns).begin(), std::get<0>(fns).end()), std::string("kern", 5));
  ASSERT_EQ(std::get<1>(fns).v.size(), 1u);
  auto [st3, layout] = c.call<calls::FuncGetParamLayout>(std::get<1>(fns).v[0]);
  EXPECT_EQ(st3, 0);
  EXPECT_EQ(std::get<0>(layout), (std::vector<uint32_t>{0, 8, 8, 4}));
  EXPECT_EQ(c.call<calls::ModuleFunctions>(ModuleRef{12345, 0}).first, cu::kInvalidHandle);
  client->shutdown();
  t.join();
}

// The attack from issue 10: on the cuda backend, freeing a module global's address used to return its
// size to the lease before the driver refused the free. Now no backend sees such a free.
TEST(MemoryLedger, FreeingAGlobalNeverReturnsMemoryToTheLease) {
  auto [client, server] = makeLoopbackPair({});
  worker::SimBackend backend{worker::SimOptions{}};
  HelloReply hello;
  backend.open(0, hello);
  std::thread t([&] { worker::Dispatcher(backend, *server, 1u << 20).serve(); });
  test::RawClient c(*client);
  auto elf = tinyElf();
  auto [st, mod] = c.call<calls::ModuleLoad>(Blob{elf.data(), elf.size()}, 0u);
  ASSERT_EQ(st, 0);
  auto [st2, global] = c.call<calls::ModuleGetGlobal>(std::get<0>(mod), std::string("table"));
  ASSERT_EQ(st2, 0);
  uint64_t g = std::get<0>(global).ptr;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.call<calls::MemFree>(g).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{g, Blob{"abcd", 4}}, uint64_t{0}, 0u).first, 0);  // still usable
  auto [st3, a] = c.call<calls::MemAlloc>(uint64_t{1} << 20);
  EXPECT_EQ(st3, 0);
  EXPECT_EQ(c.call<calls::MemAlloc>(uint64_t{1}).first, cu::kOutOfMemory);
  auto [st4, view] = c.call<calls::MemGetInfo>();
  EXPECT_EQ(st4, 0);
  EXPECT_EQ(std::get<0>(view).free, 0u);
  EXPECT_EQ(std::get<0>(view).total, 1u << 20);
  // Unloading the module ends its global: copies to it are refused from then on.
  EXPECT_EQ(c.call<calls::ModuleUnload>(std::get<0>(mod)).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{g, Blob{"abcd", 4}}, uint64_t{0}, 0u).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::MemFree>(std::get<0>(a).ptr).first, 0);
  EXPECT_EQ(c.call<calls::MemAlloc>(uint64_t{1} << 20).first, 0);
  client->shutdown();
  t.join();
}

TEST(CubinIndex, OutOfRangeHeadersGiveAnEmptyIndex) {
  auto elf = tinyElf(1ull << 40);
  auto index = worker::CubinIndex::build(elf.data(), elf.size());
  EXPECT_TRUE(index.empty());
  EXPECT_FALSE(index.why().empty());
  // Every truncation of a valid image is read without going past its end (ASan/valgrind would see it).
  auto whole = tinyElf();
  for (size_t n = 0; n < whole.size(); n += 7) {
    std::vector<uint8_t> cut(whole.begin(), whole.begin() + n);
    (void)worker::CubinIndex::build(cut.data(), cut.size());
  }
  // A fat binary whose entry claims more than the image holds.
  uint8_t fat[16 + 64] = {};
  uint32_t magic = 0xba55ed50;
  std::memcpy(fat, &magic, 4);
  fat[6] = 16;
  uint64_t body = 64;
  std::memcpy(fat + 8, &body, 8);
  fat[16] = 2;      // ELF entry
  fat[20] = 64;     // header size
  fat[24] = 0xff;   // payload far past the end
  fat[31] = 0x7f;
  EXPECT_TRUE(worker::CubinIndex::build(fat, sizeof fat).empty());
  // A compressed entry of 64 bytes that claims to inflate to 1 GiB is refused before anything is
  // allocated (the fuzzer found such images costing seconds and a gigabyte each).
  uint8_t bomb[16 + 64 + 64] = {};
  std::memcpy(bomb, &magic, 4);
  bomb[6] = 16;
  body = 128;
  std::memcpy(bomb + 8, &body, 8);
  bomb[16] = 2;  // ELF entry
  bomb[20] = 64;
  uint64_t payload = 64, flags = 0x8000 /*zstd*/, raw = 1ull << 30;
  std::memcpy(bomb + 16 + 8, &payload, 8);
  std::memcpy(bomb + 16 + 40, &flags, 8);
  std::memcpy(bomb + 16 + 56, &raw, 8);
  auto refused = worker::CubinIndex::build(bomb, sizeof bomb);
  EXPECT_TRUE(refused.empty());
  EXPECT_EQ(refused.why(), "compressed cubin with an implausible size");
}
