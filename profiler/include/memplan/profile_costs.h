// A profile (memplan run --profile) as the planner's measured node times: what calibrates the
// predicted seconds of `memplan plan --costs` (CalibrateNodeSeconds, planner.h).
#pragma once

#include <string>

#include "memplan/planner.h"
#include "memplan/profiler.h"

namespace memplan {

// The forward times `profile` measured: per node, its recompute scopes when it has any (they
// run with autograd, as recompute does), else its forward scopes; seconds per call, at the
// profile's micro-batch size (its batch / its micro-batches). `source` names the profile (a
// path) in messages. Throws MemplanError for a node without a name.
MeasuredTimes MeasuredTimesOf(const Profile& profile, const std::string& source);

// `g`'s node seconds calibrated by `profile` (the file `source`) at `rates`, the rates of
// `device` (cpu, cuda, cuda:K). Throws MemplanError when the profile is of another model (its
// structure fingerprint differs). A profile measured on another device adds a note saying that
// the nodes it lacks are priced at `device`'s rates.
Calibration CalibrateByProfile(const TrainingGraph& g, const Profile& profile,
                               const std::string& source, const MachineRates& rates,
                               const std::string& device);

}  // namespace memplan
