// Issue 11 item 1: the whole action is one include of a shipped expert solution. Must never build: only
// the packs' headers are on the include path.
#include <sm90a/solutions/Gemm.cu>
