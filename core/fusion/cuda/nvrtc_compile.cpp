// NVRTC compilation of generated kernels, behind the disk cache. The cache key covers everything
// that determines the machine code: the source, the embedded headers it includes, the options,
// the architecture and NVRTC's version.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "core/fusion/cuda_program.hpp"
#include "core/fusion/disk_cache.hpp"
#include "core/fusion/sha256.hpp"
#include "core/runtime/error.hpp"

#if KF_WITH_CUDA
#include <dlfcn.h>
#include <glob.h>
#include <nvrtc.h>

#include "core/fusion/cuda/embedded_headers.hpp"

namespace kf {
namespace fusion {
namespace {

// NVRTC is loaded at its first use, not linked: the library (and its CPU backend) then loads on
// machines that have a driver, or nothing, but not the CUDA toolkit; only compiling a fused
// kernel needs libnvrtc. The name carries the toolkit's major version, as its SONAME does; the
// directory CMake found it in at build time is tried after the loader's own search.
struct Nvrtc {
  decltype(&nvrtcVersion) version = nullptr;
  decltype(&nvrtcGetErrorString) error_string = nullptr;
  decltype(&nvrtcCreateProgram) create_program = nullptr;
  decltype(&nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&nvrtcCompileProgram) compile_program = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  std::string failure;  // why it could not be loaded; empty when loaded
};

const Nvrtc& nvrtc() {
  static const Nvrtc loaded = [] {
    Nvrtc n;
    const std::string name = "libnvrtc.so." + std::to_string(KF_NVRTC_MAJOR);
    void* library = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* reason = ::dlerror();
      const std::string first = reason != nullptr ? reason : "no reason given";
      // NVRTC opens its builtins library by name when it compiles: loaded from this directory
      // first, it is found (a loaded library answers for its SONAME), where the loader's search
      // would not find it either.
      glob_t builtins{};
      const std::string pattern = std::string(KF_NVRTC_DIR) + "/libnvrtc-builtins.so." +
                                  std::to_string(KF_NVRTC_MAJOR) + ".*";
      if (::glob(pattern.c_str(), 0, nullptr, &builtins) == 0) {
        for (size_t i = 0; i < builtins.gl_pathc; ++i)
          ::dlopen(builtins.gl_pathv[i], RTLD_NOW | RTLD_LOCAL);
      }
      ::globfree(&builtins);
      library = ::dlopen((std::string(KF_NVRTC_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library == nullptr) {
        const char* again = ::dlerror();  // (read, so that no error stays pending)
        n.failure = name + " could not be loaded (" + first + "; from " + KF_NVRTC_DIR + ": " +
                    (again != nullptr ? again : "no reason given") + ")";
        return n;
      }
    }
    bool all = true;
    const auto find = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(library, symbol));
      all = all && fn != nullptr;
    };
    find(n.version, "nvrtcVersion");
    find(n.error_string, "nvrtcGetErrorString");
    find(n.create_program, "nvrtcCreateProgram");
    find(n.destroy_program, "nvrtcDestroyProgram");
    find(n.compile_program, "nvrtcCompileProgram");
    find(n.cubin_size, "nvrtcGetCUBINSize");
    find(n.cubin, "nvrtcGetCUBIN");
    find(n.log_size, "nvrtcGetProgramLogSize");
    find(n.log, "nvrtcGetProgramLog");
    if (!all) n.failure = name + " lacks an NVRTC function this library calls";
    return n;  // (the library stays loaded for the process)
  }();
  if (!loaded.failure.empty()) {
    fail(KF_ERROR_NOT_SUPPORTED, "NVRTC is unavailable: %s; fused kernels cannot be compiled",
         loaded.failure.c_str());
  }
  return loaded;
}

constexpr const char* kProgramName = "kf_fused_kernel.cu";

// -default-device: the shared headers' KF_HOST_DEVICE functions and the generated helpers are
// device code. No fast math: results must match the CPU executor.
std::vector<std::string> nvrtc_options(int sm) {
  return {"-arch=sm_" + std::to_string(sm), "-std=c++17", "-default-device"};
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtc().version(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

Sha256Digest cache_key(const std::string& source, const std::vector<std::string>& options, int sm) {
  Sha256 h;
  h.update_field("kernel_fusion fused kernel cubin");
  h.update_field(source);
  // The headers' digest, computed once per process (hashing their text is most of the time a
  // disk-cache hit would otherwise take).
  static const Sha256Digest headers = [] {
    Sha256 hh;
    for (size_t i = 0; i < kEmbeddedHeaderCount; ++i) {
      hh.update_field(kEmbeddedHeaders[i].name);
      hh.update_field(std::string(kEmbeddedHeaders[i].text, kEmbeddedHeaders[i].size));
    }
    return hh.finish();
  }();
  h.update(headers.bytes, sizeof headers.bytes);
  for (const std::string& o : options) h.update_field(o);
  h.update_field("sm_" + std::to_string(sm));
  h.update_field("nvrtc " + nvrtc_version());
  return h.finish();
}

// KF_DUMP_SOURCE_DIR: each source as kf_fused_<first 16 hex digits of its SHA-256>.cu.
void dump_source(const std::string& source) {
  const char* dir = std::getenv("KF_DUMP_SOURCE_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = std::string(dir) + "/kf_fused_" +
                           sha256(source.data(), source.size()).hex().substr(0, 16) + ".cu";
  // Non-blocking: a FIFO at the path (no reader) fails the open instead of holding it forever.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) write_all(fd, source.data(), source.size());
  ::close(fd);
}

class NvrtcProgram {
 public:
  explicit NvrtcProgram(const std::string& source) {
    std::vector<const char*> texts, names;
    for (size_t i = 0; i < kEmbeddedHeaderCount; ++i) {
      texts.push_back(kEmbeddedHeaders[i].text);
      names.push_back(kEmbeddedHeaders[i].name);
    }
    check(nvrtc().create_program(&program_, source.c_str(), kProgramName,
                                 static_cast<int>(texts.size()), texts.data(), names.data()),
          "creating the NVRTC program");
  }
  ~NvrtcProgram() { nvrtc_.destroy_program(&program_); }
  NvrtcProgram(const NvrtcProgram&) = delete;
  NvrtcProgram& operator=(const NvrtcProgram&) = delete;

  // Compiles; on failure throws KF_ERROR_COMPILE with the log.
  void compile(const std::vector<std::string>& options, int sm) {
    std::vector<const char*> argv;
    for (const std::string& o : options) argv.push_back(o.c_str());
    const nvrtcResult r =
        nvrtc_.compile_program(program_, static_cast<int>(argv.size()), argv.data());
    if (r != NVRTC_SUCCESS) {
      fail(KF_ERROR_COMPILE, "NVRTC could not compile the generated kernel for sm_%d (%s):\n%s", sm,
           nvrtc_.error_string(r), log().c_str());
    }
  }

  std::vector<char> cubin() {
    size_t size = 0;
    check(nvrtc_.cubin_size(program_, &size), "reading the CUBIN size");
    std::vector<char> code(size);
    check(nvrtc_.cubin(program_, code.data()), "reading the CUBIN");
    return code;
  }

 private:
  std::string log() {
    size_t size = 0;
    if (nvrtc_.log_size(program_, &size) != NVRTC_SUCCESS || size == 0) return "(no log)";
    std::string text(size, '\0');
    if (nvrtc_.log(program_, &text[0]) != NVRTC_SUCCESS) return "(no log)";
    while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
    return text;
  }

  static void check(nvrtcResult r, const char* what) {
    if (r == NVRTC_ERROR_OUT_OF_MEMORY)
      fail(KF_ERROR_OUT_OF_MEMORY, "NVRTC: %s: out of memory", what);
    if (r != NVRTC_SUCCESS)
      fail(KF_ERROR_INTERNAL, "NVRTC: %s failed: %s", what, nvrtc().error_string(r));
  }

  const Nvrtc& nvrtc_ = nvrtc();  // loaded before the program is created
  nvrtcProgram program_ = nullptr;
};

}  // namespace

std::vector<char> compile_for_arch(const std::string& source, int sm, bool use_disk_cache,
                                   kf_kernel_origin_t* origin) {
  nvrtc();  // NOT_SUPPORTED before anything else when NVRTC cannot be loaded
  dump_source(source);
  const std::vector<std::string> options = nvrtc_options(sm);
  const std::string dir = use_disk_cache ? disk_cache_dir() : std::string();
  Sha256Digest key;
  if (!dir.empty()) {
    key = cache_key(source, options, sm);
    std::vector<char> cached;
    if (disk_cache_load(dir, key, &cached)) {
      if (origin != nullptr) *origin = KF_KERNEL_DISK_CACHE;
      return cached;
    }
  }
  NvrtcProgram program(source);
  program.compile(options, sm);
  std::vector<char> code = program.cubin();
  if (!dir.empty()) disk_cache_store(dir, key, code);
  if (origin != nullptr) *origin = KF_KERNEL_COMPILED;
  return code;
}

}  // namespace fusion
}  // namespace kf

#else  // CPU-only build

namespace kf {
namespace fusion {

std::vector<char> compile_for_arch(const std::string&, int, bool, kf_kernel_origin_t*) {
  fail(KF_ERROR_NOT_SUPPORTED,
       "this build has no CUDA backend (built with KF_ENABLE_CUDA=OFF): NVRTC compilation is "
       "unavailable");
}

}  // namespace fusion
}  // namespace kf

#endif
