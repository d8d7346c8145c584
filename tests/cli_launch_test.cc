// The local launcher of `memplan run --nproc N` (cli/launch.h). LaunchRanks is driven with
// /bin/sh ranks that succeed, fail, hang or kill themselves, then the memplan binary end to end:
// every failure names the rank and how it ended, the rest are stopped within the grace period,
// no process is left and no output file of a failed run remains.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch.h"
#include "memplan/training_graph.h"
#include "testing/cli_runner.h"
#include "testing/corpus.h"

extern char** environ;

namespace memplan::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Running: present in /proc and not a zombie (an orphan's zombie may wait for a pid 1 that
// never reaps in a container; it runs nothing and holds no memory).
bool Running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

// N /bin/sh ranks running `script` (with $RANK, $WORLD_SIZE, ... in their environment); their
// output lands in files read back by out() and err().
class Launch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/memplan_launch_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::system(("rm -rf '" + dir_ + "' && mkdir -p '" + dir_ + "'").c_str());
    out_fd_ = ::open((dir_ + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    err_fd_ = ::open((dir_ + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  void TearDown() override {
    ::close(out_fd_);
    ::close(err_fd_);
  }
  LaunchOptions Options(int n, const std::string& script) {
    LaunchOptions o;
    o.program = "/bin/sh";
    o.argv = {"sh", "-c", "cd '" + dir_ + "' && " + script};
    o.nproc = n;
    o.grace_seconds = 1;
    o.term_seconds = 1;
    o.out_fd = out_fd_;
    o.err_fd = err_fd_;
    o.on_start = [this](int, pid_t pid) { pids_.push_back(pid); };
    return o;
  }
  std::string out() const { return Slurp(dir_ + "/out"); }
  std::string err() const { return Slurp(dir_ + "/err"); }
  void ExpectNoRankRunning() {
    for (pid_t pid : pids_) {
      // Reaped by the launcher: the pid no longer exists at all.
      EXPECT_EQ(::kill(pid, 0), -1) << "rank pid " << pid << " is still there";
      EXPECT_EQ(errno, ESRCH);
    }
  }

  std::string dir_;
  int out_fd_ = -1, err_fd_ = -1;
  std::vector<pid_t> pids_;
};

TEST(LaunchArgs, DropsNprocInBothForms) {
  EXPECT_EQ(WithoutNproc({"memplan", "run", "m.onnx", "--nproc", "2", "--steps", "3"}),
            (std::vector<std::string>{"memplan", "run", "m.onnx", "--steps", "3"}));
  EXPECT_EQ(WithoutNproc({"memplan", "run", "--nproc=4", "m.onnx"}),
            (std::vector<std::string>{"memplan", "run", "m.onnx"}));
  // Other options that merely start alike are kept.
  EXPECT_EQ(WithoutNproc({"memplan", "run", "--nprocs-file", "x"}),
            (std::vector<std::string>{"memplan", "run", "--nprocs-file", "x"}));
}

TEST(LaunchArgs, OwnArgvIsTheCommandLine) {
  const std::vector<std::string> argv = OwnArgv();
  ASSERT_FALSE(argv.empty());
  EXPECT_NE(argv[0].find("cli_launch_tests"), std::string::npos) << argv[0];
}

TEST(LaunchPort, AFreePortCanBeListenedOn) {
  const int port = FreePort("127.0.0.1");
  ASSERT_GT(port, 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::close(fd);
}

TEST(LaunchPort, AnAddressOfAnotherMachineOrNoneIsAClearError) {
  // 10.255.255.1: routable, not this machine's (the usual unreachable test address).
  try {
    FreePort("10.255.255.1");
    ADD_FAILURE() << "no error";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("'10.255.255.1' is not an address of this machine"),
              std::string::npos)
        << e.what();
  }
  try {
    FreePort("no-such-host.invalid");  // .invalid never resolves (RFC 2606)
    ADD_FAILURE() << "no error";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-host.invalid' does not resolve"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Launch, EveryRankGetsItsEnvironmentAndItsOutputIsForwardedByLine) {
  LaunchOptions o =
      Options(3,
              "echo \"out $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR\"; "
              "echo \"err $RANK\" >&2; echo \"port $MASTER_PORT\"");
  const LaunchResult r = LaunchRanks(o);
  EXPECT_EQ(r.exit_code, 0) << err();
  const std::string o_text = out(), e_text = err();
  // Rank 0 unprefixed, the others prefixed with their rank.
  EXPECT_NE(o_text.find("out 0 0 3 3 127.0.0.1\n"), std::string::npos) << o_text;
  EXPECT_EQ(o_text.find("] out 0"), std::string::npos) << o_text;
  EXPECT_NE(o_text.find("[rank 1] out 1 1 3 3 127.0.0.1\n"), std::string::npos) << o_text;
  EXPECT_NE(o_text.find("[rank 2] out 2 2 3 3 127.0.0.1\n"), std::string::npos) << o_text;
  EXPECT_NE(e_text.find("err 0\n"), std::string::npos) << e_text;
  EXPECT_NE(e_text.find("[rank 2] err 2\n"), std::string::npos) << e_text;
  // One port for all, found free.
  std::set<std::string> ports;
  std::istringstream lines(o_text);
  for (std::string line; std::getline(lines, line);) {
    const size_t p = line.find("port ");
    if (p != std::string::npos) ports.insert(line.substr(p + 5));
  }
  ASSERT_EQ(ports.size(), 1u) << o_text;
  EXPECT_GT(std::stoi(*ports.begin()), 0);
  ASSERT_EQ(r.ranks.size(), 3u);
  ExpectNoRankRunning();
}

TEST_F(Launch, LinesAreNotCutNorMixed) {
  // Rank 1 writes a line in two pieces 0.2 s apart while rank 0 writes whole lines; the last
  // line has no newline.
  LaunchOptions o = Options(2,
                            "if [ $RANK = 1 ]; then printf 'abc'; sleep 0.2; printf 'def\\nlast'; "
                            "else for i in 1 2 3 4 5; do echo zero $i; sleep 0.05; done; fi");
  EXPECT_EQ(LaunchRanks(o).exit_code, 0);
  const std::string text = out();
  EXPECT_NE(text.find("[rank 1] abcdef\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1] last\n"), std::string::npos) << text;
  EXPECT_NE(text.find("zero 5\n"), std::string::npos) << text;
}

TEST_F(Launch, AFailedRankIsNamedAndTheLauncherExits1) {
  LaunchOptions o =
      Options(3, "if [ $RANK = 1 ]; then echo 'memplan: bad input on rank 1' >&2; exit 3; fi");
  const LaunchResult r = LaunchRanks(o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.first_failed_rank, 1);
  const std::string e = err();
  // The rank's own message first, then the launcher's.
  const size_t own = e.find("[rank 1] memplan: bad input on rank 1\n"),
               launcher = e.find("memplan: rank 1 exited with status 3\n");
  ASSERT_NE(own, std::string::npos) << e;
  ASSERT_NE(launcher, std::string::npos) << e;
  EXPECT_LT(own, launcher);
  ExpectNoRankRunning();
}

// Every rank meets the same bad input: its error line is shown once, by whichever rank printed
// it first; the launcher still names each rank's exit.
TEST_F(Launch, AnErrorEveryRankPrintsIsShownOnce) {
  LaunchOptions o = Options(3, "echo 'memplan run: error: no.onnx: no such file' >&2; exit 1");
  const LaunchResult r = LaunchRanks(o);
  EXPECT_EQ(r.exit_code, 1);
  const std::string e = err();
  const size_t first = e.find("memplan run: error: no.onnx: no such file\n");
  ASSERT_NE(first, std::string::npos) << e;
  EXPECT_EQ(e.find("memplan run: error: no.onnx", first + 1), std::string::npos) << e;
  ExpectNoRankRunning();
}

TEST_F(Launch, RanksFailingAlikeGiveTheirStatus) {
  // No plan fits (2) on every rank: the launcher's exit status says the same.
  EXPECT_EQ(LaunchRanks(Options(2, "exit 2")).exit_code, 2);
}

TEST_F(Launch, AKilledRankStopsTheHangingOnesWithinTheGracePeriod) {
  // Rank 2 is killed (as the OOM killer does); ranks 0 and 1 would wait forever in their
  // collective. Rank 1 even ignores SIGTERM. Each rank's sleep is a child of its shell: the
  // launcher must stop those grandchildren too.
  LaunchOptions o = Options(3,
                            "if [ $RANK = 2 ]; then sleep 0.3; kill -KILL $$; fi; "
                            "if [ $RANK = 1 ]; then trap '' TERM; fi; "
                            "sleep 1000 & echo \"child $!\"; wait");
  o.grace_seconds = 1;
  o.term_seconds = 1;
  const Clock::time_point start = Clock::now();
  const LaunchResult r = LaunchRanks(o);
  const double seconds = Since(start);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.first_failed_rank, 2);
  const std::string e = err();
  EXPECT_NE(
      e.find("memplan: rank 2 was killed by signal SIGKILL (out of memory? see the kernel log)\n"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("still running 1 s after rank 2 failed: stopping them (SIGTERM)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("memplan: stopped rank 0 (SIGTERM)\n"), std::string::npos) << e;
  EXPECT_NE(e.find("memplan: stopped rank 1 (SIGKILL)\n"), std::string::npos)
      << e;  // it ignored SIGTERM
  // 0.3 s until the kill, 1 s of grace, at most 1 s more until SIGKILL reaches rank 1; 1.5 s
  // of slack for a loaded machine.
  EXPECT_LT(seconds, 0.3 + 1 + 1 + 1.5);
  EXPECT_GE(r.seconds_after_failure, 1.0);  // the grace period was given
  ExpectNoRankRunning();
  // The shells' own children (the sleeps) are gone too.
  std::istringstream lines(out());
  int children = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t p = line.find("child ");
    if (p == std::string::npos) continue;
    ++children;
    const pid_t pid = std::stoi(line.substr(p + 6));
    for (int i = 0; i < 50 && Running(pid); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(Running(pid)) << "a rank's child " << pid << " survived";
  }
  EXPECT_GE(children, 2) << out();
}

TEST_F(Launch, RanksThatEndOnTheirOwnAfterAFailureAreNotStopped) {
  // Rank 1 fails; rank 0 notices (as a collective timing out would) and exits 1 with its own
  // message 0.2 s later, within the grace period: no SIGTERM, both failures named.
  LaunchOptions o =
      Options(2,
              "if [ $RANK = 1 ]; then exit 1; fi; sleep 0.2; "
              "echo 'memplan: the all-reduce of bucket 0 failed: rank 1 is gone' >&2; exit 1");
  o.grace_seconds = 5;
  const Clock::time_point start = Clock::now();
  const LaunchResult r = LaunchRanks(o);
  EXPECT_LT(Since(start), 3.0);
  EXPECT_EQ(r.exit_code, 1);
  const std::string e = err();
  EXPECT_NE(e.find("memplan: rank 1 exited with status 1\n"), std::string::npos) << e;
  EXPECT_NE(e.find("memplan: the all-reduce of bucket 0 failed: rank 1 is gone\n"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("memplan: rank 0 exited with status 1\n"), std::string::npos) << e;
  EXPECT_EQ(e.find("SIGTERM"), std::string::npos) << e;
}

TEST_F(Launch, OutputsOfAFailedRunAreRemovedAndKeptWhenEveryRankSucceeds) {
  // Rank 0 writes run.json (through a rename, as memplan does) and succeeds; rank 1 fails after.
  const std::string write =
      "if [ $RANK = 0 ]; then echo '{}' > run.tmp && mv run.tmp run.json; fi; ";
  LaunchOptions bad = Options(2, write + "if [ $RANK = 1 ]; then sleep 0.3; exit 1; fi");
  bad.outputs = {dir_ + "/run.json"};
  EXPECT_EQ(LaunchRanks(bad).exit_code, 1);
  EXPECT_FALSE(Exists(dir_ + "/run.json"));
  EXPECT_NE(err().find("removed " + dir_ + "/run.json"), std::string::npos) << err();

  LaunchOptions good = Options(2, write);
  good.outputs = {dir_ + "/run.json"};
  EXPECT_EQ(LaunchRanks(good).exit_code, 0);
  EXPECT_TRUE(Exists(dir_ + "/run.json"));

  // A failed run that did not write the file leaves the earlier run's.
  LaunchOptions untouched = Options(2, "exit 1");
  untouched.outputs = {dir_ + "/run.json"};
  EXPECT_EQ(LaunchRanks(untouched).exit_code, 1);
  EXPECT_TRUE(Exists(dir_ + "/run.json"));
}

TEST_F(Launch, SigtermToTheLauncherReachesEveryRank) {
  // The ranks trap SIGTERM, say so and exit 143 (as a process killed by it reports).
  LaunchOptions o = Options(
      2, "trap 'echo \"got TERM\"; exit 143' TERM; echo ready; while :; do sleep 0.05; done");
  o.term_seconds = 5;
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(::getpid(), SIGTERM);
  });
  const Clock::time_point start = Clock::now();
  const LaunchResult r = LaunchRanks(o);
  sender.join();
  EXPECT_LT(Since(start),
            3.0);  // the ranks ended on the forwarded signal, not the SIGKILL 5 s later
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  const std::string text = out();
  EXPECT_NE(text.find("got TERM\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1] got TERM\n"), std::string::npos) << text;
  ExpectNoRankRunning();
  // The launcher's handler is gone: the test's default SIGTERM action is back.
  struct sigaction now;
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST_F(Launch, AProgramThatCannotRunFailsEveryRank) {
  LaunchOptions o = Options(2, "true");
  o.program = dir_ + "/no-such-program";
  const LaunchResult r = LaunchRanks(o);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(err().find("memplan: cannot execute the rank's program"), std::string::npos) << err();
  EXPECT_NE(err().find("memplan: rank 0 exited with status 127"), std::string::npos) << err();
}

#ifdef MEMPLAN_HAVE_EXECUTOR
// memplan itself, started with extra environment variables; its stdout and stderr go to `log`.
pid_t StartMemplan(const std::vector<std::string>& args, const std::vector<std::string>& env,
                   const std::string& log) {
  std::vector<std::string> argv_text = {MEMPLAN_CLI};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
  env_text.insert(env_text.end(), env.begin(), env.end());
  std::vector<char*> argv, envp;
  for (std::string& a : argv_text) argv.push_back(a.data());
  for (std::string& e : env_text) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fd);
  return pid;
}

// Its exit status, or -1 after `seconds` (then it is killed).
int WaitExit(pid_t pid, double seconds) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (Since(start) > seconds) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The children of `parent` (from /proc/PID/stat's ppid field).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> kids;
  DIR* proc = ::opendir("/proc");
  while (dirent* d = ::readdir(proc)) {
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + d->d_name + "/stat");
    std::string text;
    if (!std::getline(stat, text)) continue;
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) kids.push_back(std::stoi(d->d_name));
  }
  ::closedir(proc);
  return kids;
}

// The RANK in a process's environment; -1 without one.
int RankOf(pid_t pid) {
  const std::string env = Slurp("/proc/" + std::to_string(pid) + "/environ");
  for (size_t start = 0; start < env.size(); start = env.find('\0', start) + 1) {
    if (env.compare(start, 5, "RANK=") == 0) return std::stoi(env.substr(start + 5));
    if (env.find('\0', start) == std::string::npos) break;
  }
  return -1;
}

class LaunchCli : public Launch {
 protected:
  // memplan ARGS with ENV to the end; its stdout and stderr together.
  int Memplan(const std::vector<std::string>& args, const std::vector<std::string>& env,
              std::string* output) {
    const pid_t pid = StartMemplan(args, env, dir_ + "/log");
    const int code = WaitExit(pid, 600);
    *output = Slurp(dir_ + "/log");
    return code;
  }
  // Waits until rank 0 has printed its prediction (the line before the steps; it reaches the log
  // as it is printed, the ranks' stdout being line-buffered), then 2 s into the steps.
  void IntoTheSteps() {
    for (int i = 0; i < 600 && Slurp(dir_ + "/log").find("predicted ") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_NE(Slurp(dir_ + "/log").find("predicted "), std::string::npos)
        << "no prediction line within 60 s";
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
};

TEST_F(LaunchCli, NprocUnderALauncherIsAnError) {
  std::string out;
  EXPECT_EQ(Memplan({"run", testing::CorpusModel("gpt"), "--nproc", "2"},
                    {"WORLD_SIZE=2", "RANK=0"}, &out),
            1);
  EXPECT_NE(out.find("--nproc 2 with WORLD_SIZE=2 in the environment: you are already a rank under "
                     "a launcher; drop --nproc"),
            std::string::npos)
      << out;
  EXPECT_EQ(Memplan({"run", testing::CorpusModel("gpt"), "--nproc=0"}, {}, &out), 1);
  EXPECT_NE(out.find("--nproc"), std::string::npos) << out;
}

TEST_F(LaunchCli, APortInUseIsAClearErrorAtOnce) {
  // Something listens on the port the user names.
  testing::LoopbackListener listener;
  ASSERT_GT(listener.port(), 0);
  const std::string port = std::to_string(listener.port());
  std::string out;
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(Memplan({"run", testing::CorpusModel("gpt"), "--batch", "2", "--random-weights",
                     "--nproc", "2", "--json", dir_ + "/run.json"},
                    {"MASTER_PORT=" + port}, &out),
            1);
  EXPECT_LT(Since(start), 10.0);
  EXPECT_NE(out.find("MASTER_PORT " + port + " on 127.0.0.1 is already in use"), std::string::npos)
      << out;
  EXPECT_FALSE(Exists(dir_ + "/run.json"));
}

TEST_F(LaunchCli, AnAddressNotOfThisMachineIsAClearErrorAtOnce) {
  std::string out;
  for (const std::string addr : {"10.255.255.1", "no-such-host.invalid"}) {
    const Clock::time_point start = Clock::now();
    EXPECT_EQ(Memplan({"run", testing::CorpusModel("gpt"), "--random-weights", "--nproc", "2"},
                      {"MASTER_ADDR=" + addr}, &out),
              1);
    EXPECT_LT(Since(start), 30.0);  // a name lookup may take a while without a network
    EXPECT_NE(out.find("MASTER_ADDR '" + addr + "'"), std::string::npos) << out;
  }
}

TEST_F(LaunchCli, OneProcessIsThePlainRun) {
  std::string out;
  ASSERT_EQ(Memplan({"run", testing::CorpusModel("gpt"), "--batch", "1", "--steps", "1",
                     "--random-weights", "--nproc", "1", "--json", dir_ + "/run.json"},
                    {}, &out),
            0)
      << out;
  EXPECT_TRUE(Exists(dir_ + "/run.json"));
  EXPECT_EQ(out.find("[rank"), std::string::npos) << out;
}

TEST_F(LaunchCli, AKilledRankFailsTheRunNamingItAndLeavesNothing) {
  // Rank 1 is killed a few steps in, as the OOM killer would. Rank 0 fails its next
  // collective within the timeout (or ends on its own); the launcher exits 1 naming rank 1,
  // removes the JSON and leaves no process.
  const std::string json = dir_ + "/run.json";
  const pid_t launcher =
      StartMemplan({"run", testing::CorpusModel("gpt"), "--batch", "2", "--steps", "1000",
                    "--random-weights", "--nproc", "2", "--json", json},
                   {}, dir_ + "/log");
  std::vector<pid_t> ranks;
  pid_t victim = 0;
  const Clock::time_point start = Clock::now();
  while (victim == 0 && Since(start) < 60) {
    ranks = ChildrenOf(launcher);
    for (pid_t pid : ranks) {
      if (RankOf(pid) == 1) victim = pid;
    }
    if (ranks.size() < 2) victim = 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(victim, 0) << Slurp(dir_ + "/log");
  IntoTheSteps();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const Clock::time_point killed = Clock::now();
  // 30 s of collective timeout + 5 s of grace + 5 s until SIGKILL, and slack.
  const int code = WaitExit(launcher, 30 + 5 + 5 + 10);
  const double seconds = Since(killed);
  const std::string log = Slurp(dir_ + "/log");
  EXPECT_EQ(code, 1) << log;
  std::printf("the launcher exited %.2f s after rank 1 was killed\n", seconds);
  EXPECT_NE(
      log.find("memplan: rank 1 was killed by signal SIGKILL (out of memory? see the kernel log)"),
      std::string::npos)
      << log;
  EXPECT_FALSE(Exists(json));
  for (pid_t pid : ranks) EXPECT_FALSE(Running(pid)) << "rank pid " << pid;
}

TEST_F(LaunchCli, TwoRanksWriteOneRunJson) {
  std::string out;
  const std::string json = dir_ + "/run.json";
  ASSERT_EQ(Memplan({"run", testing::CorpusModel("gpt"), "--batch", "2", "--steps", "2",
                     "--random-weights", "--nproc", "2", "--json", json},
                    {}, &out),
            0)
      << out;
  // Rank 0 reports once, unprefixed; rank 1 prints nothing.
  EXPECT_EQ(out.find("[rank 1]"), std::string::npos) << out;
  EXPECT_NE(out.find("wrote        " + json), std::string::npos) << out;
  EXPECT_EQ(out.find("wrote"), out.rfind("wrote")) << out;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["devices"], 2);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][0]["rank"], 0);
  EXPECT_EQ(j["ranks"][1]["rank"], 1);
}

TEST_F(LaunchCli, AStalledRankEndsTheRunWithinTheTimeout) {
  // Rank 1 stops (SIGSTOP: alive, its connections open, as a hung device would leave it). Rank 0
  // fails its next collective after --timeout 3; the launcher names it, gives rank 1 the grace
  // period (3 + 5 s), then stops it.
  const std::string json = dir_ + "/run.json";
  const pid_t launcher =
      StartMemplan({"run", testing::CorpusModel("gpt"), "--batch", "2", "--steps", "1000",
                    "--random-weights", "--timeout", "3", "--nproc", "2", "--json", json},
                   {}, dir_ + "/log");
  std::vector<pid_t> ranks;
  pid_t victim = 0;
  const Clock::time_point start = Clock::now();
  while ((victim == 0 || ranks.size() < 2) && Since(start) < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ranks = ChildrenOf(launcher);
    for (pid_t pid : ranks) {
      if (RankOf(pid) == 1) victim = pid;
    }
  }
  ASSERT_NE(victim, 0) << Slurp(dir_ + "/log");
  IntoTheSteps();
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const Clock::time_point stopped = Clock::now();
  // 3 s timeout + 8 s grace, and slack for a loaded machine (SIGTERM ends rank 1: the launcher
  // sends SIGCONT with it).
  const int code = WaitExit(launcher, 3 + 8 + 10);
  const double seconds = Since(stopped);
  const std::string log = Slurp(dir_ + "/log");
  EXPECT_EQ(code, 1) << log;
  std::printf("the launcher exited %.2f s after rank 1 stalled\n", seconds);
  EXPECT_GE(seconds, 3.0) << log;  // the collective waited its timeout
  EXPECT_NE(log.find("memplan: rank 0 exited with status 1"), std::string::npos) << log;
  EXPECT_NE(log.find("still running 8 s after rank 0 failed: stopping them (SIGTERM)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("memplan: stopped rank 1 (SIGTERM)"), std::string::npos) << log;
  EXPECT_FALSE(Exists(json));
  for (pid_t pid : ranks) EXPECT_FALSE(Running(pid)) << "rank pid " << pid;
}

TEST_F(LaunchCli, ARankThatCannotReachItsStoreFailsWithinTheTimeout) {
  // Under another launcher (no --nproc): rank 1 of 2 whose MASTER_ADDR is routable but answers
  // nothing gives up after --timeout 2 with a message naming the address.
  std::string out;
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(Memplan({"run", testing::CorpusModel("gpt"), "--batch", "2", "--random-weights",
                     "--timeout", "2"},
                    {"WORLD_SIZE=2", "RANK=1", "LOCAL_RANK=1", "MASTER_ADDR=10.255.255.1",
                     "MASTER_PORT=29511"},
                    &out),
            1);
  EXPECT_LT(Since(start), 2 + 20.0)
      << out;  // the timeout, and loading the model on a loaded machine
  EXPECT_NE(out.find("10.255.255.1"), std::string::npos) << out;
  // c10d's retry warnings and their C++ backtraces are not shown: memplan's message is.
  EXPECT_EQ(out.find("frame #"), std::string::npos) << out;
  EXPECT_EQ(out.find("[c10d]"), std::string::npos) << out;
}
#endif  // MEMPLAN_HAVE_EXECUTOR

}  // namespace
}  // namespace memplan::cli
