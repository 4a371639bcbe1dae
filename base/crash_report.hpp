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
// path and load address are found then too. A stack overflow
// of the main thread is reported from an alternate signal stack; one of another thread
// dies without the report.
#pragma once
#include <string_view>

namespace hearsay {

// How the report's first line begins: what a reader of a log (the simulator) looks for.
inline constexpr std::string_view kCrashReportPrefix = "hearsay: crashed: ";

// Installs the handlers for the rest of the process's life (idempotent). Call early in
// main(), before threads start.
void install_crash_report() noexcept;

}  // namespace hearsay
