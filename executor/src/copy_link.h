// The link between device memory and pinned host memory that offload uses (plan.h): one copy
// stream per direction beside the compute stream. Private to the executor (it includes ATen).
//
// CUDA: a copy starts on its direction's stream once the compute stream's work so far is done
// (an event), non_blocking; waiting for it makes the compute stream wait for its completion event.
// CPU: there is no link; the copy is a memcpy done when it starts, and, with emulated rates, its
// completion is modelled as the planner models it (copies of one direction one after the other, B
// bytes taking B / rate): waiting for it sleeps until then. The stall is what waits cost.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <memory>
#include <vector>

#include "memplan/analyzer.h"

namespace memplan::exec {

class CopyLink {
 public:
  enum Direction { kToHost = 0, kToDevice = 1 };
  // `emulated`: the CPU's modelled rates (0: copies complete when they start); unused on CUDA.
  CopyLink(const c10::Device& device, const LinkRates& emulated);
  ~CopyLink();
  CopyLink(const CopyLink&) = delete;
  CopyLink& operator=(const CopyLink&) = delete;

  // Starts copying `src` into `dst` (same byte size); returns the copy's ticket.
  int Start(Direction d, const at::Tensor& dst, const at::Tensor& src);
  // The compute stream goes on once copy `ticket` has completed.
  void Wait(int ticket);
  // Seconds the CPU waits slept this step (CUDA: 0, the device waits without the host).
  double stall_seconds() const { return stall_seconds_; }
  void StartStep();  // forgets the last step's copies and stall

 private:
  using Clock = std::chrono::steady_clock;
  c10::Device device_;
  double rate_[2] = {0, 0};
  Clock::time_point free_at_[2];         // CPU: when each direction's modelled stream is idle
  std::vector<Clock::time_point> done_;  // CPU: per ticket, its modelled completion
  double stall_seconds_ = 0;
  struct Cuda;  // streams and events (copy_link.cc)
  std::unique_ptr<Cuda> cuda_;
};

}  // namespace memplan::exec
