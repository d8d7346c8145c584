// memplan run --nproc N: starts N local ranks of the same command, as torchrun does, and
// watches them (docs/distributed.md). Process management only: no LibTorch here.
//
// Each rank is this program again (/proc/self/exe) with the same arguments minus --nproc N,
// and RANK = LOCAL_RANK = r, WORLD_SIZE = LOCAL_WORLD_SIZE = N, MASTER_ADDR, MASTER_PORT in
// its environment: what makes `memplan run` one rank of a data-parallel step.
//   - Output: every rank's stdout and stderr are forwarded line by line; the lines of rank
//     r > 0 start with "[rank r] ", rank 0's are unchanged (its summary reads as a one-process
//     run).
//   - Faults: when a rank exits non-zero or is killed, the launcher says which and how, lets
//     the others end on their own for a grace period (the collective timeout and a margin:
//     they fail their collective and say so), then sends SIGTERM (and SIGCONT, for a stopped
//     rank), then SIGKILL; it exits 1
//     (or the status every rank exited with, when they all failed alike: 2 when no plan fits).
//     Files the run was to write (--json, --profile, --trace-events) that changed during a run
//     that failed are removed: only a run where every rank succeeded leaves them.
//   - Signals: SIGINT, SIGTERM and SIGHUP to the launcher are passed to every rank (the ranks
//     are a process group of their own, so Ctrl-C reaches them through the launcher once);
//     a second one kills them. The launcher then exits 128 + the signal's number.
//   - Every rank has PR_SET_PDEATHSIG(SIGKILL): none outlives a launcher that is killed.
//     Every rank is waited for: no zombie and no orphan remains.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace memplan::cli {

struct Args;

struct LaunchOptions {
  std::string program = "/proc/self/exe";  // what every rank executes
  std::vector<std::string> argv;           // the ranks' argv, argv[0] included
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  std::string master_port;  // empty: a free port of master_addr (bound at port 0)
  // After the first rank fails, how long the others may take to end on their own before
  // SIGTERM; after SIGTERM (or a forwarded signal), how long before SIGKILL.
  double grace_seconds = 35;
  double term_seconds = 5;
  // Files removed when a rank fails, if this run created or replaced them.
  std::vector<std::string> outputs;
  // Where the ranks' output goes (the launcher's stdout and stderr by default).
  int out_fd = 1;
  int err_fd = 2;
  // Called with each rank's pid once it has started (tests kill one).
  std::function<void(int rank, pid_t pid)> on_start;
};

struct RankExit {
  int rank = 0;
  pid_t pid = 0;
  int status = 0;                    // waitpid's status
  bool stopped_by_launcher = false;  // signalled by the launcher after another rank failed
};

struct LaunchResult {
  int exit_code = 0;
  std::vector<RankExit> ranks;  // by rank
  int first_failed_rank = -1;
  double seconds_to_first_failure = 0;  // from the start to the first failed rank's exit
  double seconds_after_failure = 0;     // from that exit to the last rank reaped
};

// Starts opt.nproc ranks and waits for every one (the contract above). Throws MemplanError
// when a rank cannot be started (no pipe, no fork) after stopping those already started.
LaunchResult LaunchRanks(const LaunchOptions& opt);

// argv without its --nproc N / --nproc=N option.
std::vector<std::string> WithoutNproc(const std::vector<std::string>& argv);
// This process's own argv (/proc/self/cmdline).
std::vector<std::string> OwnArgv();
// A TCP port of `addr` that nothing listens on now (bound at port 0, then closed).
// Throws MemplanError naming the address when it does not resolve or is not of this machine.
int FreePort(const std::string& addr);

// The run command's side (commands_run.cc). --nproc N (N >= 1) or nothing; --nproc under a
// launcher (WORLD_SIZE set) is a MemplanError. True when N > 1: RunLocalRanks(a) runs them.
// In a rank (WORLD_SIZE set) it makes stdout line-buffered: the launcher forwards lines as
// they come.
bool LocalRanksRequested(const Args& a);
// Launches this command's ranks (grace: --timeout plus a margin; outputs: --json, --profile,
// --trace-events) and returns the exit code.
int RunLocalRanks(const Args& a);

}  // namespace memplan::cli
