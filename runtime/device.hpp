#pragma once
// Device and DeviceKind (and the CUDA backend queries) are public types of the embedding API,
// defined in include/tandem/device.hpp so that an application's are the runtime's own; the runtime
// implements them (device.cpp).
#include "include/tandem/device.hpp"
