// Analyzer speed and footprint on real models: time (Google Benchmark), then one table of
// wall time, peak RSS and bytes read from disk per model and batch, each measured in a
// forked child so that the numbers are the analysis alone.
//   bench_analyzer MODEL_DIR [benchmark flags]
#include <benchmark/benchmark.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "memplan/analyzer.h"

namespace {

std::vector<std::string> Models(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.substr(n.size() - 5) == ".onnx")
        out.push_back(n.substr(0, n.size() - 5));
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

int64_t ReadBytesSoFar() {  // rchar: bytes this process read through read(2)
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

struct Row {
  double seconds;
  long max_rss_kib;
  int64_t bytes_read;
  int64_t nodes;
  int64_t peak_bytes;
};

Row MeasureInChild(const std::string& path, int64_t batch) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Row r{};
    int64_t before = ReadBytesSoFar();
    auto t0 = std::chrono::steady_clock::now();
    memplan::LoadOptions o;
    o.batch = batch;
    memplan::Analysis a = memplan::Analyze(memplan::LoadTrainingGraph(path, o));
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.bytes_read = ReadBytesSoFar() - before;
    rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r.max_rss_kib = ru.ru_maxrss;
    r.nodes = static_cast<int64_t>(a.graph.nodes.size());
    r.peak_bytes = a.timeline.peak_bytes;
    if (write(fds[1], &r, sizeof r) != sizeof r) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  Row r{};
  if (read(fds[0], &r, sizeof r) != sizeof r) r.seconds = -1;
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_analyzer MODEL_DIR [benchmark flags]\n");
    return 1;
  }
  std::string dir = argv[1];
  std::vector<std::string> models = Models(dir);
  for (const std::string& m : models) {
    for (int64_t batch : {1, 64}) {
      std::string path = dir + "/" + m + ".onnx";
      benchmark::RegisterBenchmark(
          ("analyze/" + m + "/batch:" + std::to_string(batch)).c_str(),
          [path, batch](benchmark::State& state) {
            memplan::LoadOptions o;
            o.batch = batch;
            for (auto _ : state) {
              benchmark::DoNotOptimize(memplan::Analyze(memplan::LoadTrainingGraph(path, o)));
            }
          })
          ->Unit(benchmark::kMillisecond);
    }
  }
  argv[1] = argv[0];
  int bargc = argc - 1;
  benchmark::Initialize(&bargc, argv + 1);
  benchmark::RunSpecifiedBenchmarks();

  std::printf("\n%-32s %6s %6s %10s %10s %12s %12s %12s\n", "model", "batch", "nodes", "seconds",
              "rss MiB", "read MiB", ".onnx MiB", "weights MiB");
  for (const std::string& m : models) {
    std::string path = dir + "/" + m + ".onnx";
    for (int64_t batch : {1, 64}) {
      Row r = MeasureInChild(path, batch);
      std::printf("%-32s %6lld %6lld %10.3f %10.1f %12.2f %12.2f %12.1f\n", m.c_str(),
                  static_cast<long long>(batch), static_cast<long long>(r.nodes), r.seconds,
                  r.max_rss_kib / 1024.0, r.bytes_read / 1048576.0, FileSize(path) / 1048576.0,
                  FileSize(path + ".data") / 1048576.0);
    }
  }
  return 0;
}
