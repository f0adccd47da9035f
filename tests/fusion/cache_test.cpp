// The fusion engine's kernel caches, through the public API: the in-memory cache of a context
// (hit, miss on structure change, no recompile on value change, one kernel for 8 concurrent
// compiles), the on-disk cache of machine code (miss then hit, a truncated or corrupted file
// recompiled, KF_CACHE_DIR and KF_CACHE_DISABLE honoured), NVRTC failures as KF_ERROR_COMPILE,
// and NVRTC compiling, for sm_80 and sm_90, graphs that use every op, dtype and image read mode
// (kf_graph_compile_for_arch needs no GPU, so CI compiles every kind of generated kernel).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/test_util.hpp"
#include "tests/fusion/fusion_test_util.hpp"

#ifndef KF_TEST_BUILD_HAS_CUDA
#define KF_TEST_BUILD_HAS_CUDA 0
#endif

namespace {

using kf_test::Context;

using Graph = fusion_test::GraphHandle;

struct Kernel {
  kf_fused_kernel_t* k = nullptr;
  ~Kernel() { kf_fused_kernel_destroy(k); }
  kf_fused_kernel_info_t info() const {
    kf_fused_kernel_info_t i{};
    i.struct_size = sizeof i;
    EXPECT_EQ(kf_fused_kernel_get_info(k, &i), KF_SUCCESS) << kf_get_last_error_message();
    return i;
  }
};

int32_t tensor_input(kf_graph_t* g, kf_dtype_t dtype, int32_t rank) {
  kf_graph_input_desc_t d = KF_GRAPH_INPUT_DESC_INIT;
  d.dtype = dtype;
  d.rank = rank;
  int32_t id = -1;
  EXPECT_EQ(kf_graph_input(g, &d, &id), KF_SUCCESS) << kf_get_last_error_message();
  return id;
}

int32_t scalar(kf_graph_t* g, double v) {
  int32_t id = -1;
  EXPECT_EQ(kf_graph_scalar(g, v, &id), KF_SUCCESS) << kf_get_last_error_message();
  return id;
}

int32_t binary(kf_graph_t* g, kf_binary_op_t op, int32_t a, int32_t b) {
  int32_t id = -1;
  EXPECT_EQ(kf_graph_binary(g, op, a, b, &id), KF_SUCCESS) << kf_get_last_error_message();
  return id;
}

[[maybe_unused]] int32_t unary(kf_graph_t* g, kf_unary_op_t op, int32_t x) {
  int32_t id = -1;
  EXPECT_EQ(kf_graph_unary(g, op, x, &id), KF_SUCCESS) << kf_get_last_error_message();
  return id;
}

[[maybe_unused]] int32_t cast(kf_graph_t* g, int32_t x, kf_dtype_t dtype, kf_cast_mode_t mode) {
  int32_t id = -1;
  EXPECT_EQ(kf_graph_cast(g, x, dtype, mode, &id), KF_SUCCESS) << kf_get_last_error_message();
  return id;
}

void output(kf_graph_t* g, int32_t node, kf_output_layout_t layout = KF_OUTPUT_AS_IS,
            bool batched = false) {
  kf_graph_output_desc_t d = KF_GRAPH_OUTPUT_DESC_INIT;
  d.layout = layout;
  d.batched = batched ? 1 : 0;
  EXPECT_EQ(kf_graph_output(g, node, &d, nullptr), KF_SUCCESS) << kf_get_last_error_message();
}

// relu((a + b) * s): the graph most tests compile.
void build_chain(kf_graph_t* g, kf_dtype_t dtype, double s, kf_binary_op_t second = KF_BINARY_MUL) {
  const int32_t a = tensor_input(g, dtype, 2);
  const int32_t b = tensor_input(g, dtype, 2);
  const int32_t sum = binary(g, KF_BINARY_ADD, a, b);
  const int32_t scaled = binary(g, second, sum, scalar(g, s));
  int32_t act = -1;
  ASSERT_EQ(kf_graph_activation(g, KF_ACTIVATION_RELU, scaled, &act), KF_SUCCESS);
  output(g, act);
}

// Launches k, a build_chain kernel of f32, on random a and b (value: an override, or null) and
// checks its one output against relu((a + b) * s).
void expect_chain_result(kf_context_t* ctx, const Kernel& k, const kf_fused_value_t* value,
                         double s) {
  const std::vector<int64_t> shape = {3, 37};
  const std::vector<double> a = kf_test::random_values(kf_test::numel(shape), 1);
  const std::vector<double> b = kf_test::random_values(kf_test::numel(shape), 2);
  kf_test::Tensor ta = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, shape);
  kf_test::Tensor tb = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, shape);
  kf_test::Tensor out = kf_test::make_tensor(ctx, KF_DTYPE_FLOAT32, shape);
  kf_test::upload(ta, a);
  kf_test::upload(tb, b);
  kf_test::poison(out);
  const kf_tensor_t* inputs[] = {ta, tb};
  kf_tensor_t* outputs[] = {out};
  kf_launch_args_t args = KF_LAUNCH_ARGS_INIT;
  args.inputs = inputs;
  args.outputs = outputs;
  args.values = value;
  args.n_values = value != nullptr ? 1 : 0;
  KF_ASSERT_OK(kf_fused_kernel_launch(k.k, &args, nullptr));
  const std::vector<double> ra = kf_test::round_to_dtype(a, KF_DTYPE_FLOAT32);
  const std::vector<double> rb = kf_test::round_to_dtype(b, KF_DTYPE_FLOAT32);
  std::vector<double> want(ra.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = std::max(0.0, (ra[i] + rb[i]) * s);
  kf_test::expect_close(kf_test::download(out), want, 1e-5, "scale " + std::to_string(s));
}

