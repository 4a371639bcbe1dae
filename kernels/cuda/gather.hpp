// Batches gathered on the device from a dataset uploaded once: dst row i is src row
// indices[i]. Pointers (indices included) are device pointers. Launchers queue the copy
// on `stream` (asynchronous), launch nothing for rows == 0 (null pointers are then fine),
// and throw std::invalid_argument naming the launcher for a negative size or a null or
// misaligned pointer, CudaError when the launch fails. An index outside the dataset is a
// caller bug: it is not checked on the device (the caller draws indices below its row count).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hearsay::cuda {

// dst[i][j] = src[indices[i]][j] for i < rows, j < row_floats.
void gather_rows(long rows, long row_floats, const float* src, const std::int64_t* indices, float* dst,
                 cudaStream_t stream);
// dst[i] = src[indices[i]] for i < rows.
void gather_labels(long rows, const std::uint8_t* src, const std::int64_t* indices, std::uint8_t* dst,
                   cudaStream_t stream);

}  // namespace hearsay::cuda
