#include "model/device.hpp"

#include <dlfcn.h>

#include <charconv>
#include <cstdlib>

#ifdef HEARSAY_WITH_CUDA
#include "kernels/cuda/device.hpp"
#endif

namespace hearsay {

std::string Device::str() const { return kind == Kind::cpu ? "cpu" : "cuda:" + std::to_string(index); }

DeviceRequest parse_device(std::string_view text) {
  DeviceRequest r;
  r.text = std::string(text);
  if (text == "auto") return r;
  if (text == "cpu") {
    r.kind = DeviceRequest::Kind::cpu;
    return r;
  }
  if (text == "cuda") {
    r.kind = DeviceRequest::Kind::cuda;
    return r;
  }
  if (text.starts_with("cuda:")) {
    const std::string_view digits = text.substr(5);
    int index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!digits.empty() && ec == std::errc() && end == digits.data() + digits.size() && index >= 0 &&
        index < 1024) {
      r.kind = DeviceRequest::Kind::cuda;
      r.index = index;
      return r;
    }
  }
  throw std::invalid_argument("--device '" + std::string(text) +
                              "' is not one of auto, cpu, cuda, cuda:N (N a GPU index, e.g. cuda:0)");
}

bool built_with_cuda() {
#ifdef HEARSAY_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::string no_gpu_reason(const std::string& cuda_error, bool driver_installed) {
  if (!driver_installed) return "no GPU usable here: no NVIDIA driver is installed (libcuda.so.1)";
  if (cuda_error.find("InsufficientDriver") != std::string::npos)
    return "the NVIDIA driver is older than this build's CUDA runtime (" + cuda_error +
           "): update the driver to use the GPU";
  if (cuda_error.find("NoDevice") != std::string::npos || cuda_error == "no CUDA device")
    return "no GPU usable here: the NVIDIA driver sees no CUDA device";
  return "no GPU usable here (" + cuda_error + ")";
}

bool nvidia_driver_installed() {
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return false;
  ::dlclose(driver);
  return true;
}

int cuda_device_count(std::string& why_none) {
#ifdef HEARSAY_WITH_CUDA
  const int n = cuda::device_count_or_zero(why_none);
  if (n == 0) why_none = no_gpu_reason(why_none, nvidia_driver_installed());
  return n;
#else
  why_none =
      "this build has no CUDA backend (nvcc was not found when it was configured; rebuild with "
      "-DHEARSAY_CUDA=ON)";
  return 0;
#endif
}

DeviceChoice choose_device(const DeviceRequest& request, int local_rank) {
  if (request.kind == DeviceRequest::Kind::cpu) return {Device{}, "asked for"};
  std::string why_none;
  const int count = cuda_device_count(why_none);
  const int rank = local_rank < 0 ? 0 : local_rank;
  if (request.kind == DeviceRequest::Kind::automatic) {
    if (count == 0) return {Device{}, "auto: " + why_none + "; training on the CPU"};
    const Device d{Device::Kind::cuda, rank % count};
    return {d, "auto: local rank " + std::to_string(rank) + ", " + std::to_string(count) + " GPU" +
                   (count == 1 ? "" : "s")};
  }
  if (count == 0)
    throw DeviceUnavailable("--device " + request.text + ": " + why_none + "; use --device cpu");
  if (request.index >= count)
    throw DeviceUnavailable("--device " + request.text + ": no CUDA device " + std::to_string(request.index) +
                            ": this machine has " + std::to_string(count) + " (cuda:0" +
                            (count > 1 ? " to cuda:" + std::to_string(count - 1) : std::string()) + ")");
  const Device d{Device::Kind::cuda, request.index >= 0 ? request.index : rank % count};
  return {d, request.index >= 0 ? "asked for" : "local rank " + std::to_string(rank)};
}

int local_rank_from_environment(int fallback) {
  for (const char* name :
       {"HEARSAY_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    const std::string_view text(value);
    int rank = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
    if (ec == std::errc() && end == text.data() + text.size() && rank >= 0) return rank;
  }
  return fallback;
}

std::string describe(const Device& device) {
  if (!device.is_cuda()) return "cpu";
#ifdef HEARSAY_WITH_CUDA
  return cuda::describe_device(device.index);
#else
  return device.str();
#endif
}

}  // namespace hearsay