// A fresh directory under $TMPDIR (or /tmp), removed with its files at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base ? base : "/tmp") + "/kf_cache_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    EXPECT_NE(mkdtemp(buffer.data()), nullptr);
    path = buffer.data();
  }
  // Adopts a directory the library creates (its files and it are removed at scope exit).
  explicit TempDir(std::string existing) : path(std::move(existing)) {}
  ~TempDir() {
    for (const std::string& f : files()) std::remove(f.c_str());
    rmdir(path.c_str());
  }
  std::vector<std::string> files() const {  // regular files only
    std::vector<std::string> out;
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        struct stat st;
        const std::string full = path + "/" + name;
        if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode)) out.push_back(full);
      }
      closedir(d);
    }
    return out;
  }
};

// Points the disk cache at a fresh directory for one test, restoring the environment after.
class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    save("KF_CACHE_DIR", &saved_dir_);
    save("KF_CACHE_DISABLE", &saved_disable_);
    setenv("KF_CACHE_DIR", dir_.path.c_str(), 1);
    unsetenv("KF_CACHE_DISABLE");
  }
  void TearDown() override {
    restore("KF_CACHE_DIR", saved_dir_);
    restore("KF_CACHE_DISABLE", saved_disable_);
  }

  TempDir dir_;

 private:
  struct Saved {
    bool set = false;
    std::string value;
  };
  static void save(const char* name, Saved* s) {
    const char* v = std::getenv(name);
    s->set = v != nullptr;
    if (v != nullptr) s->value = v;
  }
  static void restore(const char* name, const Saved& s) {
    if (s.set) {
      setenv(name, s.value.c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  Saved saved_dir_, saved_disable_;
};

// ---- in-memory cache (the device under test: CPU, or CUDA on a GPU)

TEST_F(CacheTest, SecondCompileIsAMemoryHitWithTheSameStructureHash) {
  KF_REQUIRE_DEVICE();
  Context ctx;
  Graph g1(ctx), g2(ctx);
  build_chain(g1, KF_DTYPE_FLOAT32, 2.0);
  build_chain(g2, KF_DTYPE_FLOAT32, 2.0);
  Kernel k1, k2;
  KF_ASSERT_OK(kf_graph_compile(g1, nullptr, &k1.k));
  KF_ASSERT_OK(kf_graph_compile(g2, nullptr, &k2.k));
  EXPECT_EQ(k1.info().origin, KF_KERNEL_COMPILED);
  EXPECT_EQ(k2.info().origin, KF_KERNEL_MEMORY_CACHE);
  EXPECT_EQ(k1.info().structure_hash, k2.info().structure_hash);
  // Compiling the same graph object again is a hit too.
  Kernel k3;
  KF_ASSERT_OK(kf_graph_compile(g1, nullptr, &k3.k));
  EXPECT_EQ(k3.info().origin, KF_KERNEL_MEMORY_CACHE);
}

TEST_F(CacheTest, StructureChangesMiss) {
  KF_REQUIRE_DEVICE();
  Context ctx;
  Graph base(ctx), other_op(ctx), other_dtype(ctx), other_capacity(ctx);
  build_chain(base, KF_DTYPE_FLOAT32, 2.0);
  build_chain(other_op, KF_DTYPE_FLOAT32, 2.0, KF_BINARY_SUB);
  build_chain(other_dtype, KF_DTYPE_FLOAT16, 2.0);
  build_chain(other_capacity, KF_DTYPE_FLOAT32, 2.0);
  Kernel k0, k1, k2, k3;
  KF_ASSERT_OK(kf_graph_compile(base, nullptr, &k0.k));
  KF_ASSERT_OK(kf_graph_compile(other_op, nullptr, &k1.k));
  KF_ASSERT_OK(kf_graph_compile(other_dtype, nullptr, &k2.k));
  kf_compile_options_t o = KF_COMPILE_OPTIONS_INIT;
  o.max_items = 4;
  KF_ASSERT_OK(kf_graph_compile(other_capacity, &o, &k3.k));
  for (const Kernel* k : {&k1, &k2, &k3}) {
    EXPECT_EQ(k->info().origin, KF_KERNEL_COMPILED);
    EXPECT_NE(k->info().structure_hash, k0.info().structure_hash);
  }
}

TEST_F(CacheTest, ValueChangesReuseTheKernelAndTakeEffect) {
  KF_REQUIRE_DEVICE();
  Context ctx;
  Graph g2(ctx), g5(ctx);
  build_chain(g2, KF_DTYPE_FLOAT32, 2.0);
  build_chain(g5, KF_DTYPE_FLOAT32, 5.0);
  Kernel k2, k5;
  KF_ASSERT_OK(kf_graph_compile(g2, nullptr, &k2.k));
  KF_ASSERT_OK(kf_graph_compile(g5, nullptr, &k5.k));
  EXPECT_EQ(k5.info().origin, KF_KERNEL_MEMORY_CACHE);
  EXPECT_EQ(k2.info().structure_hash, k5.info().structure_hash);

  // Both kernels share machine code, yet each applies its own default value, and a launch
  // override applies another.
  expect_chain_result(ctx, k2, nullptr, 2.0);
  expect_chain_result(ctx, k5, nullptr, 5.0);
  const int32_t scalar_node = 3;  // inputs 0, 1; sum 2; the scalar 3
  const kf_fused_value_t override_value = {scalar_node, 0, -0.5};
  expect_chain_result(ctx, k2, &override_value, -0.5);
}

TEST_F(CacheTest, EightThreadsCompilingOneGraphGetOneKernel) {
  KF_REQUIRE_DEVICE();
  Context ctx;
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<Graph>> graphs;
  for (int i = 0; i < kThreads; ++i) {
    graphs.push_back(std::make_unique<Graph>(ctx));
    build_chain(*graphs.back(), KF_DTYPE_BFLOAT16, 1.5);
  }
  std::vector<Kernel> kernels(kThreads);
  std::vector<kf_result_t> results(kThreads, KF_ERROR_INTERNAL);
  std::mutex mutex;
  std::condition_variable cv;
  int ready = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mutex);
        ++ready;
        cv.notify_all();
        cv.wait(lock, [&] { return ready == kThreads; });  // start together
      }
      results[i] = kf_graph_compile(*graphs[i], nullptr, &kernels[i].k);
    });
  }
  for (std::thread& t : threads) t.join();
  int built = 0, hits = 0;
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_EQ(results[i], KF_SUCCESS) << "thread " << i;
    const kf_fused_kernel_info_t info = kernels[i].info();
    EXPECT_EQ(info.structure_hash, kernels[0].info().structure_hash);
    if (info.origin == KF_KERNEL_MEMORY_CACHE) {
      ++hits;
    } else {
      ++built;  // compiled (or, on CUDA, loaded from the fresh disk cache: not possible here)
      EXPECT_EQ(info.origin, KF_KERNEL_COMPILED);
    }
  }
  EXPECT_EQ(built, 1);
  EXPECT_EQ(hits, kThreads - 1);
  // The disk cache saw one compile: at most one file (none on a CPU context).
  EXPECT_LE(dir_.files().size(), 1u);
}

