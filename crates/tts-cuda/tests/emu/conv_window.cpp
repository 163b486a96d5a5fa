// The implicit-GEMM convolutions of kernels_emulated/conv.rs's window test (see conv_implicit.hpp).
#include "conv_implicit.hpp"

int main(int argc, char** argv) { return conv_main(argc, argv); }
