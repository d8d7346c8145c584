// A profile's measured node times for the planner's time model (profile_costs.h).
#include "memplan/profile_costs.h"

#include <algorithm>
#include <map>

#include "memplan/parse.h"
#include "memplan/plan.h"

namespace memplan {

MeasuredTimes MeasuredTimesOf(const Profile& profile, const std::string& source) {
  struct Sum {
    std::string op;
    double seconds[2] = {0, 0};  // forward, recompute
    int64_t calls[2] = {0, 0};
  };
  std::map<std::string, Sum> sums;
  std::vector<std::string> order;
  for (const NodeProfile& n : profile.nodes) {
    if (n.node == kNone || (n.phase != Phase::kForward && n.phase != Phase::kRecompute)) continue;
    if (n.name.empty()) {
      throw MemplanError("profile '" + PrintableText(source) + "': node " + std::to_string(n.node) +
                         " has no name; write the profile with `memplan run --profile`");
    }
    auto [it, added] = sums.try_emplace(n.name);
    if (added) order.push_back(n.name);
    it->second.op = n.op;
    const int k = n.phase == Phase::kRecompute ? 1 : 0;
    it->second.seconds[k] += n.seconds;
    it->second.calls[k] += n.calls;
  }
  MeasuredTimes m;
  m.source = source;
  m.batch = profile.batch / std::max<int64_t>(1, profile.micro_batches);
  for (const std::string& name : order) {
    const Sum& s = sums[name];
    const int k = s.calls[1] > 0 ? 1 : 0;
    if (s.calls[k] <= 0) continue;
    m.nodes.push_back({name, s.op, s.seconds[k] / static_cast<double>(s.calls[k])});
  }
  return m;
}

Calibration CalibrateByProfile(const TrainingGraph& g, const Profile& profile,
                               const std::string& source, const MachineRates& rates,
                               const std::string& device) {
  if (!profile.structure_fingerprint.empty() &&
      profile.structure_fingerprint != StructureFingerprint(g)) {
    throw MemplanError("--costs '" + PrintableText(source) + "' is a profile of another model (" +
                       PrintableText(profile.model) + ", structure fingerprint " +
                       profile.structure_fingerprint + ", not " + StructureFingerprint(g) + " of " +
                       PrintableText(g.model_path) + "): profile this model with `memplan run " +
                       PrintableText(g.model_path) + " --profile OUT.json`");
  }
  Calibration c = CalibrateNodeSeconds(g, MeasuredTimesOf(profile, source), rates);
  if (!profile.device.empty() && profile.device.rfind(device, 0) != 0) {
    c.notes.push_back(source + " was measured on " + profile.device +
                      "; the nodes it lacks are priced at " + device + "'s rates");
  }
  return c;
}

}  // namespace memplan
