#pragma once
// TANDEM_HD marks functions shared by host code, CUDA device code and the emulator (optimized/emu).
#if defined(__CUDACC__)
#define TANDEM_HD __host__ __device__
#else
#define TANDEM_HD
#endif
