// Where a model trains: the CPU or one CUDA device, as asked for on the command line
// (--device auto | cpu | cuda | cuda:N) and as this build and machine allow.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace hearsay {

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  // the CUDA ordinal; 0 for the CPU
  bool is_cuda() const { return kind == Kind::cuda; }
  // "cpu" or "cuda:N", as --device takes it.
  std::string str() const;
  bool operator==(const Device&) const = default;
};

// What --device asked for. index -1 with cuda: "the GPU of this peer's local rank".
struct DeviceRequest {
  enum class Kind { automatic, cpu, cuda };
  Kind kind = Kind::automatic;
  int index = -1;
  std::string text;
};

// Parses --device. std::invalid_argument naming the text and the accepted forms.
DeviceRequest parse_device(std::string_view text);

// Asking for a device that this build or machine cannot give: the message is one line
// saying why (built without CUDA, no driver, no device N) and what to use instead.
class DeviceUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether this binary was built with the CUDA backend.
bool built_with_cuda();
// Visible CUDA devices; 0 when built without CUDA or when there is no driver or GPU, with
// `why_none` saying which (no_gpu_reason).
int cuda_device_count(std::string& why_none);
// Whether an NVIDIA driver (libcuda.so.1) can be loaded on this machine.
bool nvidia_driver_installed();
// Why no GPU is usable, in a user's words, from the CUDA runtime's error and whether an
// NVIDIA driver (libcuda.so.1) is installed at all. The runtime says "CUDA driver version is
// insufficient" also where there is no driver, which reads as "upgrade your driver" on a
// machine that simply has no GPU.
std::string no_gpu_reason(const std::string& cuda_error, bool driver_installed);

struct DeviceChoice {
  Device device;
  // Why this device, for the log: "asked for", "auto: local rank 1, 2 GPUs", "auto: no CUDA device".
  std::string reason;
};

// Resolves a request on this machine. auto: the GPU of local_rank (modulo the number of
// GPUs) when there is one, else the CPU. cuda without an index: the GPU of local_rank.
// cuda that cannot work throws DeviceUnavailable.
DeviceChoice choose_device(const DeviceRequest& request, int local_rank = 0);

// This process's rank among the processes of its machine, from the environment the
// launchers set (HEARSAY_LOCAL_RANK: scripts/launch; LOCAL_RANK: torchrun;
// OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID), in that order, or
// `fallback` when none is set or parses.
int local_rank_from_environment(int fallback = 0);

// One line about a device for logs ("cpu", or the GPU's name, memory and PCI address).
std::string describe(const Device& device);

}  // namespace hearsay
