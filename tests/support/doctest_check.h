// doctest, with doctest's CHECK whatever was read before: libtorch's c10 logging defines a CHECK of
// its own, and of two system headers the one read last wins, silently. Include it after libtorch's
// headers. No include guard: in a unity build another file may have read libtorch's since.
#include <doctest/doctest.h>

#undef CHECK
#define CHECK(...) DOCTEST_CHECK(__VA_ARGS__)
