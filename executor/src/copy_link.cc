#include "copy_link.h"

#include <algorithm>
#include <thread>

#ifdef MEMPLAN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace memplan::exec {

#ifdef MEMPLAN_TORCH_CUDA
struct CopyLink::Cuda {
  explicit Cuda(c10::DeviceIndex index)
      : streams{c10::cuda::getStreamFromPool(false, index),
                c10::cuda::getStreamFromPool(false, index)} {}
  c10::cuda::CUDAStream streams[2];
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> done;  // per ticket
};
#else
struct CopyLink::Cuda {};
#endif

CopyLink::CopyLink(const c10::Device& device, const LinkRates& emulated) : device_(device) {
  rate_[kToHost] = emulated.device_to_host_bytes_per_second;
  rate_[kToDevice] = emulated.host_to_device_bytes_per_second;
#ifdef MEMPLAN_TORCH_CUDA
  if (device.is_cuda()) cuda_ = std::make_unique<Cuda>(device.has_index() ? device.index() : 0);
#endif
  StartStep();
}

CopyLink::~CopyLink() = default;

void CopyLink::StartStep() {
  free_at_[kToHost] = free_at_[kToDevice] = Clock::now();
  done_.clear();
  stall_seconds_ = 0;
#ifdef MEMPLAN_TORCH_CUDA
  if (cuda_) cuda_->done.clear();
#endif
}

int CopyLink::Start(Direction d, const at::Tensor& dst, const at::Tensor& src) {
#ifdef MEMPLAN_TORCH_CUDA
  if (cuda_) {
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    at::cuda::CUDAEvent ready;
    ready.record(compute);
    c10::cuda::CUDAStream& copy = cuda_->streams[d];
    ready.block(copy);
    {
      c10::cuda::CUDAStreamGuard guard(copy);
      dst.copy_(src, /*non_blocking=*/true);
    }
    // The device side is used on the copy stream: the caching allocator must not hand its
    // block out again before the copy is done, whichever stream frees it.
    (d == kToHost ? src : dst).record_stream(copy);
    auto done = std::make_unique<at::cuda::CUDAEvent>();
    done->record(copy);
    cuda_->done.push_back(std::move(done));
    return static_cast<int>(cuda_->done.size()) - 1;
  }
#endif
  const Clock::time_point start = Clock::now();
  dst.copy_(src);
  const double bytes = static_cast<double>(src.nbytes());
  Clock::time_point done = std::max(start, free_at_[d]);
  if (rate_[d] > 0) {
    done += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(bytes / rate_[d]));
  }
  free_at_[d] = done;
  done_.push_back(done);
  return static_cast<int>(done_.size()) - 1;
}

void CopyLink::Wait(int ticket) {
#ifdef MEMPLAN_TORCH_CUDA
  if (cuda_) {
    cuda_->done.at(static_cast<size_t>(ticket))
        ->block(c10::cuda::getCurrentCUDAStream(device_.index()));
    return;
  }
#endif
  const Clock::time_point done = done_.at(static_cast<size_t>(ticket));
  const Clock::time_point now = Clock::now();
  if (done <= now) return;
  std::this_thread::sleep_until(done);
  stall_seconds_ += std::chrono::duration<double>(Clock::now() - now).count();
}

}  // namespace memplan::exec
