// Argument parsing and output helpers shared by the subcommands.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "memplan/training_graph.h"

namespace memplan::cli {

// Exit codes: 0 success, 1 a user error (bad input), 2 no plan fits the budget.
constexpr int kExitOk = 0;
constexpr int kExitUserError = 1;
constexpr int kExitInfeasible = 2;

// Flags of the form --name VALUE or --name=VALUE; repeated flags keep every value.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> flags;
  bool has(const std::string& f) const { return flags.count(f) > 0; }
  std::string get(const std::string& f, const std::string& fallback = "") const;
  // The flag's integer in [min, max] (ParseInteger), or `fallback` when it is absent.
  int64_t get_int(const std::string& f, int64_t fallback, int64_t min, int64_t max) const;
  // The flag's number in [min, max] (ParseReal), or `fallback` when it is absent.
  double get_real(const std::string& f, double fallback, double min, double max) const;
  // The flag's size (ParseBytes), or `fallback` when it is absent.
  int64_t get_bytes(const std::string& f, int64_t fallback) const;
};

// `boolean_flags` take no value. Unknown flags are errors naming the flag.
Args ParseArgs(int argc, char** argv, int first, const std::vector<std::string>& value_flags,
               const std::vector<std::string>& boolean_flags);

// Lets a model read external data from outside its folder (a boolean flag of every command
// that loads a model).
constexpr const char* kAllowOutsideFlag = "allow-external-data-outside-model-dir";

// --batch, --dim, --loss, --optimizer, --allow-external-data-outside-model-dir.
LoadOptions LoadOptionsFromArgs(const Args& a);

}  // namespace memplan::cli
