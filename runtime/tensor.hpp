#pragma once
// Tensor, Shape and concat_rows are public types of the embedding API, defined in
// include/tandem/tensor.hpp so that an application's are the runtime's own; the runtime implements
// them (tensor.cpp).
#include "include/tandem/tensor.hpp"
