// The command-line option parser (cli::Dispatch, the CLI11 app with every subcommand's
// options): the input is argv after "memplan", split on NUL bytes
// ("plan\0m.onnx\0--budget\050%"). The subcommands parse and check every option before they
// load the model, and the model never exists here, so each call parses and stops: no model
// is analyzed and no --json file is written. To keep it that way the harness turns '/' into
// '_' and skips inputs where any argument names an existing file or folder.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"memplan"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    char c = static_cast<char>(data[i]);
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c == '/' ? '_' : c);
    }
  }
  args.push_back(cur);
  if (args.size() < 2 || args.size() > 64) return 0;
  std::vector<char*> argv;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") return 0;  // prints the help: nothing to find
    struct stat st;
    if (i > 0 && ::stat(args[i].c_str(), &st) == 0) return 0;  // could be a model: never load
    argv.push_back(args[i].data());
  }
  argv.push_back(nullptr);
  const int argc = static_cast<int>(args.size());
  // Only analyze and plan: run would train and gui would open a window.
  if (args[1] != "analyze" && args[1] != "plan") return 0;
  memplan::fuzz::Guard([&] { memplan::cli::Dispatch(argc, argv.data()); });
  return 0;
}
