#include "launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "cli_util.h"
#include "memplan/parse.h"
#include "memplan/training_graph.h"

extern char** environ;

namespace memplan::cli {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The collective timeout a rank uses when --timeout is not given (the executor's default).
constexpr double kDefaultTimeoutSeconds = 30;
// What a failed rank's peers get beyond the collective timeout to notice and say so.
constexpr double kGraceMarginSeconds = 5;
// A line longer than this is forwarded in pieces.
constexpr size_t kMaxLine = 64 << 10;

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the reader went away: the output is lost, the ranks are still watched
    done += static_cast<size_t>(n);
  }
}

void Say(int fd, const std::string& message) { WriteAll(fd, "memplan: " + message + "\n"); }

std::string SignalName(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* abbrev = ::sigabbrev_np(sig)) return std::string("SIG") + abbrev;
#endif
  return "signal " + std::to_string(sig);
}

// One rank's pipe: the bytes of an unfinished line wait here until its newline arrives.
// `errors_shown`: for standard error, the error lines any rank printed already; every rank
// finds the same bad input, and the user is told once.
struct Stream {
  int fd = -1;
  int out_fd = 1;
  std::string prefix;
  std::string pending;
  std::set<std::string>* errors_shown = nullptr;
};

// A line a rank prints about the user's input ("memplan run: error: ..."), shown by one rank.
bool AlreadyShown(Stream& s, const std::string& line) {
  if (!s.errors_shown || line.rfind("memplan", 0) != 0 ||
      line.find(": error: ") == std::string::npos)
    return false;
  return !s.errors_shown->insert(line).second;
}

// Forwards what is in `s` now; false at end of file (the pipe is closed then).
bool Pump(Stream& s) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      if (!s.pending.empty()) WriteAll(s.out_fd, s.prefix + s.pending + "\n");
      s.pending.clear();
      ::close(s.fd);
      s.fd = -1;
      return false;
    }
    s.pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    std::string lines;
    for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (AlreadyShown(s, s.pending.substr(start, nl - start))) continue;
      lines += s.prefix;
      lines.append(s.pending, start, nl + 1 - start);
    }
    s.pending.erase(0, start);
    if (s.pending.size() > kMaxLine) {
      lines += s.prefix + s.pending + "\n";
      s.pending.clear();
    }
    if (!lines.empty()) WriteAll(s.out_fd, lines);
  }
}

// The launcher's own SIGINT / SIGTERM / SIGHUP arrive here (a self-pipe: poll wakes on it).
int g_signal_pipe[2] = {-1, -1};
void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

// What an output file was before the run: a file the run creates or replaces (rank 0 writes
// through a rename) has another inode or modification time after it.
struct FileState {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  struct timespec mtime = {};
};
FileState StateOf(const std::string& path) {
  FileState f;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return f;
  f.exists = true;
  f.dev = st.st_dev;
  f.ino = st.st_ino;
  f.mtime = st.st_mtim;
  return f;
}
bool Changed(const FileState& before, const FileState& after) {
  return after.exists &&
         (!before.exists || before.dev != after.dev || before.ino != after.ino ||
          before.mtime.tv_sec != after.mtime.tv_sec || before.mtime.tv_nsec != after.mtime.tv_nsec);
}

std::string Describe(const RankExit& e) {
  if (WIFEXITED(e.status))
    return "rank " + std::to_string(e.rank) + " exited with status " +
           std::to_string(WEXITSTATUS(e.status));
  const int sig = WTERMSIG(e.status);
  std::string m = "rank " + std::to_string(e.rank) + " was killed by signal " + SignalName(sig);
  if (sig == SIGKILL) m += " (out of memory? see the kernel log)";
  return m;
}

bool Failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

}  // namespace

std::vector<std::string> WithoutNproc(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i > 0 && argv[i] == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (i > 0 && argv[i].rfind("--nproc=", 0) == 0) continue;
    out.push_back(argv[i]);
  }
  return out;
}

std::vector<std::string> OwnArgv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.empty())
    throw MemplanError(
        "--nproc needs /proc/self/cmdline (Linux) to start the ranks, and cannot read it");
  std::vector<std::string> argv;
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    argv.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return argv;
}

int FreePort(const std::string& addr) {
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &found); rc != 0) {
    throw MemplanError("MASTER_ADDR '" + addr + "' does not resolve (" + ::gai_strerror(rc) +
                       "); with --nproc every rank runs here, so leave MASTER_ADDR unset "
                       "(127.0.0.1) or name this machine");
  }
  std::string why = "no address";
  int port = -1;
  for (struct addrinfo* a = found; a != nullptr && port < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    struct sockaddr_storage bound = {};
    socklen_t len = sizeof bound;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      why = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (port < 0) {
    throw MemplanError("MASTER_ADDR '" + addr + "' is not an address of this machine (" + why +
                       "); with --nproc rank 0's store listens here, so leave MASTER_ADDR unset "
                       "(127.0.0.1) or name this machine");
  }
  return port;
}