TEST_F(CacheTest, EightThreadsCompilingOneGraphHandleGetOneKernel) {
  KF_REQUIRE_DEVICE();
  Context ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_FLOAT32, 0.5);
  constexpr int kThreads = 8;
  constexpr int kRounds = 20;  // compile and destroy repeatedly: the graph's frozen state is shared
  std::vector<std::vector<kf_fused_kernel_info_t>> infos(kThreads);
  std::vector<kf_result_t> results(kThreads, KF_SUCCESS);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      for (int r = 0; r < kRounds && results[i] == KF_SUCCESS; ++r) {
        Kernel k;
        results[i] = kf_graph_compile(g, nullptr, &k.k);
        if (results[i] == KF_SUCCESS) infos[i].push_back(k.info());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int built = 0;
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_EQ(results[i], KF_SUCCESS) << "thread " << i;
    ASSERT_EQ(infos[i].size(), static_cast<size_t>(kRounds));
    for (const kf_fused_kernel_info_t& info : infos[i]) {
      EXPECT_EQ(info.structure_hash, infos[0][0].structure_hash);
      EXPECT_EQ(info.n_inputs, 2);
      if (info.origin != KF_KERNEL_MEMORY_CACHE) ++built;
    }
  }
  EXPECT_EQ(built, 1);
}

