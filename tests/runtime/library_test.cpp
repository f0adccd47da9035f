// Library-level functions: result names, the thread-local message, versions, the function
// table, dtypes and devices.
#include <cstddef>
#include <thread>

#include "tests/common/test_util.hpp"

namespace {

using kf_test::device_under_test;

TEST(Library, ResultStringNamesEveryCode) {
  EXPECT_STREQ(kf_result_string(KF_SUCCESS), "KF_SUCCESS");
  EXPECT_STREQ(kf_result_string(KF_ERROR_INVALID_ARGUMENT), "KF_ERROR_INVALID_ARGUMENT");
  EXPECT_STREQ(kf_result_string(KF_ERROR_INVALID_HANDLE), "KF_ERROR_INVALID_HANDLE");
  EXPECT_STREQ(kf_result_string(KF_ERROR_OUT_OF_MEMORY), "KF_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(kf_result_string(KF_ERROR_NOT_SUPPORTED), "KF_ERROR_NOT_SUPPORTED");
  EXPECT_STREQ(kf_result_string(KF_ERROR_SHAPE_MISMATCH), "KF_ERROR_SHAPE_MISMATCH");
  EXPECT_STREQ(kf_result_string(KF_ERROR_DTYPE_MISMATCH), "KF_ERROR_DTYPE_MISMATCH");
  EXPECT_STREQ(kf_result_string(KF_ERROR_DEVICE_MISMATCH), "KF_ERROR_DEVICE_MISMATCH");
  EXPECT_STREQ(kf_result_string(KF_ERROR_NO_DEVICE), "KF_ERROR_NO_DEVICE");
  EXPECT_STREQ(kf_result_string(KF_ERROR_CUDA), "KF_ERROR_CUDA");
  EXPECT_STREQ(kf_result_string(KF_ERROR_VERSION_MISMATCH), "KF_ERROR_VERSION_MISMATCH");
  EXPECT_STREQ(kf_result_string(KF_ERROR_INTERNAL), "KF_ERROR_INTERNAL");
  EXPECT_STREQ(kf_result_string(static_cast<kf_result_t>(999)), "KF_ERROR_UNKNOWN");
}

TEST(Library, LastErrorIsSetOnFailureClearedOnSuccessAndThreadLocal) {
  int32_t count = 0;
  KF_EXPECT_ERR(kf_get_device_count(KF_DEVICE_CPU, nullptr), KF_ERROR_INVALID_ARGUMENT);
  std::string message = kf_get_last_error_message();
  EXPECT_NE(message.find("count"), std::string::npos) << message;
  std::string other = "unset";
  std::thread([&] { other = kf_get_last_error_message(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_EQ(kf_get_last_error_message(), message);  // still there on this thread
  KF_ASSERT_OK(kf_get_device_count(KF_DEVICE_CPU, &count));
  EXPECT_STREQ(kf_get_last_error_message(), "");
}

TEST(Library, Version) {
  EXPECT_EQ(kf_get_version(), static_cast<uint32_t>(KF_VERSION));
  EXPECT_EQ(KF_VERSION, KF_VERSION_MAJOR * 10000 + KF_VERSION_MINOR * 100 + KF_VERSION_PATCH);
}

TEST(Library, ApiTableVersion1) {
  const kf_api_t* api = kf_get_api(KF_API_VERSION_1);
  ASSERT_NE(api, nullptr) << kf_get_last_error_message();
  EXPECT_EQ(api->abi_version, KF_API_VERSION_1);
  EXPECT_EQ(api->reserved, 0u);
  EXPECT_EQ(api->struct_size, sizeof(kf_api_t));
  EXPECT_EQ(api->result_string, &kf_result_string);
  EXPECT_EQ(api->get_version, &kf_get_version);
  EXPECT_EQ(api->context_create, &kf_context_create);
  EXPECT_EQ(api->tensor_copy_to_host, &kf_tensor_copy_to_host);
  EXPECT_EQ(api->dtype_size, &kf_dtype_size);
  EXPECT_EQ(api->tensor_from_dlpack, &kf_tensor_from_dlpack);
  EXPECT_EQ(api->fused_elementwise_mul_activation, &kf_fused_elementwise_mul_activation);
  // No member is left empty.
  const unsigned char* first = reinterpret_cast<const unsigned char*>(&api->result_string);
  const unsigned char* end = reinterpret_cast<const unsigned char*>(api) + sizeof(kf_api_t);
  for (const unsigned char* p = first; p < end; p += sizeof(void*)) {
    void* fn = nullptr;
    std::memcpy(&fn, p, sizeof(fn));
    EXPECT_NE(fn, nullptr) << "member at offset "
                           << (p - reinterpret_cast<const unsigned char*>(api));
  }
  // Through the table, a call works like the direct one.
  int32_t count = 0;
  EXPECT_EQ(api->get_device_count(KF_DEVICE_CPU, &count), KF_SUCCESS);
  EXPECT_EQ(count, 1);
}

TEST(Library, ApiTableRefusesOtherVersions) {
  for (uint32_t version : {0u, 2u, 0xffffffffu}) {
    EXPECT_EQ(kf_get_api(version), nullptr) << version;
    EXPECT_STRNE(kf_get_last_error_message(), "") << version;
  }
}

TEST(Library, DtypeSize) {
  EXPECT_EQ(kf_dtype_size(KF_DTYPE_FLOAT32), 4u);
  EXPECT_EQ(kf_dtype_size(KF_DTYPE_FLOAT16), 2u);
  EXPECT_EQ(kf_dtype_size(KF_DTYPE_BFLOAT16), 2u);
  EXPECT_EQ(kf_dtype_size(KF_DTYPE_FLOAT64), 8u);
  EXPECT_EQ(kf_dtype_size(KF_DTYPE_INT8), 1u);
  EXPECT_EQ(kf_dtype_size(KF_DTYPE_UINT8), 1u);
  EXPECT_EQ(kf_dtype_size(KF_DTYPE_INT32), 4u);
  EXPECT_EQ(kf_dtype_size(KF_DTYPE_INT64), 8u);
  EXPECT_EQ(kf_dtype_size(static_cast<kf_dtype_t>(42)), 0u);
}

TEST(Devices, Count) {
  int32_t count = -7;
  KF_ASSERT_OK(kf_get_device_count(KF_DEVICE_CPU, &count));
  EXPECT_EQ(count, 1);
  count = -7;
  KF_ASSERT_OK(kf_get_device_count(KF_DEVICE_CUDA, &count));
  EXPECT_GE(count, 0);
#if !KF_TEST_LIB_HAS_CUDA
  EXPECT_EQ(count, 0);
#endif
  count = -7;
  KF_EXPECT_ERR(kf_get_device_count(static_cast<kf_device_type_t>(5), &count),
                KF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(count, -7);
}

TEST(Devices, CpuProperties) {
  kf_device_properties_t props{};
  props.struct_size = sizeof(props);
  KF_ASSERT_OK(kf_get_device_properties(KF_DEVICE_CPU, 0, &props));
  EXPECT_GT(std::strlen(props.name), 0u);
  EXPECT_EQ(props.device_type, KF_DEVICE_CPU);
  EXPECT_EQ(props.device_id, 0);
  EXPECT_GE(props.multiprocessor_count, 1);
  EXPECT_GT(props.total_memory_bytes, 0u);
  EXPECT_EQ(props.stream_priority_least, 0);
  EXPECT_EQ(props.stream_priority_greatest, 0);
}

TEST(Devices, PropertiesFillOnlyWhatFits) {
  kf_device_properties_t props;
  std::memset(&props, 0x5a, sizeof(props));
  props.struct_size = offsetof(kf_device_properties_t, device_id) + sizeof(int32_t);
  KF_ASSERT_OK(kf_get_device_properties(KF_DEVICE_CPU, 0, &props));
  EXPECT_EQ(props.device_type, KF_DEVICE_CPU);
  EXPECT_EQ(props.device_id, 0);
  int32_t untouched;
  std::memset(&untouched, 0x5a, sizeof(untouched));
  EXPECT_EQ(props.multiprocessor_count, untouched);
  EXPECT_EQ(props.stream_priority_greatest, untouched);
}

TEST(Devices, PropertiesErrors) {
  kf_device_properties_t props;
  std::memset(&props, 0x5a, sizeof(props));
  props.struct_size = 4;
  KF_EXPECT_ERR(kf_get_device_properties(KF_DEVICE_CPU, 0, &props), KF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(static_cast<unsigned char>(props.name[0]), 0x5a);
  KF_EXPECT_ERR(kf_get_device_properties(KF_DEVICE_CPU, 0, nullptr), KF_ERROR_INVALID_ARGUMENT);
  props.struct_size = sizeof(props);
  KF_EXPECT_ERR(kf_get_device_properties(KF_DEVICE_CPU, 1, &props), KF_ERROR_INVALID_ARGUMENT);
  KF_EXPECT_ERR(kf_get_device_properties(static_cast<kf_device_type_t>(9), 0, &props),
                KF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(static_cast<unsigned char>(props.name[0]), 0x5a);
  int32_t count = 0;
  KF_ASSERT_OK(kf_get_device_count(KF_DEVICE_CUDA, &count));
  if (count == 0) {
    KF_EXPECT_ERR(kf_get_device_properties(KF_DEVICE_CUDA, 0, &props), KF_ERROR_NO_DEVICE);
  } else {
    KF_EXPECT_ERR(kf_get_device_properties(KF_DEVICE_CUDA, count, &props),
                  KF_ERROR_INVALID_ARGUMENT);
    KF_EXPECT_ERR(kf_get_device_properties(KF_DEVICE_CUDA, -1, &props), KF_ERROR_INVALID_ARGUMENT);
  }
  EXPECT_EQ(static_cast<unsigned char>(props.name[0]), 0x5a);
}

TEST(Devices, DeviceUnderTestProperties) {
  KF_REQUIRE_DEVICE();
  kf_device_properties_t props{};
  props.struct_size = sizeof(props);
  KF_ASSERT_OK(kf_get_device_properties(device_under_test(), 0, &props));
  EXPECT_EQ(props.device_type, device_under_test());
  EXPECT_GT(std::strlen(props.name), 0u);
  EXPECT_GE(props.stream_priority_least, props.stream_priority_greatest);
  if (device_under_test() == KF_DEVICE_CUDA) {
    EXPECT_GE(props.compute_capability_major, 5);
    EXPECT_GT(props.multiprocessor_count, 0);
    EXPECT_GT(props.total_memory_bytes, 0u);
    EXPECT_GT(props.l2_cache_bytes, 0u);
  }
}

}  // namespace
