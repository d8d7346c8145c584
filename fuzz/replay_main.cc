// Runs a fuzz target over files (or directories of files) without libFuzzer: how the
// sanitizer build replays the regression inputs and seeds with any compiler.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> inputs;  // read all before Initialize may chdir
  auto add = [&inputs](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    inputs.emplace_back(p.string(), std::string(std::istreambuf_iterator<char>(in), {}));
  };
  for (int i = 1; i < argc; ++i) {
    fs::path p = argv[i];
    if (fs::is_directory(p)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) add(f);
    } else if (fs::exists(p)) {
      add(p);
    }
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  for (const auto& [name, bytes] : inputs) {
    std::fprintf(stderr, "replay %s (%zu bytes)\n", name.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replayed %zu inputs\n", inputs.size());
  return 0;
}