TEST_F(CacheTest, BuilderCallsAfterACompileReachOnlyLaterCompiles) {
  KF_REQUIRE_DEVICE();
  Context ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_FLOAT32, 2.0);
  Kernel first, again;
  KF_ASSERT_OK(kf_graph_compile(g, nullptr, &first.k));
  KF_ASSERT_OK(kf_graph_compile(g, nullptr, &again.k));
  EXPECT_EQ(again.info().origin, KF_KERNEL_MEMORY_CACHE);
  EXPECT_EQ(again.info().structure_hash, first.info().structure_hash);

  // Another capacity is other structure; back at the first, the first's kernel again.
  kf_compile_options_t four = KF_COMPILE_OPTIONS_INIT;
  four.max_items = 4;
  Kernel wide, narrow;
  KF_ASSERT_OK(kf_graph_compile(g, &four, &wide.k));
  KF_ASSERT_OK(kf_graph_compile(g, nullptr, &narrow.k));
  EXPECT_NE(wide.info().structure_hash, first.info().structure_hash);
  EXPECT_EQ(wide.info().max_items, 4);
  EXPECT_EQ(narrow.info().structure_hash, first.info().structure_hash);
  EXPECT_EQ(narrow.info().origin, KF_KERNEL_MEMORY_CACHE);

  // A failed builder call changes nothing: still the same structure.
  int32_t unused = -1;
  EXPECT_EQ(kf_graph_binary(g, KF_BINARY_ADD, 0, 99, &unused), KF_ERROR_INVALID_ARGUMENT);
  Kernel after_failure;
  KF_ASSERT_OK(kf_graph_compile(g, nullptr, &after_failure.k));
  EXPECT_EQ(after_failure.info().structure_hash, first.info().structure_hash);
  EXPECT_EQ(after_failure.info().origin, KF_KERNEL_MEMORY_CACHE);

  // A second output: the next compile sees it, the kernels compiled before do not.
  output(g, binary(g, KF_BINARY_SUB, 0, 1));
  Kernel grown;
  KF_ASSERT_OK(kf_graph_compile(g, nullptr, &grown.k));
  EXPECT_EQ(grown.info().origin, KF_KERNEL_COMPILED);
  EXPECT_NE(grown.info().structure_hash, first.info().structure_hash);
  EXPECT_EQ(grown.info().n_outputs, 2);
  EXPECT_EQ(first.info().n_outputs, 1);
  EXPECT_EQ(again.info().n_outputs, 1);

  // The earlier kernel still runs its own graph: one output, relu((a + b) * 2).
  expect_chain_result(ctx, first, nullptr, 2.0);
}

// ---- on-disk cache and NVRTC, through kf_graph_compile_for_arch (no GPU needed)

// A CPU context: compile_for_arch works in every context, so these run on machines with no GPU.
struct CpuContext : fusion_test::ContextHandle {
  CpuContext() : ContextHandle(KF_DEVICE_CPU) {}
};

#define KF_REQUIRE_NVRTC()                                           \
  do {                                                               \
    if (!KF_TEST_BUILD_HAS_CUDA)                                     \
      GTEST_SKIP() << "CPU-only build: NVRTC is not part of it "     \
                      "(CpuOnlyBuildRefusesNvrtc checks the error)"; \
  } while (0)

#if !KF_TEST_BUILD_HAS_CUDA
TEST_F(CacheTest, CpuOnlyBuildRefusesNvrtc) {
  CpuContext ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_FLOAT32, 2.0);
  size_t bytes = 123;
  KF_EXPECT_ERR(kf_graph_compile_for_arch(g, nullptr, 90, &bytes, nullptr), KF_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(bytes, 123u);  // untouched on failure
  EXPECT_NE(std::string(kf_get_last_error_message()).find("no CUDA backend"), std::string::npos)
      << kf_get_last_error_message();
}
#endif

