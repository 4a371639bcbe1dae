// A fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes what it can to stderr
// before the process dies: the signal, the faulting address, the thread's name and its
// stack, as return addresses within their modules ("hearsay(+0x1a2b3c)"), then the
// command that names the frames within hearsay itself:
//     to name them: addr2line -Cfpe /path/to/hearsay 0x1a2b3b ...
// (the build keeps its symbols). A peer's stderr is its log, so a crash on a lab machine
// or in a simulated run leaves its stack where the run's other records are. The
// signal's default action follows, so the exit status
// (128 + signal), the parent's "killed by SIGSEGV" and a core file (where ulimit -c
// allows one) are as without the handler.
//
// What runs in the handler is async-signal-safe but for glibc's backtrace(), which is
// loaded once at install time so that the handler does not allocate; the executable's
// path and load address are found then too.
//
// Two things stop a report, and the process dies of the fault without a word:
//   - a thread that blocks the fault's signal: the kernel then kills the process at once.
//     Threads that keep signals off their polls block the others only
//     (block_async_signals_in_this_thread); the hearsay executable does the same for
//     libzmq's I/O threads, which block every signal (app/fault_signals.cpp).
//   - a stack overflow on a thread without an alternate signal stack, where the handler
//     has no room to run. The main thread gets one at install, every thread that
//     name_this_thread() names gets its own.
#pragma once
#include <signal.h>

#include <string_view>

namespace hearsay {

// How the report's first line begins: what a reader of a log (the simulator) looks for.
inline constexpr std::string_view kCrashReportPrefix = "hearsay: crashed: ";
// How its last line begins: the addr2line command that names the frames.
inline constexpr std::string_view kCrashReportLastLine = "to name them: ";

// Installs the handlers for the rest of the process's life (idempotent). Call early in
// main(), before threads start.
void install_crash_report() noexcept;

// Gives the calling thread its own alternate signal stack (released when the thread
// ends) and unblocks the fault signals in it: a fault there, a stack overflow included,
// is reported. Nothing before install_crash_report(), or where the thread has one.
void prepare_thread_for_crash_report() noexcept;

// Takes the signals of a fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) out of `set`.
void remove_fault_signals(sigset_t& set) noexcept;

// Blocks every signal but those of a fault in the calling thread: for threads whose polls
// a Ctrl-C handler must not interrupt, and which must still report their own crash.
void block_async_signals_in_this_thread() noexcept;

}  // namespace hearsay
