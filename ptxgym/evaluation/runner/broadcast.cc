// The runner's thread broadcast (confine.h, restrict_others) as a C function, for the Python worker
// (sandboxed/sandbox.py loads it with ctypes before its Landlock restrict_self, below ABI 8). Built by
// runner/build.py (build_broadcast) into the cache beside the runner.
#include <cstdio>

#include "confine.h"

// Every other thread of the process restricts itself with `ruleset`. Returns how many did, or -1 when a
// thread stayed outside (or the broadcast failed); `note` (of `cap` bytes) says what happened.
extern "C" int ptxgym_restrict_others(int ruleset, char* note, int cap) {
  int restricted = 0;
  std::string outside = ptxrunner::confine::restrict_others(ruleset, &restricted);
  std::snprintf(note, static_cast<size_t>(cap), "%s", outside.c_str());
  return outside.empty() ? restricted : -1;
}
