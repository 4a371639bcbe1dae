#include "base/crash_report.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>

namespace hearsay {
namespace {

constexpr std::array kFatalSignals = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr std::size_t kMaxFrames = 64;
constexpr std::size_t kAltStackBytes = 64 * 1024;
alignas(16) char alt_stack[kAltStackBytes];
std::atomic<bool> installed{false};
std::atomic<bool> reporting{false};

// This executable, found at install time (neither is async-signal-safe to find in the
// handler): its path and where it is loaded, for the addr2line line.
char executable_path[4096] = "";
std::uintptr_t executable_base = 0;
extern "C" char __executable_start;  // the executable's first and last text bytes (GNU ld)
extern "C" char etext;

void write_text(const char* text) noexcept {
  std::size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

// `value` in base 16 ("0x" first) or 10, without allocating.
void write_number(std::uint64_t value, unsigned base) noexcept {
  char digits[2 + 64 + 1];
  char* p = digits + sizeof digits - 1;
  *p = '\0';
  do {
    *--p = "0123456789abcdef"[value % base];
    value /= base;
  } while (value != 0);
  if (base == 16) {
    *--p = 'x';
    *--p = '0';
  }
  write_text(p);
}

const char* signal_name(int signal) noexcept {
  switch (signal) {
    case SIGSEGV:
      return "SIGSEGV (invalid memory access)";
    case SIGBUS:
      return "SIGBUS (bus error)";
    case SIGFPE:
      return "SIGFPE (arithmetic fault)";
    case SIGILL:
      return "SIGILL (illegal instruction)";
    case SIGABRT:
      return "SIGABRT (aborted)";
    default:
      return "a fatal signal";
  }
}

// "addr2line -Cfpe PATH 0x... 0x...": the frames within this executable, each at its call
// (a return address less one), ready to paste.
void write_addr2line(void* const* frames, int count) noexcept {
  if (executable_path[0] == '\0') return;
  const auto begin = reinterpret_cast<std::uintptr_t>(&__executable_start);
  const auto end = reinterpret_cast<std::uintptr_t>(&etext);
  write_text(kCrashReportLastLine.data());
  write_text("addr2line -Cfpe ");
  write_text(executable_path);
  for (int i = 0; i < count; ++i) {
    const auto address = reinterpret_cast<std::uintptr_t>(frames[i]);
    if (address <= begin || address > end) continue;
    write_text(" ");
    write_number(address - 1 - executable_base, 16);
  }
  write_text("\n");
}

void on_fatal_signal(int signal, siginfo_t* info, void*) {
  // A second fault while reporting (or in another thread at once): die with it.
  if (!reporting.exchange(true)) {
    char thread[16] = "?";
    (void)pthread_getname_np(pthread_self(), thread, sizeof thread);
    write_text("\n");
    write_text(kCrashReportPrefix.data());
    write_text(signal_name(signal));
    if (info != nullptr && info->si_code <= 0 && info->si_pid == ::getpid()) {  // abort(), raise()
      write_text(" raised by the process itself (an abort: the lines before say why)");
    } else if (info != nullptr && info->si_code <= 0) {  // kill(): no fault
      write_text(" sent by pid ");
      write_number(static_cast<std::uint64_t>(info->si_pid), 10);
    } else if (info != nullptr) {
      write_text(" at address ");
      write_number(reinterpret_cast<std::uintptr_t>(info->si_addr), 16);
    }
    write_text(" on thread '");
    write_text(thread);
    write_text("'; its stack:\n");
    std::array<void*, kMaxFrames> frames{};
    const int count = ::backtrace(frames.data(), static_cast<int>(frames.size()));
    ::backtrace_symbols_fd(frames.data(), count, STDERR_FILENO);
    write_addr2line(frames.data(), count);
  }
  // The default action, now that the handler is gone: the process dies of this signal.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(signal, &dfl, nullptr);
  ::raise(signal);
}

// A thread's alternate signal stack, from its first prepare_thread_for_crash_report() to
// its end.
class ThreadAltStack {
 public:
  ThreadAltStack() noexcept {
    stack_t current = {};
    if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) == 0) return;
    void* memory =
        ::mmap(nullptr, kAltStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return;
    stack_t stack = {};
    stack.ss_sp = memory;
    stack.ss_size = kAltStackBytes;
    if (::sigaltstack(&stack, nullptr) != 0) {
      ::munmap(memory, kAltStackBytes);
      return;
    }
    memory_ = memory;
  }
  ~ThreadAltStack() {
    if (memory_ == nullptr) return;
    stack_t off = {};
    off.ss_flags = SS_DISABLE;
    if (::sigaltstack(&off, nullptr) == 0) ::munmap(memory_, kAltStackBytes);
  }
  ThreadAltStack(const ThreadAltStack&) = delete;
  ThreadAltStack& operator=(const ThreadAltStack&) = delete;

 private:
  void* memory_ = nullptr;
};

}  // namespace

void remove_fault_signals(sigset_t& set) noexcept {
  for (int signal : kFatalSignals) sigdelset(&set, signal);
}

void block_async_signals_in_this_thread() noexcept {
  sigset_t others;
  sigfillset(&others);
  remove_fault_signals(others);
  pthread_sigmask(SIG_BLOCK, &others, nullptr);
}

void prepare_thread_for_crash_report() noexcept {
  if (!installed.load()) return;
  thread_local ThreadAltStack stack;
  sigset_t faults;
  sigemptyset(&faults);
  for (int signal : kFatalSignals) sigaddset(&faults, signal);
  pthread_sigmask(SIG_UNBLOCK, &faults, nullptr);
}

void install_crash_report() noexcept {
  if (installed.exchange(true)) return;
  // backtrace() loads libgcc on its first call, which allocates: do that now.
  std::array<void*, 2> warm{};
  (void)::backtrace(warm.data(), static_cast<int>(warm.size()));
  Dl_info self = {};
  const ssize_t length = ::readlink("/proc/self/exe", executable_path, sizeof executable_path - 1);
  if (length > 0 && ::dladdr(static_cast<const void*>(executable_path), &self) != 0) {
    executable_path[length] = '\0';
    executable_base = reinterpret_cast<std::uintptr_t>(self.dli_fbase);
  } else {
    executable_path[0] = '\0';
  }
  stack_t stack = {};
  stack.ss_sp = alt_stack;
  stack.ss_size = sizeof alt_stack;
  (void)::sigaltstack(&stack, nullptr);
  struct sigaction action = {};
  action.sa_sigaction = on_fatal_signal;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (int signal : kFatalSignals) ::sigaction(signal, &action, nullptr);
}

}  // namespace hearsay
