// Catch2 main for the deltafin test binary.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