kf_kernel_origin_t compile_for(kf_graph_t* g, int32_t sm, size_t* bytes = nullptr,
                               uint32_t flags = 0) {
  kf_compile_options_t o = KF_COMPILE_OPTIONS_INIT;
  o.flags = flags;
  kf_kernel_origin_t origin = KF_KERNEL_MEMORY_CACHE;  // neither answer it may give
  size_t size = 0;
  const kf_result_t r = kf_graph_compile_for_arch(g, &o, sm, &size, &origin);
  EXPECT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
  if (bytes != nullptr) *bytes = size;
  return origin;
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(CacheTest, DiskCacheMissThenHit) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_FLOAT32, 2.0);
  size_t compiled = 0, loaded = 0;
  EXPECT_EQ(compile_for(g, 90, &compiled), KF_KERNEL_COMPILED);
  ASSERT_EQ(dir_.files().size(), 1u) << "KF_CACHE_DIR holds the entry";
  EXPECT_EQ(compile_for(g, 90, &loaded), KF_KERNEL_DISK_CACHE);
  EXPECT_GT(compiled, 0u);
  EXPECT_EQ(loaded, compiled);
  // Another architecture is another entry.
  EXPECT_EQ(compile_for(g, 80), KF_KERNEL_COMPILED);
  EXPECT_EQ(dir_.files().size(), 2u);
  // A value-only change keeps the source, hence the entry.
  Graph g5(ctx);
  build_chain(g5, KF_DTYPE_FLOAT32, 5.0);
  EXPECT_EQ(compile_for(g5, 90), KF_KERNEL_DISK_CACHE);
}

TEST_F(CacheTest, TruncatedFileIsRecompiledAndRewritten) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_FLOAT16, 2.0);
  ASSERT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
  ASSERT_EQ(dir_.files().size(), 1u);
  const std::string file = dir_.files()[0];
  const std::vector<char> good = read_file(file);
  for (size_t keep : {good.size() / 2, size_t(40), size_t(0), good.size() - 1}) {
    write_file(file, std::vector<char>(good.begin(), good.begin() + keep));
    EXPECT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED) << "truncated to " << keep;
    // NVRTC's output is not byte-identical from one compile to the next (a few hundred bytes of
    // the CUBIN vary), so the rewritten entry is checked by size and by reading it back.
    EXPECT_EQ(read_file(file).size(), good.size()) << "truncated to " << keep;
    EXPECT_EQ(compile_for(g, 90), KF_KERNEL_DISK_CACHE) << "truncated to " << keep;
  }
  // Trailing garbage is a mismatch too.
  std::vector<char> longer = good;
  longer.push_back('x');
  write_file(file, longer);
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
  EXPECT_EQ(read_file(file).size(), good.size());
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_DISK_CACHE);
}

TEST_F(CacheTest, FlippedByteIsDetectedAndRecompiled) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_BFLOAT16, 2.0);
  ASSERT_EQ(compile_for(g, 80), KF_KERNEL_COMPILED);
  ASSERT_EQ(dir_.files().size(), 1u);
  const std::string file = dir_.files()[0];
  const std::vector<char> good = read_file(file);
  // The magic, the format version, the key, the length, the checksum, the first and a middle
  // payload byte, the last byte.
  for (size_t at : {size_t(0), size_t(8), size_t(20), size_t(48), size_t(60), size_t(88),
                    good.size() / 2, good.size() - 1}) {
    std::vector<char> bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    write_file(file, bad);
    EXPECT_EQ(compile_for(g, 80), KF_KERNEL_COMPILED) << "byte " << at << " flipped";
    EXPECT_NE(read_file(file), bad) << "byte " << at << ": the fresh compile overwrote it";
    EXPECT_EQ(compile_for(g, 80), KF_KERNEL_DISK_CACHE) << "byte " << at;
  }
}

// Headers that lie and files that are not files: the reserved word not 0; a length past the
// file's size (the reader allocated what the header claimed, up to 1 GiB, before reading); a
// FIFO at the entry's path (opening it blocked until a writer came: the compile hung). Each is
// ignored, the kernel recompiled and the entry rewritten as a regular file.
TEST_F(CacheTest, LyingHeadersAndFifosAreIgnored) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_FLOAT32, 3.0);
  ASSERT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
  ASSERT_EQ(dir_.files().size(), 1u);
  const std::string file = dir_.files()[0];
  const std::vector<char> good = read_file(file);
  std::vector<char> reserved = good;
  reserved[12] = static_cast<char>(0xde);
  std::vector<char> longer_claim = good;
  longer_claim[51] = static_cast<char>(longer_claim[51] ^ 0x20);  // + 512 MiB
  for (const std::vector<char>* bad : {&reserved, &longer_claim}) {
    write_file(file, *bad);
    EXPECT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
    EXPECT_EQ(read_file(file).size(), good.size());
    EXPECT_EQ(compile_for(g, 90), KF_KERNEL_DISK_CACHE);
  }
  ASSERT_EQ(std::remove(file.c_str()), 0);
  ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
  struct stat st;
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the FIFO was replaced by the entry";
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_DISK_CACHE);
}

