// The devices memplan names on its command line and in its files: "cpu", "cuda" and "cuda:K".
// Torch-free: the command line checks --device with it before loading anything, and the
// executor's ParseDevice reads the name with it before asking LibTorch for the device.
#pragma once

#include <string>

namespace memplan {

struct DeviceName {
  bool cuda = false;  // false: the CPU
  int index = -1;     // cuda:K's K; -1 for "cpu" and "cuda" (the current device)
};

// "cpu", "cuda" or "cuda:K" with K a decimal device index (digits only). Anything else throws
// MemplanError: "--device must be cpu, cuda or cuda:K (got 'TEXT')".
DeviceName ParseDeviceName(const std::string& text);

}  // namespace memplan
