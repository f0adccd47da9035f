// Device enumeration and properties: the host CPU (always device 0) and CUDA devices.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "core/runtime/cuda/cuda_api.hpp"
#include "core/runtime/error.hpp"
#include "kernel_fusion/runtime.h"

namespace kf {
namespace {

constexpr size_t kMinDevicePropertiesSize =
    offsetof(kf_device_properties_t, name) + sizeof(char[256]);

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.compare(0, 10, "model name") == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "host CPU";
}

void cpu_properties(kf_device_properties_t* p) {
  std::string name = cpu_model_name();
  std::memcpy(p->name, name.c_str(), std::min(name.size(), sizeof(p->name) - 1));
  p->device_type = KF_DEVICE_CPU;
  p->device_id = 0;
  p->multiprocessor_count = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  p->total_memory_bytes = pages > 0 && page_size > 0
                              ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
                              : 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  p->l2_cache_bytes = l2 > 0 ? static_cast<uint64_t>(l2) : 0;
#endif
}

}  // namespace
}  // namespace kf

extern "C" {

kf_result_t kf_get_device_count(kf_device_type_t type, int32_t* count) {
  return kf::api_call([&] {
    KF_REQUIRE_ARG(count != nullptr, "count is NULL");
    int raw = kf::raw_enum(type);
    KF_REQUIRE_ARG(raw == KF_DEVICE_CPU || raw == KF_DEVICE_CUDA,
                   "type %d is not a kf_device_type_t", raw);
    *count = raw == KF_DEVICE_CPU ? 1 : kf::cuda::device_count();
  });
}

kf_result_t kf_get_device_properties(kf_device_type_t type, int32_t device_id,
                                     kf_device_properties_t* props) {
  return kf::api_call([&] {
    KF_REQUIRE_ARG(props != nullptr, "props is NULL");
    KF_REQUIRE_ARG(
        props->struct_size >= kf::kMinDevicePropertiesSize,
        "props->struct_size is %zu; set it to sizeof(kf_device_properties_t) (at least %zu)",
        props->struct_size, kf::kMinDevicePropertiesSize);
    int raw = kf::raw_enum(type);
    KF_REQUIRE_ARG(raw == KF_DEVICE_CPU || raw == KF_DEVICE_CUDA,
                   "type %d is not a kf_device_type_t", raw);
    kf_device_properties_t full{};
    if (type == KF_DEVICE_CPU) {
      KF_REQUIRE_ARG(device_id == 0, "device_id is %d; the CPU is device 0", device_id);
      kf::cpu_properties(&full);
    } else {
      int32_t count = kf::cuda::device_count();
      KF_REQUIRE(
          count > 0, KF_ERROR_NO_DEVICE,
          "no usable CUDA device (no NVIDIA driver or GPU, or this build has no CUDA backend)");
      KF_REQUIRE_ARG(device_id >= 0 && device_id < count,
                     "device_id is %d but there %s %d CUDA device%s", device_id,
                     count == 1 ? "is" : "are", count, count == 1 ? "" : "s");
      kf::cuda::get_properties(device_id, &full);
    }
    // Fill only the fields that fit in the caller's layout.
    size_t size = props->struct_size;
#define KF_FILL(field)                                                      \
  if (offsetof(kf_device_properties_t, field) + sizeof(full.field) <= size) \
  std::memcpy(&props->field, &full.field, sizeof(full.field))
    KF_FILL(name);
    KF_FILL(device_type);
    KF_FILL(device_id);
    KF_FILL(compute_capability_major);
    KF_FILL(compute_capability_minor);
    KF_FILL(multiprocessor_count);
    KF_FILL(total_memory_bytes);
    KF_FILL(l2_cache_bytes);
    KF_FILL(stream_priority_least);
    KF_FILL(stream_priority_greatest);
#undef KF_FILL
  });
}

}  // extern "C"