TEST_F(CacheTest, CacheDirectoryAndSwitchesAreHonoured) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_FLOAT64, 2.0);
  // A nested directory that does not exist yet is created.
  TempDir nested(dir_.path + "/nested");
  setenv("KF_CACHE_DIR", nested.path.c_str(), 1);
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
  EXPECT_EQ(nested.files().size(), 1u);
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_DISK_CACHE);
  // KF_CACHE_DISABLE=1: neither read nor written.
  setenv("KF_CACHE_DIR", dir_.path.c_str(), 1);
  setenv("KF_CACHE_DISABLE", "1", 1);
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
  EXPECT_TRUE(dir_.files().empty());
  unsetenv("KF_CACHE_DISABLE");
  // KF_COMPILE_NO_DISK_CACHE: the same for one compile.
  EXPECT_EQ(compile_for(g, 90, nullptr, KF_COMPILE_NO_DISK_CACHE), KF_KERNEL_COMPILED);
  EXPECT_TRUE(dir_.files().empty());
  EXPECT_EQ(compile_for(g, 90), KF_KERNEL_COMPILED);
  EXPECT_EQ(dir_.files().size(), 1u);
  // XDG_CACHE_HOME when KF_CACHE_DIR is unset: <XDG_CACHE_HOME>/kernel_fusion.
  unsetenv("KF_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_xdg = xdg != nullptr ? xdg : "";
  TempDir xdg_dir;
  setenv("XDG_CACHE_HOME", xdg_dir.path.c_str(), 1);
  EXPECT_EQ(compile_for(g, 80), KF_KERNEL_COMPILED);
  TempDir xdg_entries(xdg_dir.path + "/kernel_fusion");
  EXPECT_EQ(xdg_entries.files().size(), 1u);
  EXPECT_EQ(compile_for(g, 80), KF_KERNEL_DISK_CACHE);
  if (xdg != nullptr) {
    setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  } else {
    unsetenv("XDG_CACHE_HOME");
  }
}

TEST_F(CacheTest, NvrtcFailureIsACompileErrorWithTheLog) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  Graph g(ctx);
  build_chain(g, KF_DTYPE_FLOAT32, 2.0);
  // The public API generates only valid source, so NVRTC is made to fail through its options:
  // an architecture this NVRTC cannot target. The library must still report KF_ERROR_COMPILE
  // with NVRTC's own log, and leave the out-parameters untouched.
  size_t bytes = 7;
  kf_kernel_origin_t origin = KF_KERNEL_MEMORY_CACHE;
  KF_EXPECT_ERR(kf_graph_compile_for_arch(g, nullptr, 12345, &bytes, &origin), KF_ERROR_COMPILE);
  const std::string message = kf_get_last_error_message();
  EXPECT_NE(message.find("NVRTC"), std::string::npos) << message;
  EXPECT_NE(message.find("sm_12345"), std::string::npos) << message;
  EXPECT_EQ(bytes, 7u);
  EXPECT_EQ(origin, KF_KERNEL_MEMORY_CACHE);
  EXPECT_TRUE(dir_.files().empty()) << "a failed compile writes no cache entry";
}

// ---- NVRTC compiles every kind of generated kernel for sm_80 and sm_90 (once: the _cpu binary)

#if !defined(KF_TEST_CUDA)

const kf_dtype_t kAllDtypes[] = {KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16,
                                 KF_DTYPE_FLOAT64, KF_DTYPE_INT8,    KF_DTYPE_UINT8,
                                 KF_DTYPE_INT32,   KF_DTYPE_INT64};

bool floating(kf_dtype_t d) {
  return d == KF_DTYPE_FLOAT32 || d == KF_DTYPE_FLOAT16 || d == KF_DTYPE_BFLOAT16 ||
         d == KF_DTYPE_FLOAT64;
}

// Compiles g for sm_80 and sm_90 with no disk cache (every call a real NVRTC compile).
void expect_nvrtc_compiles(kf_graph_t* g, const std::string& what, int32_t max_items = 1) {
  for (int32_t sm : {80, 90}) {
    kf_compile_options_t o = KF_COMPILE_OPTIONS_INIT;
    o.flags = KF_COMPILE_NO_DISK_CACHE;
    o.max_items = max_items;
    size_t bytes = 0;
    kf_kernel_origin_t origin = KF_KERNEL_MEMORY_CACHE;
    EXPECT_EQ(kf_graph_compile_for_arch(g, &o, sm, &bytes, &origin), KF_SUCCESS)
        << what << " for sm_" << sm << ": " << kf_get_last_error_message();
    EXPECT_GT(bytes, 0u) << what;
    EXPECT_EQ(origin, KF_KERNEL_COMPILED) << what;
  }
}

