#pragma once
// DType, BFloat16 and DTypeOf are public types of the embedding API, defined in
// include/tandem/dtype.hpp so that an application's are the runtime's own; the runtime implements
// them (dtype.cpp).
#include "include/tandem/dtype.hpp"
