#pragma once
// GPU tests are built wherever the CUDA backend is (CI builds it without a GPU) and skip, saying
// so, where no device is visible.
#include <gtest/gtest.h>

#include "runtime/device.hpp"

#define TANDEM_REQUIRE_GPU() \
  if (::tandem::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"