namespace {

// Fails when something on this machine already listens on addr:port (rank 0's store could
// not): a clear message now rather than rank 0's bind error and its peers' connect timeout.
void CheckPortFree(const std::string& addr, const std::string& port) {
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* found = nullptr;
  if (::getaddrinfo(addr.c_str(), port.c_str(), &hints, &found) != 0)
    return;  // FreePort named the address
  std::string in_use;
  for (struct addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
                 sizeof one);  // as the store binds: TIME_WAIT is no conflict
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE)
      in_use = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (!in_use.empty()) {
    throw MemplanError(
        "MASTER_PORT " + port + " on " + addr + " is already in use (" + in_use +
        "): another job's store? Choose a free port, or leave MASTER_PORT unset for one");
  }
}

}  // namespace

LaunchResult LaunchRanks(const LaunchOptions& opt) {
  LaunchResult result;
  const int n = opt.nproc;
  const std::string port =
      opt.master_port.empty() ? std::to_string(FreePort(opt.master_addr)) : opt.master_port;

  // Everything a child needs is built before fork: between fork and exec it may only make
  // async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& s : opt.argv) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  // Here rank 0 hosts the store: a torchrun agent's flag (TCPStore then ignores a failed bind) must
  // not pass.
  const char* kOwn[] = {"RANK=",
                        "LOCAL_RANK=",
                        "WORLD_SIZE=",
                        "LOCAL_WORLD_SIZE=",
                        "MASTER_ADDR=",
                        "MASTER_PORT=",
                        "TORCHELASTIC_USE_AGENT_STORE="};
  std::vector<std::string> inherited;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    bool own = false;
    for (const char* k : kOwn) own = own || std::strncmp(*e, k, std::strlen(k)) == 0;
    if (!own) inherited.emplace_back(*e);
  }
  std::vector<std::vector<std::string>> env_text(n);
  std::vector<std::vector<char*>> envp(n);
  for (int r = 0; r < n; ++r) {
    env_text[r] = inherited;
    for (const std::string& v :
         {"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
          "WORLD_SIZE=" + std::to_string(n), "LOCAL_WORLD_SIZE=" + std::to_string(n),
          "MASTER_ADDR=" + opt.master_addr, "MASTER_PORT=" + port}) {
      env_text[r].push_back(v);
    }
    for (std::string& s : env_text[r]) envp[r].push_back(s.data());
    envp[r].push_back(nullptr);
  }
  std::vector<FileState> before;
  for (const std::string& f : opt.outputs) before.push_back(StateOf(f));

  // Signals: noted on a self-pipe while the ranks run; blocked around fork so that a child
  // never runs the launcher's handler, and put back in the child before exec.
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw MemplanError(std::string("cannot create a pipe: ") + std::strerror(errno));
  struct sigaction old_actions[std::size(kForwarded)];
  struct sigaction handler = {};
  handler.sa_handler = OnSignal;
  sigemptyset(&handler.sa_mask);
  sigset_t forwarded, old_mask;
  sigemptyset(&forwarded);
  for (size_t i = 0; i < std::size(kForwarded); ++i) {
    ::sigaction(kForwarded[i], nullptr, &old_actions[i]);
    // A signal the launcher was started ignoring (nohup) stays ignored, as it is in the ranks.
    if (old_actions[i].sa_handler != SIG_IGN) ::sigaction(kForwarded[i], &handler, nullptr);
    sigaddset(&forwarded, kForwarded[i]);
  }

  const Clock::time_point start = Clock::now();
  const pid_t launcher = ::getpid();
  std::vector<pid_t> pids(n, 0);
  std::vector<bool> reaped(n, false);
  std::set<std::string> errors_shown;  // error lines of the ranks' standard error (Stream)
  std::vector<Stream> streams;         // 2 per rank: stdout, stderr
  pid_t group = 0;                     // rank 0's pid: the ranks' process group
  std::string start_error;
  for (int r = 0; r < n && start_error.empty(); ++r) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
      start_error = std::string("cannot create a pipe: ") + std::strerror(errno);
      break;
    }
    if (::pipe2(err, O_CLOEXEC) != 0) {
      start_error = std::string("cannot create a pipe: ") + std::strerror(errno);
      ::close(out[0]);
      ::close(out[1]);
      break;
    }
    ::pthread_sigmask(SIG_BLOCK, &forwarded, &old_mask);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The child: async-signal-safe calls only.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl took effect
      ::setpgid(0, group);
      for (size_t i = 0; i < std::size(kForwarded); ++i)
        ::sigaction(kForwarded[i], &old_actions[i], nullptr);
      ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
      const int null = ::open("/dev/null", O_RDONLY);
      if (null >= 0) ::dup2(null, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execve(opt.program.c_str(), argv.data(), envp[r].data());
      static const char kFailed[] = "memplan: cannot execute the rank's program\n";
      [[maybe_unused]] ssize_t w = ::write(2, kFailed, sizeof kFailed - 1);
      ::_exit(127);
    }
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    ::close(out[1]);
    ::close(err[1]);
    if (pid < 0) {
      start_error =
          std::string("cannot start rank ") + std::to_string(r) + ": " + std::strerror(fork_errno);
      ::close(out[0]);
      ::close(err[0]);
      break;
    }
    // The parent sets the group too: whichever of the two runs first, it is set before use.
    ::setpgid(pid, r == 0 ? pid : group);
    if (r == 0) group = pid;
    pids[r] = pid;
    const std::string prefix = r == 0 ? "" : "[rank " + std::to_string(r) + "] ";
    for (int i : {0, 1}) {
      const int fd = i == 0 ? out[0] : err[0];
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      streams.push_back(Stream{fd, i == 0 ? opt.out_fd : opt.err_fd, prefix, "",
                               i == 1 ? &errors_shown : nullptr});
    }
    if (opt.on_start) opt.on_start(r, pid);
  }

  // Watching: forward output, reap ranks, and after a failure or a signal stop the rest.
  bool failed = !start_error.empty();
  int interrupted = 0;  // the first signal the launcher got
  Clock::time_point failure_time = start;
  Clock::time_point term_at = Clock::time_point::max(), kill_at = Clock::time_point::max();
  bool termed = false, killed = false;
  if (failed) {
    Say(opt.err_fd, start_error);
    term_at = Clock::now();
  }
  auto alive = [&] {
    int k = 0;
    for (int r = 0; r < n; ++r) k += pids[r] != 0 && !reaped[r];
    return k;
  };
  auto signal_ranks = [&](int sig) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] != 0 && !reaped[r]) ::kill(pids[r], sig);
    }
  };
  while (alive() > 0) {
    std::vector<pollfd> fds;
    std::vector<Stream*> polled;
    for (Stream& s : streams) {
      if (s.fd < 0) continue;
      fds.push_back({s.fd, POLLIN, 0});
      polled.push_back(&s);
    }
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    // A rank's exit closes its pipes and wakes the poll; the tick catches ranks whose pipes a
    // child of theirs still holds open.
    ::poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < polled.size(); ++i) {
      if (fds[i].revents != 0) Pump(*polled[i]);
    }
    unsigned char sig = 0;
    while (::read(g_signal_pipe[0], &sig, 1) == 1) {
      if (interrupted == 0) {
        interrupted = sig;
        signal_ranks(sig);
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(opt.term_seconds));
      } else {
        kill_at = Clock::now();  // a second signal: no more waiting
      }
    }
    for (int r = 0; r < n; ++r) {
      if (pids[r] == 0 || reaped[r]) continue;
      int status = 0;
      const pid_t got = ::waitpid(pids[r], &status, WNOHANG);
      if (got != pids[r]) continue;
      reaped[r] = true;
      // The rank's last words come before the launcher's.
      for (size_t i = 2 * static_cast<size_t>(r);
           i < 2 * static_cast<size_t>(r) + 2 && i < streams.size(); ++i) {
        while (streams[i].fd >= 0 && Pump(streams[i])) {
          pollfd p = {streams[i].fd, POLLIN, 0};
          if (::poll(&p, 1, 0) <= 0)
            break;  // nothing more now (a child of the rank holds the pipe)
        }
      }
      RankExit e{r, pids[r], status, termed && !interrupted};
      result.ranks.push_back(e);
      if (!Failed(status) || interrupted != 0) continue;
      if (termed) {
        // Its end is the launcher's doing, not a fault of its own.
        const std::string how = WIFSIGNALED(status)
                                    ? SignalName(WTERMSIG(status))
                                    : "exit status " + std::to_string(WEXITSTATUS(status));
        Say(opt.err_fd, "stopped rank " + std::to_string(r) + " (" + how + ")");
        continue;
      }
      Say(opt.err_fd, Describe(e));
      if (!failed) {
        failed = true;
        failure_time = Clock::now();
        result.first_failed_rank = r;
        result.seconds_to_first_failure = SecondsSince(start);
        term_at = failure_time + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(opt.grace_seconds));
      }
    }
    const Clock::time_point now = Clock::now();
    if (!termed && now >= term_at && alive() > 0) {
      termed = true;
      if (result.first_failed_rank >= 0) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", opt.grace_seconds);
        Say(opt.err_fd, std::to_string(alive()) + " rank(s) still running " + secs +
                            " s after rank " + std::to_string(result.first_failed_rank) +
                            " failed: stopping them (SIGTERM)");
      }
      signal_ranks(SIGTERM);
      signal_ranks(SIGCONT);  // a stopped rank (SIGSTOP, Ctrl-Z) handles SIGTERM only once it runs
      kill_at = now + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(opt.term_seconds));
    }
    if (!killed && now >= kill_at && alive() > 0) {
      killed = true;
      signal_ranks(SIGKILL);
    }
  }
  // Whatever the ranks left in their pipes, and anything their own children still run.
  for (Stream& s : streams) {
    while (s.fd >= 0 && Pump(s)) {
      pollfd p = {s.fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
    }
    if (s.fd >= 0) ::close(s.fd);
  }
  if ((failed || interrupted != 0) && group > 0) ::kill(-group, SIGKILL);
  for (size_t i = 0; i < std::size(kForwarded); ++i)
    ::sigaction(kForwarded[i], &old_actions[i], nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
  if (failed) result.seconds_after_failure = SecondsSince(failure_time);

  std::sort(result.ranks.begin(), result.ranks.end(),
            [](const RankExit& a, const RankExit& b) { return a.rank < b.rank; });
  if (failed || interrupted != 0) {
    for (size_t i = 0; i < opt.outputs.size(); ++i) {
      if (Changed(before[i], StateOf(opt.outputs[i])) && ::unlink(opt.outputs[i].c_str()) == 0) {
        Say(opt.err_fd, "removed " + opt.outputs[i] + ": it is kept only when every rank succeeds");
      }
    }
  }
  if (interrupted != 0) {
    result.exit_code = 128 + interrupted;
  } else if (failed) {
    // Every rank failed alike (bad input, no plan fits): their status; else 1.
    result.exit_code = kExitUserError;
    if (start_error.empty() && static_cast<int>(result.ranks.size()) == n) {
      const int first = result.ranks[0].status;
      bool alike = WIFEXITED(first);
      for (const RankExit& e : result.ranks) alike = alike && e.status == first;
      if (alike) result.exit_code = WEXITSTATUS(first);
    }
  }
  return result;
}

bool LocalRanksRequested(const Args& a) {
  // A rank's stdout is a pipe to its launcher: line-buffered, its progress lines are forwarded
  // as they are printed rather than all at the end.
  if (std::getenv("WORLD_SIZE") != nullptr) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!a.has("nproc")) return false;
  if (std::getenv("WORLD_SIZE") != nullptr) {
    throw MemplanError(
        "--nproc " + a.get("nproc") + " with WORLD_SIZE=" + std::getenv("WORLD_SIZE") +
        " in the environment: you are already a rank under a launcher; drop --nproc");
  }
  return a.get_int("nproc", 1, /*min=*/1, /*max=*/1024) > 1;
}