// Every unary op, activation, binary op and comparison, clamp, where, and casts to every dtype in
// every mode, for one dtype; a rank-2 input broadcast against a rank-1 one.
TEST_F(CacheTest, NvrtcCompilesEveryOpOfEveryDtype) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  for (kf_dtype_t dtype : kAllDtypes) {
    Graph g(ctx);
    const int32_t x = tensor_input(g, dtype, 2);
    const int32_t y = tensor_input(g, dtype, 1);
    int32_t acc = x;
    for (kf_unary_op_t op : {KF_UNARY_NEG, KF_UNARY_ABS, KF_UNARY_SQUARE}) acc = unary(g, op, acc);
    if (floating(dtype)) {
      for (kf_unary_op_t op : {KF_UNARY_EXP, KF_UNARY_LOG, KF_UNARY_SQRT, KF_UNARY_RSQRT}) {
        acc = unary(g, op, acc);
      }
      for (int act = KF_ACTIVATION_NONE; act <= KF_ACTIVATION_SIGMOID; ++act) {
        int32_t out = -1;
        ASSERT_EQ(kf_graph_activation(g, static_cast<kf_activation_t>(act), acc, &out), KF_SUCCESS)
            << kf_get_last_error_message();
        acc = out;
      }
      acc = binary(g, KF_BINARY_POW, acc, scalar(g, 0.5));
    }
    for (int op = KF_BINARY_ADD; op <= KF_BINARY_MAX; ++op) {
      acc = binary(g, static_cast<kf_binary_op_t>(op), acc, op % 2 == 0 ? y : scalar(g, 3.0));
    }
    int32_t clamped = -1;
    ASSERT_EQ(kf_graph_clamp(g, acc, scalar(g, -2.0), scalar(g, 100.0), &clamped), KF_SUCCESS)
        << kf_get_last_error_message();
    output(g, clamped);
    for (int op = KF_BINARY_EQ; op <= KF_BINARY_GE; ++op) {
      const int32_t cmp = binary(g, static_cast<kf_binary_op_t>(op), clamped, y);
      int32_t picked = -1;
      ASSERT_EQ(kf_graph_where(g, cmp, clamped, scalar(g, 1.0), &picked), KF_SUCCESS)
          << kf_get_last_error_message();
      output(g, op == KF_BINARY_EQ ? cmp : picked);
    }
    for (kf_dtype_t to : kAllDtypes) {
      for (kf_cast_mode_t mode : {KF_CAST_WRAP, KF_CAST_SATURATE, KF_CAST_SATURATE_ROUND}) {
        output(g, cast(g, clamped, to, mode));
      }
    }
    expect_nvrtc_compiles(g, "dtype " + std::to_string(dtype));
  }
}

// An input that no output depends on is bound at launch but never read by the kernel.
TEST_F(CacheTest, NvrtcCompilesAGraphWithAnUnusedInput) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  Graph g(ctx);
  const int32_t used = tensor_input(g, KF_DTYPE_UINT8, 2);
  tensor_input(g, KF_DTYPE_FLOAT64, 3);  // declared, never used
  output(g, binary(g, KF_BINARY_ADD, used, scalar(g, 1.0)));
  expect_nvrtc_compiles(g, "unused input");
  size_t length = 0;
  KF_ASSERT_OK(kf_graph_get_source(g, nullptr, nullptr, 0, &length));
  std::string source(length, '\0');
  KF_ASSERT_OK(kf_graph_get_source(g, nullptr, &source[0], source.size(), &length));
  EXPECT_NE(source.find("no output uses this input"), std::string::npos) << source;
}

int32_t image_input(kf_graph_t* g, kf_input_kind_t kind, kf_dtype_t dtype, int32_t channels) {
  kf_graph_input_desc_t d = KF_GRAPH_INPUT_DESC_INIT;
  d.kind = kind;
  d.dtype = dtype;
  d.rank = kind == KF_INPUT_NV12 ? 2 : 3;
  d.channels = channels;
  int32_t id = -1;
  EXPECT_EQ(kf_graph_input(g, &d, &id), KF_SUCCESS) << kf_get_last_error_message();
  return id;
}

