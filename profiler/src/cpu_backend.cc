// The CPU backend: a steady clock around each scope; memory events come from the executor's
// counting allocator through OnMemory.
#include <chrono>
#include <mutex>

#include "memplan/profiler.h"

namespace memplan {
namespace {

using Clock = std::chrono::steady_clock;

class CpuProfiler final : public ProfilerBackend {
 public:
  std::string name() const override { return "cpu"; }

  void BeginStep(int64_t start_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    profile_ = Profile{};
    profile_.backend = "cpu";
    profile_.start_bytes = start_bytes;
    open_.clear();
    t0_ = Clock::now();
    active_ = true;
  }

  void Enter(const ProfileScope& scope) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    profile_.slices.push_back({Now(), 0, scope, static_cast<int32_t>(open_.size())});
    open_.push_back(profile_.slices.size() - 1);
  }

  void Exit() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_ || open_.empty()) return;
    profile_.slices[open_.back()].end = Now();
    open_.pop_back();
  }

  void OnMemory(int64_t bytes, int64_t bytes_after) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    ProfileScope scope = open_.empty() ? ProfileScope{} : profile_.slices[open_.back()].scope;
    profile_.memory_events.push_back({Now(), bytes, bytes_after, scope});
  }

  Profile EndStep() override {
    std::lock_guard<std::mutex> lock(mu_);
    const double end = Now();
    while (!open_.empty()) {
      profile_.slices[open_.back()].end = end;
      open_.pop_back();
    }
    profile_.step_seconds = end;
    active_ = false;
    AggregateProfile(profile_);
    return std::move(profile_);
  }

 private:
  double Now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  std::mutex mu_;
  bool active_ = false;
  Clock::time_point t0_;
  Profile profile_;
  std::vector<size_t> open_;  // slices entered and not yet exited, outermost first
};

}  // namespace

std::unique_ptr<ProfilerBackend> MakeCpuProfiler() { return std::make_unique<CpuProfiler>(); }

}  // namespace memplan