int RunLocalRanks(const Args& a) {
  CheckOutputPaths(a, {"json", "profile", "trace-events"});  // once here, not in every rank
  LaunchOptions opt;
  opt.argv = WithoutNproc(OwnArgv());
  opt.nproc = static_cast<int>(a.get_int("nproc", 1, /*min=*/1, /*max=*/1024));
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0')
    opt.master_addr = addr;
  if (const char* port = std::getenv("MASTER_PORT"); port != nullptr && *port != '\0') {
    opt.master_port = std::to_string(ParseInteger("MASTER_PORT", port, /*min=*/1, /*max=*/65535));
    FreePort(opt.master_addr);  // the address is this machine's
    CheckPortFree(opt.master_addr, opt.master_port);
  }
  opt.grace_seconds =
      a.get_real("timeout", kDefaultTimeoutSeconds, /*min=*/0, /*max=*/1e9) + kGraceMarginSeconds;
  for (const char* f : {"json", "profile", "trace-events"}) {
    if (!a.has(f)) continue;
    // Rank 0 writes through a symbolic link to its target (WriteFileAtomically): that is the file.
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::weakly_canonical(a.get(f), ec);
    opt.outputs.push_back(ec ? a.get(f) : target.string());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return LaunchRanks(opt).exit_code;
}

}  // namespace memplan::cli
