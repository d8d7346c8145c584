// Strict parsing of the numbers users type (command-line options, GUI arguments), and the
// file writer every stage uses. The command line and the GUI call these, so that one option
// accepts the same text wherever it is given.
//
// Every parser reads the whole text (no trailing characters, no leading '+', no spaces
// inside a number, no inf or nan) and throws MemplanError naming `what` (the option, e.g.
// "--batch"), the text, and the accepted range.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace memplan {

// A decimal integer in [min, max].
int64_t ParseInteger(const std::string& what, const std::string& text, int64_t min, int64_t max);

// A finite decimal number in [min, max] ("0.5", "1e-3"; not "inf", "1.2.3", "..5").
double ParseReal(const std::string& what, const std::string& text, double min, double max);

// Parses "512", "1.5GiB", "300 MB", ...: a positive size below 8 EiB. Throws MemplanError.
int64_t ParseBytes(const std::string& text);

// A memory budget: a size, or a percentage of the plain step's peak ("50%"), which must lie
// in (0, kMaxBudgetPercent].
struct Budget {
  int64_t bytes = 0;   // set for a size
  double percent = 0;  // set for a percentage
  // The budget for a step whose plain peak is `baseline_bytes` (at least 1 byte).
  int64_t Resolve(int64_t baseline_bytes) const;
};
constexpr double kMaxBudgetPercent = 1000;
Budget ParseBudget(const std::string& what, const std::string& text);

// A number read from one of memplan's JSON files as an int64, for the field `field` (named in
// the error): an integer in int64's range, or a float rounded to the nearest whole number when
// inside that range. A value that is not a number, a float beyond about +-9.2e18 or an unsigned
// integer above INT64_MAX throws MemplanError naming `field` (converting those would be
// undefined behaviour; found by fuzz_document).
int64_t JsonInt64(const nlohmann::json& value, const std::string& field);

// NAME=VALUE with a positive integer VALUE (--dim).
std::pair<std::string, int64_t> ParseDimBinding(const std::string& what, const std::string& text);

// Writes `contents` to a temporary file in `path`'s folder and renames it over `path`, so that
// readers see the old file or the new one, never a partial one. A symbolic link at `path` is
// followed: its target is replaced and the link kept. The temporary is removed on every
// failure, and by SIGINT / SIGTERM / SIGHUP while it exists. Throws MemplanError naming
// `path`.
void WriteFileAtomically(const std::string& path, const std::string& contents);

// `text` with every byte sequence that is not UTF-8 replaced by U+FFFD and control
// characters (NUL included) written as \xNN, for messages that show names from files.
std::string PrintableText(const std::string& text);

}  // namespace memplan