// Every read mode of one image kind (crop or not, each interpolation, each border, letterbox),
// summed in f32, then colour conversions of its channel count, normalisation, and every output
// layout.
void build_image_sweep(kf_graph_t* g, kf_input_kind_t kind, kf_dtype_t dtype, int32_t channels) {
  const int32_t image = image_input(g, kind, dtype, channels);
  int32_t sum = -1;
  const kf_color_standard_t standards[] = {KF_COLOR_BT601, KF_COLOR_BT709};
  int variant = 0;
  for (int crop = 0; crop <= 1; ++crop) {
    for (kf_interpolation_t interp : {KF_INTERP_NONE, KF_INTERP_NEAREST, KF_INTERP_BILINEAR}) {
      for (kf_border_t border : {KF_BORDER_CONSTANT, KF_BORDER_REPLICATE, KF_BORDER_REFLECT}) {
        for (int keep = 0; keep <= (interp == KF_INTERP_NONE ? 0 : 1); ++keep) {
          kf_image_read_desc_t r = KF_IMAGE_READ_DESC_INIT;
          r.crop = crop;
          r.interpolation = interp;
          r.border = border;
          r.keep_aspect_ratio = keep;
          r.border_value = 7.0;
          r.color_standard = standards[variant % 2];
          r.full_range = (variant / 2) % 2;
          ++variant;
          int32_t read = -1;
          ASSERT_EQ(kf_graph_read_image(g, image, &r, &read), KF_SUCCESS)
              << kf_get_last_error_message();
          const int32_t value = cast(g, read, KF_DTYPE_FLOAT32, KF_CAST_WRAP);
          sum = sum < 0 ? value : binary(g, KF_BINARY_ADD, sum, value);
        }
      }
    }
  }
  const int32_t pixel_channels = kind == KF_INPUT_NV12 ? 3 : channels;
  std::vector<kf_color_conversion_t> conversions;
  if (pixel_channels == 3) {
    conversions = {KF_COLOR_RGB_TO_BGR, KF_COLOR_RGB_TO_GRAY, KF_COLOR_BGR_TO_GRAY,
                   KF_COLOR_RGB_TO_RGBA, KF_COLOR_BGR_TO_RGBA};
  } else if (pixel_channels == 4) {
    conversions = {KF_COLOR_RGBA_TO_BGRA, KF_COLOR_RGBA_TO_RGB, KF_COLOR_RGBA_TO_BGR};
  }
  for (kf_color_conversion_t c : conversions) {
    int32_t converted = -1;
    ASSERT_EQ(kf_graph_color_convert(g, sum, c, &converted), KF_SUCCESS)
        << kf_get_last_error_message();
    output(g, cast(g, converted, KF_DTYPE_UINT8, KF_CAST_SATURATE_ROUND));
  }
  const std::vector<double> mean(pixel_channels, 0.5), std_dev(pixel_channels, 0.25);
  int32_t normalized = -1;
  ASSERT_EQ(kf_graph_normalize(g, sum, 1.0 / 255.0, mean.data(), std_dev.data(), &normalized),
            KF_SUCCESS)
      << kf_get_last_error_message();
  output(g, normalized);
  output(g, normalized, KF_OUTPUT_PLANAR);
  output(g, cast(g, normalized, KF_DTYPE_FLOAT16, KF_CAST_SATURATE), KF_OUTPUT_PLANAR, true);
  output(g, sum, KF_OUTPUT_AS_IS, true);
}

TEST_F(CacheTest, NvrtcCompilesEveryImageReadMode) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  const std::pair<kf_dtype_t, int32_t> kinds[] = {
      {KF_DTYPE_UINT8, 1}, {KF_DTYPE_UINT8, 3}, {KF_DTYPE_UINT8, 4}, {KF_DTYPE_FLOAT32, 3}};
  for (const auto& kind : kinds) {
    Graph g(ctx);
    build_image_sweep(g, KF_INPUT_IMAGE, kind.first, kind.second);
    expect_nvrtc_compiles(g, "image dtype " + std::to_string(kind.first) + ", " +
                                 std::to_string(kind.second) + " channels");
  }
  Graph nv12(ctx);
  build_image_sweep(nv12, KF_INPUT_NV12, KF_DTYPE_UINT8, 1);
  expect_nvrtc_compiles(nv12, "NV12");
}

// A capacity whose item table exceeds the kernel parameter: the table goes to device memory.
TEST_F(CacheTest, NvrtcCompilesAThousandCropCapacity) {
  KF_REQUIRE_NVRTC();
  CpuContext ctx;
  Graph g(ctx);
  const int32_t frame = image_input(g, KF_INPUT_IMAGE, KF_DTYPE_UINT8, 3);
  kf_image_read_desc_t r = KF_IMAGE_READ_DESC_INIT;
  r.crop = 1;
  r.interpolation = KF_INTERP_BILINEAR;
  int32_t read = -1;
  ASSERT_EQ(kf_graph_read_image(g, frame, &r, &read), KF_SUCCESS) << kf_get_last_error_message();
  const double mean[] = {0.485, 0.456, 0.406}, std_dev[] = {0.229, 0.224, 0.225};
  int32_t normalized = -1;
  ASSERT_EQ(kf_graph_normalize(g, read, 1.0 / 255.0, mean, std_dev, &normalized), KF_SUCCESS)
      << kf_get_last_error_message();
  output(g, normalized, KF_OUTPUT_PLANAR, true);
  expect_nvrtc_compiles(g, "1000 items", 1000);
}

#endif  // !KF_TEST_CUDA

}  // namespace
